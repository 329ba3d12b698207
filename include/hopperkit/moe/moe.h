// hopperkit fused FP8 MoE: the op's parameters and their validation (the kernels are not written yet:
// see docs/NOTES.md). Everything here is host code, tested on the CPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "hopperkit/dtype.h"
#include "hopperkit/moe/heuristics.h"

namespace hopperkit {
namespace moe {

enum class MoeScaling : int32_t {
  kPerTensor = 0,  // one fp32 scale per expert per weight; static activation scales a13_scale / a2_scale
  kBlock128 = 1,   // 128x128 weight blocks; dynamic 1x128 activation groups (DeepSeek-V3-style checkpoints)
};

// All pointers are device pointers; strides in elements.
struct MoeParams {
  const void* hidden = nullptr;        // [num_tokens, hidden] bf16 (quantised inside) | fp8 e4m3 (+ hidden_scale)
  DType hidden_dtype = DType::kBF16;
  int64_t hidden_stride = 0;
  const float* hidden_scale = nullptr; // fp8 input: [1] (per-tensor) | [num_tokens, hidden / 128] (block)
  const int32_t* topk_ids = nullptr;   // [num_tokens, top_k] global expert ids
  const float* topk_weights = nullptr; // [num_tokens, top_k]
  const int32_t* expert_map = nullptr; // [num_global_experts] global -> local id or -1; null: all local
  const void* w13 = nullptr;           // [num_local_experts, 2 * intermediate, hidden] fp8 e4m3 (gate, then up)
  const void* w2 = nullptr;            // [num_local_experts, hidden, intermediate] fp8 e4m3
  const float* w13_scale = nullptr;    // per-tensor: [num_local_experts]; block: [E, 2I / 128, hidden / 128]
  const float* w2_scale = nullptr;     // per-tensor: [num_local_experts]; block: [E, hidden / 128, I / 128]
  const float* a13_scale = nullptr;    // per-tensor only: [1] static scale of the gate-up input
  const float* a2_scale = nullptr;     // per-tensor only: [1] static scale of the down input
  MoeScaling scaling = MoeScaling::kPerTensor;
  const void* shared_output = nullptr; // [num_tokens, hidden] bf16, added to the result; optional
  void* out = nullptr;                 // [num_tokens, hidden] bf16
  int64_t out_stride = 0;
  int num_tokens = 0;
  int hidden_size = 0;
  int intermediate = 0;                // per expert, after tensor-parallel sharding
  int num_local_experts = 0;
  int num_global_experts = 0;
  int top_k = 0;
  cudaStream_t stream = nullptr;
};

// Throws hopperkit::Error for any unsupported or inconsistent argument.
void validate_moe(const MoeParams& params);

}  // namespace moe
}  // namespace hopperkit
