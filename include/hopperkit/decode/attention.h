// hopperkit decode attention over a paged KV cache, driven by a plan (see plan.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hopperkit/decode/plan.h"
#include "hopperkit/dtype.h"

namespace hopperkit {
namespace decode {

// One decode step of one layer. All pointers are device pointers; strides are in elements.
// Supported combinations: (q bf16, kv bf16), (q fp8 e4m3 + q_scale, kv fp8 e4m3), (q bf16, kv fp8 e4m3).
struct DecodeAttentionParams {
  // ---- query: request b owns tokens [query_start_loc[b], query_start_loc[b+1]) (or b*max_q_len.. when
  //      query_start_loc is null); they are the last tokens of its sequence, causal among themselves.
  const void* q = nullptr;            // [num_tokens, num_q_heads, 128] bf16 | fp8 e4m3, last dim contiguous
  DType q_dtype = DType::kBF16;
  int64_t q_stride_token = 0;         // elements between tokens
  int64_t q_stride_head = 0;          // elements between heads
  const float* q_scale = nullptr;     // [num_tokens, num_q_heads] fp32, contiguous; fp8 query only

  // ---- paged KV cache: any block / token / head strides (NHD, HND, vLLM's packed K|V pages)
  const void* k_cache = nullptr;      // [num_blocks, block_size, num_kv_heads, 128] bf16 | fp8 e4m3
  const void* v_cache = nullptr;      // [num_blocks, block_size, num_kv_heads, 128] same dtype as k_cache
  DType kv_dtype = DType::kBF16;
  int64_t k_stride_block = 0, k_stride_token = 0, k_stride_head = 0;
  int64_t v_stride_block = 0, v_stride_token = 0, v_stride_head = 0;
  int num_blocks = 0;
  int block_size = 0;                 // 16, 32, 64 or 128
  const float* k_scale = nullptr;     // [1] fp32 dequantisation scale of K (fp8 KV); null = 1
  const float* v_scale = nullptr;     // [1] fp32 dequantisation scale of V (fp8 KV); null = 1

  // ---- requests
  const int32_t* block_table = nullptr;  // [batch, max_blocks_per_seq] int32 page ids, last dim contiguous
  int64_t block_table_stride = 0;        // elements between rows
  int max_blocks_per_seq = 0;
  const int32_t* seq_lens = nullptr;     // [batch] int32, cached tokens including the new ones
  const int32_t* query_start_loc = nullptr;  // [batch + 1] int32, or null (uniform max_q_len per request)
  int batch = 0;
  int num_tokens = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = kHeadDim;
  int max_q_len = 1;                  // 1..8: largest query tokens per request
  float softmax_scale = 0.f;

  // ---- output
  void* out = nullptr;                // [num_tokens, num_q_heads, 128] bf16, last dim contiguous
  int64_t out_stride_token = 0, out_stride_head = 0;
  float* lse = nullptr;               // [num_tokens, num_q_heads] fp32 natural-log LSE, optional
  int64_t lse_stride_token = 0;       // elements between tokens (heads contiguous)

  // ---- plan (made by decode_plan for this step's seq_lens)
  DecodePlanConfig plan_config;
  DecodePlanLaunch plan_launch;
  void* plan_workspace = nullptr;

  cudaStream_t stream = nullptr;
};

// Throws hopperkit::Error for any unsupported or inconsistent argument; launches nothing.
void validate_decode_attention(const DecodeAttentionParams& params);

// Validates, then enqueues the persistent attention kernel (plus nothing else) on params.stream.
void decode_attention(const DecodeAttentionParams& params);

// Attention CTAs resident per SM for a (kv dtype, query rows) variant on the current device.
int decode_ctas_per_sm(DType kv_dtype, int rows, int device);

}  // namespace decode
}  // namespace hopperkit
