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

// The pair kernel's item paths, one kernel variant each (prologue_pair_kernel.cuh): kModeAny reads every option at
// run time; kModeNeoxBf16 / kModeNeoxFp8 fold NeoX RoPE, q and the KV cache both bf16 / both fp8, and bf16 norm
// weights (or none) in at compile time. H200, session 16 (runs 1 and 3, against the generic path): fp8
// 0.95-0.98x the time from 4096 tokens, bf16 0.98-1.01x.
constexpr int kModeAny = 0, kModeNeoxBf16 = 1, kModeNeoxFp8 = 2;

// The item path of a call: the specialised ones need NeoX, equal q and cache dtypes, and bf16 norm weights or
// none (their weight loads assume 16-byte chunks of 8 bf16 values); everything else runs kModeAny.
inline int pair_mode(bool neox, bool q_fp8, bool kv_fp8, bool has_norm_weights, bool norm_weights_f32) {
  if (!neox || (has_norm_weights && norm_weights_f32) || q_fp8 != kv_fp8) return kModeAny;
  return q_fp8 ? kModeNeoxFp8 : kModeNeoxBf16;
}

}  // namespace prologue
}  // namespace hopperkit
