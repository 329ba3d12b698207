// Micro-benchmark: what a thread-block-cluster hand-off of split-KV partials would cost against today's global
// one (docs/decode_merge_plan.md, step 1 b-c). Two parts:
//
// 1. Residency. For a kernel shaped like the decode kernel's fp8q_r16 variant (160 threads, 2 CTAs per SM by
//    its launch bound) at several dynamic shared-memory sizes, cudaOccupancyMaxActiveClusters for clusters of
//    1, 2, 4, 8 and 16 CTAs (16: the non-portable size), then a launch of that many clusters in which every CTA
//    records its SM and start time and stays ~30 µs: if the starts spread by less than that, every CTA was
//    resident at once.
// 2. Hand-off latency of one merge group of N pieces (N = 2..16), each piece 8 rows x 128 dims of f16 (2048 B)
//    plus 8 float LSEs (32 B): from a cluster barrier that aligns the N CTAs to the merger holding the sum of all
//    pieces, on the merger's globaltimer (median over clusters x repetitions; 16 clusters run at once):
//      global   every CTA stores its piece to global memory, bar.sync, one atom.acq_rel.gpu per CTA; the last
//               arriver loads the N pieces (today's handshake and one merge round);
//      st.async every CTA but rank 0 stores its piece into rank 0's shared memory by st.async, 16 B per thread,
//               counting the bytes on rank 0's mbarrier; rank 0 waits on it and reads the N - 1 slots;
//      bulk     the same through the pusher's own shared memory and one cp.async.bulk shared::cta -> cluster.
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

constexpr int kThreads = 160;     // as the decode kernel: 4 consumer warps + the producer warp
constexpr int kPushThreads = 128;  // the consumer warps hold the piece: 16 B each
constexpr int kPieceBytes = 2048;  // 8 rows x 128 dims of f16
constexpr int kLseBytes = 32;      // 8 float LSEs
constexpr int kSlotBytes = kPieceBytes + kLseBytes;
constexpr int kMaxCluster = 16;
constexpr int kReps = 64;

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t cluster_size() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_barrier() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ uint32_t map_rank(uint32_t local, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(local), "r"(rank));
  return r;
}
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_arrive(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t ok = 0;
  for (uint32_t polls = 0; !ok; ++polls) {
    asm volatile(
        "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(ok)
        : "r"(bar), "r"(parity)
        : "memory");
    if (polls == (1u << 26)) __trap();
  }
}
__device__ __forceinline__ void st_async_v4(uint32_t remote, uint4 v, uint32_t remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
                   remote),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(remote_bar)
               : "memory");
}
__device__ __forceinline__ float sum_h8(uint4 v) {
  const __half2* h = reinterpret_cast<const __half2*>(&v);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) s += __low2float(h[i]) + __high2float(h[i]);
  return s;
}
// A piece's 16 bytes for thread t of rank r, repetition i (distinct per piece so that nothing is folded).
__device__ __forceinline__ uint4 piece_word(int r, int t, int i) {
  const __half2 h = __floats2half2_rn(0.001f * (r + 1), 0.0001f * (t + i));
  const uint32_t u = *reinterpret_cast<const uint32_t*>(&h);
  return make_uint4(u, u ^ 1u, u ^ 2u, u ^ 3u);
}

// ---- part 1: residency --------------------------------------------------------------------------------------
__global__ void __launch_bounds__(kThreads, 2) place_kernel(unsigned* sm, unsigned long long* start,
                                                            unsigned long long spin_ns) {
  extern __shared__ unsigned char smem[];
  if (threadIdx.x == 0) {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    const unsigned long long t0 = now_ns();
    sm[blockIdx.x] = id;
    start[blockIdx.x] = t0;
    smem[0] = static_cast<unsigned char>(id);
    while (now_ns() - t0 < spin_ns) {
    }
  }
}

// ---- part 2: hand-off latency -------------------------------------------------------------------------------
// method 0: global; 1: st.async; 2: bulk. lat[cluster * kReps + rep] = ns from the aligning barrier to the merged
// sum on the merger; sink keeps the sums alive.
template <int kMethod>
__global__ void __launch_bounds__(kThreads, 1) handoff_kernel(uint8_t* partials, int* counters,
                                                              unsigned long long* lat, float* sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem);
  uint8_t* slots = smem + 128;                                    // (N - 1) receive slots (rank 0)
  uint8_t* own = slots + (kMaxCluster - 1) * kSlotBytes;          // bulk: the pusher's staged piece
  __shared__ int is_last;
  const uint32_t rank = cluster_rank();
  const uint32_t n = cluster_size();
  const int cluster = blockIdx.x / n;
  const int t = threadIdx.x;
  if (t == 0) {
    mbar_init(smem_u32(bar), 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  cluster_barrier();
  const uint32_t remote_bar = map_rank(smem_u32(bar), 0);
  float acc = 0.f;
  for (int i = 0; i < kReps; ++i) {
    cluster_barrier();  // aligns the N CTAs; also orders the merger's reads of repetition i-1 before new pushes
    const unsigned long long t0 = now_ns();
    const uint4 mine = piece_word(rank, t, i);
    if constexpr (kMethod == 0) {
      uint8_t* slot = partials + (size_t(cluster) * kMaxCluster + rank) * kSlotBytes;
      if (t < kPushThreads) *reinterpret_cast<uint4*>(slot + t * 16) = mine;
      if (t < 2) *reinterpret_cast<uint4*>(slot + kPieceBytes + t * 16) = mine;
      __syncthreads();
      if (t == 0) {
        int old;
        asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(old) : "l"(counters + cluster) : "memory");
        is_last = old == int(n) * (i + 1) - 1;
      }
      __syncthreads();
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
      if (is_last) {
        __syncthreads();
        if (t == 0) lat[cluster * kReps + i] = now_ns() - t0;
      }
    } else {
      if (rank != 0) {
        const uint32_t dst = map_rank(smem_u32(slots + (rank - 1) * kSlotBytes), 0);
        if constexpr (kMethod == 1) {
          if (t < kPushThreads) st_async_v4(dst + t * 16, mine, remote_bar);
          if (t < 2) st_async_v4(dst + kPieceBytes + t * 16, mine, remote_bar);
        } else {
          if (t < kPushThreads) *reinterpret_cast<uint4*>(own + t * 16) = mine;
          if (t < 2) *reinterpret_cast<uint4*>(own + kPieceBytes + t * 16) = mine;
          asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
          asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory");
          if (t == 0)
            asm volatile(
                "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                    dst),
                "r"(smem_u32(own)), "n"(kSlotBytes), "r"(remote_bar)
                : "memory");
        }
      } else {
        if (t == 0) mbar_expect_arrive(smem_u32(bar), (n - 1) * kSlotBytes);
        mbar_wait(smem_u32(bar), i & 1);
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
        __syncthreads();
        if (t == 0) lat[cluster * kReps + i] = now_ns() - t0;
      }
    }
  }
  cluster_barrier();  // no CTA leaves while a peer may still push into it or read from it
  if (acc == 1.2345f) sink[blockIdx.x * kThreads + t] = acc;
}

struct Stats {
  double med, p10, p90;
};
Stats stats(std::vector<unsigned long long> v) {
  v.erase(std::remove(v.begin(), v.end(), 0ull), v.end());
  if (v.empty()) return {0, 0, 0};
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2] / 1e3, v[v.size() / 10] / 1e3, v[v.size() * 9 / 10] / 1e3};
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

template <int kMethod>
int handoff(const char* name, int cluster, int clusters, uint8_t* partials, int* counters, unsigned long long* lat,
            float* sink) {
  auto kernel = handoff_kernel<kMethod>;
  const int smem = 128 + kMaxCluster * kSlotBytes;
  MICRO_CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  MICRO_CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = cluster_cfg(attr, cluster * clusters, cluster, smem);
  std::vector<unsigned long long> all;
  for (int launch = 0; launch < 4; ++launch) {
    MICRO_CK(cudaMemset(counters, 0, 64 * sizeof(int)));
    MICRO_CK(cudaMemset(lat, 0, 64 * kReps * sizeof(unsigned long long)));
    MICRO_CK(cudaLaunchKernelEx(&cfg, kernel, partials, counters, lat, sink));
    MICRO_CK(cudaGetLastError());
    MICRO_CK(cudaDeviceSynchronize());
    std::vector<unsigned long long> h(clusters * kReps);
    MICRO_CK(cudaMemcpy(h.data(), lat, h.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    if (launch > 0) {  // the first launch warms the code and the lines
      for (int c = 0; c < clusters; ++c)
        for (int i = 2; i < kReps; ++i) all.push_back(h[c * kReps + i]);
    }
  }
  const Stats s = stats(all);
  std::printf("handoff: %-8s N %2d clusters %2d  median %6.3f us  p10 %6.3f  p90 %6.3f  (%zu samples)\n", name,
              cluster, clusters, s.med, s.p10, s.p90, all.size());
  return 0;
}

}  // namespace

int main() {
  int sms = 0;
  MICRO_CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  if (residency(sms) != 0) return 1;
  uint8_t* partials = nullptr;
  int* counters = nullptr;
  unsigned long long* lat = nullptr;
  float* sink = nullptr;
  MICRO_CK(cudaMalloc(&partials, 64 * kMaxCluster * kSlotBytes));
  MICRO_CK(cudaMalloc(&counters, 64 * sizeof(int)));
  MICRO_CK(cudaMalloc(&lat, 64 * kReps * sizeof(unsigned long long)));
  MICRO_CK(cudaMalloc(&sink, 64 * kMaxCluster * kThreads * sizeof(float)));
  for (int n : {2, 4, 8, 16}) {
    const int clusters = 256 / n < 16 ? 256 / n : 16;
    if (handoff<0>("global", n, clusters, partials, counters, lat, sink) != 0) return 1;
    if (handoff<1>("st.async", n, clusters, partials, counters, lat, sink) != 0) return 1;
    if (handoff<2>("bulk", n, clusters, partials, counters, lat, sink) != 0) return 1;
  }
  cudaFree(partials);
  cudaFree(counters);
  cudaFree(lat);
  cudaFree(sink);
  return 0;
}
