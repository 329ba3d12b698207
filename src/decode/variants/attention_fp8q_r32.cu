// hopperkit decode attention variant fp8q_r32 (see decode/variants.h).
#include "decode/variant_impl.cuh"

HK_DEFINE_DECODE_VARIANT(fp8q_r32, true, true, 32, 2, 4, true)
