// hopperkit fused FP8 MoE, kernel 2: gate-up GEMM + SiLU(gate) * up + FP8 quantisation.
// Variants: block_m {16, 64} x scaling {per-tensor (128 weight rows per tile), block (256)}.
#include "moe/gemm_launch.cuh"
#include "moe/launch.h"

namespace hopperkit {
namespace moe {

void launch_moe_gate_up(const MoeKernelArgs& a, cudaStream_t stream) {
  const int bn = gate_up_tile_n(a.block_scaled != 0);
  const int64_t tasks = moe_max_tasks(a, bn / 2, a.intermediate);
  switch (a.block_m * 2 + a.block_scaled) {
    case 16 * 2 + 0: launch_moe_gemm<16, 128, true, false>(a, tasks, stream); break;
    case 16 * 2 + 1: launch_moe_gemm<16, 256, true, true>(a, tasks, stream); break;
    case 64 * 2 + 0: launch_moe_gemm<64, 128, true, false>(a, tasks, stream); break;
    case 64 * 2 + 1: launch_moe_gemm<64, 256, true, true>(a, tasks, stream); break;
    default: HK_CHECK(kUnsupported, false, "block_m", "16 or 64", a.block_m);
  }
}

}  // namespace moe
}  // namespace hopperkit
