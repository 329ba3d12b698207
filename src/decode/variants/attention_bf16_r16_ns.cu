// hopperkit decode attention variant bf16_r16_ns (see decode/variants.h).
#include "decode/variant_impl.cuh"

HK_DEFINE_DECODE_VARIANT(bf16_r16_ns, false, false, 16, 1, 4, false)
