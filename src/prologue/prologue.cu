// hopperkit fused attention prologue: validation, dispatch over head dims, launch.
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <string>
#include <type_traits>

#include "common/env_switch.h"
#include "common/pdl_launch.h"
#include "common/resident_ctas.h"
#include "hopperkit/error.h"
#include "hopperkit/prologue/heuristics.h"
#include "hopperkit/prologue/prologue.h"
#include "prologue/prologue_kernel.cuh"
#include "prologue/prologue_pair_kernel.cuh"

namespace hopperkit {
namespace prologue {

namespace {

void check_cache(const char* arg, const void* p, int64_t sb, int64_t st, int64_t sh, int es, int hkv, int block_size,
                 int head_dim) {
  HK_CHECK(kValue, p != nullptr, arg, "a device pointer", "null");
  HK_CHECK(kAlignment, reinterpret_cast<uintptr_t>(p) % 16 == 0, arg, "a 16-byte aligned data pointer",
           "address offset " + std::to_string(reinterpret_cast<uintptr_t>(p) % 16));
  HK_CHECK(kStride, sb > 0 && st > 0 && (sh > 0 || hkv == 1), arg, "positive block / token / head strides",
           "(" + std::to_string(sb) + ", " + std::to_string(st) + ", " + std::to_string(sh) + ")");
  const int64_t s[3] = {sb, st, hkv == 1 ? 16 : sh};  // a single head's stride is never used
  for (int i = 0; i < 3; ++i) {
    HK_CHECK(kAlignment, (s[i] * es) % 16 == 0, arg, "block / token / head strides that are multiples of 16 bytes",
             "(" + std::to_string(sb) + ", " + std::to_string(st) + ", " + std::to_string(sh) + ") elements");
  }
  // the pair kernel forms a row's offset inside its block in 32 bits and multiplies a 32-bit block stride
  const int64_t extent = (static_cast<int64_t>(block_size) - 1) * st + (hkv - 1) * sh + head_dim;  // (one head: 0 * sh)
  HK_CHECK(kUnsupported, sb < (int64_t{1} << 32) && extent < (int64_t{1} << 31), arg,
           "a block stride below 2^32 elements and a block's rows within 2^31 elements",
           "block stride " + std::to_string(sb) + ", rows within " + std::to_string(extent));
}

}  // namespace

void validate_attention_prologue(const PrologueParams& p) {
  HK_CHECK(kUnsupported, p.head_dim == 64 || p.head_dim == 128 || p.head_dim == 256, "head_dim", "64, 128 or 256",
           p.head_dim);
  HK_CHECK(kValue, p.num_q_heads >= 1 && p.num_kv_heads >= 1, "num_q_heads / num_kv_heads", ">= 1 each",
           std::to_string(p.num_q_heads) + " / " + std::to_string(p.num_kv_heads));
  HK_CHECK(kValue, p.num_tokens >= 0, "num_tokens", ">= 0", p.num_tokens);
  HK_CHECK(kValue, p.rotary_dim > 0 && p.rotary_dim <= p.head_dim && p.rotary_dim % 16 == 0, "cos_sin_cache",
           "rotary_dim a multiple of 16 in 16.." + std::to_string(p.head_dim), p.rotary_dim);
  HK_CHECK(kValue, p.max_position >= 1, "cos_sin_cache", "at least one position", p.max_position);
  HK_CHECK(kValue, std::isfinite(p.eps) && p.eps > 0.f, "eps", "a finite value > 0", p.eps);
  HK_CHECK(kDtype, p.positions_dtype == DType::kInt32 || p.positions_dtype == DType::kInt64, "positions",
           "int32 or int64", dtype_name(p.positions_dtype));
  HK_CHECK(kDtype, p.cos_sin_dtype == DType::kF32 || p.cos_sin_dtype == DType::kBF16, "cos_sin_cache",
           "float32 or bfloat16", dtype_name(p.cos_sin_dtype));
  HK_CHECK(kDtype, p.norm_weight_dtype == DType::kF32 || p.norm_weight_dtype == DType::kBF16, "q_norm_weight",
           "float32 or bfloat16", dtype_name(p.norm_weight_dtype));
  HK_CHECK(kDtype, p.kv_dtype == DType::kBF16 || p.kv_dtype == DType::kFP8E4M3, "k_cache",
           "bfloat16 or float8_e4m3fn", dtype_name(p.kv_dtype));
  HK_CHECK(kDtype, p.q_out_dtype == DType::kBF16 || p.q_out_dtype == DType::kFP8E4M3, "q_out",
           "bfloat16 or float8_e4m3fn", dtype_name(p.q_out_dtype));
  if (p.num_tokens == 0) return;
  HK_CHECK(kValue, p.qkv != nullptr && p.positions != nullptr && p.cos_sin != nullptr && p.slot_mapping != nullptr &&
                       p.q_out != nullptr && p.error_count != nullptr,
           "qkv / positions / cos_sin_cache / slot_mapping / q_out / error_count", "device pointers", "a null pointer");
  HK_CHECK(kAlignment, reinterpret_cast<uintptr_t>(p.qkv) % 16 == 0 && (p.qkv_stride_token * 2) % 16 == 0, "qkv",
           "a 16-byte aligned pointer and row stride", "row stride " + std::to_string(p.qkv_stride_token));
  const int64_t row = static_cast<int64_t>(p.num_q_heads + 2 * p.num_kv_heads) * p.head_dim;
  HK_CHECK(kStride, p.qkv_stride_token >= row || p.num_tokens == 1, "qkv",
           "a row stride >= (num_q_heads + 2 * num_kv_heads) * head_dim = " + std::to_string(row),
           p.qkv_stride_token);
  const int cs_es = dtype_size(p.cos_sin_dtype);
  HK_CHECK(kAlignment,
           reinterpret_cast<uintptr_t>(p.cos_sin) % 16 == 0 && (p.cos_sin_stride * cs_es) % 16 == 0 &&
               p.cos_sin_stride >= p.rotary_dim,
           "cos_sin_cache", "a 16-byte aligned pointer and a row stride >= rotary_dim in multiples of 16 bytes",
           "row stride " + std::to_string(p.cos_sin_stride));
  for (const void* w : {p.q_norm_weight, p.k_norm_weight}) {
    HK_CHECK(kAlignment, reinterpret_cast<uintptr_t>(w) % 16 == 0, "q_norm_weight / k_norm_weight",
             "16-byte aligned pointers", "address offset " + std::to_string(reinterpret_cast<uintptr_t>(w) % 16));
  }
  const int kv_es = dtype_size(p.kv_dtype);
  check_cache("k_cache", p.k_cache, p.k_stride_block, p.k_stride_token, p.k_stride_head, kv_es, p.num_kv_heads,
              p.block_size, p.head_dim);
  check_cache("v_cache", p.v_cache, p.v_stride_block, p.v_stride_token, p.v_stride_head, kv_es, p.num_kv_heads,
              p.block_size, p.head_dim);
  HK_CHECK(kShape, p.num_blocks >= 1 && p.block_size >= 1, "k_cache", "num_blocks >= 1 and block_size >= 1",
           std::to_string(p.num_blocks) + " blocks of " + std::to_string(p.block_size));
  const int q_es = dtype_size(p.q_out_dtype);
  HK_CHECK(kAlignment,
           reinterpret_cast<uintptr_t>(p.q_out) % 16 == 0 && (p.q_out_stride_token * q_es) % 16 == 0 &&
               (p.q_out_stride_head * q_es) % 16 == 0,
           "q_out", "a 16-byte aligned pointer and strides that are multiples of 16 bytes",
           "strides (" + std::to_string(p.q_out_stride_token) + ", " + std::to_string(p.q_out_stride_head) + ")");
  HK_CHECK(kStride, p.q_out_stride_token > 0 && p.q_out_stride_head > 0, "q_out", "positive strides",
           "(" + std::to_string(p.q_out_stride_token) + ", " + std::to_string(p.q_out_stride_head) + ")");
  // the pair kernel forms byte offsets from 32-bit strides (one wide multiply per address); a single token's
  // row stride is never used
  const int64_t limit32 = int64_t{1} << 32;
  HK_CHECK(kUnsupported, row * 2 < limit32, "qkv", "rows below 2^32 bytes", row * 2);
  HK_CHECK(kUnsupported, p.num_tokens == 1 || p.qkv_stride_token * 2 < limit32, "qkv",
           "a row stride below 2^32 bytes", p.qkv_stride_token * 2);
  HK_CHECK(kUnsupported, p.cos_sin_stride * dtype_size(p.cos_sin_dtype) < limit32, "cos_sin_cache",
           "a row stride below 2^32 bytes", p.cos_sin_stride * dtype_size(p.cos_sin_dtype));
  HK_CHECK(kUnsupported,
           (p.num_tokens == 1 || p.q_out_stride_token * dtype_size(p.q_out_dtype) < limit32) &&
               p.q_out_stride_head * dtype_size(p.q_out_dtype) < limit32,
           "q_out", "strides below 2^32 bytes",
           "(" + std::to_string(p.q_out_stride_token) + ", " + std::to_string(p.q_out_stride_head) + ") elements");
  if (p.q_out_dtype == DType::kFP8E4M3) {
    HK_CHECK(kValue, p.q_scale_out != nullptr, "q_scale_out", "a [num_tokens, num_q_heads] float32 tensor (fp8 q)",
             "null");
  }
}

void attention_prologue(const PrologueParams& p) {
  validate_attention_prologue(p);
  if (p.num_tokens == 0) return;
  PrologueArgs a{};
  a.qkv = static_cast<const uint16_t*>(p.qkv);
  a.qkv_stride = p.qkv_stride_token;
  a.positions = p.positions;
  a.positions_64 = p.positions_dtype == DType::kInt64;
  a.cos_sin = p.cos_sin;
  a.cos_sin_f32 = p.cos_sin_dtype == DType::kF32;
  a.cs_stride = p.cos_sin_stride;
  a.max_position = p.max_position;
  a.rotary_dim = p.rotary_dim;
  a.is_neox = p.is_neox;
  a.q_w = p.q_norm_weight;
  a.k_w = p.k_norm_weight;
  a.w_f32 = p.norm_weight_dtype == DType::kF32;
  a.eps = p.eps;
  a.norm_first = p.norm_before_rope;
  a.k_cache = static_cast<uint8_t*>(p.k_cache);
  a.v_cache = static_cast<uint8_t*>(p.v_cache);
  a.kv_fp8 = p.kv_dtype == DType::kFP8E4M3;
  a.ks_block = p.k_stride_block, a.ks_token = p.k_stride_token, a.ks_head = p.k_stride_head;
  a.vs_block = p.v_stride_block, a.vs_token = p.v_stride_token, a.vs_head = p.v_stride_head;
  a.num_slots = static_cast<int64_t>(p.num_blocks) * p.block_size;
  a.block_size = p.block_size;
  a.k_scale = a.kv_fp8 ? p.k_scale : nullptr;
  a.v_scale = a.kv_fp8 ? p.v_scale : nullptr;
  a.slot_mapping = p.slot_mapping;
  a.q_out = static_cast<uint8_t*>(p.q_out);
  a.q_fp8 = p.q_out_dtype == DType::kFP8E4M3;
  a.qo_token = p.q_out_stride_token;
  a.qo_head = p.q_out_stride_head;
  a.q_scale_out = p.q_scale_out;
  a.err = p.error_count;
  a.num_tokens = p.num_tokens;
  a.hq = p.num_q_heads;
  a.hkv = p.num_kv_heads;
  a.hqk = p.num_q_heads + p.num_kv_heads;
  // (each below 2^32 where it is used: validate_attention_prologue; a single token's row strides are multiplied by
  // token 0 only, so their truncation is harmless)
  a.qkv_row_bytes = static_cast<uint32_t>(p.qkv_stride_token * 2);
  a.cs_row_bytes = static_cast<uint32_t>(p.cos_sin_stride * dtype_size(p.cos_sin_dtype));
  a.qo_token_bytes = static_cast<uint32_t>(p.q_out_stride_token * dtype_size(p.q_out_dtype));
  a.qo_head_bytes = static_cast<uint32_t>(p.q_out_stride_head * dtype_size(p.q_out_dtype));
  const int64_t threads = static_cast<int64_t>(p.num_tokens) * (p.num_q_heads + 2 * p.num_kv_heads) * (p.head_dim / 8);
  // the kernel indexes vectors and cache slots in 32 bits
  HK_CHECK(kUnsupported, threads + static_cast<int64_t>(kPrologueThreads) * kItems < (int64_t{1} << 31), "qkv",
           "num_tokens x heads x head_dim / 8 below 2^31", threads);
  HK_CHECK(kUnsupported, a.num_slots < (int64_t{1} << 31), "k_cache", "num_blocks x block_size below 2^31",
           a.num_slots);
  a.div_heads = make_fast_div(static_cast<uint32_t>(p.num_q_heads + 2 * p.num_kv_heads));
  a.div_block = make_fast_div(static_cast<uint32_t>(p.block_size));
  // the pair kernel's head order (pair_block_tokens() in heuristics.h). Profiling and test aid (not for serving):
  // HOPPERKIT_PROLOGUE_ORDER=blocked forces blocks of a warp's heads in tokens where token order would be picked.
  // (Token order cannot be forced: where a token's heads do not come in whole warps it would put heads of two
  // kinds in one warp, and the kernel's reductions need a warp's lanes on one path.)
  static const bool forced_blocked = env_is("HOPPERKIT_PROLOGUE_ORDER", "blocked");
  const int block_tokens = forced_blocked ? pair_heads_per_warp(p.head_dim)
                                          : pair_block_tokens(p.num_q_heads, p.num_kv_heads, p.head_dim);
  a.walk_block_shift = block_tokens == 1 ? 0 : (block_tokens == 2 ? 1 : (block_tokens == 4 ? 2 : 3));
  const int64_t block_heads = static_cast<int64_t>(block_tokens) * (p.num_q_heads + 2 * p.num_kv_heads);
  // (the walk adds two positions below block_heads in 32 bits)
  HK_CHECK(kUnsupported, block_heads < (int64_t{1} << 30), "num_q_heads / num_kv_heads",
           "(num_q_heads + 2 * num_kv_heads) x " + std::to_string(block_tokens) + " below 2^30", block_heads);
  a.div_block_heads = make_fast_div(static_cast<uint32_t>(block_heads));
  const int64_t per_block = static_cast<int64_t>(kPrologueThreads) * kItems;
  const unsigned grid = static_cast<unsigned>((threads + per_block - 1) / per_block);
  const unsigned grid_pair = static_cast<unsigned>((threads / 2 + kPrologueThreads - 1) / kPrologueThreads);
  // Profiling and test aid (not for serving): HOPPERKIT_PROLOGUE_KERNEL=one|pair forces a kernel; unset,
  // use_pair_kernel() in heuristics.h picks by size.
  static const int forced =
      env_is("HOPPERKIT_PROLOGUE_KERNEL", "one") ? 1 : (env_is("HOPPERKIT_PROLOGUE_KERNEL", "pair") ? 2 : 0);
  const bool pair = forced == 0 ? use_pair_kernel(threads) : forced == 2;
  // the pair kernel's item path (pair_mode() in heuristics.h, CPU-tested)
  const int mode = pair_mode(a.is_neox != 0, a.q_fp8 != 0, a.kv_fp8 != 0, a.q_w != nullptr || a.k_w != nullptr,
                             a.w_f32 != 0);
  auto launch_pair = [&](auto d, auto m, auto blocked, auto full) {
    constexpr int D = decltype(d)::value, M = decltype(m)::value;
    constexpr bool B = decltype(blocked)::value, F = decltype(full)::value;
    // the pair kernel loops over its items on at most one resident wave (occupancy measured once per device)
    static std::atomic<int> resident[kMaxDevices] = {};
    const int res = resident_ctas(attention_prologue_pair_kernel<D, M, B, F>, kPrologueThreads, 0, resident,
                                  "attention_prologue_pair_kernel");
    const unsigned g = grid_pair < static_cast<unsigned>(res) ? grid_pair : static_cast<unsigned>(res);
    const PairWalkStep st = pair_walk_step(g, kPrologueThreads, D, a.hq, a.hkv, 1 << a.walk_block_shift);
    a.walk_step_tokens = st.tokens, a.walk_step_heads = st.heads;
    launch_with_pdl(attention_prologue_pair_kernel<D, M, B, F>, dim3(g), dim3(kPrologueThreads), 0, p.stream, a);
  };
  // the specialised modes in both orders, full rotary or not (pair_full_rotary() in heuristics.h); kModeAny (GPT-J,
  // mixed dtypes, float32 weights) walks the block order only, which covers token order too (one token per block)
  const bool full_rotary = pair_full_rotary(p.head_dim, p.rotary_dim);
  auto launch_fast_order = [&](auto d, auto m, auto full) {
    if (a.walk_block_shift == 0) {
      launch_pair(d, m, std::false_type{}, full);
    } else {
      launch_pair(d, m, std::true_type{}, full);
    }
  };
  auto launch_fast = [&](auto d, auto m) {
    if (full_rotary) {
      launch_fast_order(d, m, std::true_type{});
    } else {
      launch_fast_order(d, m, std::false_type{});
    }
  };
  auto launch = [&](auto d) {
    constexpr int D = decltype(d)::value;
    if (!pair) {
      launch_with_pdl(attention_prologue_kernel<D>, dim3(grid), dim3(kPrologueThreads), 0, p.stream, a);
      return;
    }
    switch (mode) {
      case kModeNeoxBf16: launch_fast(d, std::integral_constant<int, kModeNeoxBf16>{}); break;
      case kModeNeoxFp8: launch_fast(d, std::integral_constant<int, kModeNeoxFp8>{}); break;
      default: launch_pair(d, std::integral_constant<int, kModeAny>{}, std::true_type{}, std::false_type{}); break;
    }
  };
  // one list of supported head dims; the default branch reports the value (validation catches it first)
  switch (p.head_dim) {
    case 64: launch(std::integral_constant<int, 64>{}); break;
    case 128: launch(std::integral_constant<int, 128>{}); break;
    case 256: launch(std::integral_constant<int, 256>{}); break;
    default: HK_CHECK(kUnsupported, false, "head_dim", "64, 128 or 256", p.head_dim);
  }
  HK_CHECK_LAUNCH("attention_prologue_kernel");
}

}  // namespace prologue
}  // namespace hopperkit
