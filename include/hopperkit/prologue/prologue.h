// hopperkit fused attention prologue: per-head QK-RMSNorm + RoPE + paged KV-cache write + FP8 query
// quantisation, one kernel, one pass over the QKV projection output.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hopperkit/dtype.h"

namespace hopperkit {
namespace prologue {

// Error counter slots (int32 each, accumulated on the device; the caller zeroes and reads them).
enum PrologueError : int {
  kErrPosition = 0,  // tokens skipped entirely: position outside [0, max_position)
  kErrSlot = 1,      // tokens whose K/V write was skipped: slot outside [0, num_blocks * block_size) and not -1
  kNumPrologueErrors = 2,
};

// All pointers are device pointers; strides in elements.
struct PrologueParams {
  // ---- input
  const void* qkv = nullptr;          // [num_tokens, (num_q_heads + 2 * num_kv_heads) * head_dim] bf16,
  int64_t qkv_stride_token = 0;       //   heads q..., k..., v...; last dim contiguous; row stride in elements
  const void* positions = nullptr;    // [num_tokens] int32 | int64
  DType positions_dtype = DType::kInt64;
  const void* cos_sin = nullptr;      // [max_position, rotary_dim] fp32 | bf16: cos in [0, r/2), sin in [r/2, r)
  DType cos_sin_dtype = DType::kF32;
  int64_t cos_sin_stride = 0;         // elements between positions
  int max_position = 0;
  int rotary_dim = 0;                 // even, multiple of 16, <= head_dim (partial rotary: the first dims)
  bool is_neox = true;                // true: rotate-half pairs (i, i + r/2); false: GPT-J pairs (2i, 2i + 1)
  const void* q_norm_weight = nullptr;  // [head_dim] bf16 | fp32, or null: no q norm
  const void* k_norm_weight = nullptr;  // [head_dim] bf16 | fp32, or null: no k norm
  DType norm_weight_dtype = DType::kBF16;
  float eps = 1e-6f;
  bool norm_before_rope = true;       // Hy3: RMSNorm, then RoPE

  // ---- paged KV cache (written at slot_mapping)
  void* k_cache = nullptr;            // [num_blocks, block_size, num_kv_heads, head_dim] bf16 | fp8 e4m3
  void* v_cache = nullptr;            // same shape and dtype
  DType kv_dtype = DType::kBF16;
  int64_t k_stride_block = 0, k_stride_token = 0, k_stride_head = 0;
  int64_t v_stride_block = 0, v_stride_token = 0, v_stride_head = 0;
  int num_blocks = 0;
  int block_size = 0;
  const float* k_scale = nullptr;     // [1] fp32, fp8 cache: stored = k / k_scale (saturated); null = 1
  const float* v_scale = nullptr;     // [1] fp32, likewise for v
  const int64_t* slot_mapping = nullptr;  // [num_tokens] int64: block * block_size + offset; -1 = padding

  // ---- query output
  void* q_out = nullptr;              // [num_tokens, num_q_heads, head_dim] bf16 | fp8 e4m3
  DType q_out_dtype = DType::kBF16;
  int64_t q_out_stride_token = 0, q_out_stride_head = 0;
  float* q_scale_out = nullptr;       // [num_tokens, num_q_heads] fp32 contiguous (fp8 q): amax / 448

  int* error_count = nullptr;         // [kNumPrologueErrors] int32, accumulated (see PrologueError)
  int num_tokens = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;                   // 64, 128 or 256
  cudaStream_t stream = nullptr;
};

// Throws hopperkit::Error for any unsupported or inconsistent argument; launches nothing.
void validate_attention_prologue(const PrologueParams& params);

// Validates, then enqueues the fused kernel on params.stream (CUDA-graph capturable).
void attention_prologue(const PrologueParams& params);

}  // namespace prologue
}  // namespace hopperkit
