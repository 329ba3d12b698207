// hopperkit fused FP8 MoE: the grouped GEMM both projections use (kernels 2 and 3).
//
// A persistent grid drains the work items: task = (tile of one expert's rows) x (block of weight rows), and
// for 16-row (decode) tiles each task's K range may be cut into S slices (split_k_slices, chosen on the device
// from the actual task count; the last slice to finish sums the fp32 partial tiles in slice order). Which tiles
// exist is known only on the device (kernel 1 wrote them), so every CTA reads the tile count and strides over
// the items, tile fastest: CTAs running at the same time share a weight block, which stays in L2 when an
// expert has several tiles.
//
// All threads load and compute: a cp.async ring of kStages stages runs continuously across work items (the
// next item's stages stream in during this item's epilogue). A stage is kBK bytes of K (256 for 16-row tiles,
// 128 otherwise) of the A rows (gathered through the routing index: no gather copy) and of the weight rows,
// XOR-swizzled in 16-byte chunks so that ldmatrix is conflict-free; weight chunks are addressed in closed form
// where the layout allows. mma.sync m16n8k32 e4m3 with fp32 accumulators. Block-wise scaling accumulates each
// 128-deep K block separately and adds it scaled by (activation group scale x weight block scale).
//
// Gate-up (kGateUp): a tile's weight rows are the gate rows and the matching up rows of BN / 2 intermediate
// columns, arranged so that each warp holds gate and up of the same columns; the epilogue forms
// SiLU(gate) * up and stores it as FP8 (per-tensor: / a2_scale; block: per row and 128-column group,
// scale = amax / 448, the whole group being in this tile). Down: the epilogue stores bf16 results at the row's
// id (token * top_k + k) for the reduce.
#pragma once

#include <cuda_fp8.h>

#include "common/ptx.cuh"
#include "hopperkit/moe/heuristics.h"
#include "moe/kernel_args.h"

namespace hopperkit {
namespace moe {

using namespace ptx;

constexpr float kActFp8Max = 448.f;
constexpr float kActMinAmax = 1e-10f;  // as in the input quantisation: an all-zero group stays finite

template <int BM, int BN, bool kGateUp, bool kBlock>
struct MoeGemmConfig {
  static_assert(BM == 16 || BM == 64, "block_m");
  static constexpr int kWarpsM = BM == 16 ? 1 : 2;
  static constexpr int kWarpsN = 4;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kWM = BM / kWarpsM;  // rows per warp
  static constexpr int kWN = BN / kWarpsN;  // weight rows per warp
  static constexpr int kMT = kWM / 16;
  static constexpr int kNT = kWN / 8;
  static_assert(kNT % 2 == 0, "n8 blocks come in pairs (one ldmatrix.x4)");
  // K bytes per stage: decode tiles (16 rows) are weight-streaming; reading 256 contiguous bytes of each
  // weight row per stage, not 128, halves the DRAM row activations per byte. 64-row tiles keep 128.
  static constexpr int kBK = BM == 16 ? 2 * kTileK : kTileK;
  static constexpr int kHalves = kBK / kScaleBlock;  // 128-deep scale blocks per stage
  static constexpr int kChunksPerRow = kBK / 16;
  static constexpr int kStageBytes = (BM + BN) * kBK;
  // 16-row tiles with 128 weight rows run 2 CTAs per SM; the others one, with a deeper ring.
  static constexpr int kBudget = (BM == 16 && BN == 128) ? 110 * 1024 : 210 * 1024;
  static constexpr int kStages = kBudget / kStageBytes > 8 ? 8 : kBudget / kStageBytes;
  static_assert(kStages >= 3, "ring depth");
  static constexpr int kScaleFloats = kHalves * (BM + 2);  // per stage and scale block: row scales, weight scale(s)
  static constexpr int kSmemBytes = kStages * kStageBytes + kStages * kScaleFloats * 4 + BM * 4;
  static constexpr int kAChunks = BM * kChunksPerRow / kThreads;  // 16-byte chunks per thread per stage
  static constexpr int kBChunks = BN * kChunksPerRow / kThreads;
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static_assert(kAChunks >= 1 && kBChunks >= 1, "chunks");
  static_assert(BM != 16 || BM * BN <= kSplitSliceFloats, "a split partial tile fits its workspace slice");
};

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile of kRowBytes-byte rows (the low three
// chunk bits XOR the row: the 8 rows one ldmatrix reads sit in 8 different bank groups).
template <int kRowBytes>
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

__device__ __forceinline__ float silu(float x) { return x / (1.f + __expf(-x)); }

template <int BM, int BN, bool kGateUp, bool kBlock>
__global__ void __launch_bounds__(MoeGemmConfig<BM, BN, kGateUp, kBlock>::kThreads)
    moe_gemm_kernel(const MoeKernelArgs a) {
  using C = MoeGemmConfig<BM, BN, kGateUp, kBlock>;
  extern __shared__ __align__(128) uint8_t smem[];
  float* s_scale = reinterpret_cast<float*>(smem + C::kStages * C::kStageBytes);  // [kStages][kScaleFloats]
  unsigned* s_amax = reinterpret_cast<unsigned*>(s_scale + C::kStages * C::kScaleFloats);  // [BM]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / C::kWarpsN, wn = warp % C::kWarpsN;
  const int g = lane >> 2, t4 = lane & 3;
  const int ch = tid % C::kChunksPerRow;  // every chunk this thread copies is chunk `ch` of its row

  const int H = a.hidden_size, I = a.intermediate;
  const int K = kGateUp ? H : I;
  const int N = kGateUp ? I : H;                 // output columns
  const int cols_per_task = kGateUp ? BN / 2 : BN;
  const int n_blocks = (N + cols_per_task - 1) / cols_per_task;
  const int nk = (K + C::kBK - 1) / C::kBK;
  const int kb_per_row = K / kScaleBlock;        // block-wise: activation / weight scale groups along K

  grid_dependency_wait();  // the routing index and the A operand come from the previous kernel
  launch_dependents();
  const int num_tiles = a.counters[0];
  const int tasks = num_tiles * n_blocks;
  // decode tiles split K when there are fewer tasks than CTAs (see split_k_slices); work item = (task, slice)
  const int S = BM == 16 && a.allow_split ? split_k_slices(tasks, gridDim.x, nk) : 1;
  const int items = tasks * S;
  __shared__ int s_last_slice;
  if (kBlock && kGateUp && tid < BM) s_amax[tid] = 0u;  // first use is after the ring's first barrier

  // ---- the load side runs kStages - 1 steps ahead of the MMAs over the flattened (task, k-step) sequence,
  // so the next task's first stages stream in while this task finishes and stores (short-K tasks do not
  // drain the ring).
  struct LoadCtx {
    int item = 0, kt = 0, kend = 0, n0 = 0, scale_ok = 0;
    const uint8_t* a_src[C::kAChunks];
    int a_ok[C::kAChunks];
    const uint8_t* w_base = nullptr;
    const uint8_t* w_row0 = nullptr;   // closed-form path: this thread's first weight row (row r0 of the tile)
    int row_lim = 0;                   // closed-form path, down: tile rows r0 + i * kRowsPerPass below this exist
    const float* scale_src = nullptr;  // block-wise: this thread's scale row (threads < BM + 2)
  } ld;
  // Weight chunk i of this thread is tile row r0 + i * kRowsPerPass. When kRowsPerPass divides a warp's gate
  // (or up) half, that row's place in the gate / up layout is a compile-time function of i, so a chunk's
  // source is w_row0 + constant * K (+ I * K for up rows): no per-chunk division or 64-bit multiply.
  const int r0 = tid / C::kChunksPerRow;
  constexpr bool kClosedForm = C::kRowsPerPass % 8 == 0 && (!kGateUp || (C::kWN / 2) % C::kRowsPerPass == 0);
  const int64_t IK = static_cast<int64_t>(I) * K;
  auto setup_load = [&](int item) {
    ld.item = item;
    if (item >= items) return;
    const int task = item / S, slice = item % S;
    ld.kt = slice * nk / S;
    ld.kend = (slice + 1) * nk / S;
    const int4 tile = a.tiles[task % num_tiles];
    const int e = tile.x, row_begin = tile.y, rows = tile.z;
    ld.n0 = (task / num_tiles) * cols_per_task;
#pragma unroll
    for (int i = 0; i < C::kAChunks; ++i) {
      const int r = tid / C::kChunksPerRow + i * C::kRowsPerPass;
      ld.a_ok[i] = r < rows;
      const int slot = row_begin + (ld.a_ok[i] ? r : 0);
      ld.a_src[i] = kGateUp ? a.a_in + static_cast<int64_t>(a.sorted_rows[slot] / a.top_k) * a.a_in_stride
                            : a.act + static_cast<int64_t>(slot) * I;
    }
    ld.w_base = kGateUp ? a.w13 + static_cast<int64_t>(e) * 2 * I * H : a.w2 + static_cast<int64_t>(e) * H * I;
    ld.w_row0 = ld.w_base + static_cast<int64_t>(ld.n0 + r0) * K;  // gate-up: gate row n0 + r0
    ld.row_lim = H - ld.n0 - r0;
    if (kBlock) {
      if (tid < BM) {
        ld.scale_ok = tid < rows;
        const int slot = row_begin + (ld.scale_ok ? tid : 0);
        ld.scale_src = kGateUp ? a.a_in_scale + static_cast<int64_t>(a.sorted_rows[slot] / a.top_k) * kb_per_row
                               : a.act_scale + static_cast<int64_t>(slot) * kb_per_row;
      } else if (tid < BM + 2) {
        ld.scale_ok = 1;
        const int wrow = kGateUp ? (tid == BM ? ld.n0 : I + ld.n0) : ld.n0;  // the weight block's first row
        const int nbk = (kGateUp ? 2 * I : H) / kScaleBlock;
        ld.scale_src = (kGateUp ? a.w13_scale : a.w2_scale) +
                       (static_cast<int64_t>(e) * nbk + wrow / kScaleBlock) * kb_per_row;
      }
    }
  };
  // Issues the loads of step (ld.task, ld.kt) into ring slot `slot`, then advances to the next step.
  auto load_next = [&](int slot) {
    if (ld.item >= items) return;
    uint8_t* sa = smem + slot * C::kStageBytes;
    uint8_t* sb = sa + BM * C::kBK;
    const int k = ld.kt * C::kBK + ch * 16;
    const int kbytes = k < K ? 16 : 0;
#pragma unroll
    for (int i = 0; i < C::kAChunks; ++i) {
      const int r = tid / C::kChunksPerRow + i * C::kRowsPerPass;
      const int ok = ld.a_ok[i] && kbytes;
      cp_async_16_zfill(sa + swz<C::kBK>(r, ch), ok ? ld.a_src[i] + k : a.w13, ok ? 16 : 0);
    }
    if constexpr (kClosedForm) {
      uint8_t* dst0 = sb + r0 * C::kBK + ((ch ^ (r0 & 7)) << 4);  // (r & 7) == (r0 & 7) for every chunk
      const uint8_t* src0 = ld.w_row0 + k;
#pragma unroll
      for (int i = 0; i < C::kBChunks; ++i) {
        constexpr int kP = C::kRowsPerPass;
        const int rr = i * kP;  // compile-time after unrolling
        int64_t off;
        int ok = kbytes;
        if (kGateUp) {
          const int grp = rr / C::kWN, wpos = rr % C::kWN;
          off = static_cast<int64_t>(grp * (C::kWN / 2) + wpos % (C::kWN / 2)) * K + (wpos >= C::kWN / 2 ? IK : 0);
        } else {
          off = static_cast<int64_t>(rr) * K;
          ok = ok && rr < ld.row_lim;
        }
        cp_async_16_zfill(dst0 + rr * C::kBK, ok ? src0 + off : a.w13, ok ? 16 : 0);
      }
    } else {
#pragma unroll
    for (int i = 0; i < C::kBChunks; ++i) {
      const int r = tid / C::kChunksPerRow + i * C::kRowsPerPass;
      int wrow;
      if (kGateUp) {  // warp column group wn: kWN / 2 gate rows, then the matching up rows
        const int grp = r / C::kWN, w = r % C::kWN, half = w / (C::kWN / 2);
        wrow = (half ? I : 0) + ld.n0 + grp * (C::kWN / 2) + w % (C::kWN / 2);
      } else {
        wrow = ld.n0 + r;
      }
      const int ok = kbytes && (kGateUp || wrow < H);
      cp_async_16_zfill(sb + swz<C::kBK>(r, ch), ok ? ld.w_base + static_cast<int64_t>(wrow) * K + k : a.w13, ok ? 16 : 0);
    }
    }
    if (kBlock && ld.scale_src != nullptr) {
#pragma unroll
      for (int h = 0; h < C::kHalves; ++h) {
        const int kb = ld.kt * C::kHalves + h;
        const int ok = ld.scale_ok && kb < kb_per_row;
        cp_async_4_zfill(s_scale + slot * C::kScaleFloats + h * (BM + 2) + tid, ok ? ld.scale_src + kb : a.w13_scale,
                         ok ? 4 : 0);
      }
    }
    if (++ld.kt == ld.kend) setup_load(ld.item + gridDim.x);
  };

  float acc[C::kMT][C::kNT][4];
  auto zero_acc = [&]() {
#pragma unroll
    for (int mt = 0; mt < C::kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < C::kNT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.f;
  };
  zero_acc();

  setup_load(blockIdx.x);
#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    load_next(s);
    cp_async_commit();
  }

  auto item_steps = [&](int item) { return ((item % S) + 1) * nk / S - (item % S) * nk / S; };
  int kt = 0, step = 0;
  int steps = blockIdx.x < items ? item_steps(blockIdx.x) : 0;
  for (int item = blockIdx.x; item < items; ++step) {
    cp_async_wait<C::kStages - 2>();
    __syncthreads();
    load_next((step + C::kStages - 1) % C::kStages);
    cp_async_commit();
    const int slot = step % C::kStages;
    const uint32_t sa = smem_addr(smem + slot * C::kStageBytes);
    const uint32_t sb = sa + BM * C::kBK;
    auto mma_stage = [&](float (&d)[C::kMT][C::kNT][4], int kk_begin, int kk_end) {
#pragma unroll
      for (int kk = kk_begin; kk < kk_end; ++kk) {
        uint32_t af[C::kMT][4];
#pragma unroll
        for (int mt = 0; mt < C::kMT; ++mt) {
          const int r = wm * C::kWM + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
          ldmatrix_x4(sa + swz<C::kBK>(r, kk * 2 + (lane >> 4)), af[mt][0], af[mt][1], af[mt][2], af[mt][3]);
        }
#pragma unroll
        for (int np = 0; np < C::kNT / 2; ++np) {
          const int r = wn * C::kWN + np * 16 + (lane & 7) + ((lane >> 4) & 1) * 8;
          uint32_t b0, b1, b2, b3;
          ldmatrix_x4(sb + swz<C::kBK>(r, kk * 2 + ((lane >> 3) & 1)), b0, b1, b2, b3);
#pragma unroll
          for (int mt = 0; mt < C::kMT; ++mt) {
            mma_e4m3(d[mt][2 * np], af[mt], b0, b1);
            mma_e4m3(d[mt][2 * np + 1], af[mt], b2, b3);
          }
        }
      }
    };
    if constexpr (!kBlock) {
      mma_stage(acc, 0, C::kBK / 32);
    } else {
#pragma unroll
     for (int h = 0; h < C::kHalves; ++h) {
      float part[C::kMT][C::kNT][4];
#pragma unroll
      for (int mt = 0; mt < C::kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < C::kNT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) part[mt][nt][i] = 0.f;
      mma_stage(part, h * 4, h * 4 + 4);
      const float* sc = s_scale + slot * C::kScaleFloats + h * (BM + 2);
#pragma unroll
      for (int mt = 0; mt < C::kMT; ++mt) {
        const float sa0 = sc[wm * C::kWM + mt * 16 + g], sa1 = sc[wm * C::kWM + mt * 16 + g + 8];
#pragma unroll
        for (int nt = 0; nt < C::kNT; ++nt) {
          const float sw = sc[BM + ((kGateUp && nt >= C::kNT / 2) ? 1 : 0)];
          acc[mt][nt][0] += part[mt][nt][0] * (sa0 * sw);
          acc[mt][nt][1] += part[mt][nt][1] * (sa0 * sw);
          acc[mt][nt][2] += part[mt][nt][2] * (sa1 * sw);
          acc[mt][nt][3] += part[mt][nt][3] * (sa1 * sw);
        }
      }
     }
    }
    if (++kt < steps) continue;

    // ---- end of a work item (the ring keeps filling with the next item's stages meanwhile)
    const int task = item / S;
    const int my_item = item;
    item += gridDim.x;
    kt = 0;
    if (item < items) steps = item_steps(item);
    if (S > 1) {  // split K: park this slice's partial tile; the last slice to arrive sums all in slice order
      constexpr int kVals = C::kMT * C::kNT * 4;
      float* mine = a.split_partials + static_cast<int64_t>(my_item) * kVals * C::kThreads;
#pragma unroll
      for (int mt = 0; mt < C::kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < C::kNT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) __stcg(mine + ((mt * C::kNT + nt) * 4 + i) * C::kThreads + tid, acc[mt][nt][i]);
      __threadfence();
      __syncthreads();
      if (tid == 0) s_last_slice = atomicAdd(a.split_counters + task, 1) == S - 1;
      __syncthreads();
      if (!s_last_slice) {
        zero_acc();
        continue;
      }
      __threadfence();
      zero_acc();
      for (int sl = 0; sl < S; ++sl) {
        const float* part = a.split_partials + static_cast<int64_t>(task * S + sl) * kVals * C::kThreads;
#pragma unroll
        for (int mt = 0; mt < C::kMT; ++mt)
#pragma unroll
          for (int nt = 0; nt < C::kNT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[mt][nt][i] += __ldcg(part + ((mt * C::kNT + nt) * 4 + i) * C::kThreads + tid);
      }
      if (tid == 0) a.split_counters[task] = 0;  // ready for the next kernel
    }
    const int4 tile = a.tiles[task % num_tiles];
    const int e = tile.x, row_begin = tile.y, rows = tile.z;
    const int n0 = (task / num_tiles) * cols_per_task;
    float out_scale = 1.f;
    if (!kBlock) {
      out_scale = kGateUp ? __ldg(a.a_in_scale) * __ldg(a.w13_scale + e) : __ldg(a.a2_scale) * __ldg(a.w2_scale + e);
    }
    if (kGateUp) {
      constexpr int kHalf = C::kNT / 2;
      const float a2 = kBlock ? 1.f : __ldg(a.a2_scale);  // per-tensor: act = h / a2_scale
      float h[C::kMT][kHalf][4];
#pragma unroll
      for (int mt = 0; mt < C::kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kHalf; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) h[mt][nt][i] = silu(acc[mt][nt][i] * out_scale) * (acc[mt][nt + kHalf][i] * out_scale);
      float row_scale[C::kMT][2];
      if (kBlock) {  // amax per row over this tile's 128 columns: quad, then the kWarpsN warps via shared memory
#pragma unroll
        for (int mt = 0; mt < C::kMT; ++mt) {
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            float m = 0.f;
#pragma unroll
            for (int nt = 0; nt < kHalf; ++nt) m = fmaxf(m, fmaxf(fabsf(h[mt][nt][2 * hh]), fabsf(h[mt][nt][2 * hh + 1])));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
            if (t4 == 0) atomicMax(&s_amax[wm * C::kWM + mt * 16 + g + hh * 8], __float_as_uint(m));
          }
        }
        __syncthreads();
#pragma unroll
        for (int mt = 0; mt < C::kMT; ++mt) {
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int r = wm * C::kWM + mt * 16 + g + hh * 8;
            row_scale[mt][hh] = fmaxf(__uint_as_float(s_amax[r]), kActMinAmax) / kActFp8Max;
            if (wn == 0 && t4 == 0 && r < rows) {
              a.act_scale[static_cast<int64_t>(row_begin + r) * (I / kScaleBlock) + n0 / kScaleBlock] = row_scale[mt][hh];
            }
          }
        }
        __syncthreads();  // every row's amax is read before it is cleared for the next task
        if (tid < BM) s_amax[tid] = 0u;
      }
#pragma unroll
      for (int mt = 0; mt < C::kMT; ++mt) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int r = wm * C::kWM + mt * 16 + g + hh * 8;
          if (r >= rows) continue;
          const float sc = kBlock ? row_scale[mt][hh] : a2;
          uint8_t* dst_row = a.act + static_cast<int64_t>(row_begin + r) * I + n0 + wn * (C::kWN / 2) + 2 * t4;
#pragma unroll
          for (int nt = 0; nt < kHalf; ++nt) {
            const __nv_fp8x2_storage_t q = __nv_cvt_float2_to_fp8x2(
                make_float2(h[mt][nt][2 * hh] / sc, h[mt][nt][2 * hh + 1] / sc), __NV_SATFINITE, __NV_E4M3);
            *reinterpret_cast<__nv_fp8x2_storage_t*>(dst_row + nt * 8) = q;
          }
        }
      }
    } else {
#pragma unroll
      for (int mt = 0; mt < C::kMT; ++mt) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int r = wm * C::kWM + mt * 16 + g + hh * 8;
          if (r >= rows) continue;
          const int64_t row_id = a.sorted_rows[row_begin + r];
          uint16_t* dst_row = a.y + row_id * H;
#pragma unroll
          for (int nt = 0; nt < C::kNT; ++nt) {
            const int n = n0 + wn * C::kWN + nt * 8 + 2 * t4;
            if (n < H) {
              *reinterpret_cast<uint32_t*>(dst_row + n) =
                  pack_bf16x2(acc[mt][nt][2 * hh] * out_scale, acc[mt][nt][2 * hh + 1] * out_scale);
            }
          }
        }
      }
    }
    zero_acc();
  }
  cp_async_wait<0>();
}

}  // namespace moe
}  // namespace hopperkit
