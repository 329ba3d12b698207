// hopperkit fused FP8 MoE: tile heuristics shared by the routing index build (device and CPU twin) and the
// grouped GEMMs. Pure integer functions; unit-tested on the CPU.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HK_MOE_HD __host__ __device__ __forceinline__
#else
#define HK_MOE_HD inline
#endif

namespace hopperkit {
namespace moe {

constexpr int kScaleBlock = 128;    // block-wise scaling: 128x128 weight blocks, 1x128 activation groups
constexpr int kMaxExperts = 512;
constexpr int kMaxTopK = 16;
constexpr int kMaxTokens = 16384;

// Rows (token, k) a local expert sees on average: tokens * top_k spread over the global experts.
HK_MOE_HD int64_t mean_rows_per_expert(int64_t num_tokens, int top_k, int num_global_experts) {
  return num_global_experts > 0 ? (num_tokens * top_k + num_global_experts - 1) / num_global_experts : 0;
}

// GEMM tile height (rows of one expert per tile): decode (a few rows per expert) uses short tiles so the
// weights, not padding rows, dominate; prefill uses tall tiles for reuse. 16 / 32 / 64 / 128.
HK_MOE_HD int block_m(int64_t num_tokens, int top_k, int num_global_experts) {
  const int64_t r = mean_rows_per_expert(num_tokens, top_k, num_global_experts);
  return r <= 16 ? 16 : r <= 32 ? 32 : r <= 64 ? 64 : 128;
}

// Upper bound of the tiles of one routing: every expert's last tile may be partial.
HK_MOE_HD int64_t max_tiles(int64_t num_tokens, int top_k, int num_local_experts, int bm) {
  return (num_tokens * top_k + bm - 1) / bm + num_local_experts;
}

}  // namespace moe
}  // namespace hopperkit
