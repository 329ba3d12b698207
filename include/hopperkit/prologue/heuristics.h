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

// Whether a specialised mode runs its full-rotary kernel (rotary_dim == head_dim): thread u of a head holds chunks u
// and u + head_dim / 16, so the second chunk's addresses and the sin are the first's plus immediates. H200, session
// 47 (cross-build A/B): the fp8 mode 0.94-0.98x the time from 4096 tokens against the general chunk map, bf16
// 0.985-1.00. Partial rotary keeps the general map in its own kernel: on the generic path (kModeAny) it took
// 1.04-1.14x the time (call 4, rotary_dim 64 at head dim 128).
inline bool pair_full_rotary(int head_dim, int rotary_dim) { return rotary_dim == head_dim; }

// The pair kernel's head order (prologue_pair_kernel.cuh): how many tokens form one block of its walk. A warp holds
// 32 / (head_dim / 16) heads. In token-major order (1 token per block) a warp takes the next heads whatever their
// kind, so when a token's q, k or v heads do not come in whole warps (hy3 at TP8: 8 q, 1 k, 1 v heads, 4 heads per
// warp) some warps hold q, k and v heads together and their lanes take the q path and the k / v path one after
// the other. Blocks of a warp's heads in tokens, walked head-major (head 0 of the block's tokens, then head 1, ...),
// give each warp one head of that many tokens, so one kind; where the heads already come in whole warps (hy3_full:
// 64 / 8 / 8), token-major order gives warps of one kind too and is kept: head-major order there took 1.04-1.08x
// (bf16) and 1.02-1.11x (fp8) the time of token order in the same build (four tokens' cos / sin rows per warp
// instead of one, our guess). Session 49 call 3 split that cost: the block-order kernel run on token order took
// 0.997-1.004x (its arithmetic costs no time), block order itself 1.037-1.053x. Where block order is needed, at hy3
// TP8, it took 0.90-0.94x (fp8) / 0.97-0.98x (bf16) the time of token order (H200, session 45;
// docs/attention_prologue.md); there the q heads walked in token order in CTAs of their own, beside the k / v heads
// in block order, were slower at 32768 tokens (session 49 calls 4-5).
inline int pair_heads_per_warp(int head_dim) { return 32 / (head_dim / 16); }
inline int pair_block_tokens(int hq, int hkv, int head_dim) {
  const int w = pair_heads_per_warp(head_dim);
  return hq % w == 0 && hkv % w == 0 ? 1 : w;
}

// The walk's step, in (tokens, heads) of the block order: a launch of `ctas` CTAs of `threads` threads covers
// ctas x threads / (head_dim / 16) heads per step; blocks hold block_tokens x (hq + 2 hkv) heads.
struct PairWalkStep {
  int tokens;  // whole blocks per step, in tokens (a multiple of block_tokens)
  int heads;   // the rest, in heads of a block: [0, block_tokens x (hq + 2 hkv))
};
inline PairWalkStep pair_walk_step(int64_t ctas, int threads, int head_dim, int hq, int hkv, int block_tokens) {
  const int64_t step = ctas * (threads / (head_dim / 16));
  const int64_t block_heads = static_cast<int64_t>(block_tokens) * (hq + 2 * hkv);
  return {static_cast<int>(step / block_heads * block_tokens), static_cast<int>(step % block_heads)};
}

}  // namespace prologue
}  // namespace hopperkit
