// hopperkit fused FP8 MoE: the four kernel launchers (defined next to their kernels). Each checks its launch.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "moe/kernel_args.h"

namespace hopperkit {
namespace moe {

// Kernel 1: routing index (one CTA) and, for a bf16 input, its FP8 quantisation (the other CTAs).
void launch_moe_prep(const MoeKernelArgs& a, cudaStream_t stream);
// Measurement aid (HOPPERKIT_MOE_PREP_BOUND): kernel 1 reduced to its resets (mode 1), its index build (2) or its
// resets and quantisation (3); timing only (prep.cu).
void launch_moe_prep_bound(const MoeKernelArgs& a, int mode, cudaStream_t stream);
// A grouped-GEMM launch's host-side inputs, prepared (and checked) before the op queues any kernel.
struct MoeGemmPlan {
  CUtensorMap wmap;   // the weights (w13 or w2)
  CUtensorMap amap;   // down: its A rows (act); gate-up: unused (a copy of wmap)
  int64_t grid = 1;   // persistent CTAs (a multiple of cluster)
  int cluster = 1;    // CTAs per cluster (2: the gate-up's pairs)
  const void* kernel = nullptr;  // the variant it was planned for (launch checks it)
};
// Kernel 2: gate-up GEMM + SiLU(gate) * up + FP8 quantisation (PDL after kernel 1).
MoeGemmPlan plan_moe_gate_up(const MoeKernelArgs& a);
void launch_moe_gate_up(const MoeKernelArgs& a, const MoeGemmPlan& plan, cudaStream_t stream);
// Kernel 3: down GEMM into per-row bf16 results (PDL after kernel 2).
MoeGemmPlan plan_moe_down(const MoeKernelArgs& a);
void launch_moe_down(const MoeKernelArgs& a, const MoeGemmPlan& plan, cudaStream_t stream);
// Kernel 4: top-k weighted reduce into the output, in token order (PDL after kernel 3).
void launch_moe_reduce(const MoeKernelArgs& a, cudaStream_t stream);

}  // namespace moe
}  // namespace hopperkit
