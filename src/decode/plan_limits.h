// hopperkit decode plan: limits of the device planner (one CTA keeps every pair's tile prefix in shared memory).
#pragma once

#include <cstdint>

#include "hopperkit/decode/heuristics.h"
#include "hopperkit/error.h"

namespace hopperkit {
namespace decode {

// The planner sums the pairs' tiles in int32 (the prefix, the total, each pair's first tile): with every pair at
// the block table's capacity (seq_lens are untrusted, clamped to it) the sum must stay below 2^31. Checked on the
// host before the planner (device or CPU twin) runs; real shapes are far inside (batch 4096 x 8 KV heads at 1M
// tokens per request: 2^29 tiles).
inline bool plan_tiles_fit(int64_t pairs, int64_t max_blocks_per_seq, int64_t block_size) {
  const int64_t tiles_per_pair = (max_blocks_per_seq * block_size + kTileTokens - 1) / kTileTokens;
  return pairs * tiles_per_pair < (int64_t{1} << 31);
}
// The block table's checks both planners (decode_plan, decode_plan_cpu) make, as typed errors: at least one column,
// and the tile sums of full rows within int32.
inline void check_plan_block_table(int64_t pairs, int max_blocks_per_seq, int block_size) {
  HK_CHECK(kValue, max_blocks_per_seq >= 1, "max_blocks_per_seq", ">= 1", max_blocks_per_seq);
  HK_CHECK(kUnsupported, plan_tiles_fit(pairs, max_blocks_per_seq, block_size), "max_blocks_per_seq",
           "batch x num_kv_heads x tiles of a full block_table row (64 tokens each) below 2^31", max_blocks_per_seq);
}

constexpr int kPlanThreads = 1024;
constexpr int kPlanItemsPerThread = 4;
// (pairs + 1) int32 prefix entries must fit the planner's shared memory (227 KB less the scan's storage).
constexpr int kMaxPlanPairs = 49152;
// Batches of at most kPlanSmallMaxPairs pairs are planned by a 256-thread block, every pass then on 8 warps
// instead of 32 (session 31 call 1, ncu at 256 pairs: the 1024-thread plan executed 13.7k warp instructions,
// most of them in warps with no pair to work on, on one SM's four schedulers). Measured on an H200 (session 31
// calls 4-5, plan.update in a CUDA graph, 256 against 1024 threads): 256 pairs 3.69 / 4.70 us, 384 4.52 / 4.58,
// 512 4.52 / 4.64; past that the small block loses: 640 5.02 / 4.79, 768 5.00 / 4.87, 1024 5.43 / 5.07.
constexpr int kPlanThreadsSmall = 256;
constexpr int kPlanSmallMaxPairs = 512;
inline int plan_threads(int pairs) { return pairs <= kPlanSmallMaxPairs ? kPlanThreadsSmall : kPlanThreads; }

}  // namespace decode
}  // namespace hopperkit
