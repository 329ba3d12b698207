// hopperkit fused FP8 MoE, kernel 1: the routing index and the input quantisation.
//
// In one CTA (index_ctas == 1), CTA 0 of moe_prep_kernel builds the index: per-expert counts in shared memory,
// their prefix, the tile list (block_m rows per tile, in expert order) and each expert's rows; the kernel's
// other CTAs quantise the input. In chunks (index_chunked in heuristics.h), moe_prep_kernel is only the
// count: one CTA per chunk of kIndexCtaRows entries writes its per-expert counts to the workspace
// (index_hist). The second kernel (moe_index_place_kernel, after it by PDL) has one CTA per chunk, which waits
// for the counts, sums them, writes the offsets and tiles, and places the chunk's rows (sorted by expert in
// shared memory first, then stored as contiguous runs: a chunk's rows of one expert are one run of the
// expert's range), and the quantisation CTAs, which do not wait: they run while the counts are made.
// Rows are placed with shared-memory atomics, so their order inside an expert range may vary from run to run;
// results do not, because every row's GEMM result depends on that row alone and the reduce sums in token order.
// The other CTAs quantise a bf16 input to FP8: per-tensor (x / a13_scale, 8 columns per thread) or in 1x128
// groups (scale = amax / 448), one warp per group.
#include <cub/block/block_scan.cuh>
#include <cuda_fp8.h>

#include "common/pdl_launch.h"
#include "common/ptx.cuh"
#include "hopperkit/error.h"
#include "hopperkit/moe/heuristics.h"
#include "moe/launch.h"
#include "moe/trace.h"  // kernel 1's events in trace builds (HK_MT_ONLY, kMoeTracePrepRow); default builds: none

namespace hopperkit {
namespace moe {

using namespace ptx;

namespace {

constexpr int kPrepThreads = 1024;
// Routing entries each index-build thread loads before it counts or places them: the loads (topk id, then the
// expert map) are dependent global round trips, so they are issued kIndexBatch at a time (one at a time, the
// prep kernel took 52 us for hy3 TP8 at 4096 tokens: 32768 entries, 32 per thread; session 5 run 4).
constexpr int kIndexBatch = 8;
constexpr float kFp8Max = 448.f;
constexpr float kMinAmax = 1e-10f;  // an all-zero group gets a tiny, finite scale (its codes are all zero)

// Expert e's tiles of up to kRows rows over its rows [c_off, c_off + c), {e, row_begin, rows, 0}, into list[off..]:
// the wide gate-up's 128-row tiles (a.tiles_wide) and the K-tail down's 256-row groups (a.tiles_pair).
template <int kRows>
__device__ __forceinline__ void write_expert_tiles(int4* list, int e, int c_off, int c, int off) {
  for (int i = 0; i * kRows < c; ++i) list[off + i] = make_int4(e, c_off + i * kRows, min(kRows, c - i * kRows), 0);
}

// The per-call state of the GEMMs, reset by whichever index build runs: the split-K arrival counters and, for the
// gate-up -> down hand-off (grouped_gemm.cuh), which hand-off the swapped down took (counters[3]: it sets 1 when it
// waits per tile), the down's item claims (counters[4]), whether the gate-up ran in pairs (counters[5]: the pair
// kernel sets 1), the CTAs an even-rounds gate-up kept (counters[6]), the GEMM index's publication (counters[7])
// and every tile's ready count.
__device__ __forceinline__ void reset_handoff_state(const MoeKernelArgs& a, int tid, int total_tiles) {
  for (int i = tid; i < kSplitSlices; i += kPrepThreads) a.split_counters[i] = 0;
  if (tid == 0) a.counters[3] = 0, a.counters[4] = 0, a.counters[5] = 0, a.counters[6] = 0, a.counters[7] = 0;
  if (a.tile_ready != nullptr) {
    for (int i = tid; i < total_tiles; i += kPrepThreads) a.tile_ready[i] = 0;
  }
}

// With the index built in the GEMMs (a.gemm_index: gemm_index in heuristics.h), the index CTA only resets the
// per-call state: the split counters and the hand-off state, every tile's ready count up to the tile bound (the
// count is the gate-up's to find). The gate-up writes the tile list, offsets, counters[0..1] and the rows.
__device__ void reset_for_gemm_index(const MoeKernelArgs& a) {
  reset_handoff_state(a, threadIdx.x,
                      static_cast<int>(max_tiles(a.num_tokens, a.top_k, a.num_local_experts, a.block_m)));
}

__device__ void build_index(const MoeKernelArgs& a) {
  __shared__ int count[kMaxExperts], cursor[kMaxExperts], row_off[kMaxExperts];
  __shared__ int dropped;
  using Scan = cub::BlockScan<int, kPrepThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  const int tid = threadIdx.x;
  const int E = a.num_local_experts;
  const int rows = a.num_tokens * a.top_k;
  for (int e = tid; e < E; e += kPrepThreads) count[e] = 0, cursor[e] = 0;
  if (tid == 0) dropped = 0;
  __syncthreads();
  // local expert of entries base + j * kPrepThreads + tid (j < kIndexBatch), -2 past the end
  auto load_batch = [&](int base, int (&e)[kIndexBatch]) {
#pragma unroll
    for (int j = 0; j < kIndexBatch; ++j) {
      const int r = base + j * kPrepThreads + tid;
      e[j] = r < rows ? __ldg(a.topk_ids + r) : -1;
    }
#pragma unroll
    for (int j = 0; j < kIndexBatch; ++j) {
      const int r = base + j * kPrepThreads + tid;
      e[j] = r < rows ? moe_local_expert(a, e[j]) : -2;
    }
  };
  int my_dropped = 0;
  // the first batch's experts stay in registers for the placement below, which then does not reload them (two
  // dependent global round trips, the topk id and then the expert map, on the prep kernel's critical path); up
  // to kPrepThreads x kIndexBatch entries (every decode call) that is every entry
  int e0[kIndexBatch];
  load_batch(0, e0);
  auto batch_at = [&](int base, int (&e)[kIndexBatch]) {  // the kept first batch, or a later one loaded
    if (base == 0) {
#pragma unroll
      for (int j = 0; j < kIndexBatch; ++j) e[j] = e0[j];
    } else {
      load_batch(base, e);
    }
  };
  for (int base = 0; base < rows; base += kPrepThreads * kIndexBatch) {
    int e[kIndexBatch];
    batch_at(base, e);
#pragma unroll
    for (int j = 0; j < kIndexBatch; ++j) {
      if (e[j] >= 0) {
        atomicAdd(&count[e[j]], 1);
      } else if (e[j] == -1) {
        ++my_dropped;
      }
    }
  }
  if (my_dropped) atomicAdd(&dropped, my_dropped);
  __syncthreads();
  HK_MT_ONLY(if (tid == 0) a.trace[kMpIndexCounted] = globaltimer();)
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
  if (a.gate_up_bm == 128) {  // the wide gate-up's 128-row tiles over the same ranges (uniform branch)
    int w_off, total_wide;
    Scan(scan_tmp).ExclusiveSum((c + 127) / 128, w_off, total_wide);
    if (tid < E) write_expert_tiles<128>(a.tiles_wide, tid, c_off, c, w_off);
    if (tid == 0) a.counters[2] = total_wide;
    __syncthreads();
  }
  if (a.tiles_pair != nullptr) {  // the K-tail down's row groups (uniform branch)
    int g_off, total_groups;
    Scan(scan_tmp).ExclusiveSum((c + 255) / 256, g_off, total_groups);
    if (tid < E) write_expert_tiles<256>(a.tiles_pair, tid, c_off, c, g_off);
    if (tid == 0) a.counters[8] = total_groups;
    __syncthreads();
  }
  HK_MT_ONLY(if (tid == 0) a.trace[kMpIndexScanned] = globaltimer();)
  if (tid == 0) {
    a.expert_offset[E] = total_rows;
    a.counters[0] = total_tiles;
    a.counters[1] = dropped;
  }
  reset_handoff_state(a, tid, total_tiles);
  for (int base = 0; base < rows; base += kPrepThreads * kIndexBatch) {
    int e[kIndexBatch];
    batch_at(base, e);
#pragma unroll
    for (int j = 0; j < kIndexBatch; ++j) {
      if (e[j] >= 0) a.sorted_rows[row_off[e[j]] + atomicAdd(&cursor[e[j]], 1)] = base + j * kPrepThreads + tid;
    }
  }
}

// Index chunk `c` (entries c * kIndexCtaRows ..): its per-expert counts and its dropped entries (ids that are
// invalid or not local) into row c of index_hist ([E] counts, then dropped).
constexpr int kChunkPerThread = kIndexCtaRows / kPrepThreads;
static_assert(kIndexCtaRows % kPrepThreads == 0, "whole entries per thread");

// local expert of chunk entry base + j * kPrepThreads + tid (j < kChunkPerThread); -2 past the routing
__device__ __forceinline__ void load_chunk(const MoeKernelArgs& a, int base, int rows, int (&e)[kChunkPerThread]) {
#pragma unroll
  for (int j = 0; j < kChunkPerThread; ++j) {
    const int r = base + j * kPrepThreads + threadIdx.x;
    e[j] = r < rows ? __ldg(a.topk_ids + r) : -1;
  }
#pragma unroll
  for (int j = 0; j < kChunkPerThread; ++j) {
    const int r = base + j * kPrepThreads + threadIdx.x;
    e[j] = r < rows ? moe_local_expert(a, e[j]) : -2;
  }
}

__device__ void count_index_chunk(const MoeKernelArgs& a, int c) {
  __shared__ int chunk_count[kMaxExperts];
  __shared__ int chunk_dropped;
  const int tid = threadIdx.x;
  const int E = a.num_local_experts;
  const int rows = a.num_tokens * a.top_k;
  for (int e = tid; e < E; e += kPrepThreads) chunk_count[e] = 0;
  if (tid == 0) chunk_dropped = 0;
  __syncthreads();
  int e[kChunkPerThread];
  load_chunk(a, c * kIndexCtaRows, rows, e);
  int my_dropped = 0;
#pragma unroll
  for (int j = 0; j < kChunkPerThread; ++j) {
    if (e[j] >= 0) {
      atomicAdd(&chunk_count[e[j]], 1);
    } else if (e[j] == -1) {
      ++my_dropped;
    }
  }
  if (my_dropped) atomicAdd(&chunk_dropped, my_dropped);
  __syncthreads();
  int32_t* hist = a.index_hist + static_cast<int64_t>(c) * (E + 1);
  for (int e2 = tid; e2 < E; e2 += kPrepThreads) hist[e2] = chunk_count[e2];
  if (tid == 0) hist[E] = chunk_dropped;
}

// Per-tensor: one thread per 8 columns (a 16-byte load, an 8-byte store; the op's validation requires a 16-byte
// aligned input and row stride, and hidden is a multiple of 64).
__device__ void quantise_input_per_tensor(const MoeKernelArgs& a) {
  const int per_row = a.hidden_size / 8;
  const int64_t n = static_cast<int64_t>(a.num_tokens) * per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x - a.index_ctas) * kPrepThreads;
  const float scale = __ldg(a.a13_scale);
  for (int64_t i = static_cast<int64_t>(blockIdx.x - a.index_ctas) * kPrepThreads + threadIdx.x; i < n;
       i += stride) {
    const int64_t tok = i / per_row;
    const int col = static_cast<int>(i - tok * per_row) * 8;
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(a.hidden + tok * a.hidden_stride + col));
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
    uint32_t q[2] = {0u, 0u};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float x = bf16_bits_to_float(j % 2 ? w[j / 2] >> 16 : w[j / 2] & 0xffff);
      q[j / 4] |= static_cast<uint32_t>(__nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3)) << (8 * (j % 4));
    }
    *reinterpret_cast<uint2*>(a.xq + tok * a.hidden_size + col) = make_uint2(q[0], q[1]);
  }
}

// Block-wise: one warp per (token, 128-column scaling group), 4 columns per lane.
__device__ void quantise_input_block(const MoeKernelArgs& a) {
  constexpr int kPerLane = 4;
  constexpr int kGroup = 32 * kPerLane;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int groups_per_token = a.hidden_size / kGroup;
  const int64_t groups = static_cast<int64_t>(a.num_tokens) * groups_per_token;
  const int64_t stride = static_cast<int64_t>(gridDim.x - a.index_ctas) * (kPrepThreads / 32);
  for (int64_t g = static_cast<int64_t>(blockIdx.x - a.index_ctas) * (kPrepThreads / 32) + warp; g < groups;
       g += stride) {
    const int64_t tok = g / groups_per_token;
    const int col = static_cast<int>(g % groups_per_token) * kGroup + lane * kPerLane;
    const uint2 raw = __ldg(reinterpret_cast<const uint2*>(a.hidden + tok * a.hidden_stride + col));
    float x[kPerLane];
    x[0] = bf16_bits_to_float(raw.x & 0xffff), x[1] = bf16_bits_to_float(raw.x >> 16);
    x[2] = bf16_bits_to_float(raw.y & 0xffff), x[3] = bf16_bits_to_float(raw.y >> 16);
    float m = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) m = fmaxf(m, fabsf(x[i]));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float scale = fmaxf(m, kMinAmax) / kFp8Max;
    if (lane == 0) a.xq_scale[tok * groups_per_token + col / kGroup] = scale;
    uint32_t q = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      q |= static_cast<uint32_t>(__nv_cvt_float_to_fp8(x[i] / scale, __NV_SATFINITE, __NV_E4M3)) << (8 * i);
    }
    *reinterpret_cast<uint32_t*>(a.xq + tok * a.hidden_size + col) = q;
  }
}

// The input quantisation CTAs' work, per the call's scaling.
__device__ __forceinline__ void quantise_input(const MoeKernelArgs& a) {
  if (a.block_scaled) {
    quantise_input_block(a);
  } else {
    quantise_input_per_tensor(a);
  }
}

// Grid: index_ctas CTAs, plus the quantisation CTAs when the index is built in one CTA (in chunks, the
// quantisation CTAs are the placement kernel's).
__global__ void __launch_bounds__(kPrepThreads) moe_prep_kernel(MoeKernelArgs a) {
  launch_dependents();  // the next grid (gate-up, or the index placement) may start; it waits for this one
  HK_MT_ONLY(const unsigned long long tr_entry = globaltimer();)
  if (static_cast<int>(blockIdx.x) < a.index_ctas) {
    if (a.gemm_index) {
      reset_for_gemm_index(a);
    } else if (a.index_ctas == 1) {
      build_index(a);
    } else {
      count_index_chunk(a, blockIdx.x);
    }
    HK_MT_ONLY(__syncthreads(); if (blockIdx.x == 0 && threadIdx.x == 0) {
      a.trace[kMpIndexEntry] = tr_entry;
      a.trace[kMpIndexDone] = globaltimer();
    })
  } else {
    quantise_input(a);
    HK_MT_ONLY(__syncthreads(); if (threadIdx.x == 0) {
      atomicMax(a.trace + kMpQuantEntryLast, tr_entry);
      atomicMax(a.trace + kMpQuantDoneLast, globaltimer());
      if (static_cast<int>(blockIdx.x) == a.index_ctas) a.trace[kMpQuantEntryFirst] = tr_entry;
    })
  }
}

// CTAs 0 .. index_ctas - 1, chunk blockIdx.x: every expert's total and this chunk's base inside the expert's
// range (the counts of the chunks before it), from index_hist; CTA 0 also writes the offsets, the tile list and
// the counters. Then the chunk's rows, sorted by expert in shared memory, are stored as one contiguous run per
// expert. The CTAs after them quantise the input (they need nothing from the count kernel).
__global__ void __launch_bounds__(kPrepThreads) moe_index_place_kernel(const MoeKernelArgs a) {
  __shared__ int s_base[kMaxExperts];   // expert_offset[e] + the earlier chunks' rows of e
  __shared__ int s_local[kMaxExperts];  // this chunk's first slot of e in s_rows
  __shared__ int s_cursor[kMaxExperts];
  __shared__ int s_rows[kIndexCtaRows];
  __shared__ uint16_t s_exp[kIndexCtaRows];
  __shared__ int s_n;
  using Scan = cub::BlockScan<int, kPrepThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  launch_dependents();     // the gate-up grid may start its set-up; it waits for this grid's results
  if (static_cast<int>(blockIdx.x) >= a.index_ctas) {
    // the count kernel only reads the routing and writes index_hist: nothing to wait for. (This grid started
    // after the count grid did, which started after the stream's earlier work completed, e.g. the previous
    // call's reads of xq.)
    quantise_input(a);
    return;
  }
  grid_dependency_wait();  // index_hist comes from the count kernel
  const int tid = threadIdx.x;
  const int c = blockIdx.x;
  const int P = a.index_ctas;
  const int E = a.num_local_experts;
  const int rows = a.num_tokens * a.top_k;
  // thread e < E: expert e's count over all chunks, over the chunks before this one, and in this one; thread E
  // sums the dropped entries
  int total = 0, before = 0, mine = 0;
  if (tid <= E) {
#pragma unroll 8
    for (int cc = 0; cc < P; ++cc) {
      const int v = __ldcg(a.index_hist + static_cast<int64_t>(cc) * (E + 1) + tid);  // written by the prep grid
      total += v;
      before += cc < c ? v : 0;
      mine = cc == c ? v : mine;
    }
  }
  const bool is_expert = tid < E;
  const int cnt = is_expert ? total : 0;
  const int t = is_expert ? (cnt + a.block_m - 1) / a.block_m : 0;
  int c_off, t_off, l_off, total_rows, total_tiles, n_local;
  Scan(scan_tmp).ExclusiveSum(cnt, c_off, total_rows);
  __syncthreads();
  Scan(scan_tmp).ExclusiveSum(t, t_off, total_tiles);
  __syncthreads();
  Scan(scan_tmp).ExclusiveSum(is_expert ? mine : 0, l_off, n_local);
  int w_off = 0, total_wide = 0, g_off = 0, total_groups = 0;
  if (a.gate_up_bm == 128 && c == 0) {  // the wide gate-up's 128-row tiles, written by CTA 0 (uniform per CTA)
    __syncthreads();
    Scan(scan_tmp).ExclusiveSum((cnt + 127) / 128, w_off, total_wide);
  }
  if (a.tiles_pair != nullptr && c == 0) {  // the K-tail down's row groups, by CTA 0 too
    __syncthreads();
    Scan(scan_tmp).ExclusiveSum((cnt + 255) / 256, g_off, total_groups);
  }
  if (is_expert) {
    s_base[tid] = c_off + before;
    s_local[tid] = l_off;
    s_cursor[tid] = 0;
  }
  if (tid == 0) s_n = n_local;
  if (c == 0) {
    if (is_expert) {
      a.expert_offset[tid] = c_off;
      for (int i = 0; i < t; ++i) {
        const int begin = c_off + i * a.block_m;
        a.tiles[t_off + i] = make_int4(tid, begin, min(a.block_m, c_off + cnt - begin), 0);
      }
    }
    if (tid == E) a.counters[1] = total;  // thread E summed the dropped column
    if (a.gate_up_bm == 128 && is_expert) write_expert_tiles<128>(a.tiles_wide, tid, c_off, cnt, w_off);
    if (a.tiles_pair != nullptr && is_expert) write_expert_tiles<256>(a.tiles_pair, tid, c_off, cnt, g_off);
    if (tid == 0) {
      if (a.tiles_pair != nullptr) a.counters[8] = total_groups;
      a.expert_offset[E] = total_rows;
      a.counters[0] = total_tiles;
      if (a.gate_up_bm == 128) a.counters[2] = total_wide;
    }
    reset_handoff_state(a, tid, total_tiles);
  }
  __syncthreads();
  int e[kChunkPerThread];
  const int base = c * kIndexCtaRows;
  load_chunk(a, base, rows, e);
#pragma unroll
  for (int j = 0; j < kChunkPerThread; ++j) {
    if (e[j] >= 0) {
      const int at = s_local[e[j]] + atomicAdd(&s_cursor[e[j]], 1);
      s_rows[at] = base + j * kPrepThreads + tid;
      s_exp[at] = static_cast<uint16_t>(e[j]);
    }
  }
  __syncthreads();
  for (int i = tid; i < s_n; i += kPrepThreads) {
    const int ex = s_exp[i];
    a.sorted_rows[s_base[ex] + (i - s_local[ex])] = s_rows[i];
  }
}

// Measurement aid (HOPPERKIT_MOE_PREP_BOUND, fused_moe.cpp): only the per-call resets of build_index, so that the
// GEMMs run on the index and the quantised input a previous call left in the workspace. What the op's time
// loses against the full prep bounds what taking the index build and the quantisation off the gate-up's
// critical path could win. Results are those of the previous call's routing and input: timing only.
// CTAs past the first quantise the input as moe_prep_kernel's do (mode 3 below).
__global__ void __launch_bounds__(kPrepThreads) moe_prep_bound_kernel(const MoeKernelArgs a) {
  launch_dependents();
  if (blockIdx.x > 0) {
    quantise_input(a);
    return;
  }
  reset_handoff_state(a, threadIdx.x, a.counters[0]);
}

unsigned quant_ctas_of(const MoeKernelArgs& a) {
  if (a.hidden == nullptr) return 0;
  // columns per warp, as in quantise_input_block / quantise_input_per_tensor
  const int group = a.block_scaled ? kScaleBlock : 8 * 32;
  const int64_t warps = (static_cast<int64_t>(a.num_tokens) * a.hidden_size + group - 1) / group;
  const int64_t blocks = (warps + kPrepThreads / 32 - 1) / (kPrepThreads / 32);
  return static_cast<unsigned>(blocks < 1024 ? blocks : 1024);
}

}  // namespace

// mode 1: the resets only; 2: the index build alone (no quantisation CTAs); 3: the resets and the quantisation
// (no index build). Needs index_ctas == 1.
void launch_moe_prep_bound(const MoeKernelArgs& a, int mode, cudaStream_t stream) {
  if (mode == 2) {
    moe_prep_kernel<<<1, kPrepThreads, 0, stream>>>(a);
    HK_CHECK_LAUNCH("moe_prep_kernel");
    return;
  }
  moe_prep_bound_kernel<<<1 + (mode == 3 ? quant_ctas_of(a) : 0u), kPrepThreads, 0, stream>>>(a);
  HK_CHECK_LAUNCH("moe_prep_bound_kernel");
}

void launch_moe_prep(const MoeKernelArgs& a, cudaStream_t stream) {
  HK_CHECK(kValue, a.index_ctas >= 1 && a.index_ctas <= kMaxIndexCtas, "index_ctas",
           "1.." + std::to_string(kMaxIndexCtas), a.index_ctas);
  const unsigned quant_ctas = quant_ctas_of(a);
  // the quantisation CTAs go with the one-CTA index build, or with the placement of a chunked one
  const unsigned index_grid = static_cast<unsigned>(a.index_ctas);
  // A plain launch (no PDL) on purpose: with the GEMM index (a.gemm_index), the gate-up writes the tile list, the
  // offsets and the rows before its own grid-dependency wait, which is safe only because the previous call's
  // down and reduce have completed before this kernel (and so the gate-up) started.
  moe_prep_kernel<<<a.index_ctas == 1 ? index_grid + quant_ctas : index_grid, kPrepThreads, 0, stream>>>(a);
  HK_CHECK_LAUNCH("moe_prep_kernel");
  if (a.index_ctas > 1) {
    launch_with_pdl(moe_index_place_kernel, dim3(index_grid + quant_ctas), dim3(kPrepThreads), 0, stream, a);
  }
}

}  // namespace moe
}  // namespace hopperkit
