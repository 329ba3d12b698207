// hopperkit fused FP8 MoE: the routing index (which rows each local expert computes, in which tiles).
//
// A "row" is one (token, k) pair of topk_ids, numbered token * top_k + k. The index groups the rows of every
// local expert into one contiguous range, in row order inside an expert (so results are deterministic), and
// cuts each range into tiles of block_m rows: the task list a persistent GEMM grid drains. Rows routed to
// experts that are not local (expert_map gives -1, or the id is out of range) are dropped.
#pragma once

#include <cstdint>
#include <vector>

namespace hopperkit {
namespace moe {

struct MoeTile {
  int32_t expert;     // local expert id
  int32_t row_begin;  // into sorted_rows
  int32_t rows;       // 1..block_m
};

struct MoeRouting {
  std::vector<int32_t> expert_count;   // [num_local_experts] rows per local expert
  std::vector<int32_t> expert_offset;  // [num_local_experts + 1] exclusive prefix of expert_count
  std::vector<int32_t> sorted_rows;    // [expert_offset.back()] row ids (token * top_k + k), grouped by expert
  std::vector<MoeTile> tiles;          // in expert order, block_m rows each (the last of an expert may be less)
  int32_t dropped_rows = 0;            // rows routed to non-local or invalid experts
};

// CPU twin of the device index build. expert_map: [num_global_experts] global id -> local id or -1, or null
// when every expert is local (num_global_experts == num_local_experts). Throws hopperkit::Error on bad sizes.
MoeRouting moe_routing_cpu(const int32_t* topk_ids, int num_tokens, int top_k, const int32_t* expert_map,
                           int num_global_experts, int num_local_experts, int block_m);

}  // namespace moe
}  // namespace hopperkit
