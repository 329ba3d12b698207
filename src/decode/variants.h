// hopperkit decode attention: the one list of compiled kernel variants.
//
//   X(name, fp8_kv, fp8_q, rows, m_tiles_per_warp, token_groups, slices)
// rows = query rows per (request, KV head) = q_len * group, rounded up to 16 / 32 / 64 / 128. fp8_q: a variant
// launched only for an fp8 query (its Q K^T on e4m3 wgmma, attention_kernel.cuh); the others take either query.
// slices = false: a 16-row variant without the sliced merge of long pairs (merge_slice), launched instead of its
// twin where the plan's host bound on the lengths says no pair can slice (DecodePlanLaunch::slice_free): the slice
// path reschedules the 16-row kernels' tile loop, which cost 1-2% where it never runs (session 62).
// Each variant is one compilation unit under variants/ (see CMakeLists.txt); the dispatcher in
// attention_launch.cpp reports any other value.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "decode/kernel_args.h"

#define HK_DECODE_VARIANTS(X)                  \
  X(bf16_r16, false, false, 16, 1, 4, true)     \
  X(bf16_r16_ns, false, false, 16, 1, 4, false) \
  X(bf16_r32, false, false, 32, 1, 2, true)     \
  X(bf16_r64, false, false, 64, 1, 1, true)     \
  X(bf16_r128, false, false, 128, 2, 1, true)   \
  X(fp8_r16, true, false, 16, 1, 4, true)       \
  X(fp8_r16_ns, true, false, 16, 1, 4, false)   \
  X(fp8q_r16, true, true, 16, 1, 4, true)       \
  X(fp8q_r16_ns, true, true, 16, 1, 4, false)   \
  X(fp8q_r32, true, true, 32, 2, 4, true)       \
  X(fp8_r32, true, false, 32, 1, 2, true)       \
  X(fp8_r64, true, false, 64, 1, 1, true)       \
  X(fp8q_r64, true, true, 64, 1, 1, true)       \
  X(fp8_r128, true, false, 128, 2, 1, true)

namespace hopperkit {
namespace decode {

struct VariantInfo {
  const char* name;
  int smem_bytes;
  int stages;
  int threads;  // per CTA
  const void* kernel;  // for occupancy queries
  void (*launch)(const CUtensorMap& k, const CUtensorMap& v, const DecodeKernelArgs& args, int grid,
                 cudaStream_t stream);
  int (*resident_ctas)();  // CTAs resident at once on the current device (SMs x occupancy; cached per device)
};

#define HK_DECLARE_VARIANT(name, fp8, fp8q, rows, mt, tw, sl) const VariantInfo& variant_##name();
HK_DECODE_VARIANTS(HK_DECLARE_VARIANT)
#undef HK_DECLARE_VARIANT

}  // namespace decode
}  // namespace hopperkit
