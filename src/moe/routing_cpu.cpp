// hopperkit fused FP8 MoE: CPU twin of the routing index build.
#include <string>

#include "hopperkit/error.h"
#include "hopperkit/moe/heuristics.h"
#include "hopperkit/moe/routing.h"
#include "moe/routing_checks.h"

namespace hopperkit {
namespace moe {

MoeRouting moe_routing_cpu(const int32_t* topk_ids, int num_tokens, int top_k, const int32_t* expert_map,
                           int num_global_experts, int num_local_experts, int bm) {
  check_routing_counts(num_tokens, top_k, num_global_experts, num_local_experts);
  HK_CHECK(kValue, expert_map != nullptr || num_local_experts == num_global_experts, "expert_map",
           "a map when only some experts are local", "null");
  HK_CHECK(kValue, bm == 16 || bm == 32 || bm == 48 || bm == 64 || bm == 128, "block_m", "16, 32, 48, 64 or 128",
           bm);
  MoeRouting r;
  r.expert_count.assign(num_local_experts, 0);
  const int rows = num_tokens * top_k;
  std::vector<int32_t> local(rows, -1);
  for (int i = 0; i < rows; ++i) {
    const int g = topk_ids[i];
    int e = -1;
    if (g >= 0 && g < num_global_experts) e = expert_map ? expert_map[g] : g;
    if (e < 0 || e >= num_local_experts) {
      ++r.dropped_rows;
      continue;
    }
    local[i] = e;
    ++r.expert_count[e];
  }
  r.expert_offset.assign(num_local_experts + 1, 0);
  for (int e = 0; e < num_local_experts; ++e) r.expert_offset[e + 1] = r.expert_offset[e] + r.expert_count[e];
  r.sorted_rows.assign(r.expert_offset.back(), 0);
  std::vector<int32_t> fill(r.expert_offset.begin(), r.expert_offset.end() - 1);
  for (int i = 0; i < rows; ++i) {
    if (local[i] >= 0) r.sorted_rows[fill[local[i]]++] = i;
  }
  for (int e = 0; e < num_local_experts; ++e) {
    for (int b = r.expert_offset[e]; b < r.expert_offset[e + 1]; b += bm) {
      const int n = r.expert_offset[e + 1] - b;
      r.tiles.push_back(MoeTile{e, b, n < bm ? n : bm});
    }
  }
  return r;
}

}  // namespace moe
}  // namespace hopperkit
