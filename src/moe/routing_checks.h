// hopperkit fused FP8 MoE: argument checks shared by the host functions that take a routing's counts
// (moe_tile_rows, the CPU routing twin): typed errors naming the argument, nothing launched.
#pragma once

#include <string>

#include "hopperkit/error.h"
#include "hopperkit/moe/heuristics.h"

namespace hopperkit {
namespace moe {

inline void check_routing_counts(int num_tokens, int top_k, int num_global_experts, int num_local_experts) {
  HK_CHECK(kValue, num_tokens >= 0 && num_tokens <= kMaxTokens, "num_tokens", "0.." + std::to_string(kMaxTokens),
           num_tokens);
  HK_CHECK(kValue, top_k >= 1 && top_k <= kMaxTopK, "top_k", "1.." + std::to_string(kMaxTopK), top_k);
  HK_CHECK(kValue, num_global_experts >= 1 && num_global_experts <= kMaxExperts, "num_global_experts",
           "1.." + std::to_string(kMaxExperts), num_global_experts);
  HK_CHECK(kValue, num_local_experts >= 1 && num_local_experts <= num_global_experts, "num_local_experts",
           "1..num_global_experts (" + std::to_string(num_global_experts) + ")", num_local_experts);
}

}  // namespace moe
}  // namespace hopperkit
