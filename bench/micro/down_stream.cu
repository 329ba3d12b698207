// Micro-benchmark: the TP8 down GEMM's weight stream at a short K, by how each item's block is loaded.
//
// At tensor-parallel 8 (Hy3, Qwen3-235B) the down GEMM's K is intermediate = 192 bytes: w2 [E][H][192] FP8, and a
// work item (expert, 128 output rows) reads a contiguous 24 KB block. The GEMM loads it as two ring stages of
// 128-byte boxes x 128 rows (K 0..127, then K 128..255 of which 64 bytes per row are past the tensor and read as
// zero), and its down stage ran at ~2.6-3.0 TB/s where the gate-up's long items reach ~3.4 (session 23; a stall
// profile put the consumers on the first stage's full barrier once the producer's copies were cheap). This program
// streams the same w2 with the same kind of ring (one producer lane, 4 consumer warps that only wait and release,
// items strided over a grid of 2 CTAs per SM in the GEMM's order: expert fastest, then the output block) and
// changes only how an item's bytes arrive:
//   two_stage : the GEMM's way, 2 stages of one 128 B x 128-row box each (16 KB stage slots; 24 KB of data)
//   one_sw64  : one stage per item, one box of [3 K chunks][128 rows][64 B] (64-byte swizzle, 24 KB): a 3-d view
//               whose K chunk is the outer box dimension, the layout a K-major wgmma with 64-byte swizzle reads
//               (its chunk stride, 64, is below its row stride, 192: if the driver rejects that, the line says so)
//   three_sw64: the same stage and layout from three boxes of 64 B x 128 rows (K 0, 64, 128), ordinary strides
//   linear    : one stage per item, the 24 KB block as one 192 B x 128-row box, no swizzle (the pattern's bound)
// plus a plain vectorised read of the whole buffer.
//
// Build: nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Iinclude -Isrc bench/micro/down_stream.cu
//        src/common/tensor_map.cpp src/common/error.cpp -o down_stream
// Run:   timeout 120 ./down_stream [experts=128] [hidden=4096] [reps=20]   (one line per pattern: us, TB/s of w2
//        bytes; 128 experts are qwen3's 101 MB, 2x L2 and ~30 us per launch: run 512 too, 403 MB, for rates that
//        compare with weight_stream's; two_stage has a quarter of its ring in zero fill, as the GEMM does)
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "common/ptx.cuh"
#include "common/tensor_map.h"
#include "hopperkit/error.h"

using namespace hopperkit;
using namespace hopperkit::ptx;

namespace {

constexpr int kK = 192;              // bytes per weight row (intermediate at TP8)
constexpr int kItemRows = 128;       // output rows per item
constexpr int kItemBytes = kItemRows * kK;  // 24 KB
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

// MODE 0 two_stage, 1 one_sw64, 2 linear, 3 three_sw64
template <int MODE>
struct Pattern {
  static constexpr int kStagesPerItem = MODE == 0 ? 2 : 1;
  static constexpr int kSlotBytes = MODE == 0 ? 16384 : kItemBytes;
  static constexpr int kStages = MODE == 0 ? 6 : 4;  // 96 KB of ring per CTA either way: 2 CTAs per SM
  // bytes a stage's box brings (the zero-filled part of two_stage's second box counts: TMA delivers it)
  static constexpr int kStageTx = MODE == 0 ? 16384 : kItemBytes;
};

template <int MODE>
__global__ void __launch_bounds__(kThreads) stream_kernel(const __grid_constant__ CUtensorMap map, int experts,
                                                           int items) {
  using P = Pattern<MODE>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + P::kStages * P::kSlotBytes);
  uint64_t* empty = full + P::kStages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < P::kStages; ++s) mbar_init(&full[s], 1), mbar_init(&empty[s], kConsumerWarps);
    fence_barrier_init();
  }
  __syncthreads();
  int step = 0;
  if (warp == kConsumerWarps) {
    if (lane != 0) return;
    const uint64_t policy = policy_evict_first();
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
      const int e = item % experts, r0 = (item / experts) * kItemRows;  // expert fastest, as the GEMM's tiles
      for (int s = 0; s < P::kStagesPerItem; ++s, ++step) {
        const int slot = step % P::kStages;
        if (step >= P::kStages) mbar_wait_bounded(&empty[slot], ((step / P::kStages) - 1) & 1);
        mbar_arrive_expect_tx(&full[slot], P::kStageTx);
        uint8_t* dst = smem + slot * P::kSlotBytes;
        if constexpr (MODE == 0) {
          tma_load_4d(dst, &map, &full[slot], s * 128, r0, e, 0, policy);  // [K 192][rows H][E]
        } else if constexpr (MODE == 1) {
          tma_load_4d(dst, &map, &full[slot], 0, r0, 0, e, policy);  // [64 B][rows H][3 chunks][E]
        } else if constexpr (MODE == 3) {
          for (int c = 0; c < kK / 64; ++c)  // [K 192][rows H][E], boxes 64 x 128 at K = 64 c
            tma_load_4d(dst + c * kItemRows * 64, &map, &full[slot], 64 * c, r0, e, 0, policy);
        } else {
          tma_load_4d(dst, &map, &full[slot], 0, r0, e, 0, policy);  // [192 B][rows H][E], box 192 x 128
        }
      }
    }
  } else {
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
      for (int s = 0; s < P::kStagesPerItem; ++s, ++step) {
        const int slot = step % P::kStages;
        mbar_wait_bounded(&full[slot], (step / P::kStages) & 1);  // a protocol slip traps, not hangs
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
int run_mode(const char* name, uint8_t* w, int experts, int hidden, int reps, int sms, cudaEvent_t ea,
             cudaEvent_t eb) {
  using P = Pattern<MODE>;
  const uint64_t total = uint64_t(experts) * hidden * kK;
  TensorMap4d spec{};
  spec.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  spec.base = w;
  if (MODE == 0) {  // the GEMM's map: [E][H][K] innermost first, 128-byte boxes, 128-byte swizzle
    spec.dims[0] = kK, spec.dims[1] = hidden, spec.dims[2] = experts, spec.dims[3] = 1;
    spec.strides_bytes[0] = kK, spec.strides_bytes[1] = uint64_t(hidden) * kK, spec.strides_bytes[2] = total;
    spec.box[0] = 128, spec.box[1] = kItemRows, spec.box[2] = 1, spec.box[3] = 1;
    spec.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  } else if (MODE == 1) {  // [64 B chunk][row][chunk index][expert]: row stride 192, chunk stride 64
    spec.dims[0] = 64, spec.dims[1] = hidden, spec.dims[2] = kK / 64, spec.dims[3] = experts;
    spec.strides_bytes[0] = kK, spec.strides_bytes[1] = 64, spec.strides_bytes[2] = uint64_t(hidden) * kK;
    spec.box[0] = 64, spec.box[1] = kItemRows, spec.box[2] = kK / 64, spec.box[3] = 1;
    spec.swizzle = CU_TENSOR_MAP_SWIZZLE_64B;
  } else {  // [E][H][K]: one 192-byte box (linear) or 64-byte boxes with the 64-byte swizzle (three_sw64)
    spec.dims[0] = kK, spec.dims[1] = hidden, spec.dims[2] = experts, spec.dims[3] = 1;
    spec.strides_bytes[0] = kK, spec.strides_bytes[1] = uint64_t(hidden) * kK, spec.strides_bytes[2] = total;
    spec.box[0] = MODE == 2 ? kK : 64, spec.box[1] = kItemRows, spec.box[2] = 1, spec.box[3] = 1;
    spec.swizzle = MODE == 2 ? CU_TENSOR_MAP_SWIZZLE_NONE : CU_TENSOR_MAP_SWIZZLE_64B;
  }
  CUtensorMap map;
  try {
    map = make_tensor_map(spec, "w2");
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "%s: tensor map rejected: %s\n", name, ex.what());
    return 1;
  }
  const int smem = P::kStages * P::kSlotBytes + 2 * P::kStages * 8 + 1024;
  auto kernel = stream_kernel<MODE>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
  const int items = experts * (hidden / kItemRows);
  const int grid = std::min(items, per_sm * sms);
  auto launch = [&] { kernel<<<grid, kThreads, smem>>>(map, experts, items); };
  launch();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  const float us = median_us(launch, reps, ea, eb);
  CK(cudaGetLastError());
  std::printf("%-10s items %5d grid %4d (%d per SM)  %9.1f us  %6.2f TB/s\n", name, items, grid, per_sm, us,
              total / (us * 1e-6) / 1e12);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int experts = argc > 1 ? std::atoi(argv[1]) : 128;
  const int hidden = argc > 2 ? std::atoi(argv[2]) : 4096;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 20;
  if (experts < 1 || hidden < kItemRows || hidden % kItemRows != 0 || reps < 1) {
    std::fprintf(stderr, "usage: down_stream [experts >= 1] [hidden: a multiple of %d] [reps >= 1]\n", kItemRows);
    return 2;
  }
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t total = size_t(experts) * hidden * kK;
  uint8_t* w = nullptr;
  int* sink = nullptr;
  CK(cudaMalloc(&w, total));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMemset(w, 0x11, total));
  cudaEvent_t ea, eb;
  CK(cudaEventCreate(&ea));
  CK(cudaEventCreate(&eb));
  std::printf("down_stream: w2 %d experts x %d rows x %d B = %.1f MB, %d SMs\n", experts, hidden, kK, total / 1e6,
              sms);
  const float us = median_us(
      [&] { read_kernel<<<sms * 8, 512>>>(reinterpret_cast<const int4*>(w), total / 16, sink); }, reps, ea, eb);
  CK(cudaGetLastError());
  std::printf("%-10s %41.1f us  %6.2f TB/s\n", "ldg", us, total / (us * 1e-6) / 1e12);
  int rc = 0;
  rc |= run_mode<0>("two_stage", w, experts, hidden, reps, sms, ea, eb);
  rc |= run_mode<3>("three_sw64", w, experts, hidden, reps, sms, ea, eb);
  rc |= run_mode<2>("linear", w, experts, hidden, reps, sms, ea, eb);
  // last: its map (a chunk stride below the row stride) is the one the driver or the copy engine might refuse,
  // and a fault in a kernel would end the measurements after it
  rc |= run_mode<1>("one_sw64", w, experts, hidden, reps, sms, ea, eb);
  cudaFree(w);
  cudaFree(sink);
  return rc;
}
