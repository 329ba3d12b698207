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

#include <cstdio>
#include <cstdlib>

#include "micro_common.cuh"
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

template <int MODE>
int run_mode(const char* name, uint8_t* w, int experts, int reps, int sms, cudaEvent_t ea, cudaEvent_t eb) {
  const uint64_t total = uint64_t(experts) * kRows * kK;
  // MODE 4: the weights as [stage][128 rows][128 B] (one linear 16 KB box per stage); else [E][rows][K]
  const TensorMap4d spec =
      MODE == 4 ? micro::expert_rows_map(w, 128, 128, total / kStageBytes, 128, 128, CU_TENSOR_MAP_SWIZZLE_128B)
                : micro::expert_rows_map(w, kK, kRows, experts, 128,
                                         MODE == 0 || MODE == 1 ? 64 : MODE == 2 ? 32 : 16,
                                         CU_TENSOR_MAP_SWIZZLE_128B);
  const int smem = kStages * kStageBytes + 2 * kStages * 8 + 1024;
  const int blocks_per_expert = kRows / kItemRows;
  const int items = experts * blocks_per_expert;
  return micro::time_ring(name, spec, stream_kernel<MODE>, kThreads, smem, items, sms, reps, double(total), ea, eb,
                          items, blocks_per_expert);
}

}  // namespace

int main(int argc, char** argv) {
  const int experts = argc > 1 ? std::atoi(argv[1]) : 192;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  int sms = 0;
  MICRO_CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t total = size_t(experts) * kRows * kK;
  std::printf("weight_stream: %d experts x %d rows x %d B = %.1f MB, %d SMs\n", experts, kRows, kK, total / 1e6, sms);
  micro::Buffer buf;
  if (micro::setup_and_read(buf, total, sms, reps) != 0) return 1;
  uint8_t* w = buf.w;
  cudaEvent_t ea = buf.a, eb = buf.b;
  int rc = 0;
  rc |= run_mode<0>("rows128", w, experts, reps, sms, ea, eb);
  rc |= run_mode<1>("k256", w, experts, reps, sms, ea, eb);
  rc |= run_mode<2>("k512", w, experts, reps, sms, ea, eb);
  rc |= run_mode<3>("k1024", w, experts, reps, sms, ea, eb);
  rc |= run_mode<4>("linear", w, experts, reps, sms, ea, eb);
  return rc;
}
