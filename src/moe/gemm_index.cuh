// hopperkit fused FP8 MoE: the routing index built inside the swapped gate-up GEMM (a.gemm_index; gemm_index in
// heuristics.h), so that kernel 1's index build is off the gate-up's critical path.
//
// Every gate-up CTA reads topk_ids (an input: complete before the op's first kernel started) while kernel 1 runs
// its resets and the input quantisation:
//  * gemm_index_build: the per-expert counts (shared-memory histogram, counts are order-free), then one warp's
//    scan into two uint16 tables, roff[e] (expert e's first sorted slot) and toff[e] (its first tile), each with
//    the total at [E];
//  * gemm_index_tile: tile ti's {expert, row_begin, rows} by a binary search of toff (the tile list kernel 1's
//    build writes, the same tiles in the same order);
//  * gemm_index_rows: one warp finds a tile's rows, the entries of its expert in ascending entry order (stable:
//    the same in every CTA and every call), ranks [(ti - toff[e]) * BM, + rows) of that expert, by ballots over
//    the entries 256 at a time (topk_ids and the expert map stay in L1 after the histogram's pass).
// The tables are kGemmIndexSlots uint16 each (up to kGemmIndexMaxExperts local experts).
#pragma once

#include <cstdint>

#include "hopperkit/moe/heuristics.h"
#include "moe/kernel_args.h"

namespace hopperkit {
namespace moe {

constexpr int kGemmIndexSlots = kGemmIndexMaxExperts + 2;  // E + 1 entries, rounded to whole 32-bit words
constexpr int kGemmIndexBytes = (2 * kGemmIndexSlots * 2 + 15) / 16 * 16;  // roff, then toff

// Builds roff / toff (shared memory, kGemmIndexSlots each) and *s_dropped (the entries with an invalid or remote
// expert id) with all kThreads threads of the CTA; ends with a CTA barrier. During the count, roff holds the
// counts (two 16-bit counts per 32-bit word: < kGemmIndexMaxRows each, no carry).
template <int BM, int kThreads>
__device__ __forceinline__ void gemm_index_build(const MoeKernelArgs& a, uint16_t* roff, uint16_t* toff,
                                                 int* s_dropped) {
  const int tid = threadIdx.x;
  const int E = a.num_local_experts;
  const int n = a.num_tokens * a.top_k;
  uint32_t* cnt = reinterpret_cast<uint32_t*>(roff);
  for (int w = tid; w < kGemmIndexSlots / 2; w += kThreads) cnt[w] = 0u;
  if (tid == 0) *s_dropped = 0;
  __syncthreads();
  // 4 entries per thread and pass: their id loads, then their map loads, issued back to back (each pass is two
  // dependent round trips to L2). 16 per pass measured slower at 4-16 tokens (session 53 calls 2-4, docs/moe.md):
  // 4 here and 8 in the row scan are the sizes of the build that won at 4 tokens.
  constexpr int kBatch = 4;
  int dropped = 0;
  for (int base = tid; base < n; base += kThreads * kBatch) {
    int id[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads;
      id[j] = i < n ? __ldg(a.topk_ids + i) : 0;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads;
      if (i < n) {
        const int e = moe_local_expert(a, id[j]);
        if (e >= 0) {
          atomicAdd(cnt + (e >> 1), 1u << ((e & 1) * 16));
        } else {
          ++dropped;
        }
      }
    }
  }
  if (dropped) atomicAdd(s_dropped, dropped);
  __syncthreads();
  // warp 0: lane l owns experts [l * per, (l + 1) * per); an exclusive scan of (rows | tiles << 16) over the lanes
  if (tid < 32) {
    constexpr int kPer = (kGemmIndexMaxExperts + 31) / 32;
    const int per = (E + 31) / 32;
    const int e0 = tid * per;
    int c[kPer];
    uint32_t mine = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      c[j] = j < per && e0 + j < E ? roff[e0 + j] : 0;
      mine += static_cast<uint32_t>(c[j]) | (static_cast<uint32_t>((c[j] + BM - 1) / BM) << 16);
    }
    uint32_t incl = mine;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const uint32_t v = __shfl_up_sync(0xffffffffu, incl, d);
      if (tid >= d) incl += v;
    }
    uint32_t run = incl - mine;
    __syncwarp();  // every lane's counts are read before any offset overwrites them (the same words)
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (j < per && e0 + j < E) {
        roff[e0 + j] = static_cast<uint16_t>(run & 0xffffu);
        toff[e0 + j] = static_cast<uint16_t>(run >> 16);
        run += static_cast<uint32_t>(c[j]) | (static_cast<uint32_t>((c[j] + BM - 1) / BM) << 16);
      }
    }
    const uint32_t total = __shfl_sync(0xffffffffu, incl, 31);
    if (tid == 0) {
      roff[E] = static_cast<uint16_t>(total & 0xffffu);
      toff[E] = static_cast<uint16_t>(total >> 16);
    }
  }
  __syncthreads();
}

// Tile ti (< toff[E]) of the tile list: {expert, first sorted slot, rows, 0}. The expert is the largest e with
// toff[e] <= ti (experts without rows have no tiles: toff[e] == toff[e + 1]).
// The CTA that publishes the index to the down GEMM (tile list, offsets, counters[0..1], then the release of
// counters[7]): the grid's last, which has the fewest items (none where the grid has more CTAs than items), so
// that its gpu-scope release waits on few or no weight stages of its own in flight (session 57: CTA 0's took
// ~5 us longer than the median CTA's wait).
__device__ __forceinline__ bool gemm_index_publisher() { return blockIdx.x == gridDim.x - 1; }

template <int BM>
__device__ __forceinline__ int4 gemm_index_tile(const uint16_t* roff, const uint16_t* toff, int E, int ti) {
  int lo = 0, hi = E - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (static_cast<int>(toff[mid]) <= ti) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int begin = roff[lo] + (ti - toff[lo]) * BM;
  const int rows = min(BM, static_cast<int>(roff[lo + 1]) - begin);
  return make_int4(lo, begin, rows, 0);
}

// One warp (all 32 lanes): the entries (token * top_k + k) of tile {e, begin, rows}, in ascending entry order
// (ranks begin - roff[e] .. of expert e's entries), into s_rows[0, rows) and sorted_rows[begin, begin + rows)
// (the down GEMM's and the tests' index). Ends with __syncwarp.
__device__ __forceinline__ void gemm_index_rows(const MoeKernelArgs& a, const uint16_t* roff, int4 tile,
                                                int* s_rows) {
  const int lane = threadIdx.x & 31;
  const int n = a.num_tokens * a.top_k;
  const int rank0 = tile.y - roff[tile.x];
  const int want = rank0 + tile.z;
  // the lanes' reads of the previous tile's s_rows come before this tile's writes (the ballots below order
  // execution, not memory); measured neutral at TP8 4 / 16 tokens (session 55 call 3: 0.996-1.002x)
  __syncwarp();
  constexpr int kBatch = 8;  // 32 x 8 entries per pass: their loads issued together
  int seen = 0;              // entries of the expert before this pass
  for (int base = 0; base < n && seen < want; base += 32 * kBatch) {
    int le[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + 32 * j + lane;
      le[j] = i < n ? __ldg(a.topk_ids + i) : -1;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + 32 * j + lane;
      le[j] = i < n ? moe_local_expert(a, le[j]) : -1;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const bool hit = le[j] == tile.x;
      const unsigned m = __ballot_sync(0xffffffffu, hit);
      const int r = seen + __popc(m & ((1u << lane) - 1u)) - rank0;
      if (hit && r >= 0 && r < tile.z) {
        const int i = base + 32 * j + lane;
        s_rows[r] = i;
        a.sorted_rows[tile.y + r] = i;
      }
      seen += __popc(m);
    }
  }
  __syncwarp();
}

}  // namespace moe
}  // namespace hopperkit
