// hopperkit fused FP8 MoE, kernel 4: out[t] = sum_k topk_weights[t, k] * y[t * top_k + k] (+ shared[t]),
// summed in k order (deterministic); rows of experts that are not local are skipped.
#include "common/ptx.cuh"
#include "hopperkit/error.h"
#include "moe/launch.h"

namespace hopperkit {
namespace moe {

using namespace ptx;

namespace {

constexpr int kReduceThreads = 256;

__global__ void __launch_bounds__(kReduceThreads) moe_reduce_kernel(const MoeKernelArgs a) {
  grid_dependency_wait();
  launch_dependents();
  const int vecs = a.hidden_size / 8;  // 8 bf16 per thread
  const int64_t total = static_cast<int64_t>(a.num_tokens) * vecs;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * kReduceThreads + threadIdx.x; v < total;
       v += static_cast<int64_t>(gridDim.x) * kReduceThreads) {
    const int64_t t = v / vecs;
    const int col = static_cast<int>(v % vecs) * 8;
    float acc[8] = {};
    for (int k = 0; k < a.top_k; ++k) {
      const int64_t row = t * a.top_k + k;
      if (moe_local_expert(a, a.topk_ids[row]) < 0) continue;
      const float w = a.topk_weights[row];
      const uint4 y = __ldcs(reinterpret_cast<const uint4*>(a.y + row * a.hidden_size + col));
      const uint32_t yy[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        acc[2 * i] += w * bf16_bits_to_float(yy[i] & 0xffff);
        acc[2 * i + 1] += w * bf16_bits_to_float(yy[i] >> 16);
      }
    }
    if (a.shared_output != nullptr) {
      const uint4 s = __ldg(reinterpret_cast<const uint4*>(a.shared_output + t * a.shared_stride + col));
      const uint32_t ss[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        acc[2 * i] += bf16_bits_to_float(ss[i] & 0xffff);
        acc[2 * i + 1] += bf16_bits_to_float(ss[i] >> 16);
      }
    }
    uint4 o;
    o.x = pack_bf16x2(acc[0], acc[1]);
    o.y = pack_bf16x2(acc[2], acc[3]);
    o.z = pack_bf16x2(acc[4], acc[5]);
    o.w = pack_bf16x2(acc[6], acc[7]);
    *reinterpret_cast<uint4*>(a.out + t * a.out_stride + col) = o;
  }
}

}  // namespace

void launch_moe_reduce(const MoeKernelArgs& a, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(a.num_tokens) * (a.hidden_size / 8);
  const int64_t blocks = (total + kReduceThreads - 1) / kReduceThreads;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks < 4096 ? blocks : 4096));
  cfg.blockDim = dim3(kReduceThreads);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  HK_CUDA_CHECK(cudaLaunchKernelEx(&cfg, moe_reduce_kernel, a));
}

}  // namespace moe
}  // namespace hopperkit
