// Micro-benchmark: what a thread-block-cluster hand-off of split-KV partials would cost against today's global
// one (docs/decode_merge_plan.md, step 1 b-c). Two parts:
//
// 1. Residency. For a kernel shaped like the decode kernel's fp8q_r16 variant (160 threads; at these dynamic
//    shared-memory sizes at most 2 CTAs per SM, as its launch bound allows), cudaOccupancyMaxActiveClusters for clusters of
//    1, 2, 4, 8 and 16 CTAs (16: the non-portable size), then a launch of that many clusters in which every CTA
//    records its SM and start time and stays ~30 µs: if the starts spread by less than that, every CTA was
//    resident at once.
// 2. Hand-off latency of one merge group of N pieces (N = 2..16), each piece 8 rows x 128 dims of f16 (2048 B)
//    plus 8 float LSEs (32 B): from the first of the group's CTAs to leave an aligning cluster barrier to the
//    merger holding the sum of all pieces (globaltimer; median over clusters x repetitions; up to 16 clusters at
//    once, as many as are resident, each CTA with the decode kernel's shared memory, so at most 2 per SM as there;
//    the sums are checked):
//      global   every CTA stores its piece to global memory, bar.sync, one atom.acq_rel.gpu per CTA; the last
//               arriver loads the N pieces (today's handshake and one merge round);
//      st.async every CTA but rank 0 stores its piece into rank 0's shared memory by st.async, 16 B per thread,
//               counting the bytes on rank 0's mbarrier; rank 0 waits on it and reads the N - 1 slots;
//      bulk     the same through the pusher's own shared memory and one cp.async.bulk shared::cta -> cluster.
//    Session 60's numbers (ab_session60.json call 1) came from an earlier form (commit cc58a94) that timed the
//    global path from the last arriver's own barrier exit (not the group's first: it left the other pieces' skew
//    out of the global figures only), ran 33 KB CTAs (several of a cluster could share an SM) and did not check
//    the sums; this form ran in session 61 (ab_session61.json call 1).
//
// Build: nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Iinclude -Isrc bench/micro/cluster_merge.cu
//        src/common/tensor_map.cpp src/common/error.cpp -o cluster_merge
// Run:   ./cluster_merge
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <vector>

#include "micro_common.cuh"

namespace {

namespace ptx = hopperkit::ptx;
using micro::place_kernel;

// The cluster primitives only this benchmark uses (the library's are in common/ptx.cuh).
__device__ __forceinline__ uint32_t cluster_nctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}
// 16 bytes into a peer's shared memory at `remote` (map_to_rank), their bytes counted on the peer's mbarrier at
// `remote_bar` (complete_tx): no fence, the peer's phase wait makes them visible.
__device__ __forceinline__ void st_async_v4(uint32_t remote, uint4 v, uint32_t remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
                   remote),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(remote_bar)
               : "memory");
}
// `bytes` (a multiple of 16) of this CTA's shared memory at `src` into a peer's at `remote`, counted on the peer's
// mbarrier at `remote_bar`; the writes to `src` must be ordered before it by fence.proxy.async.shared::cta.
__device__ __forceinline__ void bulk_copy_to_rank(uint32_t remote, const void* src, uint32_t bytes,
                                                  uint32_t remote_bar) {
  asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   remote),
               "r"(ptx::smem_addr(src)), "r"(bytes), "r"(remote_bar)
               : "memory");
}

constexpr int kThreads = 160;      // as the decode kernel: 4 consumer warps + the producer warp
constexpr int kPushThreads = 128;  // the consumer warps hold the piece: 16 B each
constexpr int kPieceBytes = 2048;  // 8 rows x 128 dims of f16
constexpr int kLseBytes = 32;      // 8 float LSEs
constexpr int kSlotBytes = kPieceBytes + kLseBytes;
constexpr int kMaxCluster = 16;
constexpr int kReps = 64;
constexpr int kHandoffSmem = 83008 + 31200 + 128;  // fp8q_r16's + 15 receive slots: 2 CTAs per SM at most

__host__ __device__ inline float sum_h8(uint4 v) {
  const __half2* h = reinterpret_cast<const __half2*>(&v);
  float s = 0.f;
  for (int i = 0; i < 4; ++i) s += __low2float(h[i]) + __high2float(h[i]);
  return s;
}
// A piece's 16 bytes for thread t of rank r, repetition i (distinct per piece so that nothing is folded).
__host__ __device__ inline uint4 piece_word(int r, int t, int i) {
  const __half2 h = __floats2half2_rn(0.001f * (r + 1), 0.0001f * (t + i));
  const uint32_t u = *reinterpret_cast<const uint32_t*>(&h);
  return make_uint4(u, u ^ 1u, u ^ 2u, u ^ 3u);
}

// method 0: global; 1: st.async; 2: bulk. t_start[(cluster * kReps + rep) * 16 + rank]: each CTA's exit from the
// aligning barrier; t_end[cluster * kReps + rep]: the merger's sum complete; sums[(cluster * kReps + rep) * 128 + t]:
// the merger's thread t's sum of that repetition's pieces (checked on the host); sm[blockIdx]: its SM.
template <int kMethod>
__global__ void __launch_bounds__(kThreads, 1) handoff_kernel(uint8_t* partials, int* counters,
                                                              unsigned long long* t_start, unsigned long long* t_end,
                                                              float* sums, unsigned* sm) {
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem);
  uint8_t* slots = smem + 128;                                    // (N - 1) receive slots (rank 0)
  uint8_t* own = slots + (kMaxCluster - 1) * kSlotBytes;          // bulk: the pusher's staged piece
  __shared__ int is_last;
  const uint32_t rank = ptx::cluster_ctarank();
  const uint32_t n = cluster_nctarank();
  const int cluster = blockIdx.x / n;
  const int t = threadIdx.x;
  if (t == 0) {
    sm[blockIdx.x] = ptx::sm_id();
    ptx::mbar_init(bar, 1);
    ptx::fence_barrier_init();
  }
  ptx::cluster_sync();
  const uint32_t remote_bar = ptx::map_to_rank(ptx::smem_addr(bar), 0);
  for (int i = 0; i < kReps; ++i) {
    ptx::cluster_sync();  // aligns the N CTAs; also orders the merger's reads of repetition i-1 before new pushes
    const size_t rec = static_cast<size_t>(cluster) * kReps + i;
    if (t == 0) t_start[rec * kMaxCluster + rank] = ptx::globaltimer();
    const uint4 mine = piece_word(rank, t, i);
    float acc = 0.f;
    bool merged = false;
    if constexpr (kMethod == 0) {
      uint8_t* slot = partials + (size_t(cluster) * kMaxCluster + rank) * kSlotBytes;
      if (t < kPushThreads) *reinterpret_cast<uint4*>(slot + t * 16) = mine;
      if (t < 2) *reinterpret_cast<uint4*>(slot + kPieceBytes + t * 16) = mine;
      __syncthreads();
      if (t == 0) is_last = ptx::atom_add_acq_rel_gpu(counters + cluster, 1) == int(n) * (i + 1) - 1;
      __syncthreads();
      merged = is_last;
      if (is_last && t < kPushThreads) {
        uint4 v[kMaxCluster];
#pragma unroll
        for (int s = 0; s < kMaxCluster; ++s)
          if (s < int(n))
            v[s] = __ldcg(reinterpret_cast<const uint4*>(partials + (size_t(cluster) * kMaxCluster + s) * kSlotBytes +
                                                         t * 16));
#pragma unroll
        for (int s = 0; s < kMaxCluster; ++s)
          if (s < int(n)) acc += sum_h8(v[s]);
      }
    } else {
      if (rank != 0) {
        const uint32_t dst = ptx::map_to_rank(ptx::smem_addr(slots + (rank - 1) * kSlotBytes), 0);
        if constexpr (kMethod == 1) {
          if (t < kPushThreads) st_async_v4(dst + t * 16, mine, remote_bar);
          if (t < 2) st_async_v4(dst + kPieceBytes + t * 16, mine, remote_bar);
        } else {
          if (t < kPushThreads) *reinterpret_cast<uint4*>(own + t * 16) = mine;
          if (t < 2) *reinterpret_cast<uint4*>(own + kPieceBytes + t * 16) = mine;
          asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
          __syncthreads();
          if (t == 0) bulk_copy_to_rank(dst, own, kSlotBytes, remote_bar);
        }
      } else {
        merged = true;
        if (t == 0) ptx::mbar_arrive_expect_tx(bar, (n - 1) * kSlotBytes);
        ptx::mbar_wait_bounded(bar, i & 1);
        if (t < kPushThreads) {
          uint4 v[kMaxCluster - 1];
#pragma unroll
          for (int s = 0; s < kMaxCluster - 1; ++s)
            if (s < int(n) - 1) v[s] = *reinterpret_cast<const uint4*>(slots + s * kSlotBytes + t * 16);
          acc += sum_h8(mine);
#pragma unroll
          for (int s = 0; s < kMaxCluster - 1; ++s)
            if (s < int(n) - 1) acc += sum_h8(v[s]);
        }
      }
    }
    if (merged) {
      __syncthreads();
      if (t == 0) t_end[rec] = ptx::globaltimer();
      if (t < kPushThreads) sums[rec * kPushThreads + t] = acc;
    }
  }
  ptx::cluster_sync();  // no CTA leaves while a peer may still push into it or read from it
}

struct Stats {
  double med, p10, p90;
};
Stats stats(std::vector<double> v) {
  if (v.empty()) return {0, 0, 0};
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[v.size() / 10], v[v.size() * 9 / 10]};
}

cudaLaunchConfig_t cluster_cfg(cudaLaunchAttribute* attr, int grid, int cluster, int smem) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

int residency(int sms) {
  MICRO_CK(cudaFuncSetAttribute(place_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  MICRO_CK(cudaFuncSetAttribute(place_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 115712));
  unsigned* sm = nullptr;
  unsigned long long* start = nullptr;
  MICRO_CK(cudaMalloc(&sm, 4096 * sizeof(unsigned)));
  MICRO_CK(cudaMalloc(&start, 4096 * sizeof(unsigned long long)));
  // fp8q_r16's shared memory today (83008 B), + 15 receive slots (31200 B) + a barrier, and the 2-per-SM limit
  const int smems[] = {83008, 83008 + 31200 + 128, 115712};
  std::printf("residency: smem_B cluster clusters ctas | launched: distinct_SMs start_spread_us (spin 30 us)\n");
  for (int smem : smems) {
    for (int c : {1, 2, 4, 8, 16}) {
      cudaLaunchAttribute attr[1];
      cudaLaunchConfig_t cfg = cluster_cfg(attr, c * sms, c, smem);
      int clusters = 0;
      if (c == 1) {
        int per_sm = 0;
        MICRO_CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, place_kernel, kThreads, smem));
        clusters = per_sm * sms;
      } else {
        MICRO_CK(cudaOccupancyMaxActiveClusters(&clusters, place_kernel, &cfg));
      }
      const int ctas = clusters * c;
      if (ctas == 0) {
        std::printf("residency: %6d %2d    0    0 | (no cluster fits)\n", smem, c);
        continue;
      }
      cfg.gridDim = dim3(ctas);
      MICRO_CK(cudaLaunchKernelEx(&cfg, place_kernel, sm, start, 30000ull));
      MICRO_CK(cudaGetLastError());
      MICRO_CK(cudaDeviceSynchronize());
      std::vector<unsigned> h_sm(ctas);
      std::vector<unsigned long long> h_st(ctas);
      MICRO_CK(cudaMemcpy(h_sm.data(), sm, ctas * sizeof(unsigned), cudaMemcpyDeviceToHost));
      MICRO_CK(cudaMemcpy(h_st.data(), start, ctas * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
      const auto mm = std::minmax_element(h_st.begin(), h_st.end());
      std::printf("residency: %6d %2d %4d %4d | %4zu %8.2f\n", smem, c, clusters, ctas,
                  std::set<unsigned>(h_sm.begin(), h_sm.end()).size(), (*mm.second - *mm.first) / 1e3);
    }
  }
  cudaFree(sm);
  cudaFree(start);
  return 0;
}

struct Buffers {
  uint8_t* partials = nullptr;
  int* counters = nullptr;
  unsigned long long* t_start = nullptr;
  unsigned long long* t_end = nullptr;
  float* sums = nullptr;
  unsigned* sm = nullptr;
};

template <int kMethod>
int handoff(const char* name, int cluster, int clusters, const Buffers& b) {
  auto kernel = handoff_kernel<kMethod>;
  MICRO_CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  MICRO_CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kHandoffSmem));
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = cluster_cfg(attr, cluster * clusters, cluster, kHandoffSmem);
  int fit = 0;
  MICRO_CK(cudaOccupancyMaxActiveClusters(&fit, kernel, &cfg));
  clusters = std::min(clusters, fit);  // every cluster resident at once: the waits need it
  if (clusters < 1) {
    std::printf("handoff: %-8s N %2d: no cluster fits: skipped\n", name, cluster);
    return 0;
  }
  cfg.gridDim = dim3(cluster * clusters);
  const size_t recs = static_cast<size_t>(clusters) * kReps;
  std::vector<double> lat;
  std::vector<unsigned long long> ts(recs * kMaxCluster), te(recs);
  std::vector<float> sums(recs * kPushThreads);
  std::vector<unsigned> sm(cluster * clusters);
  double worst_err = 0.0;
  int shared_sm_clusters = 0;
  for (int launch = 0; launch < 4; ++launch) {
    MICRO_CK(cudaMemset(b.counters, 0, 64 * sizeof(int)));
    MICRO_CK(cudaMemset(b.t_end, 0, recs * sizeof(unsigned long long)));
    MICRO_CK(cudaLaunchKernelEx(&cfg, kernel, b.partials, b.counters, b.t_start, b.t_end, b.sums, b.sm));
    MICRO_CK(cudaGetLastError());
    MICRO_CK(cudaDeviceSynchronize());
    MICRO_CK(cudaMemcpy(ts.data(), b.t_start, ts.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    MICRO_CK(cudaMemcpy(te.data(), b.t_end, te.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    MICRO_CK(cudaMemcpy(sums.data(), b.sums, sums.size() * sizeof(float), cudaMemcpyDeviceToHost));
    MICRO_CK(cudaMemcpy(sm.data(), b.sm, sm.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (int c = 0; c < clusters; ++c) {
      for (int i = 0; i < kReps; ++i) {
        const size_t rec = static_cast<size_t>(c) * kReps + i;
        for (int t = 0; t < kPushThreads; ++t) {  // every repetition's sums, against the host's
          float want = 0.f;
          for (int r = 0; r < cluster; ++r) want += sum_h8(piece_word(r, t, i));
          worst_err = std::max(worst_err, std::abs(double(sums[rec * kPushThreads + t]) - want) / std::abs(want));
        }
        if (launch > 0 && i >= 2) {  // the first launch and repetitions warm the code and the lines
          const unsigned long long t0 = *std::min_element(&ts[rec * kMaxCluster], &ts[rec * kMaxCluster] + cluster);
          lat.push_back((te[rec] - t0) / 1e3);
        }
      }
      if (launch == 0) {
        std::set<unsigned> sms(&sm[c * cluster], &sm[c * cluster] + cluster);
        shared_sm_clusters += static_cast<int>(sms.size()) < cluster;
      }
    }
  }
  const Stats s = stats(lat);
  std::printf("handoff: %-8s N %2d clusters %2d  median %6.3f us  p10 %6.3f  p90 %6.3f  (%zu samples; %d clusters "
              "with 2 CTAs on one SM; worst relative sum error %.1e)\n",
              name, cluster, clusters, s.med, s.p10, s.p90, lat.size(), shared_sm_clusters, worst_err);
  if (worst_err > 1e-3) {
    std::fprintf(stderr, "handoff %s N %d: the merged sums are wrong\n", name, cluster);
    return 1;
  }
  return 0;
}

}  // namespace

int main() {
  int sms = 0;
  MICRO_CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  if (residency(sms) != 0) return 1;
  Buffers b;
  const size_t recs = 16 * kReps;  // at most 16 clusters
  MICRO_CK(cudaMalloc(&b.partials, 64 * kMaxCluster * kSlotBytes));
  MICRO_CK(cudaMalloc(&b.counters, 64 * sizeof(int)));
  MICRO_CK(cudaMalloc(&b.t_start, recs * kMaxCluster * sizeof(unsigned long long)));
  MICRO_CK(cudaMalloc(&b.t_end, recs * sizeof(unsigned long long)));
  MICRO_CK(cudaMalloc(&b.sums, recs * kPushThreads * sizeof(float)));
  MICRO_CK(cudaMalloc(&b.sm, 16 * kMaxCluster * sizeof(unsigned)));
  int rc = 0;
  for (int n : {2, 4, 8, 16}) {
    const int clusters = 256 / n < 16 ? 256 / n : 16;
    rc |= handoff<0>("global", n, clusters, b);
    rc |= handoff<1>("st.async", n, clusters, b);
    rc |= handoff<2>("bulk", n, clusters, b);
  }
  cudaFree(b.partials);
  cudaFree(b.counters);
  cudaFree(b.t_start);
  cudaFree(b.t_end);
  cudaFree(b.sums);
  cudaFree(b.sm);
  return rc;
}
