// hopperkit decode attention: validation, TMA descriptors, variant dispatch.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "common/env_switch.h"
#include "common/tensor_map.h"
#include "decode/kernel_args.h"
#include "decode/trace.h"
#include "decode/variants.h"
#include "hopperkit/decode/attention.h"
#include "hopperkit/error.h"

#ifdef HOPPERKIT_DECODE_TRACE
namespace {
unsigned long long* g_trace = nullptr;  // [kTraceMaxCtas, kTraceSlots], allocated at the first traced launch
int g_trace_grid = 0;                   // CTAs of the last traced launch
}  // namespace

// Profiling builds only: copies the last launch's per-CTA events (decode/trace.h) to `host`
// ([max_ctas, kTraceSlots] u64) after synchronising the device. Returns the CTAs written, or -1 on an error.
extern "C" __attribute__((visibility("default"))) int hopperkit_decode_trace_read(unsigned long long* host,
                                                                                 int max_ctas) {
  using namespace hopperkit::decode;
  if (g_trace == nullptr || host == nullptr) return -1;
  const int n = std::min(g_trace_grid, max_ctas);
  if (cudaDeviceSynchronize() != cudaSuccess) return -1;
  if (cudaMemcpy(host, g_trace, sizeof(unsigned long long) * kTraceSlots * n, cudaMemcpyDeviceToHost) != cudaSuccess)
    return -1;
  return n;
}
#endif

namespace hopperkit {
namespace decode {

namespace {

// q_fp8: the query is fp8 (FP8 KV at 16, 32 and 64 rows then has variants of its own: fp8q_r16, fp8q_r32, fp8q_r64);
// slices = false: the 16-row variants without the sliced merge (DecodePlanLaunch::slice_free)
const VariantInfo& select_variant(DType kv_dtype, int rows, bool q_fp8 = false, bool slices = true) {
  const int bucket = rows_bucket(rows);
  if (kv_dtype == DType::kBF16) {
    switch (bucket) {
      case 16: return slices ? variant_bf16_r16() : variant_bf16_r16_ns();
      case 32: return variant_bf16_r32();
      case 64: return variant_bf16_r64();
      case 128: return variant_bf16_r128();
      default: break;
    }
  } else if (kv_dtype == DType::kFP8E4M3) {
    switch (bucket) {
      case 16:
        if (q_fp8) return slices ? variant_fp8q_r16() : variant_fp8q_r16_ns();
        return slices ? variant_fp8_r16() : variant_fp8_r16_ns();
      case 32: return q_fp8 ? variant_fp8q_r32() : variant_fp8_r32();
      case 64: return q_fp8 ? variant_fp8q_r64() : variant_fp8_r64();
      case 128: return variant_fp8_r128();
      default: break;
    }
  } else {
    HK_CHECK(kDtype, false, "kv_dtype", "bfloat16 or float8_e4m3fn", dtype_name(kv_dtype));
  }
  HK_CHECK(kUnsupported, false, "max_q_len * (num_q_heads / num_kv_heads)", "1..128 query rows per KV head", rows);
  return variant_bf16_r16();  // unreachable: the check above throws
}

bool is_pow2_block(int bs) { return bs == 16 || bs == 32 || bs == 64 || bs == 128; }

void check_cache(const char* arg, const void* ptr, int64_t s_block, int64_t s_token, int64_t s_head, int num_blocks,
                 int num_kv_heads, int esize) {
  HK_CHECK(kValue, ptr != nullptr, arg, "a device pointer", "null");
  HK_CHECK(kAlignment, reinterpret_cast<uintptr_t>(ptr) % 16 == 0, arg, "a 16-byte aligned data pointer",
           "address offset " + std::to_string(reinterpret_cast<uintptr_t>(ptr) % 16));
  HK_CHECK(kStride, s_block > 0 && s_token > 0 && (s_head > 0 || num_kv_heads == 1), arg,
           "positive block / token / head strides",
           "(" + std::to_string(s_block) + ", " + std::to_string(s_token) + ", " + std::to_string(s_head) + ")");
  const int64_t strides[3] = {s_block, s_token, s_head};
  const char* names[3] = {"block", "token", "head"};
  for (int i = 0; i < 3; ++i) {
    if (i == 2 && num_kv_heads == 1) continue;
    HK_CHECK(kAlignment, (strides[i] * esize) % 16 == 0, arg,
             std::string(names[i]) + " stride a multiple of 16 bytes",
             std::to_string(strides[i]) + " elements (" + std::to_string(strides[i] * esize) + " bytes)");
  }
  HK_CHECK(kShape, num_blocks >= 1, arg, "num_blocks >= 1", num_blocks);
}

// Tensor map over a cache with dims (128, block_size, num_kv_heads, num_blocks); dims 1..3 sorted by stride.
CUtensorMap cache_tensor_map(const char* arg, const void* base, DType dt, int block_size, int num_kv_heads,
                             int num_blocks, int64_t s_token, int64_t s_head, int64_t s_block, int* pos_tok,
                             int* pos_head, int* pos_blk) {
  const int es = dtype_size(dt);
  struct D {
    uint64_t extent, stride;
    int which;  // 0 token, 1 head, 2 block
  } d[3] = {{static_cast<uint64_t>(block_size), static_cast<uint64_t>(s_token * es), 0},
            {static_cast<uint64_t>(num_kv_heads),
             static_cast<uint64_t>((num_kv_heads == 1 ? s_token : s_head) * es), 1},
            {static_cast<uint64_t>(num_blocks), static_cast<uint64_t>(s_block * es), 2}};
  std::stable_sort(d, d + 3, [](const D& x, const D& y) { return x.stride < y.stride; });
  TensorMap4d spec;
  spec.dtype = dt == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8;
  spec.base = base;
  spec.dims[0] = kHeadDim;
  spec.box[0] = dt == DType::kBF16 ? 64 : 128;  // 128-byte rows: the 128B swizzle's width
  for (int i = 0; i < 3; ++i) {
    spec.dims[i + 1] = d[i].extent;
    spec.strides_bytes[i] = d[i].stride;
    spec.box[i + 1] = d[i].which == 0 ? static_cast<uint32_t>(std::min(block_size, kTileTokens)) : 1u;
    if (d[i].which == 0) *pos_tok = i + 1;
    if (d[i].which == 1) *pos_head = i + 1;
    if (d[i].which == 2) *pos_blk = i + 1;
  }
  spec.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  // kKvL2PromotionBytes (heuristics.h); HOPPERKIT_DECODE_L2PROMO overrides it (profiling, read once per process)
  static const int promo = env_int("HOPPERKIT_DECODE_L2PROMO", kKvL2PromotionBytes);
  spec.promotion = promo == 0 ? CU_TENSOR_MAP_L2_PROMOTION_NONE
                   : promo == 64 ? CU_TENSOR_MAP_L2_PROMOTION_L2_64B
                   : promo == 128 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
                                  : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  return make_tensor_map(spec, arg);
}

}  // namespace

void validate_decode_attention(const DecodeAttentionParams& p) {
  // ---- shapes of the layer
  HK_CHECK(kUnsupported, p.head_dim == kHeadDim, "head_dim", kHeadDim, p.head_dim);
  HK_CHECK(kValue, p.num_kv_heads >= 1, "num_kv_heads", ">= 1", p.num_kv_heads);
  HK_CHECK(kShape, p.num_q_heads >= 1 && p.num_q_heads % p.num_kv_heads == 0, "q",
           "num_q_heads a positive multiple of num_kv_heads (" + std::to_string(p.num_kv_heads) + ")",
           p.num_q_heads);
  const int group = p.num_q_heads / p.num_kv_heads;
  HK_CHECK(kUnsupported, group <= kMaxGroup, "num_q_heads / num_kv_heads", "<= " + std::to_string(kMaxGroup), group);
  HK_CHECK(kValue, p.max_q_len >= 1 && p.max_q_len <= kMaxQLen, "max_q_len", "1.." + std::to_string(kMaxQLen),
           p.max_q_len);
  HK_CHECK(kValue, p.batch >= 0, "batch", ">= 0", p.batch);
  HK_CHECK(kValue, p.num_tokens >= 0, "num_tokens", ">= 0", p.num_tokens);
  if (p.query_start_loc == nullptr) {
    HK_CHECK(kShape, p.num_tokens == p.batch * p.max_q_len, "q",
             "num_tokens = batch * q_len = " + std::to_string(p.batch * p.max_q_len) + " without query_start_loc",
             p.num_tokens);
  }
  HK_CHECK(kValue, std::isfinite(p.softmax_scale) && p.softmax_scale > 0.f, "softmax_scale", "a finite value > 0",
           p.softmax_scale);

  // ---- dtypes
  HK_CHECK(kDtype, p.kv_dtype == DType::kBF16 || p.kv_dtype == DType::kFP8E4M3, "k_cache",
           "bfloat16 or float8_e4m3fn", dtype_name(p.kv_dtype));
  HK_CHECK(kDtype, p.q_dtype == DType::kBF16 || p.q_dtype == DType::kFP8E4M3, "q", "bfloat16 or float8_e4m3fn",
           dtype_name(p.q_dtype));
  if (p.q_dtype == DType::kFP8E4M3) {
    HK_CHECK(kUnsupported, p.kv_dtype == DType::kFP8E4M3, "q",
             "an fp8 query only with an fp8 KV cache (use a bfloat16 query with a bfloat16 cache)",
             "float8_e4m3fn query with a bfloat16 cache");
    HK_CHECK(kValue, p.q_scale != nullptr, "q_scale", "a [num_tokens, num_q_heads] float32 tensor for an fp8 query",
             "null");
  }

  // ---- pointers, strides, alignment
  const int q_es = dtype_size(p.q_dtype);
  HK_CHECK(kValue, p.q != nullptr || p.num_tokens == 0, "q", "a device pointer", "null");
  HK_CHECK(kAlignment, reinterpret_cast<uintptr_t>(p.q) % 16 == 0, "q", "a 16-byte aligned data pointer",
           "address offset " + std::to_string(reinterpret_cast<uintptr_t>(p.q) % 16));
  HK_CHECK(kAlignment, (p.q_stride_token * q_es) % 16 == 0 && (p.q_stride_head * q_es) % 16 == 0, "q",
           "token and head strides that are multiples of 16 bytes",
           "(" + std::to_string(p.q_stride_token) + ", " + std::to_string(p.q_stride_head) + ") elements");
  const int kv_es = dtype_size(p.kv_dtype);
  HK_CHECK(kValue, is_pow2_block(p.block_size), "k_cache", "block_size 16, 32, 64 or 128", p.block_size);
  check_cache("k_cache", p.k_cache, p.k_stride_block, p.k_stride_token, p.k_stride_head, p.num_blocks,
              p.num_kv_heads, kv_es);
  check_cache("v_cache", p.v_cache, p.v_stride_block, p.v_stride_token, p.v_stride_head, p.num_blocks,
              p.num_kv_heads, kv_es);
  HK_CHECK(kValue, p.max_blocks_per_seq >= 1, "block_table", "at least one column", p.max_blocks_per_seq);
  HK_CHECK(kValue, p.batch == 0 || (p.block_table != nullptr && p.seq_lens != nullptr), "block_table / seq_lens",
           "device pointers", "null");
  HK_CHECK(kStride, p.block_table_stride >= p.max_blocks_per_seq || p.batch <= 1, "block_table",
           "a row stride >= max_blocks_per_seq (" + std::to_string(p.max_blocks_per_seq) + ")",
           p.block_table_stride);
  HK_CHECK(kStride, p.q_stride_token >= 0 && p.q_stride_head >= 0, "q", "non-negative strides",
           "(" + std::to_string(p.q_stride_token) + ", " + std::to_string(p.q_stride_head) + ")");
  HK_CHECK(kStride, (p.out_stride_token > 0 || p.num_tokens <= 1) && (p.out_stride_head > 0 || p.num_q_heads == 1),
           "out", "positive strides (no aliasing rows)",
           "(" + std::to_string(p.out_stride_token) + ", " + std::to_string(p.out_stride_head) + ")");
  HK_CHECK(kValue, p.out != nullptr || p.num_tokens == 0, "out", "a device pointer", "null");
  HK_CHECK(kAlignment,
           reinterpret_cast<uintptr_t>(p.out) % 16 == 0 && (p.out_stride_token * 2) % 16 == 0 &&
               (p.out_stride_head * 2) % 16 == 0,
           "out", "a 16-byte aligned pointer and strides that are multiples of 16 bytes",
           "strides (" + std::to_string(p.out_stride_token) + ", " + std::to_string(p.out_stride_head) + ")");
  if (p.lse != nullptr) {
    HK_CHECK(kStride, p.lse_stride_token >= p.num_q_heads || p.num_tokens <= 1, "lse",
             "a token stride >= num_q_heads (" + std::to_string(p.num_q_heads) + ")", p.lse_stride_token);
  }

  // ---- the plan
  const DecodePlanConfig& c = p.plan_config;
  HK_CHECK(kValue, p.plan_workspace != nullptr, "plan", "a plan workspace", "null");
  HK_CHECK(kValue, c.kv_dtype == p.kv_dtype, "plan", std::string("a plan made for kv dtype ") + dtype_name(p.kv_dtype),
           dtype_name(c.kv_dtype));
  HK_CHECK(kValue, c.num_kv_heads == p.num_kv_heads && c.num_q_heads == p.num_q_heads, "plan",
           "a plan made for " + std::to_string(p.num_q_heads) + "/" + std::to_string(p.num_kv_heads) + " heads",
           std::to_string(c.num_q_heads) + "/" + std::to_string(c.num_kv_heads));
  HK_CHECK(kValue, c.max_q_len >= p.max_q_len, "plan", "max_q_len >= " + std::to_string(p.max_q_len),
           c.max_q_len);
  HK_CHECK(kValue, p.plan_launch.batch == p.batch, "plan",
           "a plan updated for this batch of " + std::to_string(p.batch) + " requests (call update first)",
           p.plan_launch.batch);
  HK_CHECK(kValue, p.plan_launch.block_size == p.block_size, "plan",
           "a plan updated with block_size " + std::to_string(p.block_size), p.plan_launch.block_size);
}

int decode_ctas_per_sm(DType kv_dtype, int rows, int device) {
  // The plan does not know the query's dtype, nor whether the launch takes the kernels without the sliced merge
  // (16 rows, DecodePlanLaunch::slice_free): its CTAs must be resident under any variant that may run (FP8 KV at
  // 16 / 32 / 64 rows: fp8_r* for a bf16 query, fp8q_r* for an fp8 one; the _ns twins at 16), so the smallest
  // occupancy counts.
  const VariantInfo* vs[4] = {&select_variant(kv_dtype, rows, false), &select_variant(kv_dtype, rows, true),
                              &select_variant(kv_dtype, rows, false, false),
                              &select_variant(kv_dtype, rows, true, false)};
  int prev = 0;
  HK_CUDA_CHECK(cudaGetDevice(&prev));
  if (prev != device) HK_CUDA_CHECK(cudaSetDevice(device));
  int blocks = 0;
  cudaError_t e = cudaSuccess;
  for (int i = 0; i < 4; ++i) {
    const VariantInfo* x = vs[i];
    if (std::find(vs, vs + i, x) != vs + i) continue;  // (32+ rows: no twin, the same variant twice)
    e = cudaFuncSetAttribute(x->kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, x->smem_bytes);
    int b = 0;
    if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, x->kernel, x->threads, x->smem_bytes);
    if (e != cudaSuccess) break;
    blocks = x == vs[0] ? b : std::min(blocks, b);
  }
  if (prev != device) HK_CUDA_CHECK(cudaSetDevice(prev));
  HK_CUDA_CHECK(e);
  HK_CHECK(kUnsupported, blocks >= 1, "device", "room for one attention CTA per SM", blocks);
  // Profiling aid (not for serving): HOPPERKIT_DECODE_CTAS_PER_SM=n caps the CTAs per SM the dynamic plan
  // spreads its tiles over (fewer CTAs: longer budgets, fewer pieces of a split pair to merge).
  static const int cap = env_int("HOPPERKIT_DECODE_CTAS_PER_SM", 0, 1);
  return cap > 0 && cap < blocks ? cap : blocks;
}

void decode_attention(const DecodeAttentionParams& p) {
  validate_decode_attention(p);
  const int group = p.num_q_heads / p.num_kv_heads;
  const VariantInfo& variant = select_variant(p.kv_dtype, p.max_q_len * group, p.q_dtype == DType::kFP8E4M3,
                                              p.plan_launch.slice_free == 0);
  if (p.batch == 0 || p.num_tokens == 0 || p.plan_launch.grid_ctas == 0) return;

  DecodeKernelArgs a{};
  a.q = static_cast<const uint8_t*>(p.q);
  a.q_stride_token_bytes = p.q_stride_token * dtype_size(p.q_dtype);
  a.q_stride_head_bytes = p.q_stride_head * dtype_size(p.q_dtype);
  a.q_scale = p.q_scale;
  a.q_is_fp8 = p.q_dtype == DType::kFP8E4M3 ? 1 : 0;
  // Scales only apply to an fp8 cache (a bf16 cache ignores them, as vLLM passes 1.0 tensors either way).
  a.k_scale = p.kv_dtype == DType::kFP8E4M3 ? p.k_scale : nullptr;
  a.v_scale = p.kv_dtype == DType::kFP8E4M3 ? p.v_scale : nullptr;
  a.num_blocks = p.num_blocks;
  a.block_table = p.block_table;
  a.block_table_stride = p.block_table_stride;
  a.max_blocks_per_seq = p.max_blocks_per_seq;
  a.block_size = p.block_size;
  a.seq_lens = p.seq_lens;
  a.query_start_loc = p.query_start_loc;
  a.num_tokens = p.num_tokens;
  a.num_q_heads = p.num_q_heads;
  a.num_kv_heads = p.num_kv_heads;
  a.group = group;
  a.max_q_len = p.max_q_len;
  a.scale_log2 = p.softmax_scale * 1.4426950408889634f;
  a.out = static_cast<uint16_t*>(p.out);
  a.out_stride_token = p.out_stride_token;
  a.out_stride_head = p.out_stride_head;
  a.lse = p.lse;
  a.lse_stride_token = p.lse_stride_token;
  a.plan = decode_plan_view(p.plan_config, p.plan_workspace);
  a.partial_rows = p.plan_config.max_rows();
  // profiling experiments; results are wrong when set
  static const int debug_flags = env_int("HOPPERKIT_DECODE_DEBUG", 0);
  a.debug_flags = debug_flags;
  // A CTA may wait for another CTA's arrival (merge_slice) only in a dynamic plan whose grid is resident all at
  // once under the launched variant: a plan configured for more CTAs (make_decode_plan_config_for's sm_ctas, a
  // plan made on another GPU) keeps the two-level merges, which never wait.
  a.pieces_resident =
      p.plan_config.mode == PlanMode::kDynamic && p.plan_launch.grid_ctas <= variant.resident_ctas() ? 1 : 0;
#ifdef HOPPERKIT_DECODE_TRACE
  if (g_trace == nullptr) {  // not inside a graph capture: the first call runs eagerly
    HK_CUDA_CHECK(cudaMalloc(&g_trace, sizeof(unsigned long long) * kTraceSlots * kTraceMaxCtas));
    HK_CUDA_CHECK(cudaMemset(g_trace, 0, sizeof(unsigned long long) * kTraceSlots * kTraceMaxCtas));
  }
  a.trace = p.plan_launch.grid_ctas <= kTraceMaxCtas ? g_trace : nullptr;
  g_trace_grid = p.plan_launch.grid_ctas;
#endif

  const CUtensorMap tk = cache_tensor_map("k_cache", p.k_cache, p.kv_dtype, p.block_size, p.num_kv_heads, p.num_blocks,
                                          p.k_stride_token, p.k_stride_head, p.k_stride_block, &a.k_pos_tok,
                                          &a.k_pos_head, &a.k_pos_blk);
  const CUtensorMap tv = cache_tensor_map("v_cache", p.v_cache, p.kv_dtype, p.block_size, p.num_kv_heads, p.num_blocks,
                                          p.v_stride_token, p.v_stride_head, p.v_stride_block, &a.v_pos_tok,
                                          &a.v_pos_head, &a.v_pos_blk);
  variant.launch(tk, tv, a, p.plan_launch.grid_ctas, p.stream);
}

}  // namespace decode
}  // namespace hopperkit
