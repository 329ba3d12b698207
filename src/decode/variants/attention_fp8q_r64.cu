// hopperkit decode attention variant fp8q_r64 (see decode/variants.h).
#include "decode/variant_impl.cuh"

HK_DEFINE_DECODE_VARIANT(fp8q_r64, true, true, 64, 1, 1, true)
