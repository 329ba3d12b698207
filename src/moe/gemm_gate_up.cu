// hopperkit fused FP8 MoE, kernel 2: gate-up GEMM + SiLU(gate) * up + FP8 quantisation.
// Variants (tile rows / scaling / weight rows per tile): 16, 32 and 48 per-tensor 128, 16 and 32 block 256 (each
// also as the GEMM-index variant, kIndex: gemm_index in heuristics.h), 64
// per-tensor 128 or 256, 64 block 256, 128 per-tensor 128 or 192 (each also in clusters of two: gate_up_pairs),
// 128 block 256 (block_m and gate_up_block_m in heuristics.h).
#include "moe/gemm_launch.cuh"
#include "moe/launch.h"

namespace hopperkit {
namespace moe {

namespace {
// Calls f with this call's variant (one of the list below; the default branch reports the value it got).
template <class F>
void with_variant(const MoeKernelArgs& a, F&& f) {
  // a warp's columns are all in or all past I (the epilogue skips them per warp): 64 columns per warp
  HK_CHECK(kUnsupported, a.intermediate % 64 == 0, "intermediate", "a multiple of 64",
           std::to_string(a.intermediate));
  // a 192-row tile's task is 96 columns: whole tasks only (its epilogue does not bound columns by I)
  HK_CHECK(kUnsupported, a.gate_up_tile_n != 192 || a.intermediate % 96 == 0, "intermediate",
           "a multiple of 96 with 192-row gate-up tiles", std::to_string(a.intermediate));
  if (a.gate_up_pairs) {  // clusters of two sharing the weight stages (gate_up_pairs in heuristics.h)
    HK_CHECK(kUnsupported, a.gate_up_bm == 128 && !a.block_scaled, "gate-up pairs", "per-tensor 128-row tiles",
             "block_m " + std::to_string(a.gate_up_bm) + ", block_scaled " + std::to_string(a.block_scaled));
    switch (a.gate_up_tile_n) {
      case 128: f(MoeGemmVariant<128, 128, true, false, true>{}); return;
      case 192: f(MoeGemmVariant<128, 192, true, false, true>{}); return;
      default:
        HK_CHECK(kUnsupported, false, "gate-up pairs tile_n", "128 or 192", std::to_string(a.gate_up_tile_n));
    }
  }
  if (a.gemm_index) {  // the swapped variants that build the routing index themselves (gemm_index in heuristics.h)
    switch ((a.gate_up_bm * 2 + a.block_scaled) * 1000 + a.gate_up_tile_n) {
      case (16 * 2 + 0) * 1000 + 128: f(MoeGemmVariant<16, 128, true, false, false, true>{}); return;
      case (16 * 2 + 1) * 1000 + 256: f(MoeGemmVariant<16, 256, true, true, false, true>{}); return;
      case (32 * 2 + 0) * 1000 + 128: f(MoeGemmVariant<32, 128, true, false, false, true>{}); return;
      case (32 * 2 + 1) * 1000 + 256: f(MoeGemmVariant<32, 256, true, true, false, true>{}); return;
      case (48 * 2 + 0) * 1000 + 128: f(MoeGemmVariant<48, 128, true, false, false, true>{}); return;
      default:
        HK_CHECK(kUnsupported, false, "GEMM-index gate-up block_m / block_scaled / tile_n",
                 "16/0/128, 16/1/256, 32/0/128, 32/1/256 or 48/0/128",
                 std::to_string(a.gate_up_bm) + "/" + std::to_string(a.block_scaled) + "/" +
                     std::to_string(a.gate_up_tile_n));
    }
  }
  switch ((a.gate_up_bm * 2 + a.block_scaled) * 1000 + a.gate_up_tile_n) {
    case (16 * 2 + 0) * 1000 + 128: f(MoeGemmVariant<16, 128, true, false>{}); break;
    case (16 * 2 + 1) * 1000 + 256: f(MoeGemmVariant<16, 256, true, true>{}); break;
    case (32 * 2 + 0) * 1000 + 128: f(MoeGemmVariant<32, 128, true, false>{}); break;
    case (32 * 2 + 1) * 1000 + 256: f(MoeGemmVariant<32, 256, true, true>{}); break;
    case (48 * 2 + 0) * 1000 + 128: f(MoeGemmVariant<48, 128, true, false>{}); break;
    case (64 * 2 + 0) * 1000 + 128: f(MoeGemmVariant<64, 128, true, false>{}); break;
    case (64 * 2 + 0) * 1000 + 256: f(MoeGemmVariant<64, 256, true, false>{}); break;
    case (64 * 2 + 1) * 1000 + 256: f(MoeGemmVariant<64, 256, true, true>{}); break;
    case (128 * 2 + 0) * 1000 + 128: f(MoeGemmVariant<128, 128, true, false>{}); break;
    case (128 * 2 + 0) * 1000 + 192: f(MoeGemmVariant<128, 192, true, false>{}); break;
    case (128 * 2 + 1) * 1000 + 256: f(MoeGemmVariant<128, 256, true, true>{}); break;
    default:
      HK_CHECK(kUnsupported, false, "gate-up block_m / block_scaled / tile_n",
               "16/0/128, 16/1/256, 32/0/128, 32/1/256, 48/0/128, 64/0/128, 64/0/256, 64/1/256, 128/0/128, 128/0/192 "
               "or 128/1/256",
               std::to_string(a.gate_up_bm) + "/" + std::to_string(a.block_scaled) + "/" +
                   std::to_string(a.gate_up_tile_n));
  }
}
int64_t max_tasks(const MoeKernelArgs& a) {
  return moe_max_tasks(a, a.gate_up_tile_n / 2, a.intermediate, a.gate_up_bm);
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
