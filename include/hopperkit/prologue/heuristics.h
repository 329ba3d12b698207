// hopperkit fused attention prologue: which kernel a call runs. Pure integer functions; unit-tested on the CPU.
#pragma once

#include <cstdint>

namespace hopperkit {
namespace prologue {

// Two kernels (src/prologue/): one 8-element vector per thread (prologue_kernel.cuh: the shortest dependent
// chain per thread, for calls that fill less than a wave), or two vectors per thread that are each other's
// NeoX partners (prologue_pair_kernel.cuh: fewer instructions per byte, for calls of several waves).
// H200, session 9 run 3, same build (pair / one-vector time): 0.76-0.94x from 655,360 vectors (hy3_full at 512
// tokens, hy3_tp8 at 4096), 1.03-1.15x at 81,920 vectors and below (hy3_full at 64 tokens, hy3_tp8 at 512).
// The switch sits near one wave of the one-vector kernel (132 SMs x 6 CTAs x 256 threads = 202,752 vectors).
constexpr int64_t kPairKernelMinVectors = int64_t{1} << 18;

// vectors = tokens x (q heads + 2 kv heads) x head_dim / 8
inline bool use_pair_kernel(int64_t vectors) { return vectors >= kPairKernelMinVectors; }

}  // namespace prologue
}  // namespace hopperkit
