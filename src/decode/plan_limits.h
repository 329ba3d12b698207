// hopperkit decode plan: limits of the device planner (one CTA keeps every pair's tile prefix in shared memory).
#pragma once

namespace hopperkit {
namespace decode {

constexpr int kPlanThreads = 1024;
constexpr int kPlanItemsPerThread = 4;
// Batches of at most kPlanThreadsSmall * kPlanItemsPerThread pairs are planned by a 256-thread block: every pass
// then runs on 8 warps instead of 32 (session 31 call 1, ncu at 256 pairs: the 1024-thread plan executed 13.7k
// warp instructions, most of them warps with no pair to work on, on one SM's four schedulers).
constexpr int kPlanThreadsSmall = 256;
inline int plan_threads(int pairs) {
  return pairs <= kPlanThreadsSmall * kPlanItemsPerThread ? kPlanThreadsSmall : kPlanThreads;
}
// (pairs + 1) int32 prefix entries must fit the planner's shared memory (227 KB less the scan's storage).
constexpr int kMaxPlanPairs = 49152;

}  // namespace decode
}  // namespace hopperkit
