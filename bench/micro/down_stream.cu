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

#include <cstdio>
#include <cstdlib>

#include "micro_common.cuh"
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

// MODE 0 two_stage, 1 one_sw64, 2 linear, 3 three_sw64
template <int MODE>
struct Pattern {
  static constexpr int kStagesPerItem = MODE == 0 ? 2 : 1;
  // a slot is what one stage's boxes bring, the expect-tx count too (two_stage's second box counts its zero-filled
  // half: TMA delivers it)
  static constexpr int kSlotBytes = MODE == 0 ? 16384 : kItemBytes;
  static constexpr int kStages = MODE == 0 ? 6 : 4;  // 96 KB of ring per CTA either way: 2 CTAs per SM
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
        mbar_arrive_expect_tx(&full[slot], P::kSlotBytes);
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

template <int MODE>
int run_mode(const char* name, uint8_t* w, int experts, int hidden, int reps, int sms, cudaEvent_t ea,
             cudaEvent_t eb) {
  using P = Pattern<MODE>;
  const uint64_t total = uint64_t(experts) * hidden * kK;
  TensorMap4d spec{};
  if (MODE == 0) {  // the GEMM's map: [E][H][K] innermost first, 128-byte boxes, 128-byte swizzle
    spec = micro::expert_rows_map(w, kK, hidden, experts, 128, kItemRows, CU_TENSOR_MAP_SWIZZLE_128B);
  } else if (MODE == 1) {  // [64 B chunk][row][chunk index][expert]: row stride 192, chunk stride 64
    spec.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;
    spec.base = w;
    spec.dims[0] = 64, spec.dims[1] = hidden, spec.dims[2] = kK / 64, spec.dims[3] = experts;
    spec.strides_bytes[0] = kK, spec.strides_bytes[1] = 64, spec.strides_bytes[2] = uint64_t(hidden) * kK;
    spec.box[0] = 64, spec.box[1] = kItemRows, spec.box[2] = kK / 64, spec.box[3] = 1;
    spec.swizzle = CU_TENSOR_MAP_SWIZZLE_64B;
  } else {  // [E][H][K]: one 192-byte box (linear) or 64-byte boxes with the 64-byte swizzle (three_sw64)
    spec = micro::expert_rows_map(w, kK, hidden, experts, MODE == 2 ? kK : 64, kItemRows,
                                  MODE == 2 ? CU_TENSOR_MAP_SWIZZLE_NONE : CU_TENSOR_MAP_SWIZZLE_64B);
  }
  const int smem = P::kStages * P::kSlotBytes + 2 * P::kStages * 8 + 1024;
  const int items = experts * (hidden / kItemRows);
  return micro::time_ring(name, spec, stream_kernel<MODE>, kThreads, smem, items, sms, reps, double(total), ea, eb,
                          experts, items);
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
  MICRO_CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t total = size_t(experts) * hidden * kK;
  std::printf("down_stream: w2 %d experts x %d rows x %d B = %.1f MB, %d SMs\n", experts, hidden, kK, total / 1e6,
              sms);
  micro::Buffer buf;
  if (micro::setup_and_read(buf, total, sms, reps) != 0) return 1;
  uint8_t* w = buf.w;
  cudaEvent_t ea = buf.a, eb = buf.b;
  int rc = 0;
  rc |= run_mode<0>("two_stage", w, experts, hidden, reps, sms, ea, eb);
  rc |= run_mode<3>("three_sw64", w, experts, hidden, reps, sms, ea, eb);
  rc |= run_mode<2>("linear", w, experts, hidden, reps, sms, ea, eb);
  // last: its map (a chunk stride below the row stride) is the one the driver or the copy engine might refuse,
  // and a fault in a kernel would end the measurements after it
  rc |= run_mode<1>("one_sw64", w, experts, hidden, reps, sms, ea, eb);
  return rc;
}
