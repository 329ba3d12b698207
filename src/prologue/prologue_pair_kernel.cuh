// The fused attention prologue with two vectors per thread that are each other's RoPE partners.
//
// A head of D elements is handled by D / 16 threads. Thread u of a head holds two 8-element vectors, chunks
// ca(u) and cb(u), chosen so that under NeoX RoPE every element's rotate-half partner sits in the same thread:
//   u <  r/16:  ca = u,                 cb = u + r/16                 (rotated dims: e and e + r/2)
//   u >= r/16:  ca = r/8 + v,           cb = r/8 + (D - r)/16 + v     (v = u - r/16: dims past r, any pairing)
// with r = rotary_dim (a multiple of 16, checked on the host); at full rotary (r = D) that is ca = u, cb = u + D/16,
// which the specialised modes' full-rotary kernels (kFull) fold in at compile time. GPT-J pairs are adjacent
// elements of one vector, so the same assignment serves it. Against one vector per thread (prologue_kernel.cuh)
// this removes the eight partner shuffles, loads each cos / sin row segment once for both vectors, computes the
// token, head, position and cache slot once per two vectors, and the norm and FP8 amax reductions span half as many
// lanes. A warp's loads stay inside whole heads (each 16-byte chunk of a head is read by exactly one thread).
// Four vectors per thread (two NeoX pairs, D / 32 threads per head) issued ~22% fewer instructions at 80 registers
// and was slower there and at 64 (H200, sessions 49-50, docs/attention_prologue.md): two stay.
#pragma once

#include "hopperkit/prologue/heuristics.h"
#include "prologue/prologue_kernel.cuh"

namespace hopperkit {
namespace prologue {

// Resident CTAs per SM asked of the register allocator: 3. Each thread walks its items g, g + grid size, ... over
// one resident wave; while it works on an item, the next item's lines are prefetched into L1 (prefetch_pair_item),
// and its loads follow the work. H200, session 9, same-build A/B (run 6) against one item per thread on a full
// grid at 4 CTAs per SM (64 registers, run 4's kernel): the loop was 0.82-0.85x the time for bf16 at 4096-32768
// tokens, 0.89-0.96x for fp8. Against one vector per thread (prologue_kernel.cuh), the full-grid pair kernel was
// 0.76-0.94x from 655,360 vectors and 1.03-1.15x at 81,920 and below (run 3): heuristics.h.
// Session 26 (cross-build A/B, run 5): the L1 prefetch in place of the next item held in registers (80 ->
// 64-72 registers) took 0.944-0.991x the time from 4096 tokens at 3 CTAs per SM (1.034x at hy3_full 512 bf16);
// 4 CTAs per SM, which its 64 registers would allow, measured 0.949-1.017x (fp8 hy3_full slower): 3 stays.
// What runs (session 44, ncu): kPairMinCtas only caps the registers (85); the launch takes the measured occupancy,
// so the two specialised modes, compiled to 64 registers, run 4 CTAs per SM (528 CTAs on an H200) and kModeAny
// (72) runs 3. At hy3_full 4096 / 32768 tokens both neighbours lost: a variant with 10% fewer instructions at 80
// registers (3 per SM) 1.08-1.12x, this kernel at 48 registers (5 per SM) 1.03-1.15x (docs/attention_prologue.md,
// session 44); an item-path change that takes the fast modes past 64 registers costs a CTA per SM (and
// pair_min_ctas() below).
constexpr int kPairMinCtas = 3;

// NeoX on a pair of vectors that are each other's rotate-half partners: x_a = x_a c - x_b s, x_b = x_b c + x_a s.
// kHalf > 0: the sin lies kHalf elements after the cos (sp unused), an immediate offset in either table format.
template <int kHalf = 0>
__device__ __forceinline__ void rope_neox_pair(float (&xa)[8], float (&xb)[8], const uint8_t* cp, const uint8_t* sp,
                                               int f32) {
  auto rot = [&](int i, float c, float s) {
    const float a0 = xa[i], b0 = xb[i];
    xa[i] = a0 * c - b0 * s;
    xb[i] = b0 * c + a0 * s;
  };
  if constexpr (kHalf > 0) {
    if (f32) {
      for_cos_sin8(cp, cp + kHalf * 4, 1, rot);
    } else {
      for_cos_sin8(cp, cp + kHalf * 2, 0, rot);
    }
  } else {
    for_cos_sin8(cp, sp, f32, rot);
  }
}

// One item: a thread's two vectors of one head of one token, and the token's position and cache slot.
struct PairItem {
  uint4 raw_a, raw_b;
  int64_t p, slot;
  int t, h;
};

// What a thread keeps for its whole loop: its two chunks' byte offsets and per-call constants that the item path
// used to recompute per item. Session 15 (H200, hy3_full 32768 tokens, ncu): the fp8 path executed 401 warp
// instructions per item, much of it 64-bit address arithmetic and, per K / V item, an IEEE division of the
// cache scale; byte offsets from 32-bit strides (one wide multiply per address), the token and head advanced
// by a constant step instead of a division, the cache scales' reciprocals once per thread, and the 1/rms folded
// into the store's factor (norm_weights) took the fp8 path to 0.95-0.98x the time (run 7). The per-call byte
// strides and hq + hkv are PrologueArgs fields formed on the host (kernel parameters, read as constant operands):
// held here they were rematerialised per item at 64 registers (session 48 call 5: 0.990-1.002x the time, 9 SASS
// instructions fewer in the fp8 full-rotary loop, 58-59 registers against 62-64).
struct PairConsts {
  uint32_t chunk_a, chunk_b;  // byte offsets of chunks ca, cb inside a head (bf16)
  uint32_t cs_c;            // NeoX: byte offset of this thread's cos inside a row (its sin: + the half's bytes)
  float inv_k, inv_v;       // 1 / the fp8 cache scales (1 for bf16)
};

// Head h of token t in qkv (bytes); load_pair_item and prefetch_pair_item read the same lines from it.
template <int D>
__device__ __forceinline__ const uint8_t* pair_item_head(const PrologueArgs& a, int t, int h) {
  return reinterpret_cast<const uint8_t*>(a.qkv) + static_cast<uint64_t>(static_cast<uint32_t>(t)) * a.qkv_row_bytes +
         static_cast<uint32_t>(h) * (D * 2);
}

template <int D>
__device__ __forceinline__ void load_pair_item(const PrologueArgs& a, const PairConsts& k, int t, int h,
                                               PairItem& it) {
  it.t = t, it.h = h;
  const uint8_t* head = pair_item_head<D>(a, t, h);
  it.raw_a = *reinterpret_cast<const uint4*>(head + k.chunk_a);
  it.raw_b = *reinterpret_cast<const uint4*>(head + k.chunk_b);
  const uint32_t tu = static_cast<uint32_t>(t);
  it.p = a.positions_64 ? static_cast<const int64_t*>(a.positions)[tu]
                        : static_cast<int64_t>(static_cast<const int32_t*>(a.positions)[tu]);
  it.slot = h >= a.hq ? a.slot_mapping[tu] : -1;
}

// The same item's lines into L1 (prefetch.global.L1: no registers held while they are in flight); the
// load_pair_item that follows one item later finds them there.
// kIndexLines: also the position and slot lines (kModeAny only). The specialised modes leave them to their loads:
// H200, cross-build A/Bs, the fp8 mode in session 46 call 4 (f8pf): 0.973x the time at hy3_full fp8 4096 / 32768
// tokens, 0.98 at 512, 1.00 at hy3_tp8 (16 / 8 SASS instructions fewer in token / block order); the bf16 mode in
// session 47 call 1 (pfall): 0.978-0.985x at hy3_full 512-32768, 0.983 at hy3_tp8 4096, 1.00 elsewhere (8
// instructions fewer in token order, 60-63 registers).
// kFull: full rotary (a specialised mode's kernel): the second chunk lies D bytes after the first, an immediate.
template <int D, bool kIndexLines = true, bool kFull = false>
__device__ __forceinline__ void prefetch_pair_item(const PrologueArgs& a, const PairConsts& k, int t, int h) {
  const uint8_t* head = pair_item_head<D>(a, t, h);
  asm volatile("prefetch.global.L1 [%0];" ::"l"(head + k.chunk_a));
  if constexpr (kFull) {
    asm volatile("prefetch.global.L1 [%0+%1];" ::"l"(head + k.chunk_a), "n"(D));
  } else {
    asm volatile("prefetch.global.L1 [%0];" ::"l"(head + k.chunk_b));
  }
  if (!kIndexLines) return;
  const uint32_t tu = static_cast<uint32_t>(t);
  const void* pos = a.positions_64 ? static_cast<const void*>(static_cast<const int64_t*>(a.positions) + tu)
                                   : static_cast<const void*>(static_cast<const int32_t*>(a.positions) + tu);
  asm volatile("prefetch.global.L1 [%0];" ::"l"(pos));
  if (h >= a.hq) asm volatile("prefetch.global.L1 [%0];" ::"l"(a.slot_mapping + tu));
}

// The norm weights of chunk c (8 values, fp32 or bf16) from global memory (L1 hits after the first item). Copying
// them to shared memory once per CTA (fill, then a barrier before the first item) was 2-5% slower at 512-4096
// tokens, where a thread has ~3 items (session 15 runs 5 and 7; equal from 32768 tokens).
__device__ __forceinline__ void global_w8(const void* w, int w_f32, int c, float (&x)[8]) {
  load8(static_cast<const uint8_t*>(w) + static_cast<int64_t>(c) * 8 * (w_f32 ? 4 : 2), w_f32, x);
}

// RMSNorm with the 1/rms factor deferred: x *= w, returns 1/rms of x as it came in (before the weights).
// RoPE is linear and the fp8 amax scales with it, so the factor joins the one multiply of the store.
// kWBf16: the weights are bf16 (known at compile time): a chunk's 8 weights are 16 bytes, at the same byte offset
// in the weight vector as the chunk in the head (k.chunk_a / k.chunk_b), so no address arithmetic per item and no
// per-element select between the two formats (~25 SASS instructions per normed item in the generic kernel).
template <int D, bool kWBf16>
__device__ __forceinline__ float norm_weights(float (&xa)[8], float (&xb)[8], const void* w, int w_f32,
                                             const PairConsts& k, int ca, int cb, float eps, unsigned mask) {
  constexpr int TPH = D / 16;
  // two fma chains (one per vector): 16 FFMA, where (a^2 + b^2) then + took a FMUL, a FFMA and a FADD per pair
  float sa = 0.f, sb = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) sa = fmaf(xa[i], xa[i], sa), sb = fmaf(xb[i], xb[i], sb);
  const float ss = group_sum<TPH>(sa + sb, mask);
  float wa[8], wb[8];
  if constexpr (kWBf16) {
    bf16x8_to_float(*reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(w) + k.chunk_a), wa);
    bf16x8_to_float(*reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(w) + k.chunk_b), wb);
  } else {
    global_w8(w, w_f32, ca, wa);
    global_w8(w, w_f32, cb, wb);
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    xa[i] *= wa[i];
    xb[i] *= wb[i];
  }
  return rsqrtf(ss * (1.f / static_cast<float>(D)) + eps);
}

// The cache row (bytes) of K / V head h for a slot, or null for a padding slot (-1) or one out of range (counted
// once per token): kv_row's element index with 32-bit offsets inside a block (the host checks that a block's rows
// lie within 2^31 elements and its stride below 2^32) and one wide multiply for the block; every mode's form
// (kModeAny's since session 47). H200, session 46: it took 0.4-1.4% off the bf16 mode's times (call 1, sx against
// sxw) and 0.1-0.5% off the fp8 mode's (call 4, f8both against f8pf).
__device__ __forceinline__ uint8_t* pair_kv_row(const PrologueArgs& a, int h, int64_t slot, bool count_lane,
                                                bool kv_fp8) {
  if (slot == -1) return nullptr;
  if (static_cast<uint64_t>(slot) >= static_cast<uint64_t>(a.num_slots)) {
    if (h == a.hq && count_lane) atomicAdd(&a.err[kErrSlot], 1);
    return nullptr;
  }
  const uint32_t s = static_cast<uint32_t>(slot);
  const uint32_t blk = fast_div(s, a.div_block);
  const uint32_t off = s - blk * static_cast<uint32_t>(a.block_size);
  const bool is_k = h < a.hqk;
  const uint32_t head = static_cast<uint32_t>(h - a.hq - (is_k ? 0 : a.hkv));
  const uint32_t in_block = off * static_cast<uint32_t>(is_k ? a.ks_token : a.vs_token) +
                            head * static_cast<uint32_t>(is_k ? a.ks_head : a.vs_head);
  const uint64_t idx =
      static_cast<uint64_t>(blk) * static_cast<uint32_t>(is_k ? a.ks_block : a.vs_block) + in_block;
  return (is_k ? a.k_cache : a.v_cache) + (kv_fp8 ? idx : idx * 2);
}

// Whether the group reductions shuffle over the whole warp (valid: every warp holds heads of one kind of one block,
// see the kernel), with items that store nothing running to the end of them, rather than over the head's lanes
// (ptxas then tests the lanes' convergence at each reduction: ~5 instructions). H200, session 46 (cross-build A/B,
// with pair_kv_row and the 64-register cap): the bf16 mode took 0.92-0.99x main's time at hy3_full 512-32768 and
// hy3_tp8 4096 tokens (1.00 elsewhere); the fp8 mode 0.99-1.02x, where its head-lane form with the same index
// arithmetic took 0.98-1.00x (not profiled). The whole-warp q path leaves before the fp8 amax reduction, so it is
// the bf16 mode's only. Session 48 call 1 measured the fp8 mode on it again, on the full-rotary kernels (skipped q
// items leaving after the amax reduction; 24 SASS instructions fewer, about half in the shuffles' never-taken
// divergent fallbacks): 1.015-1.025x the time from 4096 tokens. With the amax by redux.sync over the head's
// lanes instead (a group mask: ptxas serialises the groups, WARPSYNC.EXCLUSIVE + REDUX each): 1.034-1.059x.
template <int kMode>
constexpr bool pair_whole_warp() {
  return kMode == kModeNeoxBf16;
}

// Item paths specialised for the common configurations: the modes of pair_mode() in
// include/hopperkit/prologue/heuristics.h, one kernel variant each (one kernel holding all three loops spilled
// 28 bytes at the 80-register cap). The specialised ones still read every other option at run time.

template <int D, int kMode, bool kBlocked, bool kFull>
__device__ __forceinline__ void process_pair_item(const PrologueArgs& a, const PairConsts& k,
                                                  const PairItem& it, int u, int ca, int cb, int r16,
                                                  unsigned mask) {
  constexpr int TPH = D / 16;
  const bool neox = kMode == kModeAny ? a.is_neox != 0 : true;
  const bool q_fp8 = kMode == kModeAny ? a.q_fp8 != 0 : kMode == kModeNeoxFp8;
  const bool kv_fp8 = kMode == kModeAny ? a.kv_fp8 != 0 : kMode == kModeNeoxFp8;
  const int t = it.t, h = it.h;
  constexpr bool kWide = pair_whole_warp<kMode>();
  static_assert(!kWide || kMode == kModeNeoxBf16, "the whole-warp q path leaves before the fp8 amax reduction");
  bool skip = false, bad_pos = false;
  if (kWide) {
    // Items that store nothing still run to the end of the group reductions (their warp's lanes shuffle
    // together): a position past the last token (partial last block of the walk) and an untrusted position (the
    // whole token is skipped and counted once; its cos / sin row is read at position 0).
    const bool past_end = kBlocked && t >= a.num_tokens;
    bad_pos = static_cast<uint64_t>(it.p) >= static_cast<uint64_t>(a.max_position);
    if (bad_pos && !past_end && h == 0 && u == 0) atomicAdd(&a.err[kErrPosition], 1);
    skip = past_end || bad_pos;
  } else {
    if (kBlocked && t >= a.num_tokens) return;  // a position past the last token (partial last block of the walk)
    if (static_cast<uint64_t>(it.p) >= static_cast<uint64_t>(a.max_position)) {  // untrusted: skip the token,
      if (h == 0 && u == 0) atomicAdd(&a.err[kErrPosition], 1);                  // count it once
      return;
    }
  }
  const uint32_t pos = bad_pos ? 0u : static_cast<uint32_t>(it.p);
  const int kind = h < a.hq ? 0 : (h < a.hqk ? 1 : 2);  // q, k, v
  float xa[8], xb[8];
  bf16x8_to_float(it.raw_a, xa);
  bf16x8_to_float(it.raw_b, xb);
  float rn = 1.f;  // the deferred 1/rms (1: no norm)
  if (kind != 2) {
    const void* w = kind == 0 ? a.q_w : a.k_w;
    const bool has_w = w != nullptr;
    const uint8_t* row =
        static_cast<const uint8_t*>(a.cos_sin) + static_cast<uint64_t>(pos) * a.cs_row_bytes;
    if (has_w && a.norm_first) rn = norm_weights<D, kMode != kModeAny>(xa, xb, w, a.w_f32, k, ca, cb, a.eps, mask);
    if (neox) {
      if constexpr (kFull) {  // full rotary: the sin D / 2 elements after the cos
        rope_neox_pair<D / 2>(xa, xb, row + k.cs_c, nullptr, a.cos_sin_f32);
      } else if (u < r16) {
        const uint32_t half_bytes = static_cast<uint32_t>(a.rotary_dim / 2) * (a.cos_sin_f32 ? 4u : 2u);  // uniform
        rope_neox_pair(xa, xb, row + k.cs_c, row + k.cs_c + half_bytes, a.cos_sin_f32);
      }
    } else {
      const int es = a.cos_sin_f32 ? 4 : 2;
      const int half = a.rotary_dim / 2;
      if (ca < 2 * r16) rope_gptj_vec(xa, row, es, half, ca, a.cos_sin_f32);
      if (cb < 2 * r16) rope_gptj_vec(xb, row, es, half, cb, a.cos_sin_f32);
    }
    if (has_w && !a.norm_first) rn = norm_weights<D, kMode != kModeAny>(xa, xb, w, a.w_f32, k, ca, cb, a.eps, mask);
  }
  if (kind == 0) {
    if (skip) return;  // (the whole-warp form is the bf16 mode's: its q path has no reduction after the norm's)
    uint8_t* dst = a.q_out + (static_cast<uint64_t>(static_cast<uint32_t>(t)) * a.qo_token_bytes +
                              static_cast<uint64_t>(static_cast<uint32_t>(h)) * a.qo_head_bytes);
    if (q_fp8) {
      float amax = 0.f;
#pragma unroll
      for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fmaxf(fabsf(xa[i]), fabsf(xb[i])));
      amax = group_max<TPH>(amax, mask);
      float scale, inv;
      fp8_head_scale(amax * rn, scale, inv);  // max |x * rn| == rn * max |x| exactly (rn > 0)
      const float f = rn * inv;
      *reinterpret_cast<uint2*>(dst + ca * 8) = fp8x8(xa, f);
      *reinterpret_cast<uint2*>(dst + cb * 8) = fp8x8(xb, f);
      if (u == 0) a.q_scale_out[t * a.hq + h] = scale;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) xa[i] *= rn, xb[i] *= rn;
      *reinterpret_cast<uint4*>(dst + k.chunk_a) = bf16x8(xa);
      *reinterpret_cast<uint4*>(dst + k.chunk_b) = bf16x8(xb);
    }
    return;
  }
  if (skip) return;
  uint8_t* row = pair_kv_row(a, h, it.slot, u == 0, kv_fp8);
  if (row == nullptr) return;
  if (kv_fp8) {
    const float f = rn * (kind == 1 ? k.inv_k : k.inv_v);
    *reinterpret_cast<uint2*>(row + ca * 8) = fp8x8(xa, f);
    *reinterpret_cast<uint2*>(row + cb * 8) = fp8x8(xb, f);
  } else {
    if (kind == 1) {
#pragma unroll
      for (int i = 0; i < 8; ++i) xa[i] *= rn, xb[i] *= rn;
    }
    *reinterpret_cast<uint4*>(row + k.chunk_a) = bf16x8(xa);
    *reinterpret_cast<uint4*>(row + k.chunk_b) = bf16x8(xb);
  }
}

// Resident CTAs per SM asked of the register allocator (kPairMinCtas, above): the specialised modes ask for one
// more (64 registers, 4 CTAs per SM; uncapped, since session 46 they compile to 64-70).
template <int kMode>
constexpr int pair_min_ctas() {
  return kMode != kModeAny ? kPairMinCtas + 1 : kPairMinCtas;
}

// kBlocked: the walk's block order with 2^walk_block_shift tokens per block (pair_block_tokens() in heuristics.h);
// false: token-major order (walk_block_shift 0) compiled without the block arithmetic.
template <int D, int kMode, bool kBlocked, bool kFull>
__global__ void __launch_bounds__(kPrologueThreads, pair_min_ctas<kMode>())
    attention_prologue_pair_kernel(const PrologueArgs a) {
  constexpr int TPH = D / 16;  // threads per head, two vectors each
  static_assert(kPrologueThreads % TPH == 0, "a CTA holds whole heads");
  // Every warp holds heads of one kind (q, k or v) of one block of the walk (pair_block_tokens() in heuristics.h:
  // token order only where a token's q and k / v heads come in whole warps; CPU-tested with the walk's step), so
  // a warp's lanes take the same path to the group reductions and leave the loop together: the whole-warp form's
  // shuffles name the whole warp (pair_whole_warp).
  const unsigned mask = pair_whole_warp<kMode>() ? 0xffffffffu
                                                 : (((1u << TPH) - 1u) << ((threadIdx.x & 31) & ~(TPH - 1)));
  const int H = a.hq + 2 * a.hkv;
  // A thread keeps its lane u of a head and walks the heads g, g + step, ... of the walk's block order, where g is
  // its head-group index: blocks of 2^shift tokens start at multiples of 2^shift, and position r of a block holds
  // head r >> shift of token (block start) + r % 2^shift. With one token per block that is token-major order; with
  // a warp's heads in tokens, each warp holds one head of that many tokens, so heads of one kind. The walk's state
  // is (block start bt, position r); in token order they are the token and the head.
  const int shift = kBlocked ? a.walk_block_shift : 0, tmask = (1 << shift) - 1, block_heads = H << shift;
  const int hv0 = (blockIdx.x * kPrologueThreads + threadIdx.x) / TPH;
  const int b0 = static_cast<int>(fast_div(static_cast<uint32_t>(hv0), a.div_block_heads));
  int bt = b0 << shift, r = hv0 - b0 * block_heads;
  int t = bt + (r & tmask), h = r >> shift;
  const int u = threadIdx.x % TPH;
  const int r16 = a.rotary_dim / 16;
  // the chunks of the header's table; at full rotary (kFull, pair_full_rotary() in heuristics.h) cb is ca + D / 16
  // at compile time and the second chunk's addresses are the first's plus an immediate (H200, session 47 call 2:
  // 0.94-0.98x the time for the fp8 mode from 4096 tokens, 64-72 SASS instructions fewer)
  static_assert(!kFull || kMode != kModeAny, "full rotary is a specialised mode's form");
  const int ca = kFull || u < r16 ? u : 2 * r16 + (u - r16);
  const int cb = kFull ? u + TPH : (u < r16 ? u + r16 : 2 * r16 + (D / 16 - r16) + (u - r16));
  PairConsts k;
  k.chunk_a = static_cast<uint32_t>(ca) * 16u;
  k.chunk_b = static_cast<uint32_t>(cb) * 16u;
  k.cs_c = static_cast<uint32_t>(u * 8) * (a.cos_sin_f32 ? 4u : 2u);
  // Programmatic dependent launch (prologue.cu), as in attention_prologue_kernel: global memory only from here
  ptx::grid_dependency_wait();
  ptx::launch_dependents();
  // In block order, positions of a partial last block past the last token hold no item: they load the last
  // token's lines (valid addresses, unused) and keep their own token index, which process_pair_item skips (a
  // clamp instead of a branch around the loads: with the branch the fp8 mode compiled to 78 registers).
  auto clamp = [&](int tt) { return kBlocked ? min(tt, a.num_tokens - 1) : tt; };
  // the first item's loads go out before the cache scales' loads and divisions
  const bool active = bt < a.num_tokens;
  PairItem A;
  if (active) {
    load_pair_item<D>(a, k, clamp(t), h, A);
    A.t = t;
  }
  k.inv_k = kv_inv_scale(a, true);
  k.inv_v = kv_inv_scale(a, false);
  if (!active) return;  // whole head groups drop out together
  const int dt = a.walk_step_tokens, dh = a.walk_step_heads;  // the step, from the host (pair_walk_step())
  auto advance = [&]() {
    bt += dt, r += dh;
    if (r >= block_heads) r -= block_heads, bt += tmask + 1;
    t = bt + (r & tmask), h = r >> shift;
  };
  // the next item's lines go to L1 while this one is processed, then its loads hit there: no registers hold a
  // prefetched item (sessions 9-25 held it in registers and copied it each step)
  while (true) {
    advance();
    const bool more = bt < a.num_tokens;
    if (more) prefetch_pair_item<D, kMode == kModeAny, kFull>(a, k, clamp(t), h);
    process_pair_item<D, kMode, kBlocked, kFull>(a, k, A, u, ca, cb, r16, mask);
    if (!more) break;
    load_pair_item<D>(a, k, clamp(t), h, A);
    A.t = t;
  }
}

}  // namespace prologue
}  // namespace hopperkit
