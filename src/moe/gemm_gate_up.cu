// hopperkit fused FP8 MoE, kernel 2: gate-up GEMM + SiLU(gate) * up + FP8 quantisation.
// Variants: block_m {16, 64} x scaling {per-tensor (128 weight rows per tile), block (256)}.
#include "moe/gemm_launch.cuh"
#include "moe/launch.h"

namespace hopperkit {
namespace moe {

namespace {
// Calls f with this call's variant (one of the list below; the default branch reports the value it got).
template <class F>
void with_variant(const MoeKernelArgs& a, F&& f) {
  switch (a.block_m * 2 + a.block_scaled) {
    case 16 * 2 + 0: f(MoeGemmVariant<16, 128, true, false>{}); break;
    case 16 * 2 + 1: f(MoeGemmVariant<16, 256, true, true>{}); break;
    case 64 * 2 + 0: f(MoeGemmVariant<64, 128, true, false>{}); break;
    case 64 * 2 + 1: f(MoeGemmVariant<64, 256, true, true>{}); break;
    default:
      HK_CHECK(kUnsupported, false, "block_m / block_scaled", "16 or 64 / 0 or 1",
               std::to_string(a.block_m) + " / " + std::to_string(a.block_scaled));
  }
}
int64_t max_tasks(const MoeKernelArgs& a) {
  const int bn = gate_up_tile_n(a.block_scaled != 0);
  return moe_max_tasks(a, bn / 2, a.intermediate);
}
}  // namespace

MoeGemmPlan plan_moe_gate_up(const MoeKernelArgs& a) {
  MoeGemmPlan plan;
  with_variant(a, [&](auto v) { plan = plan_moe_gemm(a, max_tasks(a), v); });
  return plan;
}

void launch_moe_gate_up(const MoeKernelArgs& a, const MoeGemmPlan& plan, cudaStream_t stream) {
  with_variant(a, [&](auto v) { launch_moe_gemm(a, plan, v, stream); });
}

}  // namespace moe
}  // namespace hopperkit
