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

// GEMM tile height (rows of one expert per tile), one of kBlockMs: decode (a few rows per expert) uses short
// tiles so that the weights, not padding rows, dominate; everything above 16 rows per expert uses 64-row tiles
// (8 warps, 2 x 4), whose MMA work per weight byte is 4x higher.
constexpr int kBlockMs[] = {16, 64};
HK_MOE_HD int block_m(int64_t num_tokens, int top_k, int num_global_experts) {
  return mean_rows_per_expert(num_tokens, top_k, num_global_experts) <= 16 ? 16 : 64;
}

// Weight rows one GEMM tile covers (the N extent). Gate-up tiles hold matching gate and up rows (half each) so
// that SiLU(gate) * up is formed in registers; block-wise scaling needs all 128 columns of an activation
// quantisation group in one tile, hence 256 rows there.
HK_MOE_HD int gate_up_tile_n(bool block_scaled) { return block_scaled ? 256 : 128; }
constexpr int kDownTileN = 128;
constexpr int kTileK = 128;

// Split-K of decode tiles (16 rows): each task's K range may be cut into S slices (S <= kMaxSplit, each >= one
// K step); the slices' fp32 partial tiles go to the workspace and the last slice to arrive sums them in slice
// order (deterministic). S is chosen on the device from the actual task count: work items (task x slice) are
// dealt round-robin over the grid, so the SM that streams the most bytes holds ceil(items / sms) items of at
// most ceil(k_steps / S) steps each, plus about one step's worth of fixed cost per item (partial tile, epilogue).
// split_k_slices() picks the S in 1..max that minimises that, the smallest S on ties.
constexpr int kMaxSplit = 8;
constexpr int kSplitSlices = 1024;            // partial tiles the workspace holds (tasks x S never exceed it)
constexpr int kSplitSliceFloats = 16 * 256;   // the largest 16-row tile (256 weight rows)
HK_MOE_HD int64_t split_k_cost(int tasks, int sms, int k_steps, int s) {
  const int64_t items = static_cast<int64_t>(tasks) * s;
  return (items + sms - 1) / sms * ((k_steps + s - 1) / s + 1);
}
HK_MOE_HD int split_k_slices(int tasks, int sms, int k_steps) {
  if (tasks <= 0 || sms <= 0 || k_steps <= 1) return 1;
  int max_s = kMaxSplit < k_steps ? kMaxSplit : k_steps;
  max_s = max_s < kSplitSlices / tasks ? max_s : kSplitSlices / tasks;
  int best = 1;
  int64_t best_cost = split_k_cost(tasks, sms, k_steps, 1);
  for (int s = 2; s <= max_s; ++s) {
    const int64_t c = split_k_cost(tasks, sms, k_steps, s);
    if (c < best_cost) best = s, best_cost = c;
  }
  return best;
}

// Upper bound of the tiles of one routing: every expert's last tile may be partial.
HK_MOE_HD int64_t max_tiles(int64_t num_tokens, int top_k, int num_local_experts, int bm) {
  return (num_tokens * top_k + bm - 1) / bm + num_local_experts;
}

}  // namespace moe
}  // namespace hopperkit
