// Probe: does compute-sanitizer's racecheck follow a cp.async -> mbarrier hand-off?
//
// The MoE block-scaled GEMMs and the decode kernel hand per-thread cp.async copies (block scales, query rows) to
// consumer warps through a stage's "full" mbarrier: each producer lane issues its copies, then
// `cp.async.mbarrier.arrive.noinc`, and the barrier's count includes those arrivals; the consumers wait on the
// barrier, read, and release the stage through an "empty" mbarrier before the producer copies into it again.
// racecheck (Compute Sanitizer 2025.3) reports hazards between those copies and reads (sessions 5, 16, 17).
// This program runs the same ring, with nothing else in it, in three hand-off forms:
//   noinc   : cp.async, then cp.async.mbarrier.arrive.noinc (full counts the 32 lanes) -- the library's form
//   inc     : cp.async, then cp.async.mbarrier.arrive (no .noinc: the pending count is raised first) and an
//             ordinary mbarrier.arrive per lane (full counts 32)
//   waitall : cp.async, cp.async.wait_all, then an ordinary mbarrier.arrive per lane (full counts 32)
// Each form checks its own output (every consumer lane sums the stage's 32 values). All three are correct by
// the PTX memory model; a hazard reported for one form and not for another is the tool's view of that form.
//
// Build: nvcc -std=c++17 -O2 -lineinfo -gencode arch=compute_90a,code=sm_90a bench/micro/racecheck_noinc.cu
//        -o racecheck_noinc
// Run:   compute-sanitizer --tool racecheck ./racecheck_noinc     (prints "<form>: ok|WRONG" per form)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr int kStages = 2;
constexpr int kSteps = 64;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void bar_init(uint64_t* b, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
}

__device__ __forceinline__ void bar_arrive(uint64_t* b) {
  asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.shared::cta.b64 st, [%0];\n\t}" ::"r"(smem_u32(b))
               : "memory");
}

__device__ __forceinline__ void bar_wait(uint64_t* b, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(smem_u32(b)), "r"(parity)
        : "memory");
  }
}

template <int kForm>  // 0 noinc, 1 inc, 2 waitall
__global__ void ring_kernel(const float* __restrict__ src, float* __restrict__ out) {
  __shared__ float buf[kStages][32];
  __shared__ uint64_t full[kStages], empty[kStages];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      bar_init(&full[s], 32);
      bar_init(&empty[s], 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp == 0) {  // producer: each lane copies one value per step
    for (int step = 0; step < kSteps; ++step) {
      const int slot = step % kStages;
      if (step >= kStages) bar_wait(&empty[slot], ((step / kStages) - 1) & 1);
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_u32(&buf[slot][lane])),
                   "l"(src + step * 32 + lane)
                   : "memory");
      if constexpr (kForm == 0) {
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_u32(&full[slot])) : "memory");
      } else if constexpr (kForm == 1) {
        asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];" ::"r"(smem_u32(&full[slot])) : "memory");
        bar_arrive(&full[slot]);
      } else {
        asm volatile("cp.async.wait_all;" ::: "memory");
        bar_arrive(&full[slot]);
      }
    }
  } else {  // consumer: every lane sums the stage, then lane 0 releases it
    for (int step = 0; step < kSteps; ++step) {
      const int slot = step % kStages;
      bar_wait(&full[slot], (step / kStages) & 1);
      float s = 0.f;
      for (int i = 0; i < 32; ++i) s += buf[slot][(lane + i) % 32];
      __syncwarp();
      if (lane == 0) bar_arrive(&empty[slot]);
      out[step * 32 + lane] = s;
    }
  }
}

template <int kForm>
bool run(const char* name, const float* d_src, float* d_out, const std::vector<float>& src) {
  if (cudaMemset(d_out, 0xff, kSteps * 32 * sizeof(float)) != cudaSuccess) return false;
  ring_kernel<kForm><<<1, 64>>>(d_src, d_out);
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::printf("%s: CUDA error %s\n", name, cudaGetErrorString(err));
    return false;
  }
  std::vector<float> out(kSteps * 32);
  if (cudaMemcpy(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) return false;
  bool ok = true;
  for (int step = 0; step < kSteps; ++step) {
    for (int lane = 0; lane < 32; ++lane) {
      float want = 0.f;
      for (int i = 0; i < 32; ++i) want += src[step * 32 + (lane + i) % 32];
      ok = ok && out[step * 32 + lane] == want;
    }
  }
  std::printf("%s: %s\n", name, ok ? "ok" : "WRONG");
  return ok;
}

}  // namespace

int main() {
  std::vector<float> src(kSteps * 32);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>((i * 37) % 101) - 50.f;  // exact sums
  float *d_src = nullptr, *d_out = nullptr;
  if (cudaMalloc(&d_src, src.size() * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&d_out, src.size() * sizeof(float)) != cudaSuccess ||
      cudaMemcpy(d_src, src.data(), src.size() * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
    std::printf("setup failed\n");
    return 1;
  }
  bool ok = run<0>("noinc", d_src, d_out, src);
  ok = run<1>("inc", d_src, d_out, src) && ok;
  ok = run<2>("waitall", d_src, d_out, src) && ok;
  cudaFree(d_src);
  cudaFree(d_out);
  return ok ? 0 : 1;
}
