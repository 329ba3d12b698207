// hopperkit fused FP8 MoE: the op's parameters, its workspace and its launcher.
//
// One call runs four kernels on `stream`, chained by Programmatic Dependent Launch, with no host
// synchronisation (CUDA-graph capturable): (1) routing index build + quantisation of a bf16 input,
// (2) gate-up GEMM reading token rows through the index, SiLU(gate) * up and FP8 quantisation in its epilogue,
// (3) down GEMM, (4) top-k weighted reduce in token order (+ an optional shared-expert output). Results are
// bitwise identical from run to run: every output element is summed in a fixed order.
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
  const int32_t* expert_map = nullptr; // [num_global_experts] global -> local id or -1; null: all local (pass
                                       // null rather than an identity map: a map costs a load per entry)
  const void* w13 = nullptr;           // [num_local_experts, 2 * intermediate, hidden] fp8 e4m3 (gate, then up)
  const void* w2 = nullptr;            // [num_local_experts, hidden, intermediate] fp8 e4m3
  const float* w13_scale = nullptr;    // per-tensor: [num_local_experts]; block: [E, 2I / 128, hidden / 128]
  const float* w2_scale = nullptr;     // per-tensor: [num_local_experts]; block: [E, hidden / 128, I / 128]
  const float* a13_scale = nullptr;    // per-tensor only: [1] static scale of the gate-up input
  const float* a2_scale = nullptr;     // per-tensor only: [1] static scale of the down input
  MoeScaling scaling = MoeScaling::kPerTensor;
  const void* shared_output = nullptr; // [num_tokens, hidden] bf16, added to the result; optional
  int64_t shared_stride = 0;
  void* out = nullptr;                 // [num_tokens, hidden] bf16
  int64_t out_stride = 0;
  void* workspace = nullptr;           // moe_workspace_bytes(...) bytes, 256-byte aligned; any contents
  size_t workspace_bytes = 0;
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

// Workspace bytes for calls with up to max_tokens tokens (routing index, quantised activations, per-row
// down-projection results). Sized once, up front; a call never allocates.
size_t moe_workspace_bytes(int max_tokens, int top_k, int hidden, int intermediate, int num_local_experts,
                           MoeScaling scaling);

// The routing index's tile height (rows of one expert per GEMM tile: 16, 32, 48 or 64) that fused_moe picks for
// this shape on the current device when no HOPPERKIT_MOE_* profiling switch is set (the block_m heuristic,
// include/hopperkit/moe/heuristics.h: it depends on the GEMMs' task counts per SM), for tests and introspection.
// Throws hopperkit::Error on arguments outside fused_moe's limits; asks the current device for its SM count (a
// CUDA error throws too).
int moe_tile_rows(int num_tokens, int top_k, int num_global_experts, int num_local_experts, int hidden,
                  int intermediate, MoeScaling scaling);

// Validates, then launches the fused MoE on params.stream. Throws hopperkit::Error (nothing launched) on bad
// input. Rows routed to experts that are not local (expert_map -1, or ids outside [0, num_global_experts))
// contribute nothing.
void fused_moe(const MoeParams& params);

}  // namespace moe
}  // namespace hopperkit
