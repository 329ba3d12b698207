// hopperkit fused FP8 MoE, kernel 1: the routing index and the input quantisation.
//
// CTA 0 builds the index: per-expert counts in shared memory, their prefix, the tile list (block_m rows per
// tile, in expert order) and each expert's rows. Rows are placed with shared-memory atomics, so their order
// inside an expert range may vary from run to run; results do not, because every row's GEMM result depends on
// that row alone and the reduce sums in token order. The other CTAs quantise a bf16 input to FP8: per-tensor
// (x / a13_scale) or in 1x128 groups (scale = amax / 448), one warp per group.
#include <cub/block/block_scan.cuh>
#include <cuda_fp8.h>

#include "common/ptx.cuh"
#include "hopperkit/error.h"
#include "hopperkit/moe/heuristics.h"
#include "moe/launch.h"

namespace hopperkit {
namespace moe {

using namespace ptx;

namespace {

constexpr int kPrepThreads = 1024;
constexpr float kFp8Max = 448.f;
constexpr float kMinAmax = 1e-10f;  // an all-zero group gets a tiny, finite scale (its codes are all zero)

__device__ void build_index(const MoeKernelArgs& a) {
  __shared__ int count[kMaxExperts], cursor[kMaxExperts], row_off[kMaxExperts];
  __shared__ int dropped;
  using Scan = cub::BlockScan<int, kPrepThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  const int tid = threadIdx.x;
  const int E = a.num_local_experts;
  const int rows = a.num_tokens * a.top_k;
  for (int e = tid; e < E; e += kPrepThreads) count[e] = 0, cursor[e] = 0;
  for (int i = tid; i < kSplitSlices; i += kPrepThreads) a.split_counters[i] = 0;
  if (tid == 0) dropped = 0;
  __syncthreads();
  int my_dropped = 0;
  for (int r = tid; r < rows; r += kPrepThreads) {
    const int e = moe_local_expert(a, a.topk_ids[r]);
    if (e >= 0) {
      atomicAdd(&count[e], 1);
    } else {
      ++my_dropped;
    }
  }
  if (my_dropped) atomicAdd(&dropped, my_dropped);
  __syncthreads();
  const int c = tid < E ? count[tid] : 0;
  const int t = (c + a.block_m - 1) / a.block_m;
  int c_off, t_off, total_rows, total_tiles;
  Scan(scan_tmp).ExclusiveSum(c, c_off, total_rows);
  __syncthreads();
  Scan(scan_tmp).ExclusiveSum(t, t_off, total_tiles);
  if (tid < E) {
    row_off[tid] = c_off;
    a.expert_offset[tid] = c_off;
    for (int i = 0; i < t; ++i) {
      const int begin = c_off + i * a.block_m;
      a.tiles[t_off + i] = make_int4(tid, begin, min(a.block_m, c_off + c - begin), 0);
    }
  }
  __syncthreads();
  if (tid == 0) {
    a.expert_offset[E] = total_rows;
    a.counters[0] = total_tiles;
    a.counters[1] = dropped;
  }
  for (int r = tid; r < rows; r += kPrepThreads) {
    const int e = moe_local_expert(a, a.topk_ids[r]);
    if (e >= 0) a.sorted_rows[row_off[e] + atomicAdd(&cursor[e], 1)] = r;
  }
}

// One warp per (token, group of columns): 128 columns (4 per lane) for block-wise scaling, where the group is
// the scaling group, and 64 (2 per lane) for per-tensor scaling, whose hidden sizes are multiples of 64.
template <int kPerLane>
__device__ void quantise_input(const MoeKernelArgs& a) {
  constexpr int kGroup = 32 * kPerLane;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int groups_per_token = a.hidden_size / kGroup;
  const int64_t groups = static_cast<int64_t>(a.num_tokens) * groups_per_token;
  const int64_t stride = static_cast<int64_t>(gridDim.x - 1) * (kPrepThreads / 32);
  const float static_scale = a.block_scaled ? 1.f : __ldg(a.a13_scale);
  for (int64_t g = static_cast<int64_t>(blockIdx.x - 1) * (kPrepThreads / 32) + warp; g < groups; g += stride) {
    const int64_t tok = g / groups_per_token;
    const int col = static_cast<int>(g % groups_per_token) * kGroup + lane * kPerLane;
    const uint16_t* src = a.hidden + tok * a.hidden_stride + col;
    float x[kPerLane];
    if constexpr (kPerLane == 4) {
      const uint2 raw = __ldg(reinterpret_cast<const uint2*>(src));
      x[0] = bf16_bits_to_float(raw.x & 0xffff), x[1] = bf16_bits_to_float(raw.x >> 16);
      x[2] = bf16_bits_to_float(raw.y & 0xffff), x[3] = bf16_bits_to_float(raw.y >> 16);
    } else {
      const uint32_t raw = __ldg(reinterpret_cast<const uint32_t*>(src));
      x[0] = bf16_bits_to_float(raw & 0xffff), x[1] = bf16_bits_to_float(raw >> 16);
    }
    float scale = static_scale;
    if (a.block_scaled) {
      float m = 0.f;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) m = fmaxf(m, fabsf(x[i]));
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      scale = fmaxf(m, kMinAmax) / kFp8Max;
      if (lane == 0) a.xq_scale[tok * groups_per_token + col / kGroup] = scale;
    }
    uint32_t q = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      q |= static_cast<uint32_t>(__nv_cvt_float_to_fp8(x[i] / scale, __NV_SATFINITE, __NV_E4M3)) << (8 * i);
    }
    uint8_t* dst = a.xq + tok * a.hidden_size + col;
    if constexpr (kPerLane == 4) {
      *reinterpret_cast<uint32_t*>(dst) = q;
    } else {
      *reinterpret_cast<uint16_t*>(dst) = static_cast<uint16_t>(q);
    }
  }
}

__global__ void __launch_bounds__(kPrepThreads) moe_prep_kernel(MoeKernelArgs a) {
  launch_dependents();  // the gate-up grid may start its set-up; it waits for this grid's results
  if (blockIdx.x == 0) {
    build_index(a);
  } else {
    if (a.block_scaled) {
      quantise_input<4>(a);
    } else {
      quantise_input<2>(a);
    }
  }
}

}  // namespace

void launch_moe_prep(const MoeKernelArgs& a, cudaStream_t stream) {
  unsigned grid = 1;
  if (a.hidden != nullptr) {
    const int group = a.block_scaled ? kScaleBlock : 64;  // columns per warp, as in quantise_input
    const int64_t warps = static_cast<int64_t>(a.num_tokens) * (a.hidden_size / group);
    const int64_t blocks = (warps + kPrepThreads / 32 - 1) / (kPrepThreads / 32);
    grid += static_cast<unsigned>(blocks < 1024 ? blocks : 1024);
  }
  moe_prep_kernel<<<grid, kPrepThreads, 0, stream>>>(a);
  HK_CHECK_LAUNCH("moe_prep_kernel");
}

}  // namespace moe
}  // namespace hopperkit
