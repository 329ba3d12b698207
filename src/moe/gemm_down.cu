// hopperkit fused FP8 MoE, kernel 3: down GEMM into per-row bf16 results.
// Variants: block_m {16, 64} x scaling {per-tensor, block}; 128 weight rows per tile.
#include "moe/gemm_launch.cuh"
#include "moe/launch.h"

namespace hopperkit {
namespace moe {

void launch_moe_down(const MoeKernelArgs& a, cudaStream_t stream) {
  const int64_t tasks = moe_max_tasks(a, kDownTileN, a.hidden_size);
  switch (a.block_m * 2 + a.block_scaled) {
    case 16 * 2 + 0: launch_moe_gemm<16, kDownTileN, false, false>(a, tasks, stream); break;
    case 16 * 2 + 1: launch_moe_gemm<16, kDownTileN, false, true>(a, tasks, stream); break;
    case 64 * 2 + 0: launch_moe_gemm<64, kDownTileN, false, false>(a, tasks, stream); break;
    case 64 * 2 + 1: launch_moe_gemm<64, kDownTileN, false, true>(a, tasks, stream); break;
    default: HK_CHECK(kUnsupported, false, "block_m", "16 or 64", a.block_m);
  }
}

}  // namespace moe
}  // namespace hopperkit
