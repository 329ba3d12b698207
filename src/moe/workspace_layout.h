// hopperkit fused FP8 MoE: where each buffer lives in the caller's workspace. Shared by the size query and the
// launcher so that the two never disagree.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hopperkit/moe/heuristics.h"

namespace hopperkit {
namespace moe {

struct MoeWorkspaceLayout {
  size_t counters = 0;       // int32 [16]: num_tiles, dropped rows, num wide tiles, down waited per tile, down
                             // claims, gate-up pairs ran, even-rounds CTAs, GEMM index published, row groups
                             // (kernel_args.h)
  size_t expert_offset = 0;  // int32 [num_local_experts + 1]
  size_t tiles = 0;          // int4  [max_tiles(bm = 16)]: expert, row_begin, rows, -
  size_t tiles_wide = 0;     // int4  [max_tiles(bm = 128)]: 128-row tiles of the wide gate-up
  size_t sorted_rows = 0;    // int32 [num_tokens * top_k]: row ids (token * top_k + k) grouped by expert
  size_t xq = 0;             // fp8   [num_tokens, hidden]: the quantised bf16 input
  size_t xq_scale = 0;       // fp32  [num_tokens, hidden / 128] (block-wise scaling)
  size_t act = 0;            // fp8   [num_tokens * top_k, intermediate]: SiLU(gate) * up, by sorted position
  size_t act_scale = 0;      // fp32  [num_tokens * top_k, intermediate / 128] (block-wise scaling)
  size_t y = 0;              // bf16  [num_tokens * top_k, hidden]: down-projection result per row id
  size_t split_counters = 0; // int32 [kSplitSlices]: arrivals per split task (zeroed by kernel 1)
  size_t split_partials = 0; // fp32  [kSplitSlices, 32 x 256]: split-K partial tiles (swapped tiles only)
  size_t index_hist = 0;     // int32 [index_ctas(rows), E + 1]: per-chunk expert counts + dropped (> 1 chunk)
  size_t tile_ready = 0;     // int32 [max_tiles(bm = 16)]: act columns written per tile (zeroed by the index build)
  size_t tiles_pair = 0;     // int4  [max_tiles(bm = 256)]: row groups of the K-tail down (kernel_args.h)
  size_t total_bytes = 0;
};

inline MoeWorkspaceLayout moe_workspace_layout(int64_t tokens, int top_k, int hidden, int intermediate,
                                               int num_local_experts) {
  auto up = [](size_t v) { return (v + 255) / 256 * 256; };
  const size_t rows = static_cast<size_t>(tokens) * top_k;
  MoeWorkspaceLayout l;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t here = at;
    at += up(bytes);
    return here;
  };
  l.counters = take(16 * sizeof(int32_t));
  l.expert_offset = take((num_local_experts + 1) * sizeof(int32_t));
  l.tiles = take(static_cast<size_t>(max_tiles(tokens, top_k, num_local_experts, 16)) * 4 * sizeof(int32_t));
  l.tiles_wide = take(static_cast<size_t>(max_tiles(tokens, top_k, num_local_experts, 128)) * 4 * sizeof(int32_t));
  l.sorted_rows = take(rows * sizeof(int32_t));
  l.xq = take(static_cast<size_t>(tokens) * hidden);
  l.xq_scale = take(static_cast<size_t>(tokens) * (hidden / kScaleBlock + 1) * sizeof(float));
  l.act = take(rows * intermediate);
  l.act_scale = take(rows * (intermediate / kScaleBlock + 1) * sizeof(float));
  l.y = take(rows * hidden * 2);
  l.split_counters = take(kSplitSlices * sizeof(int32_t));
  l.split_partials = take(static_cast<size_t>(kSplitSlices) * kSplitSliceFloats * sizeof(float));
  const int chunks = index_ctas(static_cast<int64_t>(rows));
  l.index_hist = take(chunks > 1 ? static_cast<size_t>(chunks) * (num_local_experts + 1) * sizeof(int32_t) : 0);
  l.tile_ready = take(static_cast<size_t>(max_tiles(tokens, top_k, num_local_experts, 16)) * sizeof(int32_t));
  l.tiles_pair = take(static_cast<size_t>(max_tiles(tokens, top_k, num_local_experts, 256)) * 4 * sizeof(int32_t));
  l.total_bytes = at;
  return l;
}

}  // namespace moe
}  // namespace hopperkit
