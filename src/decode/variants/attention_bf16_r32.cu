// hopperkit decode attention variant bf16_r32 (see decode/variants.h).
#include "decode/variant_impl.cuh"

HK_DEFINE_DECODE_VARIANT(bf16_r32, false, false, 32, 1, 2, true)
