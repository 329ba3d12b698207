// hopperkit decode attention variant fp8_r128 (see decode/variants.h).
#include "decode/variant_impl.cuh"

HK_DEFINE_DECODE_VARIANT(fp8_r128, true, false, 128, 2, 1, true)
