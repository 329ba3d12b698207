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

// kOneRound: the grid has a thread for every vector (launch_moe_reduce), so no thread loops and none loads a next
// vector's routing; 4 CTAs per SM (kReduceOneRoundCtasPerSm) make that grid fit up to 264 tokens at H = 4096 on
// 132 SMs. The loop kernels compile as before it (SASS compared, session 67).
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

constexpr int kReduceOneRoundCtasPerSm = 4;

// A grid of up to `resident` CTAs of `kernel` (cached per device in `cache`); false if the call's vectors need
// more than that and kNeedAll (the one-round kernel) asks for all of them.
template <bool kNeedAll, class Kernel>
bool launch_reduce_grid(Kernel kernel, const MoeKernelArgs& a, cudaStream_t stream,
                        std::atomic<int> (&cache)[kMaxDevices], const char* what) {
  const int64_t total = static_cast<int64_t>(a.num_tokens) * (a.hidden_size / 8);
  const int64_t blocks = (total + kReduceThreads - 1) / kReduceThreads;
  const int64_t resident = resident_ctas(kernel, kReduceThreads, 0, cache, what);
  if (kNeedAll && blocks > resident) return false;
  const dim3 grid(static_cast<unsigned>(blocks < resident ? (blocks > 0 ? blocks : 1) : resident));
  launch_with_pdl(kernel, grid, dim3(kReduceThreads), 0, stream, a);
  return true;
}

}  // namespace

void launch_moe_reduce(const MoeKernelArgs& a, cudaStream_t stream) {
  // per device: CTAs per SM x SMs of each kernel (0: not measured yet)
  static std::atomic<int> one_round[kMaxDevices] = {}, loop8[kMaxDevices] = {}, loop16[kMaxDevices] = {};
  if (a.top_k <= kReduceChunk) {
    // one round where every vector gets a thread (decode: up to 264 tokens at H = 4096; session 67: 0.982-0.989x
    // at hy3 / qwen3 TP8 and EP8 256 tokens, where the loop's grid ran 1.29 vectors per thread)
    if (launch_reduce_grid<true>(moe_reduce_kernel<kReduceChunk, kReduceOneRoundCtasPerSm, true>, a, stream,
                                 one_round, "moe reduce (one round)")) {
      return;
    }
    launch_reduce_grid<false>(moe_reduce_kernel<kReduceChunk, 3, false>, a, stream, loop8, "moe reduce");
  } else {  // top_k 9-16: two chunks of 8 rows
    launch_reduce_grid<false>(moe_reduce_kernel<kMaxTopK, 2, false>, a, stream, loop16, "moe reduce");
  }
}

}  // namespace moe
}  // namespace hopperkit
