// hopperkit decode plan: limits of the device planner (one CTA keeps every pair's tile prefix in shared memory).
#pragma once

namespace hopperkit {
namespace decode {

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
