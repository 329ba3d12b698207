// hopperkit decode attention: defines one compiled variant (included by exactly one file under variants/).
#pragma once

#include "common/resident_ctas.h"
#include "decode/attention_kernel.cuh"
#include "decode/variants.h"
#include "hopperkit/error.h"

#define HK_DEFINE_DECODE_VARIANT(name, fp8, fp8q, rows, mt, tw, sl)                                           \
  namespace hopperkit {                                                                                     \
  namespace decode {                                                                                        \
  namespace {                                                                                               \
  using Traits_##name = DecodeTraits<fp8, mt, tw, fp8q, sl>;                                                \
  static_assert(Traits_##name::kMPad == rows, "variant rows");                                             \
  static_assert(sl || rows <= kSliceMaxRows, "a twin without the sliced merge only where rows can slice");  \
  void launch_##name(const CUtensorMap& k, const CUtensorMap& v, const DecodeKernelArgs& args, int grid,     \
                     cudaStream_t stream) {                                                                 \
    auto kernel = decode_attention_kernel<Traits_##name>;                                                   \
    static std::atomic<int> smem_set[kMaxDevices] = {}; /* the smem limit, raised once per device */        \
    set_max_dynamic_smem_once(kernel, Traits_##name::kSmemBytes, smem_set);                                 \
    cudaLaunchConfig_t cfg = {};                                                                            \
    cfg.gridDim = dim3(grid);                                                                               \
    cfg.blockDim = dim3(Traits_##name::kBlockThreads);                                                      \
    cfg.dynamicSmemBytes = Traits_##name::kSmemBytes;                                                       \
    cfg.stream = stream;                                                                                    \
    cudaLaunchAttribute attr[1];                                                                            \
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; /* PDL: prologue overlaps the tail */  \
    attr[0].val.programmaticStreamSerializationAllowed = 1;                                                 \
    cfg.attrs = attr;                                                                                       \
    cfg.numAttrs = 1;                                                                                       \
    HK_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, k, v, args));                                            \
    HK_CHECK_LAUNCH(#name);                                                                                 \
  }                                                                                                         \
  int resident_##name() {                                                                                   \
    static std::atomic<int> cache[kMaxDevices] = {};                                                        \
    return resident_ctas(decode_attention_kernel<Traits_##name>, Traits_##name::kBlockThreads,              \
                         Traits_##name::kSmemBytes, cache, #name);                                          \
  }                                                                                                         \
  }                                                                                                         \
  const VariantInfo& variant_##name() {                                                                     \
    static const VariantInfo info{#name, Traits_##name::kSmemBytes, Traits_##name::kStages,                 \
                                  Traits_##name::kBlockThreads,                                             \
                                  reinterpret_cast<const void*>(&decode_attention_kernel<Traits_##name>),   \
                                  &launch_##name, &resident_##name};                                        \
    return info;                                                                                            \
  }                                                                                                         \
  }                                                                                                         \
  }
