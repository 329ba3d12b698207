// hopperkit fused FP8 MoE, kernel 4: out[t] = sum_k topk_weights[t, k] * y[t * top_k + k] (+ shared[t]),
// summed in k order (deterministic); rows of experts that are not local are skipped.
#include <atomic>

#include "common/pdl_launch.h"
#include "common/ptx.cuh"
#include "hopperkit/error.h"
#include "hopperkit/moe/heuristics.h"
#include "moe/launch.h"
#include "common/resident_ctas.h"

namespace hopperkit {
namespace moe {

using namespace ptx;

namespace {

constexpr int kReduceThreads = 256;
constexpr int kReduceChunk = 8;  // rows loaded together (4 registers each)

// One thread: 8 columns (16 bytes) of one token, looping over the grid's vectors. The routing of a vector
// (top_k weights, which rows are local) is an input of the call: the first is read before waiting for the down
// GEMM, each next one while the current vector's rows are in flight, so that a thread's only dependent latency
// per vector is its row loads (prefill: the rows are ~300 MB and the grid is what stays resident, so a vector's
// routing -> rows chain would otherwise be paid once per vector, session 6). kK: the largest top_k handled
// (8: most models, 3 CTAs per SM in the loop; 16: two chunks of 8 rows, 2 CTAs per SM). At 4 CTAs per SM (the
// one-round kernel below: 64 registers) one 8-byte register pair spills, in the row address arithmetic.
template <int kK>
struct Route {
  float w[kK];
  uint32_t local;  // bit k: row k's expert is local (other rows are skipped, not loaded)
};

template <int kK>
__device__ __forceinline__ Route<kK> load_route(const MoeKernelArgs& a, int64_t t) {
  Route<kK> r;
  r.local = 0;
#pragma unroll
  for (int k = 0; k < kK; ++k) {
    r.w[k] = 0.f;
    if (k < a.top_k) {
      const int64_t row = t * a.top_k + k;
      if (moe_local_expert(a, a.topk_ids[row]) >= 0) r.local |= 1u << k;
      r.w[k] = a.topk_weights[row];
    }
  }
  return r;
}

// kOneRound: the grid has a thread for every vector (launch_moe_reduce, reduce_one_round in heuristics.h), so no
// thread loops and none loads a next vector's routing; 4 CTAs per SM (kReduceOneRoundCtasPerSm) make that grid
// hold up to 264 tokens at H = 4096 on 132 SMs. The loop kernels compile as before it (SASS compared, session 67).
template <int kK, int kMinCtasPerSm, bool kOneRound>
__global__ void __launch_bounds__(kReduceThreads, kMinCtasPerSm) moe_reduce_kernel(const MoeKernelArgs a) {
  const int vecs = a.hidden_size / 8;  // 8 bf16 per thread
  const int64_t total = static_cast<int64_t>(a.num_tokens) * vecs;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kReduceThreads;
  int64_t v = static_cast<int64_t>(blockIdx.x) * kReduceThreads + threadIdx.x;
  Route<kK> cur;
  if (v < total) cur = load_route<kK>(a, v / vecs);
  grid_dependency_wait();  // y comes from the down GEMM (a grid with no vector here still waits, so that it
  launch_dependents();     // never completes before the down GEMM)
  for (; v < total; v += stride) {
    const int64_t t = v / vecs;
    const int col = static_cast<int>(v % vecs) * 8;
    const bool more = !kOneRound && v + stride < total;
    Route<kK> nxt;
    float acc[8] = {};
#pragma unroll
    for (int k0 = 0; k0 < kK; k0 += kReduceChunk) {
      if (k0 >= a.top_k) break;
      uint4 y[kReduceChunk];
#pragma unroll
      for (int i = 0; i < kReduceChunk; ++i) {
        if (cur.local & (1u << (k0 + i))) {
          y[i] = __ldcs(reinterpret_cast<const uint4*>(a.y + (t * a.top_k + k0 + i) * a.hidden_size + col));
        }
      }
      if (k0 == 0 && more) nxt = load_route<kK>(a, (v + stride) / vecs);  // while these rows are in flight
#pragma unroll
      for (int i = 0; i < kReduceChunk; ++i) {
        if (cur.local & (1u << (k0 + i))) {
          const float wk = cur.w[k0 + i];
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
    if (more) cur = nxt;
    if (kOneRound) break;
  }
}

// CTAs per SM in the launch bounds: the loop at top_k <= 8 (at 4 it spilled) and at 9-16, the one-round kernel
constexpr int kReduceLoopCtasPerSm = 3, kReduceLoop16CtasPerSm = 2, kReduceOneRoundCtasPerSm = 4;

template <class Kernel>
void launch_reduce_grid(Kernel kernel, int64_t ctas, int64_t resident, const MoeKernelArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(ctas < resident ? (ctas > 0 ? ctas : 1) : resident));
  launch_with_pdl(kernel, grid, dim3(kReduceThreads), 0, stream, a);
}

}  // namespace

void launch_moe_reduce(const MoeKernelArgs& a, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(a.num_tokens) * (a.hidden_size / 8);
  const int64_t ctas = (total + kReduceThreads - 1) / kReduceThreads;
  // per device: CTAs per SM x SMs of each kernel (0: not measured yet)
  static std::atomic<int> one_round_cache[kMaxDevices] = {}, loop8_cache[kMaxDevices] = {},
                          loop16_cache[kMaxDevices] = {};
  if (a.top_k <= kReduceChunk) {
    const auto loop = moe_reduce_kernel<kReduceChunk, kReduceLoopCtasPerSm, false>;
    const auto one_round = moe_reduce_kernel<kReduceChunk, kReduceOneRoundCtasPerSm, true>;
    const int64_t loop_resident = resident_ctas(loop, kReduceThreads, 0, loop8_cache, "moe reduce");
    const int64_t one_round_resident =
        resident_ctas(one_round, kReduceThreads, 0, one_round_cache, "moe reduce (one round)");
    if (reduce_one_round(ctas, loop_resident, one_round_resident)) {  // heuristics.h
      launch_reduce_grid(one_round, ctas, one_round_resident, a, stream);
    } else {
      launch_reduce_grid(loop, ctas, loop_resident, a, stream);
    }
  } else {  // top_k 9-16: two chunks of 8 rows
    const auto loop = moe_reduce_kernel<kMaxTopK, kReduceLoop16CtasPerSm, false>;
    const int64_t loop_resident = resident_ctas(loop, kReduceThreads, 0, loop16_cache, "moe reduce (top_k 16)");
    launch_reduce_grid(loop, ctas, loop_resident, a, stream);
  }
}

}  // namespace moe
}  // namespace hopperkit
