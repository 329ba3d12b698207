// hopperkit fused FP8 MoE: the four kernel launchers (defined next to their kernels). Each checks its launch.
#pragma once

#include <cuda_runtime.h>

#include "moe/kernel_args.h"

namespace hopperkit {
namespace moe {

// Kernel 1: routing index (one CTA) and, for a bf16 input, its FP8 quantisation (the other CTAs).
void launch_moe_prep(const MoeKernelArgs& a, cudaStream_t stream);
// Kernel 2: gate-up GEMM + SiLU(gate) * up + FP8 quantisation (PDL after kernel 1).
void launch_moe_gate_up(const MoeKernelArgs& a, cudaStream_t stream);
// Kernel 3: down GEMM into per-row bf16 results (PDL after kernel 2).
void launch_moe_down(const MoeKernelArgs& a, cudaStream_t stream);
// Kernel 4: top-k weighted reduce into the output, in token order (PDL after kernel 3).
void launch_moe_reduce(const MoeKernelArgs& a, cudaStream_t stream);

}  // namespace moe
}  // namespace hopperkit
