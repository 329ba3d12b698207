// hopperkit decode plan: limits of the device planner (one CTA keeps every pair's tile prefix in shared memory).
#pragma once

namespace hopperkit {
namespace decode {

constexpr int kPlanThreads = 1024;
constexpr int kPlanItemsPerThread = 4;
// (pairs + 1) int32 prefix entries must fit the planner's shared memory (227 KB less the scan's storage).
constexpr int kMaxPlanPairs = 49152;

}  // namespace decode
}  // namespace hopperkit
