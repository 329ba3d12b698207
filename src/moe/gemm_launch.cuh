// hopperkit fused FP8 MoE: launching one grouped-GEMM variant as a persistent, PDL-chained grid.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <string>

#include "common/pdl_launch.h"
#include "common/tensor_map.h"
#include "hopperkit/error.h"
#include "moe/grouped_gemm.cuh"
#include "moe/launch.h"
#include "common/resident_ctas.h"

namespace hopperkit {
namespace moe {

// One grouped-GEMM variant as a type (the dispatchers in gemm_gate_up.cu / gemm_down.cu pass one to a lambda).
// kPairs: clusters of two CTAs sharing the weight stages (the per-tensor 128-row gate-up; moe_gemm_kernel).
// kIndex: the swapped gate-up that builds the routing index itself (a.gemm_index). kKTail: the per-tensor 128 x 256
// down at K = 192 (MoeGemmConfig).
template <int BM, int BN, bool kGateUp, bool kBlock, bool kPairs = false, bool kIndex = false, bool kKTail = false>
struct MoeGemmVariant {};

// Everything a launch needs that can fail on the host (occupancy query, tensor-map encoding), computed before
// any of the op's kernels is queued: a failure throws with nothing launched.
// Grid: the resident CTAs of this variant (measured occupancy x SMs), at most the task-count bound. Pairs:
// whole resident clusters of two, at most two CTAs per pair task (max_tasks counts single tiles' tasks).
template <int BM, int BN, bool kGateUp, bool kBlock, bool kPairs, bool kIndex, bool kKTail>
MoeGemmPlan plan_moe_gemm(const MoeKernelArgs& a, int64_t max_tasks,
                          MoeGemmVariant<BM, BN, kGateUp, kBlock, kPairs, kIndex, kKTail>) {
  using Cfg = MoeGemmConfig<BM, BN, kGateUp, kBlock, kIndex, kKTail>;
  auto kernel = moe_gemm_kernel<BM, BN, kGateUp, kBlock, kPairs, kIndex, kKTail>;
  static std::atomic<int> resident[kMaxDevices] = {};  // per device: CTAs per SM x SMs (0: not measured yet)
  const int res = resident_ctas(kernel, Cfg::kThreads, Cfg::kSmemBytes, resident, kPairs ? "moe gemm pairs" : "moe gemm",
                                kPairs ? 2 : 1);
  MoeGemmPlan plan;
  plan.kernel = reinterpret_cast<const void*>(kernel);
  plan.cluster = kPairs ? 2 : 1;
  if (kPairs) {  // pair tasks = ceil(tiles / 2) x column blocks <= max_tasks (>= 1 tile), two CTAs each
    const int64_t want = 2 * (max_tasks > 0 ? max_tasks : 1);
    plan.grid = want < res ? want : res;
  } else {
    plan.grid = max_tasks < res ? (max_tasks > 0 ? max_tasks : 1) : res;
  }
  // The weights as a 4-d byte tensor [1][E][rows][K] (innermost first: K, rows, E), boxes of 128 bytes x the
  // tile's rows (gate-up: half the tile, loaded twice), 128-byte swizzle; out-of-range rows / K read as zero.
  const uint64_t k = kGateUp ? a.hidden_size : a.intermediate;
  const uint64_t rows = kGateUp ? 2ull * a.intermediate : a.hidden_size;
  TensorMap4d spec;
  spec.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  spec.base = kGateUp ? static_cast<const void*>(a.w13) : static_cast<const void*>(a.w2);
  spec.dims[0] = k, spec.dims[1] = rows, spec.dims[2] = static_cast<uint64_t>(a.num_local_experts), spec.dims[3] = 1;
  spec.strides_bytes[0] = k, spec.strides_bytes[1] = rows * k, spec.strides_bytes[2] = rows * k * spec.dims[2];
  spec.box[0] = Cfg::kBK, spec.box[1] = Cfg::kBoxRows, spec.box[2] = 1, spec.box[3] = 1;
  spec.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  // a box may reach past the tensor (hidden or intermediate 64): the part outside reads as zero
  plan.wmap = make_tensor_map(spec, kGateUp ? "w13" : "w2");
  // Down: its A operand, act [T * top_k][I] bytes, in boxes of 128 bytes x BM rows, 128-byte swizzle (rows or K
  // past the tensor read as zero). Gate-up gathers its rows with cp.async and ignores this map.
  plan.amap = plan.wmap;
  if (Cfg::kTmaA) {
    TensorMap4d aspec;
    aspec.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;
    aspec.base = a.act;
    aspec.dims[0] = static_cast<uint64_t>(a.intermediate);
    aspec.dims[1] = static_cast<uint64_t>(a.num_tokens) * static_cast<uint64_t>(a.top_k);
    aspec.dims[2] = 1, aspec.dims[3] = 1;
    aspec.strides_bytes[0] = aspec.dims[0], aspec.strides_bytes[1] = aspec.dims[0] * aspec.dims[1];
    aspec.strides_bytes[2] = aspec.strides_bytes[1];
    aspec.box[0] = Cfg::kBK, aspec.box[1] = BM, aspec.box[2] = 1, aspec.box[3] = 1;
    aspec.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
    plan.amap = make_tensor_map(aspec, "workspace (act)");
  }
  return plan;
}

// Launches a planned variant as a persistent, PDL-chained grid.
template <int BM, int BN, bool kGateUp, bool kBlock, bool kPairs, bool kIndex, bool kKTail>
void launch_moe_gemm(const MoeKernelArgs& a, const MoeGemmPlan& plan,
                     MoeGemmVariant<BM, BN, kGateUp, kBlock, kPairs, kIndex, kKTail>, cudaStream_t stream) {
  using Cfg = MoeGemmConfig<BM, BN, kGateUp, kBlock, kIndex, kKTail>;
  auto kernel = moe_gemm_kernel<BM, BN, kGateUp, kBlock, kPairs, kIndex, kKTail>;
  HK_CHECK(kValue, plan.kernel == reinterpret_cast<const void*>(kernel), "moe gemm plan",
           "a plan made for this variant", plan.kernel ? "a plan for another variant" : "no plan");
  HK_CHECK(kValue, plan.cluster == (kPairs ? 2 : 1) && plan.grid % plan.cluster == 0, "moe gemm plan",
           kPairs ? "an even grid in clusters of 2" : "no cluster", "cluster " + std::to_string(plan.cluster) +
           ", grid " + std::to_string(plan.grid));
  // PDL: the set-up overlaps the previous kernel's tail
  launch_with_pdl_cluster(kernel, dim3(static_cast<unsigned>(plan.grid)), dim3(Cfg::kThreads), Cfg::kSmemBytes,
                          plan.cluster, stream, a, plan.wmap, plan.amap);
}

// Task-count bound known on the host: the most tiles any routing can make, times the weight blocks.
inline int64_t moe_max_tasks(const MoeKernelArgs& a, int cols_per_task, int n, int bm) {
  return max_tiles(a.num_tokens, a.top_k, a.num_local_experts, bm) * ((n + cols_per_task - 1) / cols_per_task);
}

}  // namespace moe
}  // namespace hopperkit
