// hopperkit decode attention variant fp8_r32 (see decode/variants.h).
#include "decode/variant_impl.cuh"

HK_DEFINE_DECODE_VARIANT(fp8_r32, true, false, 32, 1, 2, true)
