// hopperkit decode attention variant fp8q_r16_ns (see decode/variants.h).
#include "decode/variant_impl.cuh"

HK_DEFINE_DECODE_VARIANT(fp8q_r16_ns, true, true, 16, 1, 4, false)
