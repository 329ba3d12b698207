// hopperkit fused FP8 MoE, kernel 4: out[t] = sum_k topk_weights[t, k] * y[t * top_k + k] (+ shared[t]),
// summed in k order (deterministic); rows of experts that are not local are skipped.
#include "common/ptx.cuh"
#include "hopperkit/error.h"
#include "hopperkit/moe/heuristics.h"
#include "moe/launch.h"

namespace hopperkit {
namespace moe {

using namespace ptx;

namespace {

constexpr int kReduceThreads = 256;

// At decode the whole reduce is a few dependent loads deep: the routing (ids, weights, expert map) is an input
// of the call, so each thread reads its rows' routing before waiting for the down GEMM, then issues all its
// (up to kMaxTopK) row loads at once, then sums them in k order.
__global__ void __launch_bounds__(kReduceThreads) moe_reduce_kernel(const MoeKernelArgs a) {
  const int vecs = a.hidden_size / 8;  // 8 bf16 per thread
  const int64_t total = static_cast<int64_t>(a.num_tokens) * vecs;
  bool waited = false;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * kReduceThreads + threadIdx.x; v < total;
       v += static_cast<int64_t>(gridDim.x) * kReduceThreads) {
    const int64_t t = v / vecs;
    const int col = static_cast<int>(v % vecs) * 8;
    float w[kMaxTopK];
    uint32_t local = 0;  // bit k: row k's expert is local (other rows are skipped, not loaded)
#pragma unroll
    for (int k = 0; k < kMaxTopK; ++k) {
      w[k] = 0.f;
      if (k < a.top_k) {
        const int64_t row = t * a.top_k + k;
        if (moe_local_expert(a, a.topk_ids[row]) >= 0) local |= 1u << k;
        w[k] = a.topk_weights[row];
      }
    }
    if (!waited) {
      grid_dependency_wait();  // y comes from the down GEMM
      launch_dependents();
      waited = true;
    }
    float acc[8] = {};
    constexpr int kChunk = 8;  // rows loaded together (registers: 4 per row)
#pragma unroll
    for (int k0 = 0; k0 < kMaxTopK; k0 += kChunk) {
      if (k0 >= a.top_k) break;
      uint4 y[kChunk];
#pragma unroll
      for (int i = 0; i < kChunk; ++i) {
        if (local & (1u << (k0 + i))) {
          y[i] = __ldcs(reinterpret_cast<const uint4*>(a.y + (t * a.top_k + k0 + i) * a.hidden_size + col));
        }
      }
#pragma unroll
      for (int i = 0; i < kChunk; ++i) {
        if (local & (1u << (k0 + i))) {
          const float wk = w[k0 + i];
          const uint32_t yy[4] = {y[i].x, y[i].y, y[i].z, y[i].w};
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            acc[2 * j] += wk * bf16_bits_to_float(yy[j] & 0xffff);
            acc[2 * j + 1] += wk * bf16_bits_to_float(yy[j] >> 16);
          }
        }
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
  if (!waited) {  // no vector here: still wait, so that this grid never completes before the down GEMM
    grid_dependency_wait();
    launch_dependents();
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
