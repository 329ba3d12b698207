// Micro-benchmark: where the CTAs of a persistent grid land (which SM each blockIdx runs on).
//
// The MoE GEMMs hand out work items as item = blockIdx.x + i * gridDim.x over a grid of the resident CTAs. When
// there are fewer items than CTAs, which SMs get work depends on how the hardware places consecutive blockIdx:
// one per SM first (items spread over every SM), or in pairs (2 CTAs per SM: the first items crowd onto half the
// SMs). Session 29 measured the block-wise 16 x 256 gate-up at 2 CTAs per SM 0.92-0.96x the time at some decode
// points and 1.04-1.08x at others (its session 29 run: no pairing, but at 2 CTAs per SM the first 132 CTAs use
// 124 SMs, in GPC order; docs/moe.md, session 29's steps). This program launches grids shaped like
// the GEMMs (160 threads; dynamic shared memory for 1 or 2 CTAs per SM), each CTA recording its SM and start time
// while every CTA of the grid stays resident, and prints, per shape, how many distinct SMs the first k CTAs use.
//
// Build: nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Iinclude -Isrc bench/micro/cta_placement.cu
//        src/common/tensor_map.cpp src/common/error.cpp -o cta_placement
// Run:   ./cta_placement   (one block of lines per shape)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <vector>

#include "micro_common.cuh"

namespace {

using micro::place_kernel;

int run_shape(const char* name, int threads, int smem_bytes, int sms) {
  MICRO_CK(cudaFuncSetAttribute(place_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  int per_sm = 0;
  MICRO_CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, place_kernel, threads, smem_bytes));
  const int grid = per_sm * sms;
  unsigned* d_sm = nullptr;
  unsigned long long* d_start = nullptr;
  MICRO_CK(cudaMalloc(&d_sm, grid * sizeof(unsigned)));
  MICRO_CK(cudaMalloc(&d_start, grid * sizeof(unsigned long long)));
  std::vector<unsigned> h_sm(grid);
  std::vector<unsigned long long> h_start(grid);
  std::printf("%s: %d threads, %d B shared, %d CTAs per SM, grid %d\n", name, threads, smem_bytes, per_sm, grid);
  for (int rep = 0; rep < 3; ++rep) {
    place_kernel<<<grid, threads, smem_bytes>>>(d_sm, d_start, 20000ull);
    MICRO_CK(cudaGetLastError());
    MICRO_CK(cudaDeviceSynchronize());
    MICRO_CK(cudaMemcpy(h_sm.data(), d_sm, grid * sizeof(unsigned), cudaMemcpyDeviceToHost));
    MICRO_CK(cudaMemcpy(h_start.data(), d_start, grid * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    std::printf("  rep %d: distinct SMs among the first k CTAs:", rep);
    for (int k : {16, 48, 64, 96, 124, 132, 180, 192, 240, 264}) {
      if (k > grid) break;
      std::set<unsigned> s(h_sm.begin(), h_sm.begin() + k);
      std::printf(" %d:%zu", k, s.size());
    }
    int pairs = 0;
    for (int i = 0; i + 1 < grid; i += 2) pairs += h_sm[i] == h_sm[i + 1];
    const unsigned long long t0 = *std::min_element(h_start.begin(), h_start.end());
    const unsigned long long t1 = *std::max_element(h_start.begin(), h_start.end());
    std::printf("; (2i, 2i+1) on one SM: %d of %d; starts spread %.2f us\n", pairs, grid / 2, (t1 - t0) * 1e-3);
    if (rep == 0) {
      std::printf("  blockIdx -> SM (first 40):");
      for (int i = 0; i < 40 && i < grid; ++i) std::printf(" %u", h_sm[i]);
      std::printf("\n");
    }
  }
  MICRO_CK(cudaFree(d_sm));
  MICRO_CK(cudaFree(d_start));
  return 0;
}

}  // namespace

int main() {
  int dev = 0, sms = 0;
  MICRO_CK(cudaGetDevice(&dev));
  MICRO_CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  // the block-wise 16 x 256 gate-up: 1 CTA per SM (6 stages of 34 KB) on main, 2 (3 stages) in session 29's bg2
  if (run_shape("one CTA per SM (205 KB)", 160, 205 * 1024, sms)) return 1;
  if (run_shape("two CTAs per SM (106 KB)", 160, 106 * 1024, sms)) return 1;
  if (run_shape("two CTAs per SM, 192 threads (110 KB)", 192, 110 * 1024, sms)) return 1;
  return 0;
}
