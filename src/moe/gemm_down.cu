// hopperkit fused FP8 MoE, kernel 3: down GEMM into per-row bf16 results.
// Variants: block_m {16, 64} x scaling {per-tensor, block}; 128 weight rows per tile.
#include "moe/gemm_launch.cuh"
#include "moe/launch.h"

namespace hopperkit {
namespace moe {

namespace {
// Calls f with this call's variant (one of the list below; the default branch reports the value it got).
template <class F>
void with_variant(const MoeKernelArgs& a, F&& f) {
  switch (a.block_m * 2 + a.block_scaled) {
    case 16 * 2 + 0: f(MoeGemmVariant<16, kDownTileN, false, false>{}); break;
    case 16 * 2 + 1: f(MoeGemmVariant<16, kDownTileN, false, true>{}); break;
    case 64 * 2 + 0: f(MoeGemmVariant<64, kDownTileN, false, false>{}); break;
    case 64 * 2 + 1: f(MoeGemmVariant<64, kDownTileN, false, true>{}); break;
    default:
      HK_CHECK(kUnsupported, false, "block_m / block_scaled", "16 or 64 / 0 or 1",
               std::to_string(a.block_m) + " / " + std::to_string(a.block_scaled));
  }
}
int64_t max_tasks(const MoeKernelArgs& a) {
  return moe_max_tasks(a, kDownTileN, a.hidden_size);
}
}  // namespace

MoeGemmPlan plan_moe_down(const MoeKernelArgs& a) {
  MoeGemmPlan plan;
  with_variant(a, [&](auto v) { plan = plan_moe_gemm(a, max_tasks(a), v); });
  return plan;
}

void launch_moe_down(const MoeKernelArgs& a, const MoeGemmPlan& plan, cudaStream_t stream) {
  with_variant(a, [&](auto v) { launch_moe_gemm(a, plan, v, stream); });
}

}  // namespace moe
}  // namespace hopperkit
