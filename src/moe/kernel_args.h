// hopperkit fused FP8 MoE: the arguments every kernel of the pipeline receives (plain device pointers).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hopperkit {
namespace moe {

struct MoeKernelArgs {
  // ---- inputs
  const uint8_t* a_in;        // gate-up input rows: [num_tokens, hidden] fp8 (the caller's, or xq below)
  int64_t a_in_stride;        // elements (= bytes)
  const float* a_in_scale;    // per-tensor: [1]; block: [num_tokens, hidden / 128]
  const uint16_t* hidden;     // [num_tokens, hidden] bf16 when the input is quantised here, else null
  int64_t hidden_stride;
  const float* a13_scale;     // per-tensor static scale of the gate-up input [1] (bf16 input only)
  const int32_t* topk_ids;    // [num_tokens, top_k]
  const float* topk_weights;  // [num_tokens, top_k]
  const int32_t* expert_map;  // [num_global_experts] or null
  const uint8_t* w13;         // [E, 2I, H] fp8
  const uint8_t* w2;          // [E, H, I] fp8
  const float* w13_scale;     // per-tensor [E]; block [E, 2I / 128, H / 128]
  const float* w2_scale;      // per-tensor [E]; block [E, H / 128, I / 128]
  const float* a2_scale;      // per-tensor static scale of the down input [1]
  const uint16_t* shared_output;  // [num_tokens, hidden] bf16 or null
  int64_t shared_stride;
  uint16_t* out;              // [num_tokens, hidden] bf16
  int64_t out_stride;
  // ---- sizes
  int num_tokens, hidden_size, intermediate, num_local_experts, num_global_experts, top_k;
  int block_m;                // 16, 32, 48 or 64: the routing index's tiles (both GEMMs unless gate_up_bm says)
  int gate_up_bm;             // the gate-up's tile rows: block_m, or 128 (tiles_wide; gate_up_block_m)
  int down_bm;                // the down GEMM's tile rows: block_m, or 128 (tiles_wide, only with gate_up_bm 128)
  int block_scaled;           // 0: per-tensor, 1: 128x128 weight blocks + 1x128 activation groups
  int gate_up_tile_n;         // weight rows per gate-up tile (gate_up_tile_n in heuristics.h)
  int down_tile_n;            // weight rows per down tile (down_tile_n)
  int allow_split;            // split-K of decode tiles allowed (see split_k_slices)
  int index_ctas;             // CTAs of the routing index build (index_ctas in heuristics.h)
  // ---- workspace (see workspace_layout.h)
  int32_t* counters;          // [0] num_tiles, [1] dropped rows, [2] num wide tiles (gate_up_bm == 128),
                              // [3] 1 when the swapped down waited per tile (tile_ready), else 0,
                              // [4] the per-tensor swapped down's item claims (one per item it ran, each CTA's
                              // last, failing one included: ends at tasks x slices; 0 otherwise; zeroed by prep),
                              // [5] 1 when the gate-up ran in clusters of two (gate_up_pairs; zeroed by prep),
                              // [6] the CTAs a swapped gate-up on even rounds kept (0 otherwise; zeroed by prep),
                              // [7] with gemm_index: the tile count + 1, published by the gate-up's last CTA (release)
                              // once the tile list is written (0 otherwise; zeroed by prep),
                              // [8] with tiles_pair: the number of row groups in it
  int32_t* expert_offset;     // [E + 1]
  int4* tiles;                // {expert, row_begin, rows, 0}
  int4* tiles_wide;           // the same, 128 rows per tile (written when gate_up_bm == 128)
  int32_t* sorted_rows;
  uint8_t* xq;
  float* xq_scale;
  uint8_t* act;
  float* act_scale;
  uint16_t* y;
  int32_t* split_counters;    // [kSplitSlices], zero between uses
  float* split_partials;      // [kSplitSlices, kSplitSliceFloats]
  int32_t* index_hist;        // [index_ctas, E + 1] when index_ctas > 1
  // [max_tiles(bm = 16)] or null: act columns the gate-up has written per tile of `tiles` (zeroed by the index
  // build); with swapped (16- to 48-row) tiles the down GEMM waits for a tile's count to reach I instead of
  // waiting for the whole gate-up grid (grouped_gemm.cuh)
  int32_t* tile_ready;
  // (after the others but the trace builds' field, so that the kernels that do not read it compile as before)
  int gate_up_pairs;          // 1: the 128-row gate-up runs in clusters of two (gate_up_pairs in heuristics.h)
  int even_rounds;            // 1: the swapped gate-up spreads its items over even rounds (gate_up_even_rounds)
  int gemm_index;             // 1: the GEMMs build the routing index, kernel 1 only resets (gemm_index in heuristics.h)
  int split_handoff;          // 1: the per-tensor 16- / 32-row gate-up hands split pieces to its hand-off warp
  // [max_tiles(bm = 256)] or null: row groups of up to 256 rows {expert, row_begin, rows, 0} (an expert's 128-row
  // tiles two at a time), written by the index build where the per-tensor 128 x 256 down's K-tail kernel runs
  // (down_k_tail_fits in heuristics.h), whose items they are (grouped_gemm.cuh, kATiles)
  int4* tiles_pair;
#ifdef HOPPERKIT_MOE_TRACE
  unsigned long long* trace;  // [grid, kMoeTraceSlots] per-CTA event times of one GEMM, or kernel 1's one row
                              // [kMoeTraceSlots] (trace builds; moe/trace.h)
#endif
};

#if defined(__CUDACC__)
// Local expert of a global id, or -1 (the one rule the index build and the reduce share). Branch-free: the map
// is read at entry 0 for an id out of range and the result dropped, so that a caller's lookups of several
// entries issue back to back (with an early return for bad ids, each lookup waited for the one before it: 1 + 8
// dependent round trips per batch of 8 entries in the index build when an expert map is given).
__device__ __forceinline__ int moe_local_expert(const MoeKernelArgs& a, int g) {
  const bool in_range = g >= 0 && g < a.num_global_experts;
  const int e = a.expert_map ? __ldg(a.expert_map + (in_range ? g : 0)) : g;
  return in_range && e >= 0 && e < a.num_local_experts ? e : -1;
}
#endif

}  // namespace moe
}  // namespace hopperkit
