// hopperkit decode attention variant bf16_r128 (see decode/variants.h).
#include "decode/variant_impl.cuh"

HK_DEFINE_DECODE_VARIANT(bf16_r128, false, false, 128, 2, 1, true)
