// hopperkit decode attention variant bf16_r64 (see decode/variants.h).
#include "decode/variant_impl.cuh"

HK_DEFINE_DECODE_VARIANT(bf16_r64, false, false, 64, 1, 1, true)
