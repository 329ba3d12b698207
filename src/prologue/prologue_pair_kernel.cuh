// The fused attention prologue with two vectors per thread that are each other's RoPE partners.
//
// A head of D elements is handled by D / 16 threads. Thread u of a head holds two 8-element vectors, chunks
// ca(u) and cb(u), chosen so that under NeoX RoPE every element's rotate-half partner sits in the same thread:
//   u <  r/16:  ca = u,                 cb = u + r/16                 (rotated dims: e and e + r/2)
//   u >= r/16:  ca = r/8 + v,           cb = r/8 + (D - r)/16 + v     (v = u - r/16: dims past r, any pairing)
// with r = rotary_dim (a multiple of 16, checked on the host). GPT-J pairs are adjacent elements of one vector,
// so the same assignment serves it. Against one vector per thread (prologue_kernel.cuh) this removes the eight
// partner shuffles, loads each cos / sin row segment once for both vectors, computes the token, head, position
// and cache slot once per two vectors, and the norm and FP8 amax reductions span half as many lanes. A warp's
// loads stay inside whole heads (each 16-byte chunk of a head is read by exactly one thread).
#pragma once

#include "prologue/prologue_kernel.cuh"

namespace hopperkit {
namespace prologue {

// Resident CTAs per SM asked of the register allocator: 3 (77 registers, no spills). Each thread walks its items
// g, g + grid size, ... over one resident wave and loads the next item before working on the current one. H200,
// session 9, same-build A/B (run 6) against one item per thread on a full grid at 4 CTAs per SM (64 registers,
// run 4's kernel): 0.82-0.85x the time for bf16 at 4096-32768 tokens (hy3_full 32768: 433 -> 353 us, 90% of copy
// bandwidth), 0.89-0.96x for fp8, 0.88 / 0.92x at hy3_full 512 tokens; the loop at 4 CTAs per SM (64 registers,
// 36 B of spills) gained only 0.92-1.04x. Against one vector per thread (prologue_kernel.cuh), the full-grid pair
// kernel was 0.76-0.94x from 655,360 vectors and 1.03-1.15x at 81,920 and below (run 3): heuristics.h.
constexpr int kPairMinCtas = 3;

// NeoX on a pair of vectors that are each other's rotate-half partners: x_a = x_a c - x_b s, x_b = x_b c + x_a s
__device__ __forceinline__ void rope_neox_pair(float (&xa)[8], float (&xb)[8], const uint8_t* cp, const uint8_t* sp,
                                               int f32) {
  for_cos_sin8(cp, sp, f32, [&](int i, float c, float s) {
    const float a0 = xa[i], b0 = xb[i];
    xa[i] = a0 * c - b0 * s;
    xb[i] = b0 * c + a0 * s;
  });
}

// One item: a thread's two vectors of one head of one token, and the token's position and cache slot.
struct PairItem {
  uint4 raw_a, raw_b;
  int64_t p, slot;
  int t, h;
};

template <int D>
__device__ __forceinline__ void load_pair_item(const PrologueArgs& a, int g, int ca, int cb, PairItem& it) {
  constexpr int TPH = D / 16;
  const int H = a.hq + 2 * a.hkv;
  const int hv = g / TPH;
  it.t = static_cast<int>(fast_div(static_cast<uint32_t>(hv), a.div_heads));
  it.h = hv - it.t * H;
  const uint16_t* src = a.qkv + static_cast<int64_t>(it.t) * a.qkv_stride + it.h * D;
  it.raw_a = *reinterpret_cast<const uint4*>(src + ca * 8);
  it.raw_b = *reinterpret_cast<const uint4*>(src + cb * 8);
  it.p = a.positions_64 ? static_cast<const int64_t*>(a.positions)[it.t]
                        : static_cast<int64_t>(static_cast<const int32_t*>(a.positions)[it.t]);
  it.slot = it.h >= a.hq ? a.slot_mapping[it.t] : -1;
}

template <int D>
__device__ __forceinline__ void process_pair_item(const PrologueArgs& a, const PairItem& it, int u, int ca, int cb,
                                                  int r16, unsigned mask) {
  constexpr int TPH = D / 16;
  const int t = it.t, h = it.h;
  const int64_t p = it.p, slot = it.slot;
  const uint4 raw_a = it.raw_a, raw_b = it.raw_b;
  if (p < 0 || p >= a.max_position) {  // untrusted: skip the whole token, count it once
    if (h == 0 && u == 0) atomicAdd(&a.err[kErrPosition], 1);
    return;
  }
  const int kind = h < a.hq ? 0 : (h < a.hq + a.hkv ? 1 : 2);  // q, k, v
  float xa[8], xb[8];
  bf16x8_to_float(raw_a, xa);
  bf16x8_to_float(raw_b, xb);
  if (kind != 2) {
    const void* w = kind == 0 ? a.q_w : a.k_w;
    const int es = a.cos_sin_f32 ? 4 : 2;
    const int half = a.rotary_dim / 2;
    const uint8_t* row = static_cast<const uint8_t*>(a.cos_sin) + p * a.cs_stride * es;
    auto norm = [&]() {
      float ss = 0.f;
#pragma unroll
      for (int i = 0; i < 8; ++i) ss += xa[i] * xa[i] + xb[i] * xb[i];
      ss = group_sum<TPH>(ss, mask);
      const float rn = rsqrtf(ss / static_cast<float>(D) + a.eps);
      float wa[8], wb[8];
      const int wes = a.w_f32 ? 4 : 2;
      load8(static_cast<const uint8_t*>(w) + static_cast<int64_t>(ca) * 8 * wes, a.w_f32, wa);
      load8(static_cast<const uint8_t*>(w) + static_cast<int64_t>(cb) * 8 * wes, a.w_f32, wb);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        xa[i] = xa[i] * rn * wa[i];
        xb[i] = xb[i] * rn * wb[i];
      }
    };
    if (w != nullptr && a.norm_first) norm();
    if (a.is_neox) {
      if (u < r16) rope_neox_pair(xa, xb, row + static_cast<int64_t>(u * 8) * es,
                                  row + static_cast<int64_t>(half + u * 8) * es, a.cos_sin_f32);
    } else {
      if (ca < 2 * r16) rope_gptj_vec(xa, row, es, half, ca, a.cos_sin_f32);
      if (cb < 2 * r16) rope_gptj_vec(xb, row, es, half, cb, a.cos_sin_f32);
    }
    if (w != nullptr && !a.norm_first) norm();
  }
  if (kind == 0) {
    const int64_t o = static_cast<int64_t>(t) * a.qo_token + static_cast<int64_t>(h) * a.qo_head;
    if (a.q_fp8) {
      float amax = 0.f;
#pragma unroll
      for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fmaxf(fabsf(xa[i]), fabsf(xb[i])));
      amax = group_max<TPH>(amax, mask);
      float scale, inv;
      fp8_head_scale(amax, scale, inv);
      *reinterpret_cast<uint2*>(a.q_out + o + ca * 8) = fp8x8(xa, inv);
      *reinterpret_cast<uint2*>(a.q_out + o + cb * 8) = fp8x8(xb, inv);
      if (u == 0) a.q_scale_out[static_cast<int64_t>(t) * a.hq + h] = scale;
    } else {
      *reinterpret_cast<uint4*>(a.q_out + (o + ca * 8) * 2) = bf16x8(xa);
      *reinterpret_cast<uint4*>(a.q_out + (o + cb * 8) * 2) = bf16x8(xb);
    }
    return;
  }
  KvDst d;
  if (!kv_destination(a, h, slot, u == 0, d)) return;
  store_kv(a, d, ca, xa);
  store_kv(a, d, cb, xb);
}

template <int D>
__global__ void __launch_bounds__(kPrologueThreads, kPairMinCtas) attention_prologue_pair_kernel(const PrologueArgs a) {
  constexpr int TPH = D / 16;  // threads per head, two vectors each
  static_assert(kPrologueThreads % TPH == 0, "a CTA holds whole heads");
  const int lane = threadIdx.x & 31;
  const unsigned mask = TPH == 32 ? 0xffffffffu : (((1u << TPH) - 1u) << (lane & ~(TPH - 1)));
  const int total = a.num_tokens * (a.hq + 2 * a.hkv) * TPH;  // < 2^30, checked on the host
  const int stride = gridDim.x * kPrologueThreads;             // a multiple of TPH: head groups stay together
  int g = blockIdx.x * kPrologueThreads + threadIdx.x;
  if (g >= total) return;  // whole head groups drop out together (total is a multiple of TPH)
  const int u = threadIdx.x % TPH;
  const int r16 = a.rotary_dim / 16;
  const int ca = u < r16 ? u : 2 * r16 + (u - r16);
  const int cb = u < r16 ? u + r16 : 2 * r16 + (D / 16 - r16) + (u - r16);
  PairItem cur;
  load_pair_item<D>(a, g, ca, cb, cur);
  while (true) {
    const int gn = g + stride;
    const bool more = gn < total;
    PairItem next;
    if (more) load_pair_item<D>(a, gn, ca, cb, next);
    process_pair_item<D>(a, cur, u, ca, cb, r16, mask);
    if (!more) break;
    cur = next;
    g = gn;
  }
}

}  // namespace prologue
}  // namespace hopperkit
