// hopperkit fused attention prologue: device code.
//
// A block works on one token (see prologue/heuristics.h for the launch shape): the token's position, slot and
// cos/sin values and each lane's norm weights are read once, before the head loop, and reused for every head.
// One thread per 8 consecutive elements (16 bytes of bf16) of a head; the D/8 threads of a head are consecutive
// lanes of one warp, so per-head reductions (RMSNorm sum of squares, FP8 amax) and the NeoX rotate-half partner
// exchange are warp shuffles inside the group. A pass covers the block's head slots in memory order (coalesced
// 16-byte loads and stores); the loads of up to kItems passes are issued before any use. All index math is
// 32-bit except the per-token bases.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "hopperkit/prologue/heuristics.h"
#include "hopperkit/prologue/prologue.h"

namespace hopperkit {
namespace prologue {

constexpr int kItems = kPrologueItems;
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
  int heads_per_pass, passes_per_block, chunks, tokens_per_block;  // launch shape (PrologueShape)
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

// x <- x / rms(head) * w (w: this lane's 8 weights)
template <int TPH>
__device__ __forceinline__ void rms_norm(float (&x)[8], const float* w, float eps, unsigned mask) {
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) ss += x[i] * x[i];
  ss = group_sum<TPH>(ss, mask);
  const float r = rsqrtf(ss / static_cast<float>(TPH * 8) + eps);
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = x[i] * r * w[i];
}

// Rotation of this lane's 8 elements e0..e0+7: c[i], s[i] are the cos / sin that element e0+i uses (NeoX: index
// e mod rotary/2, partner element e +- rotary/2 held by lane `partner`; GPT-J: index e / 2, partner e ^ 1 in the
// same lane). `rotated` false: the lane's dims are past rotary_dim.
template <int TPH>
__device__ __forceinline__ void rope(float (&x)[8], const float* c, const float* s, bool rotated, bool first,
                                     int partner, int is_neox, unsigned mask) {
  if (is_neox) {
    float xp[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) xp[i] = __shfl_sync(mask, x[i], partner);  // every lane of the group takes part
    if (rotated) {
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = first ? x[i] * c[i] - xp[i] * s[i] : x[i] * c[i] + xp[i] * s[i];
    }
  } else if (rotated) {
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const float x0 = x[2 * m], x1 = x[2 * m + 1];
      x[2 * m] = x0 * c[2 * m] - x1 * s[2 * m];
      x[2 * m + 1] = x1 * c[2 * m] + x0 * s[2 * m];
    }
  }
}

// One value of a [n] fp32 | bf16 vector.
__device__ __forceinline__ float load1(const void* p, int f32, int i) {
  return f32 ? static_cast<const float*>(p)[i]
             : __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16);
}

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

// Per-token values a block shares (one entry per token slot).
struct TokenInfo {
  int64_t k_base, v_base;  // elements: the token's cache row (head 0, element 0)
  int state;               // 0: skip the token (bad position or past the end), 1: q only, 2: q and k/v
};

template <int D>
__global__ void __launch_bounds__(kPrologueMaxThreads) attention_prologue_kernel(const PrologueArgs a) {
  constexpr int TPH = D / 8;  // threads per head
  constexpr int TB = kPrologueMaxTokensPerBlock;
  const int lane = threadIdx.x & 31;
  const unsigned mask = TPH == 32 ? 0xffffffffu : (((1u << TPH) - 1u) << (lane & ~(TPH - 1)));
  const int j = threadIdx.x % TPH;   // this lane's vector in a head
  const int hs = threadIdx.x / TPH;  // its head slot
  const bool slot_ok = hs < a.heads_per_pass;
  const int H = a.hq + 2 * a.hkv;
  const int group = blockIdx.x / a.chunks;  // block = (token group, chunk of heads)
  const int chunk = blockIdx.x - group * a.chunks;
  const int t0 = group * a.tokens_per_block;
  const int h_begin = chunk * a.passes_per_block * a.heads_per_pass;
  const int h_end = min(H, h_begin + a.passes_per_block * a.heads_per_pass);
  const int units = a.tokens_per_block * a.passes_per_block;  // (token slot, pass) pairs, pass fastest

  // unit u of this thread: token slot u / passes, head h_begin + (u % passes) * heads_per_pass + hs
  auto unit = [&](int u, int& tb, int& h) {
    tb = u / a.passes_per_block;
    h = h_begin + (u - tb * a.passes_per_block) * a.heads_per_pass + hs;
    return slot_ok && h < h_end && t0 + tb < a.num_tokens;
  };
  auto load_units = [&](int u0, uint4 (&raw)[kItems]) {
#pragma unroll
    for (int it = 0; it < kItems; ++it) {
      int tb, h;
      if (u0 + it < units && unit(u0 + it, tb, h)) {
        raw[it] = __ldcs(reinterpret_cast<const uint4*>(a.qkv + static_cast<int64_t>(t0 + tb) * a.qkv_stride +
                                                        h * D + j * 8));
      }
    }
  };

  // ---- the first units' loads go out before anything else
  uint4 raw[kItems];
  load_units(0, raw);

  // ---- per-token values and per-element constants in shared memory
  __shared__ TokenInfo s_tok[TB];
  __shared__ __align__(16) float s_qw[D], s_kw[D], s_c[TB][D], s_s[TB][D];
  auto position = [&](int t) {
    return a.positions_64 ? static_cast<const int64_t*>(a.positions)[t]
                          : static_cast<int64_t>(static_cast<const int32_t*>(a.positions)[t]);
  };
  if (threadIdx.x < a.tokens_per_block) {
    const int tb = threadIdx.x, t = t0 + tb;
    TokenInfo info{0, 0, 0};
    if (t < a.num_tokens) {
      const int64_t p = position(t);
      const int64_t slot = a.slot_mapping[t];
      const bool count = chunk == 0;  // count each token once
      if (p < 0 || p >= a.max_position) {  // untrusted: skip the whole token
        if (count) atomicAdd(&a.err[kErrPosition], 1);
      } else if (slot == -1) {  // padding token: q only
        info.state = 1;
      } else if (slot < 0 || slot >= a.num_slots) {
        if (count) atomicAdd(&a.err[kErrSlot], 1);
        info.state = 1;
      } else {
        const int64_t blk = slot / a.block_size;
        const int64_t off = slot - blk * a.block_size;
        info.k_base = blk * a.ks_block + off * a.ks_token;
        info.v_base = blk * a.vs_block + off * a.vs_token;
        info.state = 2;
      }
    }
    s_tok[tb] = info;
  }
  for (int e = threadIdx.x; e < D; e += blockDim.x) {
    s_qw[e] = a.q_w != nullptr ? load1(a.q_w, a.w_f32, e) : 1.f;
    s_kw[e] = a.k_w != nullptr ? load1(a.k_w, a.w_f32, e) : 1.f;
  }
  {
    const int half = a.rotary_dim / 2;
    const int es = a.cos_sin_f32 ? 4 : 2;
    for (int i = threadIdx.x; i < a.tokens_per_block * D; i += blockDim.x) {
      const int tb = i / D, e = i - tb * D;
      float c = 1.f, sn = 0.f;
      const int t = t0 + tb;
      if (e < a.rotary_dim && t < a.num_tokens) {
        const int64_t p = position(t);
        if (p >= 0 && p < a.max_position) {
          const uint8_t* cs = static_cast<const uint8_t*>(a.cos_sin) + p * a.cs_stride * es;
          const int r = a.is_neox ? (e < half ? e : e - half) : e / 2;
          c = load1(cs, a.cos_sin_f32, r);
          sn = load1(cs, a.cos_sin_f32, half + r);
        }
      }
      s_c[tb][e] = c, s_s[tb][e] = sn;
    }
  }
  const bool rotated = j * 8 < a.rotary_dim;
  const bool first = j * 8 < a.rotary_dim / 2;
  // NeoX partner of element e is e +- r/2: the same slot of the lane r/16 lanes away
  const int partner = !(a.is_neox && rotated) ? lane : (first ? lane + a.rotary_dim / 16 : lane - a.rotary_dim / 16);
  const float k_inv = a.kv_fp8 && a.k_scale != nullptr ? 1.f / *a.k_scale : 1.f;
  const float v_inv = a.kv_fp8 && a.v_scale != nullptr ? 1.f / *a.v_scale : 1.f;
  const int qes = a.q_fp8 ? 1 : 2;
  const int kves = a.kv_fp8 ? 1 : 2;
  __syncthreads();

  for (int u0 = 0; u0 < units; u0 += kItems) {
    if (u0 != 0) load_units(u0, raw);
#pragma unroll
    for (int it = 0; it < kItems; ++it) {
      int tb, h;
      if (u0 + it >= units || !unit(u0 + it, tb, h)) continue;  // whole head groups drop out together
      const TokenInfo info = s_tok[tb];
      if (info.state == 0) continue;
      const int t = t0 + tb;
      float x[8];
      bf16x8_to_float(raw[it], x);
      const float* c = s_c[tb] + j * 8;
      const float* sn = s_s[tb] + j * 8;
      if (h < a.hq) {  // ---- q
        if (a.q_w != nullptr && a.norm_first) rms_norm<TPH>(x, s_qw + j * 8, a.eps, mask);
        rope<TPH>(x, c, sn, rotated, first, partner, a.is_neox, mask);
        if (a.q_w != nullptr && !a.norm_first) rms_norm<TPH>(x, s_qw + j * 8, a.eps, mask);
        uint8_t* dst = a.q_out + (static_cast<int64_t>(t) * a.qo_token + static_cast<int64_t>(h) * a.qo_head + j * 8) * qes;
        if (a.q_fp8) {
          float amax = 0.f;
#pragma unroll
          for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(x[i]));
          amax = group_max<TPH>(amax, mask);
          const float scale = fmaxf(amax, 1e-12f) / kFp8Max;
          *reinterpret_cast<uint2*>(dst) = fp8x8(x, 1.f / scale);
          if (j == 0) a.q_scale_out[static_cast<int64_t>(t) * a.hq + h] = scale;
        } else {
          *reinterpret_cast<uint4*>(dst) = bf16x8(x);
        }
        continue;
      }
      if (info.state != 2) continue;
      const bool is_k = h < a.hq + a.hkv;
      if (is_k) {  // ---- k
        if (a.k_w != nullptr && a.norm_first) rms_norm<TPH>(x, s_kw + j * 8, a.eps, mask);
        rope<TPH>(x, c, sn, rotated, first, partner, a.is_neox, mask);
        if (a.k_w != nullptr && !a.norm_first) rms_norm<TPH>(x, s_kw + j * 8, a.eps, mask);
      }
      const int head = is_k ? h - a.hq : h - a.hq - a.hkv;
      const int64_t idx = (is_k ? info.k_base + head * a.ks_head : info.v_base + head * a.vs_head) + j * 8;
      uint8_t* dst = (is_k ? a.k_cache : a.v_cache) + idx * kves;
      if (a.kv_fp8) {
        *reinterpret_cast<uint2*>(dst) = fp8x8(x, is_k ? k_inv : v_inv);
      } else {
        *reinterpret_cast<uint4*>(dst) = bf16x8(x);
      }
    }
  }
}

}  // namespace prologue
}  // namespace hopperkit
