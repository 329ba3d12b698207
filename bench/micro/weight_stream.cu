// Micro-benchmark: how fast can a persistent TMA ring stream MoE weights from HBM, by the shape of its boxes?
//
// The decode MoE GEMMs (16-row tiles) stream each item's weights as stages of [128 bytes of K] x [the tile's
// weight rows], so every weight row is read 128 bytes at a time, one stage apart. This program streams the same
// buffer ([E][R][K] bytes, K-major rows like w13) with the same ring (producer warp + 4 waiting consumer warps,
// 6 stages of 16 KB, 2 CTAs per SM, items strided over the grid as in the GEMMs) and only the order of the bytes
// changed, to separate the memory system's rate for that pattern from everything else the GEMM does:
//   rows128  : stage = 2 boxes of 128 B x 64 rows at the same K (the gate-up GEMM's pattern)
//   k256     : stage = 2 boxes of 128 B x 64 rows at K and K + 128 (256 contiguous bytes per row)
//   k512     : stage = 4 boxes of 128 B x 32 rows at K .. K + 384
//   k1024    : stage = 8 boxes of 128 B x 16 rows at K .. K + 896
//   linear   : stage = 16 KB contiguous (an item is its 512 KB in order)
// plus a plain vectorised read of the whole buffer. An item is always 128 rows x 4096 bytes (32 stages).
//
// Build: nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Iinclude -Isrc bench/micro/weight_stream.cu
//        src/common/tensor_map.cpp src/common/error.cpp -o weight_stream
// Run:   ./weight_stream [experts=192] [reps=20]    (prints one line per pattern: us, TB/s)
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/ptx.cuh"
#include "common/tensor_map.h"
#include "hopperkit/error.h"

using namespace hopperkit;
using namespace hopperkit::ptx;

namespace {

constexpr int kStages = 6;
constexpr int kStageBytes = 16384;
constexpr int kRows = 384;       // weight rows per expert (hy3 TP8 gate-up: 2 x 192)
constexpr int kK = 4096;         // bytes per row (hidden)
constexpr int kItemRows = 128;   // rows per item
constexpr int kItemStages = kItemRows * kK / kStageBytes;  // 32
constexpr int kConsumerWarps = 4;
constexpr int kThreads = 32 * (kConsumerWarps + 1);

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)

// MODE: 0 rows128, 1 k256, 2 k512, 3 k1024, 4 linear
template <int MODE>
__global__ void __launch_bounds__(kThreads) stream_kernel(const __grid_constant__ CUtensorMap map, int items,
                                                           int blocks_per_expert) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);
  uint64_t* empty = full + kStages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(&full[s], 1), mbar_init(&empty[s], kConsumerWarps);
    fence_barrier_init();
  }
  __syncthreads();
  int step = 0;
  if (warp == kConsumerWarps) {
    if (lane != 0) return;
    const uint64_t policy = policy_evict_first();
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
      const int e = item / blocks_per_expert, r0 = (item % blocks_per_expert) * kItemRows;
      for (int s = 0; s < kItemStages; ++s, ++step) {
        const int slot = step % kStages;
        if (step >= kStages) mbar_wait(&empty[slot], ((step / kStages) - 1) & 1);
        mbar_arrive_expect_tx(&full[slot], kStageBytes);
        uint8_t* dst = smem + slot * kStageBytes;
        if constexpr (MODE == 4) {  // map: [total / 16384][128 rows of 128 B] -> box 128 x 128 = 16 KB
          tma_load_4d(dst, &map, &full[slot], 0, 0, item * kItemStages + s, 0, policy);
        } else {
          constexpr int kBoxes = MODE == 0 ? 2 : MODE == 1 ? 2 : MODE == 2 ? 4 : 8;
          constexpr int kBoxRows = kStageBytes / 128 / kBoxes;  // 64, 64, 32, 16
          if constexpr (MODE == 0) {
            const int k = s * 128;
            for (int b = 0; b < 2; ++b)
              tma_load_4d(dst + b * 8192, &map, &full[slot], k, r0 + 64 * b, e, 0, policy);
          } else {
            // the item's rows in groups of kBoxRows; each group over all of K, kBoxes * 128 bytes per stage
            constexpr int kStagesPerGroup = kK / (kBoxes * 128);
            const int g = s / kStagesPerGroup, k = (s % kStagesPerGroup) * kBoxes * 128;
            for (int b = 0; b < kBoxes; ++b)
              tma_load_4d(dst + b * kBoxRows * 128, &map, &full[slot], k + 128 * b, r0 + g * kBoxRows, e, 0,
                          policy);
          }
        }
      }
    }
  } else {
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
      for (int s = 0; s < kItemStages; ++s, ++step) {
        const int slot = step % kStages;
        mbar_wait(&full[slot], (step / kStages) & 1);
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[slot]);
      }
    }
  }
}

__global__ void read_kernel(const int4* __restrict__ p, size_t n, int* sink) {
  int acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const int4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678) *sink = acc;
}

template <typename F>
float median_us(F&& launch, int reps, cudaEvent_t a, cudaEvent_t b) {
  std::vector<float> t;
  for (int i = 0; i < reps + 2; ++i) {
    cudaEventRecord(a);
    launch();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (i >= 2) t.push_back(ms * 1000.f);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <int MODE>
int run_mode(const char* name, uint8_t* w, int experts, int reps, int sms, cudaEvent_t ea, cudaEvent_t eb) {
  TensorMap4d spec{};
  spec.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  spec.base = w;
  spec.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  const uint64_t total = uint64_t(experts) * kRows * kK;
  if (MODE == 4) {
    spec.dims[0] = 128, spec.dims[1] = 128, spec.dims[2] = total / kStageBytes, spec.dims[3] = 1;
    spec.strides_bytes[0] = 128, spec.strides_bytes[1] = kStageBytes, spec.strides_bytes[2] = total;
    spec.box[0] = 128, spec.box[1] = 128, spec.box[2] = 1, spec.box[3] = 1;
  } else {
    const uint32_t box_rows = MODE == 0 || MODE == 1 ? 64 : MODE == 2 ? 32 : 16;
    spec.dims[0] = kK, spec.dims[1] = kRows, spec.dims[2] = experts, spec.dims[3] = 1;
    spec.strides_bytes[0] = kK, spec.strides_bytes[1] = uint64_t(kRows) * kK, spec.strides_bytes[2] = total;
    spec.box[0] = 128, spec.box[1] = box_rows, spec.box[2] = 1, spec.box[3] = 1;
  }
  CUtensorMap map;
  try {
    map = make_tensor_map(spec, "w");
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "%s: %s\n", name, ex.what());
    return 1;
  }
  const int smem = kStages * kStageBytes + 2 * kStages * 8 + 1024;
  auto kernel = stream_kernel<MODE>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
  const int blocks_per_expert = kRows / kItemRows;
  const int items = experts * blocks_per_expert;
  const int grid = std::min(items, per_sm * sms);
  auto launch = [&] { kernel<<<grid, kThreads, smem>>>(map, items, blocks_per_expert); };
  launch();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  const float us = median_us(launch, reps, ea, eb);
  CK(cudaGetLastError());
  std::printf("%-8s items %4d grid %4d (%d per SM)  %9.1f us  %6.2f TB/s\n", name, items, grid, per_sm, us,
              total / (us * 1e-6) / 1e12);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int experts = argc > 1 ? std::atoi(argv[1]) : 192;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t total = size_t(experts) * kRows * kK;
  uint8_t* w = nullptr;
  int* sink = nullptr;
  CK(cudaMalloc(&w, total));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMemset(w, 0x11, total));
  cudaEvent_t ea, eb;
  CK(cudaEventCreate(&ea));
  CK(cudaEventCreate(&eb));
  std::printf("weight_stream: %d experts x %d rows x %d B = %.1f MB, %d SMs\n", experts, kRows, kK, total / 1e6, sms);
  const float us = median_us([&] { read_kernel<<<sms * 8, 512>>>(reinterpret_cast<const int4*>(w), total / 16, sink); },
                             reps, ea, eb);
  CK(cudaGetLastError());
  std::printf("%-8s %39.1f us  %6.2f TB/s\n", "ldg", us, total / (us * 1e-6) / 1e12);
  int rc = 0;
  rc |= run_mode<0>("rows128", w, experts, reps, sms, ea, eb);
  rc |= run_mode<1>("k256", w, experts, reps, sms, ea, eb);
  rc |= run_mode<2>("k512", w, experts, reps, sms, ea, eb);
  rc |= run_mode<3>("k1024", w, experts, reps, sms, ea, eb);
  rc |= run_mode<4>("linear", w, experts, reps, sms, ea, eb);
  cudaFree(w);
  return rc;
}
