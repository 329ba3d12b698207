// hopperkit fused attention prologue: device code.
//
// One thread per 8 consecutive elements (16 bytes of bf16) of one head of one token; the D/8 threads of a head
// are consecutive lanes of one warp, so per-head reductions (RMSNorm sum of squares, FP8 amax) and the NeoX
// rotate-half partner exchange are warp shuffles inside the group. Threads walk the QKV row in memory order,
// so every load and store is a coalesced 16-byte (or 8-byte for FP8) access; each thread handles kItems
// vectors whose loads are all issued before any use.
//
// What limits it is memory requests in flight, i.e. warps resident: one vector per thread and at least
// kPrologueMinCtas CTAs per SM (40 registers) against two vectors per thread at 64 registers (3 CTAs per SM):
// 0.72-0.84x the time up to 64 tokens, 0.80-0.97x at 512-32768 tokens (H200, session 8, same-build A/B; 1 vector
// at 56 registers was 1.11-1.15x at 4096+, at 32 registers with 112 B of spills 1.07x). NeoX RoPE keeps cos / sin
// packed until each product (bf16: 4 + 4 registers, not 16 floats), which cut the spills at 40 registers from
// 16-28 to 4-8 bytes: 0.95-0.99x the time of the unpacked kernel, geomean 0.975x over 24 points (session 9,
// same-build A/B); at 8 CTAs per SM (32 registers, 40 B of spills) the packed kernel was 1.08x.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/ptx.cuh"
#include "hopperkit/fast_div.h"
#include "hopperkit/prologue/prologue.h"

namespace hopperkit {
namespace prologue {

constexpr int kPrologueThreads = 256;
constexpr int kItems = 1;            // vectors per thread, loaded together
constexpr int kPrologueMinCtas = 6;  // resident CTAs per SM asked of the register allocator
constexpr float kFp8Max = 448.f;

struct PrologueArgs {
  const uint16_t* qkv;
  int64_t qkv_stride;
  const void* positions;
  int positions_64;
  const void* cos_sin;
  int cos_sin_f32;
  int64_t cs_stride;
  int max_position;
  int rotary_dim;
  int is_neox;
  const void* q_w;
  const void* k_w;
  int w_f32;
  float eps;
  int norm_first;
  uint8_t* k_cache;
  uint8_t* v_cache;
  int kv_fp8;
  int64_t ks_block, ks_token, ks_head;  // elements
  int64_t vs_block, vs_token, vs_head;
  int64_t num_slots;                    // num_blocks * block_size
  int block_size;
  const float* k_scale;
  const float* v_scale;
  const int64_t* slot_mapping;
  uint8_t* q_out;
  int q_fp8;
  int64_t qo_token, qo_head;            // elements
  float* q_scale_out;
  int* err;
  int num_tokens;
  int hq, hkv;
  FastDiv div_heads;       // by hq + 2 hkv (vector index / TPH / heads -> token); tokens x heads x D/8 < 2^31
  FastDiv div_block;       // by block_size (slot -> block); num_slots < 2^31
  // the pair kernel's walk (prologue_pair_kernel.cuh; pair_block_tokens / pair_walk_step in heuristics.h)
  int walk_block_shift;                    // log2 of the tokens per block of its head order (0: token-major)
  int walk_step_tokens, walk_step_heads;   // its step per loop iteration, for the launched grid
  FastDiv div_block_heads;                 // by (hq + 2 hkv) << walk_block_shift
  // the pair kernel's per-call byte strides, formed on the host (kernel parameters, not registers of the loop). The
  // one-vector kernel keeps the element strides above: on these byte fields (8-32 SASS instructions fewer, the
  // element fields dropped) it took 1.07-1.17x the time at each point measured where it runs (hy3_full 1 / 64 tokens,
  // hy3 TP8 1 / 64 / 512; H200, session 50 calls 1-2, cross-build, all prologue tests passed under it; call 2's
  // SASS-identical control 0.998-1.013): the two forms stay.
  uint32_t qkv_row_bytes;                  // qkv row stride (< 2^32: checked on the host)
  uint32_t cs_row_bytes;                   // cos/sin row stride
  uint32_t qo_token_bytes, qo_head_bytes;  // q_out strides
  int hqk;                                 // hq + hkv (the first v head)
};

__device__ __forceinline__ void bf16x8_to_float(const uint4& v, float (&x)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[2 * i] = __uint_as_float(w[i] << 16);
    x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ uint32_t pack_bf16(float a, float b) {
  __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ uint16_t pack_fp8x2(float a, float b) {
  return static_cast<uint16_t>(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3));
}

// 8 consecutive values (fp32 or bf16) starting at p.
__device__ __forceinline__ void load8(const void* p, int f32, float (&x)[8]) {
  if (f32) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    const float4 b = *(reinterpret_cast<const float4*>(p) + 1);
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
  } else {
    bf16x8_to_float(*reinterpret_cast<const uint4*>(p), x);
  }
}

// 4 consecutive values (fp32 or bf16) starting at p.
__device__ __forceinline__ void load4(const void* p, int f32, float (&x)[4]) {
  if (f32) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
  } else {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    x[0] = __uint_as_float(v.x << 16), x[1] = __uint_as_float(v.x & 0xffff0000u);
    x[2] = __uint_as_float(v.y << 16), x[3] = __uint_as_float(v.y & 0xffff0000u);
  }
}

template <int TPH>
__device__ __forceinline__ float group_sum(float v, unsigned mask) {
#pragma unroll
  for (int o = TPH / 2; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o);
  return v;
}

template <int TPH>
__device__ __forceinline__ float group_max(float v, unsigned mask) {
#pragma unroll
  for (int o = TPH / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(mask, v, o));
  return v;
}

template <int TPH>
__device__ __forceinline__ void rms_norm(float (&x)[8], const void* w, int w_f32, int j, float eps, unsigned mask) {
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) ss += x[i] * x[i];
  ss = group_sum<TPH>(ss, mask);
  const float r = rsqrtf(ss / static_cast<float>(TPH * 8) + eps);
  float wv[8];
  load8(static_cast<const uint8_t*>(w) + static_cast<int64_t>(j) * 8 * (w_f32 ? 4 : 2), w_f32, wv);
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = x[i] * r * wv[i];
}

// The dynamic fp8 scale of a head from its amax (scale = amax / 448, at least 1e-12 / 448) and the factor the
// codes are formed with (inv = 1 / scale). A multiply and one approximate reciprocal (MUFU.RCP) instead of two
// IEEE divisions (FCHK, Newton steps and a slow-path branch each: ~25 instructions per item in session 10's
// SASS). Both are within an ulp or two of the divisions; scale stays in [2.2e-15, 7.6e35], where the
// reciprocal is a normal number; codes saturate (SATFINITE) should x * inv round past 448.
__device__ __forceinline__ void fp8_head_scale(float amax, float& scale, float& inv) {
  scale = fmaxf(amax, 1e-12f) * (1.f / kFp8Max);
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(inv) : "f"(scale));
}

// the 8 values x[0..7] as fp8 codes of x * inv (8 bytes) or as bf16 (16 bytes)
__device__ __forceinline__ uint2 fp8x8(const float (&x)[8], float inv) {
  uint2 q8;
  q8.x = static_cast<uint32_t>(pack_fp8x2(x[0] * inv, x[1] * inv)) |
         (static_cast<uint32_t>(pack_fp8x2(x[2] * inv, x[3] * inv)) << 16);
  q8.y = static_cast<uint32_t>(pack_fp8x2(x[4] * inv, x[5] * inv)) |
         (static_cast<uint32_t>(pack_fp8x2(x[6] * inv, x[7] * inv)) << 16);
  return q8;
}

__device__ __forceinline__ uint4 bf16x8(const float (&x)[8]) {
  return make_uint4(pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3]), pack_bf16(x[4], x[5]), pack_bf16(x[6], x[7]));
}

// NeoX: f(i, cos_i, sin_i) for the 8 cos / sin values at cp / sp (fp32 or bf16), kept packed until each use
template <class F>
__device__ __forceinline__ void for_cos_sin8(const uint8_t* cp, const uint8_t* sp, int f32, F&& f) {
  if (f32) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float4 c = *(reinterpret_cast<const float4*>(cp) + hh);
      const float4 s = *(reinterpret_cast<const float4*>(sp) + hh);
      const float cv[4] = {c.x, c.y, c.z, c.w}, sv[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) f(4 * hh + i, cv[i], sv[i]);
    }
  } else {
    const uint4 cr = *reinterpret_cast<const uint4*>(cp);
    const uint4 sr = *reinterpret_cast<const uint4*>(sp);
    const uint32_t cw[4] = {cr.x, cr.y, cr.z, cr.w}, sw[4] = {sr.x, sr.y, sr.z, sr.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      f(2 * k, __uint_as_float(cw[k] << 16), __uint_as_float(sw[k] << 16));
      f(2 * k + 1, __uint_as_float(cw[k] & 0xffff0000u), __uint_as_float(sw[k] & 0xffff0000u));
    }
  }
}

// GPT-J RoPE on one vector at chunk c (elements 8c .. 8c + 7; pairs (2m, 2m + 1) use cos / sin index 4c + m)
__device__ __forceinline__ void rope_gptj_vec(float (&x)[8], const uint8_t* row, int es, int half, int c, int f32) {
  float cv[4], sv[4];
  load4(row + static_cast<int64_t>(c * 4) * es, f32, cv);
  load4(row + static_cast<int64_t>(half + c * 4) * es, f32, sv);
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const float x0 = x[2 * m], x1 = x[2 * m + 1];
    x[2 * m] = x0 * cv[m] - x1 * sv[m];
    x[2 * m + 1] = x1 * cv[m] + x0 * sv[m];
  }
}

// Where head h's K or V row of cache slot `slot` goes. False: nothing to write (a padding token, or a slot
// outside the cache: counted once per token, by the lane with count_lane set of the first K head).
struct KvDst {
  uint8_t* cache;  // k_cache or v_cache
  int64_t idx;     // element index of the row
  float inv;       // fp8: 1 / the cache's scale
};
// The row only (d.inv left unset; kv_destination adds it). The pair kernel forms the same row in 32-bit offsets
// (pair_kv_row, prologue_pair_kernel.cuh). This kernel on that helper (8-16 SASS instructions fewer, 40 registers)
// took 1.03-1.12x the time where it runs (hy3_full 1-64 tokens, hy3 TP8 1-512; H200, session 49 call 6,
// cross-build, the whole suite passed under it): the two forms stay.
__device__ __forceinline__ bool kv_row(const PrologueArgs& a, int h, int64_t slot, bool count_lane, KvDst& d) {
  if (slot == -1) return false;  // padding token
  if (slot < 0 || slot >= a.num_slots) {
    if (h == a.hq && count_lane) atomicAdd(&a.err[kErrSlot], 1);
    return false;
  }
  const int blk = static_cast<int>(fast_div(static_cast<uint32_t>(slot), a.div_block));
  const int off = static_cast<int>(slot) - blk * a.block_size;
  const bool is_k = h < a.hq + a.hkv;
  const int head = is_k ? h - a.hq : h - a.hq - a.hkv;
  d.idx = is_k ? blk * a.ks_block + off * a.ks_token + head * a.ks_head
               : blk * a.vs_block + off * a.vs_token + head * a.vs_head;
  d.cache = is_k ? a.k_cache : a.v_cache;
  return true;
}
// 1 / the fp8 cache scale of K (is_k) or V; 1 for a bf16 cache or no scale
__device__ __forceinline__ float kv_inv_scale(const PrologueArgs& a, bool is_k) {
  if (!a.kv_fp8) return 1.f;
  const float* sp = is_k ? a.k_scale : a.v_scale;
  return sp != nullptr ? 1.f / *sp : 1.f;
}
__device__ __forceinline__ bool kv_destination(const PrologueArgs& a, int h, int64_t slot, bool count_lane,
                                               KvDst& d) {
  if (!kv_row(a, h, slot, count_lane, d)) return false;
  d.inv = kv_inv_scale(a, h < a.hq + a.hkv);
  return true;
}
// vector x at chunk c of the row
__device__ __forceinline__ void store_kv(const PrologueArgs& a, const KvDst& d, int c, const float (&x)[8]) {
  if (a.kv_fp8) {
    *reinterpret_cast<uint2*>(d.cache + d.idx + c * 8) = fp8x8(x, d.inv);
  } else {
    *reinterpret_cast<uint4*>(d.cache + (d.idx + c * 8) * 2) = bf16x8(x);
  }
}

template <int TPH>
__device__ __forceinline__ void rope(float (&x)[8], const PrologueArgs& a, int64_t pos, int j, int lane,
                                     unsigned mask) {
  const int e0 = j * 8;
  const int half = a.rotary_dim / 2;
  const uint8_t* row = static_cast<const uint8_t*>(a.cos_sin) + pos * a.cs_stride * (a.cos_sin_f32 ? 4 : 2);
  const int es = a.cos_sin_f32 ? 4 : 2;
  if (a.is_neox) {
    // partner of element e is e +- r/2: the same slot of the thread r/16 lanes away (every thread of the group
    // takes part in the shuffles, those beyond the rotary dims with themselves)
    const bool rotated = e0 < a.rotary_dim;
    const bool first = e0 < half;
    const int src = !rotated ? lane : (first ? lane + half / 8 : lane - half / 8);
    float xp[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) xp[i] = __shfl_sync(mask, x[i], src);
    if (rotated) {
      // cos / sin stay packed until used (bf16: 4 + 4 registers instead of 8 + 8 floats; fp32: two halves)
      const int c0 = first ? e0 : e0 - half;
      const float sgn = first ? -1.f : 1.f;
      for_cos_sin8(row + static_cast<int64_t>(c0) * es, row + static_cast<int64_t>(half + c0) * es, a.cos_sin_f32,
                   [&](int i, float c, float s) { x[i] = x[i] * c + sgn * xp[i] * s; });
    }
  } else if (e0 < a.rotary_dim) {
    rope_gptj_vec(x, row, es, half, j, a.cos_sin_f32);  // GPT-J: pairs (2m, 2m + 1) use cos / sin index m
  }
}

template <int D>
__global__ void __launch_bounds__(kPrologueThreads, kPrologueMinCtas) attention_prologue_kernel(const PrologueArgs a) {
  constexpr int TPH = D / 8;  // threads per head
  const int lane = threadIdx.x & 31;
  const unsigned mask = TPH == 32 ? 0xffffffffu : (((1u << TPH) - 1u) << (lane & ~(TPH - 1)));
  const int H = a.hq + 2 * a.hkv;
  const int total = a.num_tokens * H * TPH;  // < 2^31, checked on the host
  const int base = blockIdx.x * (kPrologueThreads * kItems) + threadIdx.x;
  const int j = threadIdx.x % TPH;           // the same vector of every item: kPrologueThreads is a multiple of TPH
  // Programmatic dependent launch (prologue.cu): this grid may start while the previous kernel in the stream
  // finishes. Nothing above read global memory; from here on its inputs (qkv, positions, slots) may be that
  // kernel's results and the caches it writes may be that kernel's inputs. The next grid (the decode attention's
  // set-up) may start once every CTA of this one has passed this point and SMs have room; it waits for this
  // grid's results.
  ptx::grid_dependency_wait();
  ptx::launch_dependents();

  // ---- loads of every item first; each item's (token, head) once
  uint4 raw[kItems];
  int64_t pos[kItems];
  int tok[kItems], head_of[kItems];
  int64_t slot_of[kItems];  // k/v items: the token's cache slot, loaded with the row (not after the math)
#pragma unroll
  for (int it = 0; it < kItems; ++it) {
    const int g = base + it * kPrologueThreads;
    raw[it] = make_uint4(0u, 0u, 0u, 0u);
    pos[it] = 0;
    tok[it] = 0, head_of[it] = 0;
    slot_of[it] = -1;
    if (g < total) {
      const int hv = g / TPH;
      const int t = static_cast<int>(fast_div(static_cast<uint32_t>(hv), a.div_heads));
      const int h = hv - t * H;
      tok[it] = t, head_of[it] = h;
      raw[it] = *reinterpret_cast<const uint4*>(a.qkv + static_cast<int64_t>(t) * a.qkv_stride + h * D + j * 8);
      pos[it] = a.positions_64 ? static_cast<const int64_t*>(a.positions)[t]
                               : static_cast<int64_t>(static_cast<const int32_t*>(a.positions)[t]);
      if (h >= a.hq) slot_of[it] = a.slot_mapping[t];
    }
  }

#pragma unroll
  for (int it = 0; it < kItems; ++it) {
    const int g = base + it * kPrologueThreads;
    if (g >= total) continue;  // whole head groups drop out together (total is a multiple of TPH)
    const int t = tok[it];
    const int h = head_of[it];
    const int64_t p = pos[it];
    if (p < 0 || p >= a.max_position) {  // untrusted: skip the whole token, count it once
      if (h == 0 && j == 0) atomicAdd(&a.err[kErrPosition], 1);
      continue;
    }
    const int kind = h < a.hq ? 0 : (h < a.hq + a.hkv ? 1 : 2);  // q, k, v
    float x[8];
    bf16x8_to_float(raw[it], x);
    if (kind != 2) {
      const void* w = kind == 0 ? a.q_w : a.k_w;
      if (w != nullptr && a.norm_first) rms_norm<TPH>(x, w, a.w_f32, j, a.eps, mask);
      rope<TPH>(x, a, p, j, lane, mask);
      if (w != nullptr && !a.norm_first) rms_norm<TPH>(x, w, a.w_f32, j, a.eps, mask);
    }
    if (kind == 0) {
      uint8_t* dst =
          a.q_out + (static_cast<int64_t>(t) * a.qo_token + static_cast<int64_t>(h) * a.qo_head + j * 8) * (a.q_fp8 ? 1 : 2);
      if (a.q_fp8) {
        float amax = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(x[i]));
        amax = group_max<TPH>(amax, mask);
        float scale, inv;
        fp8_head_scale(amax, scale, inv);
        *reinterpret_cast<uint2*>(dst) = fp8x8(x, inv);
        if (j == 0) a.q_scale_out[static_cast<int64_t>(t) * a.hq + h] = scale;
      } else {
        *reinterpret_cast<uint4*>(dst) = bf16x8(x);
      }
      continue;
    }
    KvDst d;
    if (kv_destination(a, h, slot_of[it], j == 0, d)) store_kv(a, d, j, x);
  }
}

}  // namespace prologue
}  // namespace hopperkit
