// hopperkit decode attention variant fp8_r64 (see decode/variants.h).
#include "decode/variant_impl.cuh"

HK_DEFINE_DECODE_VARIANT(fp8_r64, true, false, 64, 1, 1, true)
