// Shared pieces of the micro-benchmarks in bench/micro: the CUDA-call check (prints and returns 1 from the
// calling function), the tensor-map encode that reports a rejection, the device buffer with its plain vectorised
// read (the streaming reference), the kernel that records where each CTA of a grid lands, the median of timed
// launches, and the timing of a persistent ring kernel on its resident grid.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include "common/ptx.cuh"
#include "common/tensor_map.h"

#define MICRO_CK(x)                                                                            \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)

namespace micro {

// Reads n 16-byte words once (streaming loads); the xor keeps the loads alive.
__global__ void read_kernel(const int4* __restrict__ p, size_t n, int* sink) {
  int acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const int4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678) *sink = acc;
}

// Each CTA: its SM and start time (globaltimer); then thread 0 stays ~spin_ns so that the whole grid is resident at
// once (cta_placement, cluster_merge).
__global__ void place_kernel(unsigned* sm, unsigned long long* start, unsigned long long spin_ns) {
  extern __shared__ unsigned char smem[];
  if (threadIdx.x == 0) {
    const unsigned id = hopperkit::ptx::sm_id();
    const unsigned long long t0 = hopperkit::ptx::globaltimer();
    sm[blockIdx.x] = id;
    start[blockIdx.x] = t0;
    smem[0] = static_cast<unsigned char>(id);
    while (hopperkit::ptx::globaltimer() - t0 < spin_ns) {
    }
  }
  __syncthreads();
}

// Median time in µs of `reps` launches (after two warm-up launches), each bracketed by events.
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

// The tensor map of `spec` into `map`, or false (after printing the driver's reason) if it is rejected.
inline bool encode_map(const hopperkit::TensorMap4d& spec, const char* name, CUtensorMap& map) {
  try {
    map = hopperkit::make_tensor_map(spec, name);
    return true;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "%s: tensor map rejected: %s\n", name, ex.what());
    return false;
  }
}

// The map of a [experts][rows][row_bytes] uint8 weight tensor at `base`, innermost first: boxes of box_bytes x
// box_rows of one expert.
inline hopperkit::TensorMap4d expert_rows_map(void* base, uint64_t row_bytes, uint64_t rows, uint64_t experts,
                                              uint32_t box_bytes, uint32_t box_rows, CUtensorMapSwizzle swizzle) {
  hopperkit::TensorMap4d spec{};
  spec.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  spec.base = base;
  spec.dims[0] = row_bytes, spec.dims[1] = rows, spec.dims[2] = experts, spec.dims[3] = 1;
  spec.strides_bytes[0] = row_bytes, spec.strides_bytes[1] = rows * row_bytes;
  spec.strides_bytes[2] = experts * rows * row_bytes;
  spec.box[0] = box_bytes, spec.box[1] = box_rows, spec.box[2] = 1, spec.box[3] = 1;
  spec.swizzle = swizzle;
  return spec;
}

// A device buffer of `bytes` filled with 0x11, the events, and the plain read of it timed and printed (the "ldg"
// line, aligned with time_ring's). Returns 1 (after printing why) if a CUDA call fails.
struct Buffer {
  uint8_t* w = nullptr;
  int* sink = nullptr;
  cudaEvent_t a = nullptr, b = nullptr;
  ~Buffer() {
    cudaFree(w);
    cudaFree(sink);
    if (a != nullptr) cudaEventDestroy(a);
    if (b != nullptr) cudaEventDestroy(b);
  }
};
inline int setup_and_read(Buffer& buf, size_t bytes, int sms, int reps) {
  MICRO_CK(cudaMalloc(&buf.w, bytes));
  MICRO_CK(cudaMalloc(&buf.sink, 4));
  MICRO_CK(cudaMemset(buf.w, 0x11, bytes));
  MICRO_CK(cudaEventCreate(&buf.a));
  MICRO_CK(cudaEventCreate(&buf.b));
  const float us = median_us(
      [&] { read_kernel<<<sms * 8, 512>>>(reinterpret_cast<const int4*>(buf.w), bytes / 16, buf.sink); }, reps,
      buf.a, buf.b);
  MICRO_CK(cudaGetLastError());
  std::printf("%-10s %43.1f us  %6.2f TB/s\n", "ldg", us, bytes / (us * 1e-6) / 1e12);
  return 0;
}

// A persistent kernel taking (the tensor map of `spec`, args...) over `items` work items on its resident grid
// (occupancy x SMs, at most one CTA per item): one checked launch, then the median of `reps`; prints the line
// "name items grid (per SM) us TB/s" for `bytes`. Returns 1 (after printing why) if the map is rejected or a
// CUDA call fails.
template <typename Kernel, typename... Args>
int time_ring(const char* name, const hopperkit::TensorMap4d& spec, Kernel kernel, int threads, int smem, int items,
              int sms, int reps, double bytes, cudaEvent_t a, cudaEvent_t b, Args... args) {
  CUtensorMap map;
  if (!encode_map(spec, name, map)) return 1;
  MICRO_CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int per_sm = 0;
  MICRO_CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  const int grid = std::min(items, per_sm * sms);
  auto launch = [&] { kernel<<<grid, threads, smem>>>(map, args...); };
  launch();
  MICRO_CK(cudaGetLastError());
  MICRO_CK(cudaDeviceSynchronize());
  const float us = median_us(launch, reps, a, b);
  MICRO_CK(cudaGetLastError());
  std::printf("%-10s items %5d grid %4d (%d per SM)  %9.1f us  %6.2f TB/s\n", name, items, grid, per_sm, us,
              bytes / (us * 1e-6) / 1e12);
  return 0;
}

}  // namespace micro
