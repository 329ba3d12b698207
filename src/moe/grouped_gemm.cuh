// hopperkit fused FP8 MoE: the grouped GEMM both projections use (kernels 2 and 3).
//
// A persistent grid drains the task list (tile of one expert's rows) x (block of weight rows); which tiles
// exist is known only on the device (kernel 1 wrote them), so every CTA reads the tile count and strides over
// the work items (task x K slice, see split_k_slices), tile fastest: CTAs running at the same time share a
// weight block, which stays in L2 when an expert has several tiles (the swapped gate-up: column block fastest,
// so that its tiles complete in order for the down GEMM's per-tile wait, a.tile_ready; the per-tensor swapped
// down: column block fastest too, its CTAs claiming their items past the first, kClaims). The block-wise 16 x 256
// gate-up (one CTA per SM) shares out all tasks' K steps evenly instead when its last round of whole tasks
// would be short (stream-K: stream_k_applies in heuristics.h).
//
// Warp roles: one producer warp (a warpgroup for 128-row tiles) fills a ring of kStages stages; kConsumerWarps
// warps run the MMAs.
//  * weights arrive by TMA (one 128-byte-wide box per stage, or two for gate-up: the gate rows and the up rows
//    of the same intermediate columns), with the 128-byte swizzle; K and N tails come back zero-filled;
//  * gate-up: the A rows are gathered through the routing index (no gather copy) by the producer's lanes with
//    cp.async, which arrive on the same full barrier (cp.async.mbarrier.arrive.noinc), as do block-wise scales;
//    down: the A rows are contiguous (by sorted slot) and arrive by TMA (block-wise scales still by cp.async);
//  * consumers wait on the stage's full barrier, run wgmma on it straight from shared memory (fp32
//    accumulators) and release the stage on its empty barrier. The ring runs continuously across work items.
//  * 16-, 32- and 48-row (decode) tiles: one consumer warpgroup, operands swapped (64 weight rows x the tile's 16,
//    32 or 48 rows per m64n16k32 / m64n32k32 / m64n48k32), one stage's group in flight while the previous stage's sum is added
//    (wait_group 1); the 32-row down tile over 256 weight rows, which holds one stage partial, runs its stages
//    one after the other (kSerialSwap).
//  * 64-row tiles: two consumer warpgroups; with 128 weight rows one stage's wgmma group stays in flight
//    while the previous stage's sum is added and its slot released (wait_group 1); 256-row tiles (where the
//    columns divide, see heuristics.h), whose registers do not hold a second partial tile, do the same by
//    half stages (64 weight rows per warpgroup and wgmma group).
//  * down: the A rows (act, contiguous by sorted slot) arrive by TMA as well; 64-row tiles stage each warp's
//    output block in shared memory and store whole row segments (128 or 256 bytes).
// Block-wise scaling accumulates each 128-deep K block separately and adds it scaled by (activation group
// scale x weight block scale).
//
// Gate-up (kGateUp): SiLU(gate) * up is formed in registers and stored as FP8 (per-tensor: / a2_scale; block:
// per row and 128-column group, scale = amax / 448, the whole group being in this tile). Down: bf16 results at
// the row's id (token * top_k + k) for the reduce.
#pragma once

#include <cuda.h>
#include <cuda_fp8.h>

#include <type_traits>
#include <utility>

#include "common/ptx.cuh"
#include "common/wgmma.cuh"
#include "hopperkit/moe/heuristics.h"
#include "moe/gemm_index.cuh"
#include "moe/kernel_args.h"

// Per-CTA event trace (moe/trace.h: HK_MT_ONLY): compiled only with -DHOPPERKIT_MOE_TRACE.
#include "moe/trace.h"
#ifdef HOPPERKIT_MOE_TRACE
#define HK_MT_SET(ev, val)                                                                                \
  do {                                                                                                    \
    if (a.trace) a.trace[blockIdx.x * kMoeTraceSlots + (ev)] = static_cast<unsigned long long>(val);    \
  } while (0)
#else
#define HK_MT_SET(ev, val) \
  do {                     \
  } while (0)
#endif
#define HK_MT(ev) HK_MT_SET(ev, globaltimer())

namespace hopperkit {
namespace moe {

using namespace ptx;

constexpr float kActFp8Max = 448.f;
constexpr float kActMinAmax = 1e-10f;  // as in the input quantisation: an all-zero group stays finite

// kIndex: the swapped gate-up variant that builds the routing index itself (a.gemm_index, gemm_index.cuh); a
// template parameter, so that the other variants compile exactly as without it.
// kKTail: the per-tensor 128 x 256 down tile at K = 192 (TP8 shards of Hy3 and Qwen3-235B), whose item's second and
// last stage holds 64 bytes of K (TMA zero-fills the rest): its wgmma groups stop after two k32 steps there, a
// quarter of the item's MMA work (a template parameter, so that no wgmma sits in a divergent path, and the
// other variants compile exactly as without it).
template <int BM, int BN, bool kGateUp, bool kBlock, bool kIndex = false, bool kKTail = false>
struct MoeGemmConfig {
  static_assert(!kKTail || (BM == 128 && BN == 256 && !kGateUp && !kBlock), "K tail: the per-tensor 128 x 256 down");
  static_assert(BM == 16 || BM == 32 || BM == 48 || BM == 64 || BM == 128, "block_m");
  static_assert(BM != 48 || (!kBlock && BN == 128), "48-row tiles: per-tensor, 128 weight rows");
  static_assert(BN == 128 || BN == 256 || (BN == 192 && BM == 128 && kGateUp && !kBlock), "tile_n");
  static_assert(!kBlock || !kGateUp || BN == 256, "block-scaled gate-up: a whole 128-column activation group");
  static_assert(BM != 128 || !kGateUp || (kBlock ? BN == 256 : BN == 128 || BN == 192),
                "128-row gate-up tiles: 128 or 192 weight rows per-tensor, 256 block-wise");
  // 64-row tiles: two consumer warpgroups, each a wgmma m64 over half the weight rows (warp w of a warpgroup
  // holds rows 16w..16w+15); 128-row tiles (the wide gate-up): two consumer warpgroups, each a wgmma m64 over
  // its half of the rows and all the weight rows (one weight stage feeds 128 rows); 16- to 48-row tiles: one
  // warpgroup, operands swapped (kSwapAB below).
  static constexpr bool kWgmma = BM >= 64;
  // 16-row tiles (and 32-row ones, below): wgmma with the operands swapped (D^T = W x X^T, m64n16k32: 64 weight
  // rows x the tile's 16 rows), one warpgroup, BN / 64 m64 blocks per stage (gate-up: its gate blocks, then its
  // up blocks, so that a thread holds matching gate and up values; down: the weight rows in order). sm_90 has no
  // FP8 mma.sync: the m16n8k32 e4m3 path compiles to F2FP unpacks, f16 HMMAs and FADDs (session 11 run 6: ~460
  // instructions per warp and stage on the down GEMM at hy3 TP8 128 tokens, issue-bound). Accumulator
  // acc[0][2 b + j][i]: weight row 64 b + 16 warp + g + 8 (i >> 1) of the tile, tile row 8 j + 2 t4 + (i & 1).
  // 32-row tiles (session 19; 12-32 rows per expert by the GEMMs' task counts, see block_m()): m64n32k32, four n8 tiles
  // of tile rows per m64 block: acc[0][4 b + j][i], j = 0..3 (kSwapRowTiles = BM / 8 in general). 48-row tiles
  // (per-tensor, 128 weight rows: m64n48k32, six n8 tiles; the accumulators and the two stage partials take 144
  // registers: 2 CTAs of 160 threads per SM need <= 168 per thread, hence kMinBlocks = 2 below).
  static constexpr bool kSwapAB = BM <= 48;
  static constexpr int kSwapBlocks = BN / 64;
  static constexpr int kSwapRowTiles = BM / 8;
  static constexpr int kWarpsM = kSwapAB ? 1 : BM / 16;
  static constexpr int kWarpsN = kSwapAB ? 4 : 128 / BM;
  static constexpr int kConsumerWarps = kWarpsM * kWarpsN;
  static constexpr int kConsumerThreads = 32 * kConsumerWarps;
  // The producer: one warp, or for 128-row tiles a warpgroup, whose 128 threads gather the tile's A rows (8
  // cp.async per thread and stage instead of 32: session 10's 128-row tiles with one producer warp measured
  // 1.03-1.30x slower than 64-row ones, the gather by one warp the likeliest cause). 384 threads at one CTA
  // per SM leave 168 registers per thread, what session 10's 128-row consumers needed (167).
  // (128-row down tiles get their A rows by TMA, but take a producer warpgroup too: setmaxnreg below works on
  // whole warpgroups, and with 9 warps a sub-partition's register file holds 3 of them at 168 registers.)
  static constexpr int kProducerThreads = BM == 128 ? 128 : 32;
  // The block-wise 128-row tile (128 x 256: a whole 128-column activation group) holds 128 accumulators per
  // consumer thread plus two 32-register partials (kParts below): more than the 168 registers 384 threads get.
  // Its warpgroups re-balance them with setmaxnreg: the producer gives up to kProducerRegs, the consumers take
  // kConsumerRegs (128 x 56 + 256 x 224 = 384 x 168, the registers the launch allocates).
  // (and the per-tensor 128 x 192 gate-up at I = 192: 96 accumulators plus two 48-register half-stage partials)
  static constexpr bool kSetMaxNReg = BM == 128 && (BN == 256 || BN == 192);  // block-wise gate-up; down at 256
  static constexpr int kProducerRegs = 56, kConsumerRegs = 224;
  // ptxas honours setmaxnreg only with a known register count at entry: one CTA per SM in the launch bounds
  // (without it, C7508: ignored); the other kernels keep the bounds they had (0: unspecified)
  // 48-row swapped tiles: 2 CTAs per SM in the bounds, or ptxas takes 180-197 registers and one CTA fits (a
  // helper's review: registers go out per warp in 256-register units, 2 warps of 200 per sub-partition; capped
  // at 168 the down kernel spills 24 bytes)
  // The 32-row down tile over 256 weight rows too: it needs 164-165 registers, 3-4 below what 2 CTAs per SM
  // allow, and without the bound a few more would silently halve its occupancy (a helper's review, session 27).
  // The gate-up tiles with the hand-off warp (kHandoffWarp: its comment below) too: 2 CTAs of 192 threads allow 168.
  static constexpr bool kHandoffWarp = kGateUp && kSwapAB && !kBlock && BM <= 32 && !kIndex;
  static constexpr int kMinBlocks =
      kSetMaxNReg ? 1
                  : (kSwapAB && (BM == 48 || (!kGateUp && BM == 32 && BN == 256) || kHandoffWarp)) ? 2 : 0;
  static_assert(!kSetMaxNReg || kProducerRegs * kProducerThreads + kConsumerRegs * 256 <= 168 * 384,
                "setmaxnreg: the warpgroups' registers fit what the launch allocated");
  // The per-tensor swapped gate-up's split hand-off warp (session 58): a warp after the producer takes each split
  // piece's arrival atomic and, for a task's last piece, the merge, the act codes and the tile_ready release, so
  // that the consumers park a piece's partial and go on to their next item (session 57's trace: the park, the
  // arrival atomic and the barriers around it took 3.3-6.0 us of a CTA's first items at EP8; a bound without the
  // hand-off measured 0.928-0.966x at seven EP8 points). MoeKernelArgs::split_handoff = 0 keeps the consumers' own
  // hand-off (the warp leaves at once). Not in the 48-row tile: at its 168 registers (2 CTAs per SM) the warp's
  // code made ptxas spill 12-32 bytes; the decode points the hand-off is for run 16- and 32-row tiles. Not in the
  // GEMM-index kernels (kIndex): built with the warp they measured 1.007-1.109x slower at all 18 per-tensor points
  // that take them (TP8 4-64, EP8 4-8 tokens), and 1.010-1.105x with the warp leaving at once (HANDOFF=0), their
  // producers' first A copies 3.5-5.5 us later (medians; session 58 calls 1-2; not the extra warp itself: an idle
  // one that returns at once, with the old launch bound, measured 0.994-1.014x there in call 4; nor the 2-CTA
  // bound alone, 0.996-1.017x, or the queue's shared memory and barriers alone, 0.992-1.015x: session 59 call 1;
  // nor the act store through swap_gate_up_act_store, session 59 call 2, so what is left is the warp's code
  // itself); without it they compile as before. Measured with the warp
  // (call 3, against main, medians of 2 rounds, per-tensor 4-64 tokens): qwen3 EP8 16 / 32 tokens 0.968 / 0.961x,
  // deepseek EP8 16 0.993, hy3 EP8 16 0.994, 0.997x geomean over 27 points.
  static_assert(!kHandoffWarp || BN == 128, "the hand-off warp's act store: 128 weight rows (64 act columns)");
  static constexpr int kThreads = kConsumerThreads + kProducerThreads + (kHandoffWarp ? 32 : 0);
  static constexpr int kWM = BM / kWarpsM;  // rows per warp
  static constexpr int kWN = BN / kWarpsN;  // weight rows per warp
  static constexpr int kMT = kSwapAB ? 1 : kWM / 16;
  static constexpr int kNT = kSwapAB ? kSwapRowTiles * kSwapBlocks : kWN / 8;
  static_assert(!kGateUp || kNT % 4 == 0, "gate-up: a thread's gate and up halves are whole n8 pairs");
  static constexpr int kBK = kTileK;                    // 128 bytes of K per stage = one TMA box row
  static constexpr int kABytes = BM * kBK;
  // The K-tail down runs over row groups of up to 256 rows (two 128-row tiles of one expert: a.tiles_pair), its
  // stage holding both tiles' A rows and the one weight block they share (staged once per group instead of once
  // per tile: the tiles' MMAs run one after the other from the same stages)
  static constexpr int kATiles = kKTail ? 2 : 1;
  static constexpr int kWOffset = kATiles * kABytes;    // the weight box's offset in a stage
  static constexpr int kStageBytes = (kATiles * BM + BN) * kBK;  // multiple of 1024: every region swizzle-aligned
  static_assert(kABytes % 1024 == 0 && kStageBytes % 1024 == 0, "128-byte swizzle needs 1 KB aligned tiles");
  static constexpr int kBoxRows = kGateUp ? BN / 2 : BN;
  // Down: the A rows (act, by sorted slot) of a tile are contiguous, so they arrive by TMA too (a BM x 128-byte
  // box at the tile's first slot; rows past the tile are other tiles' rows, whose outputs are never stored);
  // per-tensor swapped (16- to 48-row) tiles keep cp.async (with TMA, hy3 TP8 at 4 tokens took 47.4 us against
  // 44.9 on 16-row tiles).
  // Gate-up gathers its A rows through the routing index with cp.async.
  static constexpr bool kTmaA = !kGateUp && (BM >= 64 || kBlock);
  // The producer's lanes copy with cp.async (A rows, block-wise scales) and arrive on the full barrier when
  // those land; per-tensor down copies nothing that way.
  static constexpr bool kLaneCopies = !kTmaA || kBlock;
  static constexpr int kBoxes = kGateUp ? 2 : 1;
  // 16- to 48-row tiles with 128 weight rows run 2 CTAs per SM (32 rows: 5 stages of 20 KB; 48: 5 of 22 KB, two
  // CTAs of 114.9 KB with the 1 KB reserved per CTA in the SM's 228 KB), and so do the 16- and 32-row down tiles
  // over 256 weight rows (3 stages of 34 / 36 KB; the 16-row one at 6 stages and one CTA per SM measured no gain,
  // session 27); the others one, with a deeper ring (the 256-row down tile leaves room for its output staging,
  // 34 KB).
  // 128-row down tiles: room for their output staging (8 warps x 16 rows: 67.6 KB at 256 weight rows, 34.8 KB
  // at 128)
  static constexpr int kBudget = kKTail                                   ? 192 * 1024  // 3 stages of 64 KB
                                 : (BM == 48)                               ? 110 * 1024
                                 : (kSwapAB && BN == 128)               ? 108 * 1024
                                 : (kSwapAB && !kGateUp)                ? 108 * 1024
                                 : (!kGateUp && BM == 64 && BN == 256)  ? 170 * 1024
                                 : (!kGateUp && BM == 128 && BN == 256) ? 150 * 1024
                                 : (!kGateUp && BM == 128)              ? 180 * 1024
                                                                        : 205 * 1024;
  static constexpr int kStages = kBudget / kStageBytes > 8 ? 8 : kBudget / kStageBytes;
  static_assert(kStages >= 3, "ring depth");
  static constexpr int kScaleFloats = BM + 2;          // per stage: activation scale per row, weight scale(s)
  static constexpr int kAChunks = BM * (kBK / 16) / kProducerThreads;  // A chunks per producer thread per stage
  static constexpr int kScaleSlots = (kScaleFloats + kProducerThreads - 1) / kProducerThreads;  // per producer thread
  // Down, 64-row tiles: each warp's bf16 output block (kWM rows x kWN columns: 16 x 128 or 256 bytes) goes
  // through its own shared-memory block, so that it is stored as whole row segments in 16-byte chunks (the
  // fragment layout stores 4 bytes per thread, 8 rows per warp instruction); warp-local, no CTA barrier.
  static constexpr bool kStagedOut = !kGateUp && BM >= 64;
  // The K-tail down stages a warp's block in kOutRounds rounds of kOutCols columns (18 KB instead of 67.6: its
  // 64 KB stages take the room)
  static constexpr int kOutRounds = kKTail ? 4 : 1;
  static constexpr int kOutCols = kWN / kOutRounds;             // columns of a warp's block per round
  static constexpr int kOutRowChunks = kOutCols * 2 / 16;       // 16-byte chunks per row of a round's block
  static constexpr int kOutStride = kOutCols * 2 + 16;          // bytes per staged row: conflict-free 4-byte writes
  static constexpr int kOutWarpBytes = kWM * kOutStride;
  static constexpr int kOutBytes = kStagedOut ? kConsumerWarps * kOutWarpBytes : 0;
  static constexpr int kOutChunks = kStagedOut ? kWM * kOutRowChunks / 32 : 1;  // per lane
  static_assert(!kStagedOut || (kMT == 1 && kWM * kOutRowChunks % 32 == 0), "whole chunks per lane");
  static_assert(!kStagedOut || kNT % kOutRounds == 0, "whole n8 tiles per staging round");
  static constexpr int kOutOffset =  // after the ring, the scales, s_amax and the barriers, 16-byte aligned
      (kStages * kStageBytes + kStages * kScaleFloats * 4 + BM * 4 + 2 * kStages * 8 + 15) / 16 * 16;
  // The swapped gate-up builds the routing index itself when a.gemm_index says (gemm_index.cuh): its two tables
  // (kGemmIndexBytes) take the per-tensor kernels' scale and s_amax region where it is large enough (unused
  // there: only block-wise kernels read scales or amax; the 48-row tile, whose two CTAs per SM leave 0.7 KB),
  // else room after the output staging.
  static constexpr bool kIndexKernel = kGateUp && kSwapAB && kIndex;
  static constexpr bool kIndexReader = !kGateUp && kSwapAB && kIndex;  // the down that acquires the published list
  static_assert(!kIndex || kSwapAB, "the GEMM index: swapped variants only");
  static constexpr bool kIndexInScales =
      kIndexKernel && !kBlock && kStages * kScaleFloats * 4 + BM * 4 >= kGemmIndexBytes;
  static constexpr int kIndexOffset = kIndexInScales ? kStages * kStageBytes : kOutOffset + kOutBytes;
  static constexpr int kIndexExtra = kIndexKernel && !kIndexInScales ? kGemmIndexBytes : 0;
  static constexpr int kSmemBytes = 1024 /* alignment slack */ + kOutOffset + kOutBytes + kIndexExtra;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA");
  // the swapped tiles over 128 weight rows keep two CTAs per SM (228 KB, 1 KB reserved per CTA, up to 0.5 KB of
  // static shared memory each)
  static_assert(!(kSwapAB && BN == 128) || 2 * (kSmemBytes + 1024 + 512) <= 228 * 1024, "two CTAs per SM");
  static_assert(!kSwapAB || BM * BN <= kSplitSliceFloats, "a split partial tile fits its workspace slice");
  // the swapped down's stage retire applies one weight scale per stage (sc[BM]): one 128-row weight block
  static_assert(!(kSwapAB && kBlock && !kGateUp) || BN == 128, "block-wise swapped down: 128 weight rows");
};

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of 128-byte rows with the 128-byte swizzle
// (what TMA writes for SWIZZLE_128B from a 1 KB aligned base; the A rows are placed the same way).
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return static_cast<uint32_t>(row * 128 + ((chunk ^ (row & 7)) << 4));
}

__device__ __forceinline__ float silu(float x) { return x / (1.f + __expf(-x)); }

// f(mt, nt, i) over every element of a [MT][NT][4] accumulator tile (fully unrolled: the tiles stay in registers)
template <int MT, int NT, class F>
__device__ __forceinline__ void for_each_acc(F&& f) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) f(mt, nt, i);
}

// f(std::integral_constant<int, i>) for i = 0 .. N - 1, unrolled at compile time (register arrays stay arrays)
template <class F, int... Is>
__device__ __forceinline__ void static_for_impl(F& f, std::integer_sequence<int, Is...>) {
  (f(std::integral_constant<int, Is>{}), ...);
}
template <int N, class F>
__device__ __forceinline__ void static_for(F&& f) {
  static_for_impl(f, std::make_integer_sequence<int, N>{});
}
// a or b, chosen at compile time
template <int kSecond, class T>
__device__ __forceinline__ T& select_ref(T& a, T& b) {
  if constexpr (kSecond != 0) {
    return b;
  } else {
    return a;
  }
}

// Swapped (16- to 48-row) tiles' stores. The accumulators of one m64 block and 8 tile rows hold, per half hi, an
// 8 x 8 block of (output column g + 8 hi, tile rows 2 t4, 2 t4 + 1) pairs, the mma fragment layout; x01 / x23
// are the two halves packed as b16 pairs. movmatrix.trans turns each into (tile row g, output columns 2 t4,
// 2 t4 + 1), then lanes t4 and t4 ^ 1 trade halves: an even t4 keeps columns 2 t4 .. 2 t4 + 3 of half 0, an odd
// one columns 8 + 2 t4 - 2 .. 8 + 2 t4 + 1 of half 1, so that the 4 lanes of a row hold its 16 columns in order.
// Returns those 4 columns as two words (the first two columns, then the next two); every lane of the warp calls
// it (shuffle). swap_store_col: the first of the 4 columns, past the block's first column (+ 64 per m64 block).
__device__ __forceinline__ uint2 swap_store_pairs(uint32_t x01, uint32_t x23, int t4) {
  const bool odd = (t4 & 1) != 0;
  const uint32_t h0 = movmatrix_trans(x01);
  const uint32_t h1 = movmatrix_trans(x23);
  const uint32_t got = __shfl_xor_sync(0xffffffffu, odd ? h0 : h1, 1);
  return odd ? make_uint2(got, h1) : make_uint2(h0, got);
}
__device__ __forceinline__ int swap_store_col(int warp, int t4) {
  return 16 * warp + ((t4 & 1) != 0 ? 8 + 2 * t4 - 2 : 2 * t4);
}

// Per-tensor swapped gate-up (16- to 48-row tiles over 128 weight rows: J = rows / 8): one consumer warp's
// accumulators (warp w's fragment, acc[j][i] gate and acc[J + j][i] up, see kSwapAB) as act codes: SiLU(gate) *
// up, / a2, FP8 e4m3, stored into act rows row_begin + r (r < rows), columns n0 + 16 w + ... (4 per lane, through
// swap_store_pairs). Every lane of the calling warp calls it (shuffles). The consumers call it for their own warp,
// the hand-off warp once per consumer warp of a merged split task.
template <int J>
__device__ __forceinline__ void swap_gate_up_act_store(const float (&acc)[2 * J][4], float out_scale, float a2,
                                                       int rows, int row_begin, int n0, int I, uint8_t* act, int w,
                                                       int lane) {
  const int g = lane >> 2, t4 = lane & 3;
  const int col = n0 + swap_store_col(w, t4);
#pragma unroll
  for (int j = 0; j < J; ++j) {
    uint32_t c[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // a padding row's zero would send silu's IEEE division down its slow path (a subroutine call per element):
      // feed it 1 and divide 1, whose codes are never stored (silu(0) * up = 0 is what a zero row gives)
      const bool valid = 8 * j + 2 * t4 + (i & 1) < rows;
      const float gate = valid ? acc[j][i] * out_scale : 1.f;
      const float h = valid ? silu(gate) * (acc[J + j][i] * out_scale) : 1.f;
      c[i] = __nv_cvt_float_to_fp8(h / a2, __NV_SATFINITE, __NV_E4M3);
    }
    const uint2 wd = swap_store_pairs(c[0] | (c[1] << 16), c[2] | (c[3] << 16), t4);
    const int r = 8 * j + g;
    if (r < rows) {  // bytes 0 and 2 of each word are the codes (0x6420: x.b0, x.b2, y.b0, y.b2)
      *reinterpret_cast<uint32_t*>(act + static_cast<int64_t>(row_begin + r) * I + col) =
          __byte_perm(wd.x, wd.y, 0x6420);
    }
  }
}

// The swapped wgmmas of one 32-byte K step (16-, 32- or 48-row tiles: R tile rows, m64nRk32): m64 block b (weight
// rows 64 b .., w's address + b * 8 KB) into d[(R / 8) b .. (R / 8) b + R / 8 - 1] (the tile's rows 8 j ..);
// `first`: the stage's first step (d written, not read).
template <int kBlocks, int R, int NT>
__device__ __forceinline__ void swap_wgmma_blocks(float (&d)[NT][4], uint64_t w, uint64_t dx, bool first) {
  static_assert(R == 16 || R == 32 || R == 48, "swapped tiles: 16, 32 or 48 rows");
  static_assert(NT == (R / 8) * kBlocks, "R / 8 n8 tiles per m64 block");
  constexpr int J = R / 8;
#pragma unroll
  for (int b = 0; b < kBlocks; ++b) {
    const uint64_t dw = gmma_desc_add(w, b * 64 * 128);
    if (first) {
      if (b == 0) wgmma_m64k32_e4m3_first<R, 0 * J>(d, dw, dx);
      if (b == 1) wgmma_m64k32_e4m3_first<R, 1 * J>(d, dw, dx);
      if constexpr (kBlocks > 2) {
        if (b == 2) wgmma_m64k32_e4m3_first<R, 2 * J>(d, dw, dx);
        if (b == 3) wgmma_m64k32_e4m3_first<R, 3 * J>(d, dw, dx);
      }
    } else {
      if (b == 0) wgmma_m64k32_e4m3<R, 0 * J>(d, dw, dx);
      if (b == 1) wgmma_m64k32_e4m3<R, 1 * J>(d, dw, dx);
      if constexpr (kBlocks > 2) {
        if (b == 2) wgmma_m64k32_e4m3<R, 2 * J>(d, dw, dx);
        if (b == 3) wgmma_m64k32_e4m3<R, 3 * J>(d, dw, dx);
      }
    }
  }
}

// kPairs (the per-tensor 128-row gate-up at prefill, gate_up_pairs in heuristics.h): the grid runs as clusters of
// two CTAs. A cluster takes one pair of consecutive entries of the 128-row tile list at a time (tiles 2 p and
// 2 p + 1; rank r computes tile 2 p + r, with the same column block). Where both tiles belong to one expert, each
// CTA loads one of the stage's two weight boxes (rank 0 the gate rows, rank 1 the up rows) and multicasts it to
// both, so that each SM pulls 12 of a 128 x 192 stage's 24 KB of weights (or 8 of 16 KB at 128 weight rows) from
// L2; its 16 KB of gathered A rows stay its own. A pair whose tiles belong to two experts loads as single CTAs
// do; a missing second tile (an odd tile count) computes an empty tile of the first one's expert, and multicasts.
// The ring's slots are written by both CTAs' copies, so a slot is free only when both CTAs' consumers released
// it: every consumer warp arrives on both CTAs' empty barriers, and both CTAs run the same stages in the same
// order (the same pairs, every item the whole of K). The producer waits, before it leaves, for its ring's last
// releases (the peer's consumers arrive on this CTA's barriers until then).
template <int BM, int BN, bool kGateUp, bool kBlock, bool kPairs = false, bool kIndex = false, bool kKTail = false>
__global__ void __launch_bounds__(MoeGemmConfig<BM, BN, kGateUp, kBlock, kIndex, kKTail>::kThreads,
                                  MoeGemmConfig<BM, BN, kGateUp, kBlock, kIndex, kKTail>::kMinBlocks)
    moe_gemm_kernel(const MoeKernelArgs a, const __grid_constant__ CUtensorMap wmap,
                    const __grid_constant__ CUtensorMap amap) {
  using C = MoeGemmConfig<BM, BN, kGateUp, kBlock, kIndex, kKTail>;
  static_assert(!kPairs || (BM == 128 && kGateUp && !kBlock), "pairs: the per-tensor 128-row gate-up");
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  float* s_scale = reinterpret_cast<float*>(smem + C::kStages * C::kStageBytes);  // [kStages][kScaleFloats]
  unsigned* s_amax = reinterpret_cast<unsigned*>(s_scale + C::kStages * C::kScaleFloats);  // [BM]
  uint64_t* full = reinterpret_cast<uint64_t*>(s_amax + BM);                         // [kStages]
  uint64_t* empty = full + C::kStages;                                               // [kStages]
  uint8_t* s_out = smem + C::kOutOffset;                      // [kConsumerWarps][kWM][kOutStride] (kStagedOut)
  __shared__ int s_last_slice;
  // the split hand-off (C::kHandoffWarp): records {task, item index u} and the tile, kHandQ deep; full: thread 0
  // of the consumers wrote one (1 arrival), empty: the warp copied it. (A task's pieces are its S slices: the
  // warp's kernels are per-tensor, stream-K is block-wise only.)
  constexpr int kHandQ = 2;
  __shared__ int2 s_hand_rec[C::kHandoffWarp ? kHandQ : 1];
  __shared__ int4 s_hand_tile[C::kHandoffWarp ? kHandQ : 1];
  __shared__ uint64_t s_hand_full[C::kHandoffWarp ? kHandQ : 1], s_hand_empty[C::kHandoffWarp ? kHandQ : 1];
  __shared__ int s_handed;  // the records consumer thread 0 wrote (thread 0 alone: no register across the items)
  const bool handoff = C::kHandoffWarp && a.split_handoff != 0;
  // consumer thread 0: the next record into the queue (after the warp copied the one kHandQ before it)
  // (tile: none for the end record)
  auto push_hand = [&](int2 rec, const int4* tile) {
    const int handed = s_handed, q = handed % kHandQ;
    if (handed >= kHandQ) mbar_wait_bounded(&s_hand_empty[q], ((handed / kHandQ) - 1) & 1);
    s_hand_rec[q] = rec;
    if (tile != nullptr) s_hand_tile[q] = *tile;
    mbar_arrive(&s_hand_full[q]);  // (release, CTA scope: what the consumers stored before their barrier)
    if (tile != nullptr) s_handed = handed + 1;  // (the end record is the last)
  };
  // swapped down (kClaims below): item u >= 1's {expert, row_begin, rows, item} (item -1: no more), written by the
  // producer into the slot of the item's first stage before it arms that stage
  __shared__ int4 s_claim[C::kStages];
  // a.gemm_index (swapped gate-up, gemm_index.cuh): the routing index's tables, the producer's current tile rows
  // (entry ids) and the dropped entries' count
  uint16_t* s_roff = reinterpret_cast<uint16_t*>(smem + C::kIndexOffset);  // [kGemmIndexSlots]
  uint16_t* s_toff = s_roff + kGemmIndexSlots;                             // [kGemmIndexSlots]
  __shared__ int s_rows[C::kIndexKernel ? BM : 1];
  __shared__ int s_dropped;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  HK_MT_ONLY(const unsigned long long tr_entry = globaltimer();)
  // the producer's threads, and each one's index in it (a one-warp producer's index is its lane: said so, the
  // one-warp kernels compile as before, 8-10 registers fewer in the 16-row down kernels)
  const bool producer = C::kProducerThreads == 32 ? warp == C::kConsumerWarps : warp >= C::kConsumerWarps;
  const int pl = C::kProducerThreads == 32 ? lane : tid - C::kConsumerThreads;

  const int H = a.hidden_size, I = a.intermediate;
  const int K = kGateUp ? H : I;
  const int N = kGateUp ? I : H;                 // output columns
  const int cols_per_task = kGateUp ? BN / 2 : BN;
  const int n_blocks = (N + cols_per_task - 1) / cols_per_task;
  const int nk = (K + C::kBK - 1) / C::kBK;
  const int kb_per_row = K / kScaleBlock;        // block-wise: activation / weight scale groups along K

  if (tid == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      // the producer's expect_tx (+ its threads' cp.async arrivals)
      mbar_init(&full[s], C::kLaneCopies ? 1 + C::kProducerThreads : 1);
      mbar_init(&empty[s], C::kConsumerWarps * (kPairs ? 2 : 1));  // pairs: both CTAs' consumer warps
    }
    if constexpr (C::kHandoffWarp) {
      s_handed = 0;
      for (int q = 0; q < kHandQ; ++q) {
        mbar_init(&s_hand_full[q], 1);
        mbar_init(&s_hand_empty[q], 1);
      }
    }
    fence_barrier_init();
    prefetch_tensormap(&wmap);
    if (C::kTmaA) prefetch_tensormap(&amap);
  }
  if (kBlock && kGateUp && tid < BM) s_amax[tid] = 0u;
  // The routing index built here (a.gemm_index: the swapped gate-up; kernel 1 then only resets and quantises): the
  // tables from topk_ids while kernel 1 runs (the build's first barrier also publishes the ring's barriers), and
  // the publisher CTA writes the tile list, the offsets and counters[0..1] for the down GEMM (which reads them once
  // the publisher has released counters[7], below) and the tests. Kernel 1 writes none of them in this mode.
  // The publisher is the grid's last CTA (gemm_index_publisher: with CTA 0 publishing, CTA 0 started its first
  // item 9.5-10.1 us after the grid's first entry, the median CTA 4.1-4.9: session 57's trace).
  constexpr bool gidx = C::kIndexKernel;  // (the host picks this variant where a.gemm_index says)
  if constexpr (gidx) {
    gemm_index_build<BM, C::kThreads>(a, s_roff, s_toff, &s_dropped);
    if (gemm_index_publisher()) {
      const int E = a.num_local_experts, T = s_toff[E];
      for (int ti = tid; ti < T; ti += C::kThreads) a.tiles[ti] = gemm_index_tile<BM>(s_roff, s_toff, E, ti);
      for (int e = tid; e <= E; e += C::kThreads) a.expert_offset[e] = s_roff[e];
      if (tid == 0) a.counters[0] = T, a.counters[1] = s_dropped;
    }
  }
  // Down, swapped (16- to 48-row) tiles: the weights do not depend on the gate-up grid it follows (only the A operand,
  // act, does), so the producer issues the weight boxes of its first kStages stages (per-tensor: of its first
  // item's, kClaims below) before waiting for that grid: a CTA that becomes resident while gate-up CTAs still run streams weights during their tail. The tile
  // list it needs comes from the prep grid, complete before any gate-up CTA passed its own wait, hence before
  // this grid was launched (PDL trigger after that wait; this holds because the down grid is only ever launched
  // right after the gate-up grid, see fused_moe() in fused_moe.cpp). Each stage's expect_tx covers the weights
  // and the A box (TMA); the A rows follow after the wait, or after the item's per-tile wait where the down
  // waits per tile (a.tile_ready, below; the main loop below skips the first pre_steps stages' weights). Not
  // for 64-row tiles: at prefill the gate-up CTAs leave only at its end (and the 256-row down kernel would spill
  // 4 bytes).
  constexpr bool kEarlyWeights = !kGateUp && C::kSwapAB;
  // Dynamic items (per-tensor swapped down, session 34): a CTA's first item is blockIdx.x, each later one is
  // claimed from a counter (a.counters[4], zeroed by prep) when the previous one starts, so that CTAs that become
  // resident early (while the gate-up's last round runs) take more items and those resident late fewer, instead
  // of every CTA taking every gridDim.x-th. Items run column block fastest (task = tile x n_blocks + block, as
  // the swapped gate-up's), so the items claimed first belong to the tiles the gate-up finished first. The
  // producer passes each later item (and its tile) to the consumers through s_claim; an item of -1 ends them.
  // Measured on an H200 (session 34 calls 4 and 5, cross-build A/B over 50 points at 4-256 tokens, MoE tests
  // 131/131 under it): per-tensor 0.986 / 0.988x geomean over 30 points (qwen3 TP8 64-256 tokens 0.95-0.97x:
  // 256 101.1 -> 96.9 us, 128 86.8 -> 83.0, 64 85.4 -> 82.3; hy3 TP8 128 / 256 0.96 / 0.94-0.95x: 256 140.0 ->
  // 131.8; deepseek TP8 16-256 0.96-0.98x; slower: qwen3 TP8 16 1.04-1.05x, qwen3 EP8 128 / 256 1.03x, hy3 EP8
  // 16 1.02-1.03x, 4 tokens 1.01-1.04x), block-wise 1.010 / 1.013x over 20 (deepseek TP8 64-256 1.01-1.03x), so
  // the block-wise downs keep their static items. Per-tensor, the claims alone (tile-fastest order) measured
  // 0.996x and the order alone 1.004x (call 5): the gain needs both.
  constexpr bool kClaims = !kGateUp && C::kSwapAB && !kBlock;
  // Task -> its tile (index into the tile list) and its block of output columns, for `tiles` tiles: column block
  // fastest (task = tile x n_blocks + block) in the swapped gate-up (kReadyWriter below) and the claimed downs,
  // tile fastest elsewhere. (tile_idx / col_blk below, once the tile count is read; the pre-wait weights here.)
  // The K-tail down's row groups too: groups are one or two tiles long, and with group fastest a grid stride that
  // divides the groups' period gives every CTA the same kind (at hy3 TP8 8192 tokens, three tiles per expert: one
  // group of two, one of one, and an even grid took only one kind per CTA: measured 1.049x, session 69 call 4).
  constexpr bool kColFastest = (kGateUp && C::kSwapAB) || kClaims || kKTail;
  auto task_tile = [&](int task, int tiles) { return kColFastest ? task / n_blocks : task % tiles; };
  auto task_col = [&](int task, int tiles) { return kColFastest ? task % n_blocks : task / tiles; };
  int pre_steps = 0;
  if constexpr (kEarlyWeights) {
    // the GEMM index: the tile list is the gate-up's publisher's (its last CTA), released before that CTA triggered
    // this grid; acquired here once for the CTA (the barrier below orders every thread's reads of it after)
    if constexpr (C::kIndexReader) {
      if (tid == 0) wait_count_at_least(a.counters + 7, 1);
    }
    __syncthreads();  // barriers initialised
    if (producer && lane == 0) {
      const int nt0 = __ldcg(a.counters);
      const int tasks0 = nt0 * n_blocks;
      const int S0 = C::kSwapAB && a.allow_split ? split_k_slices(tasks0, gridDim.x, nk, a.allow_split) : 1;
      const uint64_t policy = C::kSwapAB ? policy_evict_first() : policy_evict_normal();
      // (kClaims: the first item only; the later ones are claimed as the CTA goes)
      for (int item = blockIdx.x; item < tasks0 * S0 && pre_steps < C::kStages; item += gridDim.x) {
        const int task = item / S0, slice = item % S0;
        const int e = __ldcg(&a.tiles[task_tile(task, nt0)].x);
        const int n0 = task_col(task, nt0) * cols_per_task;
        for (int kt = slice * nk / S0; kt < (slice + 1) * nk / S0 && pre_steps < C::kStages; ++kt, ++pre_steps) {
          const int slot = pre_steps;  // < kStages: no wait for a free slot
          uint8_t* sb = smem + slot * C::kStageBytes + C::kWOffset;
          mbar_arrive_expect_tx(&full[slot], C::kBoxRows * C::kBK + (C::kTmaA ? BM * C::kBK : 0));
          tma_load_4d(sb, &wmap, &full[slot], kt * C::kBK, n0, e, 0, policy);
        }
        if (kClaims) break;
      }
    }
    pre_steps = __shfl_sync(0xffffffffu, pre_steps, 0);  // per warp: the producer's lanes learn it from lane 0
  }
  // Per-tile ready counts (a.tile_ready, swapped tiles): the gate-up adds the act columns each of its tasks
  // wrote to its tile's count (release, after the consumers' barrier), and the swapped down, instead of waiting
  // for the whole gate-up grid, waits (acquire) for its item's tile to reach I before it reads the tile's act
  // rows. No deadlock: the down grid starts only once every gate-up CTA has passed its own wait (the trigger
  // below), so the tasks it waits on belong to CTAs that are already running. Not with split-K in the down (its
  // partials and counters share the workspace with the gate-up's): then it waits for the grid as before.
  // The swapped gate-up takes its tasks column block fastest (task = tile x n_blocks + block), so that tiles
  // complete in order while its last round runs, and the down finds its first tiles done (block-wise: tile
  // fastest; per-tensor: column block fastest, with claimed items, kClaims above).
  constexpr bool kReadyWriter = kGateUp && C::kSwapAB;
  constexpr bool kReadyReader = !kGateUp && C::kSwapAB;
  // the down reads the tile count before its wait: the prep grid wrote it, complete before any gate-up CTA
  // passed its wait, hence before this grid was launched (as kEarlyWeights above)
  if constexpr (!kReadyReader) {
    if (!gidx) {  // (the GEMM index's gate-up waits below, after its first item's rows and weights)
      grid_dependency_wait();  // the routing index and the A operand come from the previous kernel
      launch_dependents();
    }
  }
  if constexpr (kPairs) {  // which gate-up ran (tests read it; prep zeroed it before this grid's wait released)
    if (blockIdx.x == 0 && tid == 0) a.counters[5] = 1;
  }
  // the wide gate-up (128-row tiles) drains the 128-row tile list the index build wrote beside the other
  // (the K-tail down: the row groups of up to 256 rows, kATiles above)
  const int4* const tile_list = kKTail ? a.tiles_pair : BM == 128 ? a.tiles_wide : a.tiles;
  const int num_tiles = gidx     ? static_cast<int>(s_toff[a.num_local_experts])
                        : kKTail ? a.counters[8]
                                 : a.counters[BM == 128 ? 2 : 0];
  // pairs: a task is (pair of tiles, column block), pair fastest
  const int npairs = (num_tiles + 1) / 2;
  const int tasks = (kPairs ? npairs : num_tiles) * n_blocks;
  // decode tiles split K when there are fewer tasks than CTAs, or just past one wave over a long K (see
  // split_k_slices); work item = (task, slice)
  const int S = C::kSwapAB && a.allow_split ? split_k_slices(tasks, gridDim.x, nk, a.allow_split) : 1;
  bool poll_ready = false;  // the down waits per tile, not for the gate-up grid
  if constexpr (kReadyReader) {
    poll_ready = a.tile_ready != nullptr && S == 1;
    if (!poll_ready) grid_dependency_wait();
    launch_dependents();
    if (blockIdx.x == 0 && tid == 0) a.counters[3] = poll_ready ? 1 : 0;  // which hand-off ran (tests read it)
  }
  HK_MT_ONLY(unsigned long long tr_waited = globaltimer();)  // (the index gate-up: again after its wait, below)
  // task -> its tile (index into tile_list) and its block of output columns
  static_assert(kColFastest == (kReadyWriter || kClaims || kKTail),
                "one task order for the hand-off's writer and readers (and the K-tail down's row groups)");
  const int rank = kPairs ? static_cast<int>(cluster_ctarank()) : 0;
  // (pairs: their tiles come from tile_of below only; tile_idx serves the non-prefetching and swapped paths)
  auto tile_idx = [&](int task) { return task_tile(task, num_tiles); };
  auto col_blk = [&](int task) { return kPairs ? task / npairs : task_col(task, num_tiles); };
  // split K: slot's parked partial tile, value v (the accumulators' order, for_each_acc) of consumer thread t at
  // [v * kConsumerThreads + t]
  auto split_partial = [&](int slot) {
    return a.split_partials + static_cast<int64_t>(slot) * (C::kMT * C::kNT * 4) * C::kConsumerThreads;
  };
  // the swapped gate-up (kReadyWriter): task's act columns [n0, ...) are stored, ordered before this by the caller's
  // barrier; add them to its tile's ready count for the down (release; the down reads act through the async proxy:
  // TMA block-wise, cp.async per-tensor)
  auto publish_tile_ready = [&](int task, int n0) {
    fence_proxy_async_global();
    red_add_release_gpu(a.tile_ready + tile_idx(task), min(cols_per_task, I - n0));
  };
  // work items: a cluster's (pairs) or a CTA's first, and the stride between a CTA's items (read where used: the
  // other kernels compile as before)
  auto first_item = [] { return kPairs ? blockIdx.x >> 1 : blockIdx.x; };
  // Balanced K ranges (stream-K: stream_k_applies in heuristics.h) for the block-wise 16 x 256 gate-up, which
  // runs one CTA per SM: CTA c takes the K steps [stream_k_begin(c), stream_k_begin(c + 1)) of all tasks x nk
  // steps laid end to end; a task shared by two CTAs ("pieces") parks their partials at stream_k_slot and the
  // last piece to arrive sums them in K order (as the split's slices: deterministic). Its work items are virtual:
  // item blockIdx.x + u gridDim.x is the CTA's u-th task, so the loops below run unchanged.
  constexpr bool kStreamKKernel = kGateUp && kBlock && BM == 16;
  static_assert(!kStreamKKernel || (C::kSwapAB && !C::kWgmma), "stream-K: swapped tiles (no kPrefetch, tile_of)");
  const int G = static_cast<int>(gridDim.x);
  const bool stream_k = kStreamKKernel && a.allow_split && stream_k_applies(tasks, nk, G);
  auto sk_begin = [&](int c) { return stream_k_begin(c, tasks, nk, G); };
  auto sk_cta_of_step = [&](int st) { return stream_k_cta_of_step(st, tasks, nk, G); };
  const int sk_b = stream_k ? sk_begin(blockIdx.x) : 0, sk_e = stream_k ? sk_begin(blockIdx.x + 1) : 0;
  const int sk_task0 = sk_b / nk;
  // items this CTA may run up to (exclusive): every CTA's own bound in stream-K mode
  const int items = stream_k ? static_cast<int>(blockIdx.x) + ((sk_e - 1) / nk - sk_task0 + 1) * G : tasks * S;
  // work item `item` (this CTA's u-th: item = blockIdx.x + u item_stride(), or claimed (kClaims)) -> its task
  auto task_of = [&](int item, int u) { return stream_k ? sk_task0 + u : item / S; };
  // Even rounds (the swapped gate-ups, a.even_rounds: gate_up_even_rounds in heuristics.h): the items go to as few
  // CTAs as keep their number of rounds, ceil(items / ceil(items / grid)), every round then as wide as the first;
  // the CTAs past them leave at once, so that their SM slots take the down grid's CTAs from the start.
  constexpr bool kEvenRoundsKernel = kGateUp && C::kSwapAB;
  int g_eff = static_cast<int>(gridDim.x);
  if constexpr (kEvenRoundsKernel) {
    if (a.even_rounds && !stream_k && items > 0) {
      const int rounds = (items + g_eff - 1) / g_eff;
      g_eff = (items + rounds - 1) / rounds;
    }
  }
  // (gridDim.x outside the even-rounds kernels: the other kernels compile as before)
  auto item_stride = [&] {
    return kPairs ? static_cast<int>(gridDim.x >> 1) : (kEvenRoundsKernel ? g_eff : static_cast<int>(gridDim.x));
  };
  auto item_range = [&](int item, int u, int& kb0, int& kb1) {
    if (stream_k) {
      stream_k_task_steps(task_of(item, u), sk_b, sk_e, nk, kb0, kb1);
      return;
    }
    const int slice = item % S;
    kb0 = slice * nk / S;
    kb1 = (slice + 1) * nk / S;
  };

  // The GEMM index's gate-up: this CTA's first item (none for an even-rounds CTA past g_eff) gets its rows, and
  // the weights of its first stages go out (the main loop skips those, pre_steps), before the wait for kernel 1
  // (the resets and the quantised input); then the publisher releases the tile count (+ 1) to the down GEMM, before
  // this grid's trigger, so that the down finds it published.
  if constexpr (gidx) {
    const int item0 = first_item();
    if (producer && item0 < items && item0 < g_eff) {
      const int task0 = task_of(item0, 0);
      const int4 t0 = gemm_index_tile<BM>(s_roff, s_toff, a.num_local_experts, tile_idx(task0));
      gemm_index_rows(a, s_roff, t0, s_rows);
      if (lane == 0) {
        int kb0, kb1;
        item_range(item0, 0, kb0, kb1);
        const int n0 = col_blk(task0) * cols_per_task;
        const uint64_t policy = policy_evict_first();
        for (int kt = kb0; kt < kb1 && pre_steps < C::kStages; ++kt, ++pre_steps) {
          uint8_t* sb = smem + pre_steps * C::kStageBytes + C::kWOffset;  // slot pre_steps: no wait for a free one
          mbar_arrive_expect_tx(&full[pre_steps], C::kBoxes * C::kBoxRows * C::kBK);
          tma_load_4d(sb, &wmap, &full[pre_steps], kt * C::kBK, n0, t0.x, 0, policy);                  // gate
          tma_load_4d(sb + C::kBoxRows * C::kBK, &wmap, &full[pre_steps], kt * C::kBK, I + n0, t0.x, 0, policy);
        }
      }
      pre_steps = __shfl_sync(0xffffffffu, pre_steps, 0);
    }
    __syncthreads();         // the publisher: its threads' tile list and offsets are written
    grid_dependency_wait();  // kernel 1: the per-call resets and the quantised input
    HK_MT_ONLY(tr_waited = globaltimer();)
    if (gemm_index_publisher() && tid == 0) red_add_release_gpu(a.counters + 7, num_tiles + 1);
    launch_dependents();
  }
  HK_MT_ONLY(if (tid == 0) {  // (before the barrier: the producer's events come after it)
    for (int e = 0; e < kMoeTraceSlots; ++e) HK_MT_SET(e, 0);
    HK_MT_SET(kMtEntry, tr_entry);
    HK_MT_SET(kMtWaited, tr_waited);
    HK_MT_SET(kMtSm, sm_id());
  })
  if constexpr (kEvenRoundsKernel) {  // (after the trace row's reset: a CTA that leaves records no items)
    if (a.even_rounds && blockIdx.x == 0 && tid == 0) a.counters[6] = g_eff;  // the CTAs that ran (tests read it)
    if (static_cast<int>(blockIdx.x) >= g_eff) return;  // (the whole CTA: no item of its own)
  }
  __syncthreads();  // barriers initialised, s_amax cleared
  if constexpr (kPairs) cluster_sync();  // and the peer's: its copies and arrivals may reach this CTA from now on

  // Which latency hiding each kernel gets, as measured (session 4, device runs 4-6):
  //  * kPrefetch (per-tensor 64-row tiles): the producer loads each item's tile two items ahead and its token ids
  //    one ahead, the consumers the tile one ahead (2% faster at >= 4096 tokens than loading them at the item's
  //    start; on 16-row tiles it measured 4% slower);
  //  * every tile: the consumers load the epilogue's inputs after the item's first stage instead of after its
  //    last (per-tensor decode 4% faster in session 4).
  constexpr bool kPrefetch = C::kWgmma && !kBlock;
  // work item `it`'s tile {expert, row_begin, rows, 0}; past the last item, an empty tile (nothing is read).
  // Pairs: {expert, row_begin, rows, multicast}: multicast 1 where the pair's two tiles share the expert or the
  // second is missing (this CTA's, if it is: the first one's expert, no rows). Only the producer reads the flag
  // (kFlag): the consumers' form loads this CTA's tile alone.
  static_assert(!kPairs || kPrefetch, "pairs: the prefetching (per-tensor 128-row) path");
  auto tile_of = [&](int it, auto flag) {  // (kPrefetch kernels only: never in stream-K mode)
    [[maybe_unused]] constexpr bool kFlag = decltype(flag)::value;
    if constexpr (kPairs) {
      if (it >= items) return make_int4(0, 0, 0, 0);
      const int t0 = 2 * (it % npairs);
      if (t0 + 1 >= num_tiles) {
        const int4 first = tile_list[t0];
        return rank == 0 ? make_int4(first.x, first.y, first.z, 1) : make_int4(first.x, 0, 0, 1);
      }
      if constexpr (!kFlag) {
        return tile_list[t0 + rank];
      } else {
        const int4 first = tile_list[t0], second = tile_list[t0 + 1];
        const int4 mine = rank == 0 ? first : second;
        return make_int4(mine.x, mine.y, mine.z, first.x == second.x ? 1 : 0);
      }
    } else {
      return it < items ? tile_list[tile_idx(it / S)] : make_int4(0, 0, 0, 0);
    }
  };
  using WithFlag = std::true_type;
  using NoFlag = std::false_type;

  if (producer) {
    // ---------------------------------------------------------------- producer warp (128-row tiles: warpgroup)
    if constexpr (C::kSetMaxNReg) setmaxnreg_dec<C::kProducerRegs>();
    // per-tensor 128-row down: one thread issues every copy (TMA); the warpgroup's other warps have nothing to do
    if constexpr (!C::kLaneCopies && C::kProducerThreads > 32) {
      if (pl >= 32) return;
    }
    // decode tiles read each weight block once; 64-row tiles of one expert share it through L2
    const uint64_t policy = C::kSwapAB ? policy_evict_first() : policy_evict_normal();
    const uint64_t policy_a = policy_evict_normal();  // every weight block of the output re-reads a tile's rows
    // An item's first copies need its tile and (gate-up) its rows' token ids, two dependent global loads: both
    // are loaded an item ahead (the tile two), so that short items (the down GEMM's K of 192 is 2 stages) do
    // not wait on them. chunk c = pl + kProducerThreads i of a tile is 16-byte chunk (c % 8) of tile row c / 8.
    constexpr int kP = C::kProducerThreads;
    auto load_tokens = [&](int4 t, int (&tok)[C::kAChunks]) {
#pragma unroll
      for (int i = 0; i < C::kAChunks; ++i) {
        const int r = (pl + kP * i) >> 3;
        tok[i] = kGateUp && r < t.z ? a.sorted_rows[t.y + r] / a.top_k : 0;
      }
    };
    int4 t_cur = make_int4(0, 0, 0, 0), t_next = make_int4(0, 0, 0, 0);
    int tok_cur[C::kAChunks];
    if constexpr (kPrefetch) {
      t_cur = tile_of(first_item(), WithFlag{});
      t_next = tile_of(first_item() + item_stride(), WithFlag{});
      load_tokens(t_cur, tok_cur);
    }
    int step = 0;
    int claimed = 0;  // kClaims: lane 0's claim for the next item (issued as this one starts)
    for (int item = first_item(), u = 0; kClaims || item < items;
         item = kClaims ? G + __shfl_sync(0xffffffffu, claimed, 0) : item + item_stride(), ++u) {
      if constexpr (kClaims) {
        if (item >= items) {  // no more: an item of -1 in the next stage's slot ends the consumers' loop
          const int slot = step % C::kStages;
          if (step >= C::kStages) mbar_wait_bounded(&empty[slot], ((step / C::kStages) - 1) & 1);
          if (pl == 0) s_claim[slot] = make_int4(0, 0, 0, -1);
          if constexpr (C::kLaneCopies) mbar_arrive(&full[slot]);  // the lanes' arrivals, without copies
          if (pl == 0) mbar_arrive(&full[slot]);                    // after the store: it is released with it
          break;
        }
        if (pl == 0) claimed = atomicAdd(a.counters + 4, 1);
      }
      const int task = task_of(item, u);
      int4 tile, t_after = make_int4(0, 0, 0, 0);
      int tok_next[C::kAChunks];
      if constexpr (kPrefetch) {
        tile = t_cur;
        t_after = tile_of(item + 2 * item_stride(), WithFlag{});
        load_tokens(t_next, tok_next);
      } else if (gidx) {
        tile = gemm_index_tile<BM>(s_roff, s_toff, a.num_local_experts, tile_idx(task));
        if (u > 0) gemm_index_rows(a, s_roff, tile, s_rows);  // (the first item's: before the wait, above)
      } else {
        tile = tile_list[tile_idx(task)];
      }
      const int e = tile.x, row_begin = tile.y, rows = tile.z;
      const int n0 = col_blk(task) * cols_per_task;
      int kb0, kb1;
      item_range(item, u, kb0, kb1);
      // this thread's A chunks (cp.async path: gate-up's token rows, per-tensor swapped down's act rows by slot)
      const uint8_t* a_src[C::kAChunks] = {};
      int a_ok[C::kAChunks] = {};
      if constexpr (!C::kTmaA) {
#pragma unroll
        for (int i = 0; i < C::kAChunks; ++i) {
          const int r = (pl + kP * i) >> 3;
          a_ok[i] = r < rows;
          const int slot = row_begin + (a_ok[i] ? r : 0);
          const int tok =
              kPrefetch ? tok_cur[i]
                        : (kGateUp ? (gidx ? s_rows[a_ok[i] ? r : 0] : a.sorted_rows[slot]) / a.top_k : 0);
          a_src[i] = (kGateUp ? a.a_in + static_cast<int64_t>(tok) * a.a_in_stride
                              : a.act + static_cast<int64_t>(slot) * I) + ((pl + kP * i) & 7) * 16;
        }
      }
      const float* sc_src[C::kScaleSlots];  // block-wise: scale rows (idx < BM: activations; BM, BM+1: weights)
      int sc_ok[C::kScaleSlots];
      if (kBlock) {
#pragma unroll
        for (int j = 0; j < C::kScaleSlots; ++j) {
          const int idx = pl + kP * j;
          sc_ok[j] = 0;
          sc_src[j] = a.w13_scale;
          if (idx < BM) {
            sc_ok[j] = idx < rows;
            const int slot = row_begin + (sc_ok[j] ? idx : 0);
            const int entry = !kGateUp ? 0 : gidx ? s_rows[sc_ok[j] ? idx : 0] : a.sorted_rows[slot];
            sc_src[j] = kGateUp ? a.a_in_scale + static_cast<int64_t>(entry / a.top_k) * kb_per_row
                                : a.act_scale + static_cast<int64_t>(slot) * kb_per_row;
          } else if (idx < BM + 2) {
            sc_ok[j] = 1;
            // the weight block's first row: gate-up its gate and up blocks; down its one block (128-row tiles) or
            // two (256-row tiles: H % 256 == 0, so both are inside)
            const int wrow = kGateUp ? (idx == BM ? n0 : I + n0) : (idx == BM || BN == 128 ? n0 : n0 + kScaleBlock);
            const int nbk = (kGateUp ? 2 * I : H) / kScaleBlock;
            sc_src[j] = (kGateUp ? a.w13_scale : a.w2_scale) +
                        (static_cast<int64_t>(e) * nbk + wrow / kScaleBlock) * kb_per_row;
          }
        }
      }
      for (int kt = kb0; kt < kb1; ++kt, ++step) {
        const int slot = step % C::kStages;
        if (step >= C::kStages) mbar_wait_bounded(&empty[slot], ((step / C::kStages) - 1) & 1);
        uint8_t* sa = smem + slot * C::kStageBytes;
        uint8_t* sb = sa + C::kWOffset;
        if (pl == 0) {
          const bool weights_issued = (kEarlyWeights || C::kIndexKernel) && step < pre_steps;  // before the wait
          // a later item's first stage carries the item to the consumers (never pre-issued: the first item only)
          if (kClaims && u > 0 && kt == kb0) s_claim[slot] = make_int4(e, row_begin, rows, item);
          if (!weights_issued) {
            // (the K-tail down: a group's second A box where it has more than 128 rows)
            const int a_boxes = kKTail && rows > BM ? 2 : 1;
            mbar_arrive_expect_tx(&full[slot],
                                  C::kBoxes * C::kBoxRows * C::kBK + (C::kTmaA ? a_boxes * BM * C::kBK : 0));
          }
          // the A box first (the swapped down's comes after its per-tile wait, below)
          if (C::kTmaA && !kReadyReader) tma_load_4d(sa, &amap, &full[slot], kt * C::kBK, row_begin, 0, 0, policy_a);
          if (kKTail && rows > BM) {
            tma_load_4d(sa + C::kABytes, &amap, &full[slot], kt * C::kBK, row_begin + BM, 0, 0, policy_a);
          }
          if (weights_issued) {
          } else if (kPairs && tile.w != 0) {  // this CTA's box for both CTAs: rank 0 the gate rows, rank 1 up
            tma_load_4d_multicast(sb + rank * C::kBoxRows * C::kBK, &wmap, &full[slot], kt * C::kBK,
                                  rank * I + n0, e, 0, 0x3, policy);
          } else if (kGateUp) {
            tma_load_4d(sb, &wmap, &full[slot], kt * C::kBK, n0, e, 0, policy);                   // gate rows
            tma_load_4d(sb + C::kBoxRows * C::kBK, &wmap, &full[slot], kt * C::kBK, I + n0, e, 0, policy);  // up
          } else {
            tma_load_4d(sb, &wmap, &full[slot], kt * C::kBK, n0, e, 0, policy);
          }
        }
        if constexpr (kReadyReader) {
          // the item's first stage: its weights are on their way; its A rows (and block-wise their scales) once
          // the gate-up has written the whole tile (every lane acquires for its own copies)
          if (poll_ready && kt == kb0) {
            wait_count_at_least(a.tile_ready + tile_idx(task), I);
            if (C::kTmaA && pl == 0) fence_proxy_async_global();  // the A box comes by TMA (async proxy)
          }
          if (C::kTmaA && pl == 0) tma_load_4d(sa, &amap, &full[slot], kt * C::kBK, row_begin, 0, 0, policy_a);
        }
        const int k = kt * C::kBK;
        if constexpr (!C::kTmaA) {
#pragma unroll
          for (int i = 0; i < C::kAChunks; ++i) {
            const int c = pl + kP * i;
            const int ok = a_ok[i] && k + (c & 7) * 16 < K;
            cp_async_16_zfill(sa + swz(c >> 3, c & 7), ok ? a_src[i] + k : a.w13, ok ? 16 : 0);
          }
        }
        if (kBlock) {
#pragma unroll
          for (int j = 0; j < C::kScaleSlots; ++j) {
            const int idx = pl + kP * j;
            if (idx < BM + 2) {
              cp_async_4_zfill(s_scale + slot * C::kScaleFloats + idx, sc_ok[j] ? sc_src[j] + kt : a.w13_scale,
                               sc_ok[j] ? 4 : 0);
            }
          }
        }
        if constexpr (C::kLaneCopies) cp_async_mbar_arrive_noinc(&full[slot]);
        HK_MT_ONLY(if (pl == 0 && kt == kb0 && u < kMoeTraceItems) HK_MT(kMtItemIssued + u);)
      }
      if constexpr (kPrefetch) {
        t_cur = t_next;
        t_next = t_after;
#pragma unroll
        for (int i = 0; i < C::kAChunks; ++i) tok_cur[i] = tok_next[i];
      }
    }
    cp_async_wait<0>();  // no copy of this warp outlives it
    if constexpr (kPairs) {  // the ring's last releases: the peer's consumers arrive on this CTA's barriers
      if (pl < 32) {
        for (int st = step > C::kStages ? step - C::kStages : 0; st < step; ++st) {
          mbar_wait_bounded(&empty[st % C::kStages], (st / C::kStages) & 1);
        }
      }
    }
    HK_MT_ONLY(if (pl == 0) HK_MT(kMtProducerDone);)
    // a down that waited per tile completes only after the gate-up grid (which the kernels after it rely on)
    if constexpr (kReadyReader) {
      if (poll_ready) grid_dependency_wait();
    }
    return;
  }

  // ------------------------------------------------------------------ split hand-off warp (C::kHandoffWarp)
  // Takes the consumers' split pieces in their order: the arrival atomic (acq_rel: it releases the pieces'
  // partials, which the consumers' barrier and the record's mbarrier ordered before it, and for the last piece
  // acquires the others'); for a task's last piece it sums the task's parked partials in K order (as the consumers'
  // merge: bitwise the same), stores the act codes once per consumer warp's fragment (swap_gate_up_act_store) and
  // releases the tile's ready count. Leaves on the consumers' end record (task -1).
  if constexpr (C::kHandoffWarp) {
    if (warp == C::kConsumerWarps + 1) {
      if (!handoff) return;
      constexpr int J = C::kSwapRowTiles;
      const float scale_x = __ldg(a.a_in_scale), a2 = __ldg(a.a2_scale);
      for (int hq = 0;; ++hq) {
        const int q = hq % kHandQ;
        mbar_wait_bounded(&s_hand_full[q], (hq / kHandQ) & 1);
        const int2 rec = s_hand_rec[q];
        const int4 tile = s_hand_tile[q];
        __syncwarp();
        if (lane == 0) mbar_arrive(&s_hand_empty[q]);  // copied: the slot may take the next record
        const int task = rec.x, pieces = S;
        if (task < 0) break;
        int last = 0;
        if (lane == 0) last = ptx::atom_add_acq_rel_gpu(a.split_counters + task, 1) == pieces - 1;
        last = __shfl_sync(0xffffffffu, last, 0);
        HK_MT_ONLY(if (lane == 0 && rec.y < kMoeTraceItems) HK_MT(kMtItemArrived + rec.y);)
        if (!last) continue;
        __syncwarp();  // lane 0's acquire before every lane's loads of the partials
        const float out_scale = scale_x * __ldg(a.w13_scale + tile.x);
        const int n0 = col_blk(task) * cols_per_task;
        for (int w = 0; w < C::kConsumerWarps; ++w) {
          float m[C::kNT][4];
#pragma unroll
          for (int nt = 0; nt < C::kNT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) m[nt][i] = 0.f;
          for (int sl = 0; sl < pieces; ++sl) {  // consumer thread 32 w + lane's values, slot by slot (K order)
            const float* part = split_partial(task * S + sl) + 32 * w + lane;
#pragma unroll
            for (int nt = 0; nt < C::kNT; ++nt)
#pragma unroll
              for (int i = 0; i < 4; ++i) m[nt][i] += __ldcg(part + (nt * 4 + i) * C::kConsumerThreads);
          }
          swap_gate_up_act_store<J>(m, out_scale, a2, tile.z, tile.y, n0, I, a.act, w, lane);
        }
        __syncwarp();  // every lane's act codes are stored (before lane 0's release)
        if (lane == 0) {
          HK_MT_ONLY(if (rec.y < kMoeTraceItems) HK_MT(kMtItemActDone + rec.y);)
          a.split_counters[task] = 0;  // ready for the next kernel
          if (a.tile_ready != nullptr) {
            publish_tile_ready(task, n0);
          }
        }
      }
      return;
    }
  }

  // ------------------------------------------------------------------ consumer warps
  if constexpr (C::kSetMaxNReg) setmaxnreg_inc<C::kConsumerRegs>();
  // wgmma: warpgroup wn = warp / kWarpsM takes weight rows [wn * kWN, ...), its warp wm = warp % kWarpsM rows
  // 16 wm ... (128-row tiles: kWarpsM = 8, wn = 0: warpgroup w / 4 holds tile rows 64 (w / 4) ...)
  const int wm = C::kWgmma ? warp % C::kWarpsM : warp / C::kWarpsN;
  const int wn = C::kWgmma ? warp / C::kWarpsM : warp % C::kWarpsN;
  const int g = lane >> 2, t4 = lane & 3;
  auto consumer_sync = [] { named_bar_sync(1, C::kConsumerThreads); };

  float acc[C::kMT][C::kNT][4];
  auto zero_acc = [&]() { for_each_acc<C::kMT, C::kNT>([&](int mt, int nt, int i) { acc[mt][nt][i] = 0.f; }); };
  zero_acc();

  // 64-row tiles with 128 weight rows keep one stage's wgmmas in flight while the previous stage's sum is added
  // (below): their tile holds 32 accumulators per thread. 256-row tiles (64 per thread) have no room for two
  // more whole partial tiles: kHalfPipe.
  constexpr bool kPipe = (C::kWgmma && C::kWN == 64) || C::kSwapAB;
  // The 32-row down tile over 256 weight rows (64 accumulators per thread) has room for one stage partial, not
  // two: its stages run one after the other (at short K an item is two stages, so little overlap is lost).
  constexpr bool kSerialSwap = C::kSwapAB && !kGateUp && BM == 32 && BN == 256;
  // 256-row tiles pipeline by half stages instead: a warpgroup's stage is two wgmma groups of 64 weight rows
  // (gate-up: its gate rows, then its up rows; down: its first and second 64 rows), each summed on its own into
  // a 32-register partial; one group stays in flight while the previous one is added. Registers: the tile's
  // 64 accumulators + two half partials, as many as a whole-stage partial without the pipeline.
  // 256-row tiles, 128-row tiles (all 128 weight rows), and the block-wise 128-row tile (256 weight rows: by
  // quarter stages)
  constexpr bool kHalfPipe = C::kWgmma && C::kWN >= 128;
  static_assert(kPipe != kHalfPipe, "every tile runs on wgmma, by whole or half stages");
  int step = 0;
  int4 t_next = kPrefetch ? tile_of(first_item(), NoFlag{}) : make_int4(0, 0, 0, 0);
  HK_MT_ONLY(int tr_items = 0;)
  // The K-tail down: an item is a row group (up to two 128-row tiles, kATiles), run as `nsub` sub-items one tile
  // each (sub), which share the item's stages: the last one releases them.
  int sub = 0, nsub = 1;
  int4 group = make_int4(0, 0, 0, 0);
  auto next_item = [&](int& it) {
    if constexpr (kKTail) {
      if (sub + 1 < nsub) {
        ++sub;
        return;
      }
      sub = 0;
    }
    it += kClaims ? 0 : item_stride();
  };
  for (int item = first_item(), u = 0; kClaims || item < items; next_item(item), ++u) {
    int4 tile;
    if constexpr (kClaims) {  // item u >= 1 and its tile from the producer, with its first stage
      if (u > 0) {
        const int slot = step % C::kStages;
        mbar_wait_bounded(&full[slot], (step / C::kStages) & 1);
        tile = s_claim[slot];
        item = tile.w;
      }
      if (item < 0 || item >= items) break;
      if (u == 0) tile = tile_list[tile_idx(task_of(item, u))];
    }
    HK_MT_ONLY(++tr_items; if (tid == 0 && u < kMoeTraceItems) HK_MT(kMtItemStart + u);)
    int kb0, kb1;
    item_range(item, u, kb0, kb1);
    // the epilogue's inputs (tile -> expert scale / row ids: dependent global loads) are loaded now and after
    // the first stage (load_epilogue_inputs), so that their latency hides behind the K loop
    if constexpr (kKTail) {  // (a kPrefetch kernel)
      if (sub == 0) {
        group = t_next;
        t_next = tile_of(item + item_stride(), NoFlag{});
      }
      nsub = group.z > BM ? 2 : 1;
      tile = make_int4(group.x, group.y + sub * BM, min(BM, group.z - sub * BM), 0);
    } else if constexpr (kPrefetch) {
      tile = t_next;
      t_next = tile_of(item + item_stride(), NoFlag{});
    } else if constexpr (!kClaims) {
      tile = gidx ? gemm_index_tile<BM>(s_roff, s_toff, a.num_local_experts, tile_idx(task_of(item, u)))
                  : tile_list[tile_idx(task_of(item, u))];
    }
    // per-tensor: the two scale factors stay apart until the epilogue (their product right after the loads
    // made the consumers wait on them after the first stage: 7% of the decode gate-up's stall samples)
    float out_scale = 1.f, a2 = 1.f, scale_x = 1.f, scale_w = 1.f;
    // swapped down: the ids of the tile rows 8 j + g this thread stores (index j), -1 past
    int srow_id[C::kSwapRowTiles];
    // 48-row down tiles load their row ids in the epilogue instead (held across the K loop, their 6 registers
    // push the kernel past the 168 that 2 CTAs per SM allow: 12 bytes of spills; 12 registers and 24 bytes
    // when each lane stored two rows per row tile)
    constexpr bool kLateRowIds = C::kSwapAB && BM == 48;
    auto load_row_ids = [&] {
      // the GEMM index: the rows come from the gate-up's producers (sorted_rows), published by the tile's ready
      // count; the producer lanes acquired it, this thread acquires it too (already reached: one load) so that
      // its own reads are ordered after the writers' (the full barrier's arrivals do not carry that acquire).
      // The load runs after this item's first full barrier, which completes only after the producer lanes saw
      // the full count, and ld.acquire.gpu reads L2, so on the hardware it returns the full count. That is a
      // hardware argument, not a PTX memory-model one (the arrivals are cp.async.mbarrier.arrive.noinc, which
      // carry no release): a deliberate choice. Polling to the full count (wait_count_at_least, or a plain loop)
      // would make it formal, but measured 1.011-1.019x (0.7-1.6% for the plain loop) the time at hy3 / qwen3
      // TP8 4 tokens (session 55 call 3, cross-build, medians of 3): not taken.
      if constexpr (C::kIndexReader) {
        if (poll_ready) (void)ld_acquire_gpu(a.tile_ready + tile_idx(task_of(item, u)));
      }
#pragma unroll
      for (int j = 0; j < C::kSwapRowTiles; ++j) {
        const int r = 8 * j + g;
        srow_id[j] = r < tile.z ? a.sorted_rows[tile.y + r] : -1;
      }
    };
    int out_rid[C::kOutChunks];  // staged down: the row id of each 16-byte chunk this lane stores, -1 past
    auto load_epilogue_inputs = [&] {
      if (!kBlock) {
        scale_x = __ldg(kGateUp ? a.a_in_scale : a.a2_scale);
        scale_w = __ldg((kGateUp ? a.w13_scale : a.w2_scale) + tile.x);
        if (kGateUp) a2 = __ldg(a.a2_scale);  // per-tensor: act = h / a2_scale
      }
      if constexpr (C::kStagedOut) {
#pragma unroll
        for (int j = 0; j < C::kOutChunks; ++j) {
          const int r = wm * C::kWM + (lane + 32 * j) / C::kOutRowChunks;
          out_rid[j] = r < tile.z ? a.sorted_rows[tile.y + r] : -1;
        }
      } else if constexpr (!kGateUp && C::kSwapAB && !kLateRowIds) {
        load_row_ids();
      }
    };
    // Stage `st`'s MMAs into d (wgmma: d = this stage's product, issued and committed; the caller waits for the
    // group).
    auto mma_stage_on = [&](uint32_t sa, float (&d)[C::kMT][C::kNT][4]) {
      const uint32_t sb = sa + C::kWOffset;
      if constexpr (kHalfPipe) {
        // unused: 256-row tiles issue their stages by halves (below)
      } else if constexpr (C::kSwapAB) {
        // d[0][kSwapRowTiles b + j]: m64 block b (weight rows 64 b ..; gate-up: the first half of the blocks
        // gate, the second up), tile rows 8 j ..
        if constexpr (!C::kTmaA) fence_proxy_async_shared();  // the tile rows arrived by cp.async
        wgmma_fence();
        const uint64_t dx0 = gmma_desc_sw128(sa), dw0 = gmma_desc_sw128(sb);
#pragma unroll
        for (int kk = 0; kk < C::kBK / 32; ++kk) {
          // gate-up: the gate box (BN / 2 rows) is followed by the up box, so block b's rows start at 64 b
          swap_wgmma_blocks<C::kSwapBlocks, BM>(d[0], gmma_desc_add(dw0, kk * 32), gmma_desc_add(dx0, kk * 32),
                                                kk == 0);
        }
        wgmma_commit();
      } else if constexpr (C::kWgmma) {
        // gate-up: the warpgroup's gate rows (first box) and the matching up rows (second box) go to the first
        // and second halves of its n8 tiles, as the epilogue expects; down: one wgmma over its kWN rows.
        // A rows that arrived by cp.async (generic proxy) are fenced for wgmma's async-proxy reads.
        if constexpr (!C::kTmaA) fence_proxy_async_shared();
        wgmma_fence();
        constexpr int kN = kGateUp ? C::kWN / 2 : C::kWN;
        const uint64_t da0 = gmma_desc_sw128(sa), db00 = gmma_desc_sw128(sb + (wn * kN) * 128);
#pragma unroll
        for (int kk = 0; kk < C::kBK / 32; ++kk) {
          const uint64_t da = gmma_desc_add(da0, kk * 32);
          // the stage's first wgmma declares d write-only
          const uint64_t db0 = gmma_desc_add(db00, kk * 32);
          const uint64_t db1 = gmma_desc_add(db00, C::kBoxRows * 128 + kk * 32);  // gate-up: up
          if (kk == 0) {
            wgmma_m64k32_e4m3_first<kN, 0>(d[0], da, db0);
            if constexpr (kGateUp) wgmma_m64k32_e4m3_first<kN, C::kNT / 2>(d[0], da, db1);
          } else {
            wgmma_m64k32_e4m3<kN, 0>(d[0], da, db0);
            if constexpr (kGateUp) wgmma_m64k32_e4m3<kN, C::kNT / 2>(d[0], da, db1);
          }
        }
        wgmma_commit();
      }
    };
    // waits for stage `st` and starts its MMAs
    auto mma_stage_at = [&](int st, float (&d)[C::kMT][C::kNT][4]) {
      const int slot = st % C::kStages;
      mbar_wait_bounded(&full[slot], (st / C::kStages) & 1);
      mma_stage_on(smem_addr(smem + slot * C::kStageBytes), d);
    };
    auto release = [&](int st) {
      __syncwarp();
      if (lane == 0) {  // this warp is done with the stage (pairs: in both CTAs, whose copies both fill it)
        mbar_arrive(&empty[st % C::kStages]);
        if constexpr (kPairs) mbar_arrive_cluster(&empty[st % C::kStages], static_cast<uint32_t>(rank ^ 1));
      }
    };

    if constexpr (kHalfPipe) {
      // A warpgroup's stage is kParts wgmma groups of 64 weight rows (gate-up: its gate rows, then its up rows;
      // down: its rows in order), each summed into a 32-register partial of its own; one group stays in flight
      // while the previous one is added. kParts = 2 (halves) but for the block-wise 128-row gate-up (4: 128
      // gate + 128 up rows per warpgroup, whose registers hold no half-stage partials).
      // Parts of 64 weight rows, but 96 for the per-tensor 128 x 192 gate-up (its 96 gate and 96 up rows: one
      // m64n96 group each)
      constexpr int kPartRows = C::kWN == 192 ? 96 : 64;
      constexpr int kParts = C::kWN / kPartRows;
      constexpr int kPartNT = kPartRows / 8;  // n8 tiles of a part: accumulator tiles p * kPartNT ...
      static_assert(C::kMT == 1 && kParts * kPartNT == C::kNT && kParts % 2 == 0,
                    "wgmma tiles: one m64 per warpgroup, parts of 64 or 96 rows, gate and up alike");
      static_assert(C::kWN != 192 || (kGateUp && !kBlock), "192 weight rows: the per-tensor gate-up only");
      float pa[kPartNT][4], pb[kPartNT][4];  // the parts' partials, in turn (even parts in pa, odd in pb)
      if constexpr (kParts > 2) {  // read (and ignored: scale-d 0) by the in-place first products
#pragma unroll
        for (int nt = 0; nt < kPartNT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) pa[nt][i] = pb[nt][i] = 0.f;
      }
      // gate-up: part p is box p / (kParts / 2) (gate, up) at its warpgroup's rows + 64 (p % (kParts / 2))
      auto part_row = [&](int p) {
        return kGateUp ? (p / (kParts / 2)) * C::kBoxRows + wn * (C::kWN / 2) + (p % (kParts / 2)) * kPartRows
                       : wn * C::kWN + p * kPartRows;
      };
      // waits for stage st (part 0 only) and issues part p's wgmma group of `steps` k32 steps into d (a constant
      // at every call: kSteps, or kTailSteps for the last stage of a kKTail kernel; a generic lambda here made
      // cudafe++ 13.0 crash)
      auto issue = [&](int st, int p, float (&d)[kPartNT][4], int steps) {
        const int slot = st % C::kStages;
        const uint32_t sa = smem_addr(smem + slot * C::kStageBytes);
        const uint32_t sb = sa + C::kWOffset;
        if (p == 0) {  // (the K-tail down's second sub-item: the phase its first one waited for, still held)
          mbar_wait_bounded(&full[slot], (st / C::kStages) & 1);
          if constexpr (!C::kTmaA) fence_proxy_async_shared();  // A rows written by cp.async (generic proxy)
        }
        const int brow = part_row(p);
        // 128-row tiles: this warpgroup's 64 A rows start 64 rows into the stage (1 KB aligned: the swizzle holds)
        // (the K-tail down: sub-item sub's A tile)
        const uint32_t a_wg = (BM == 128 ? static_cast<uint32_t>((warp / 4) * 64 * C::kBK) : 0u) +
                              (kKTail ? static_cast<uint32_t>(sub * C::kABytes) : 0u);
        const uint64_t da0 = gmma_desc_sw128(sa + a_wg), db0 = gmma_desc_sw128(sb + brow * 128);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < steps; ++kk) {
          const uint64_t da = gmma_desc_add(da0, kk * 32);
          const uint64_t db = gmma_desc_add(db0, kk * 32);
          if (kk == 0) {
            if constexpr (kParts > 2) {  // pa / pb reused in turn within the unrolled stage: keep their registers
              wgmma_m64k32_e4m3_first_inplace<kPartRows, 0>(d, da, db);
            } else {
              wgmma_m64k32_e4m3_first<kPartRows, 0>(d, da, db);
            }
          } else {
            wgmma_m64k32_e4m3<kPartRows, 0>(d, da, db);
          }
        }
        wgmma_commit();
      };
      // adds part p of stage st (complete) to the accumulators; the last part releases the stage
      auto retire_part = [&](int st, int p, float (&d)[kPartNT][4]) {
        float s0 = 1.f, s1 = 1.f;
        if constexpr (kBlock) {  // (activation row scale x weight block scale) of the stage's K block
          const float* sc = s_scale + (st % C::kStages) * C::kScaleFloats;
          // gate-up: the gate / up block; down: the warpgroup's block (128-row tiles: the part's 128-block of
          // the tile's 256 weight rows)
          const float sw = sc[BM + (kGateUp ? p / (kParts / 2) : BM == 128 ? p * 64 / kScaleBlock : wn)];
          s0 = sc[wm * C::kWM + g] * sw;
          s1 = sc[wm * C::kWM + g + 8] * sw;
        }
#pragma unroll
        for (int nt = 0; nt < kPartNT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            wgmma_fence_operand(d[nt][i]);
            if constexpr (kBlock) {
              acc[0][p * kPartNT + nt][i] += d[nt][i] * (i < 2 ? s0 : s1);
            } else {
              acc[0][p * kPartNT + nt][i] += d[nt][i];
            }
          }
        // after the scales are read: they live in the stage (the K-tail down: by the group's last sub-item)
        if (p == kParts - 1 && (!kKTail || sub + 1 == nsub)) release(st);
      };
      const int n = kb1 - kb0;  // >= 1 (see kPipe); kKTail: 2 (K = 192, down_k_tail), the second a tail
      constexpr int kSteps = C::kBK / 32;
      constexpr int kTailSteps = kKTail ? C::kBK / 64 : kSteps;  // the last stage's
      issue(step, 0, pa, kSteps);
      load_epilogue_inputs();
      issue(step, 1, pb, kSteps);
      int j = 0;
      // stage j: part p completes while the next group runs; its buffer takes part p + 2 (of stage j, or of
      // stage j + 1 past the last part, with next_steps k32 steps)
      auto run_stage = [&](int next_steps) {
        static_for<kParts>([&](auto P) {
          constexpr int p = decltype(P)::value;
          auto& d = select_ref<p & 1>(pa, pb);
          wgmma_wait<1>();
          retire_part(step + j, p, d);
          if constexpr (p + 2 < kParts) {
            issue(step + j, p + 2, d, kSteps);
          } else {
            issue(step + j + 1, p + 2 - kParts, d, next_steps);
          }
        });
      };
      if constexpr (kKTail) {  // two stages (K = 192, down_k_tail): the first, whose successor is the tail
        if (n != 2) __trap();  // the host chose this kernel for K = 192 only
        run_stage(kTailSteps);
        ++j;
      } else {
        for (; j + 1 < n; ++j) run_stage(kSteps);
      }
      static_for<kParts>([&](auto P) {  // the last stage
        constexpr int p = decltype(P)::value;
        auto& d = select_ref<p & 1>(pa, pb);
        if constexpr (p == kParts - 1) {
          wgmma_wait<0>();
        } else {
          wgmma_wait<1>();
        }
        retire_part(step + j, p, d);
        if constexpr (p + 2 < kParts) issue(step + j, p + 2, d, kTailSteps);
      });
      if (!kKTail || sub + 1 == nsub) step += n;  // (the K-tail down: its group's stages, once)
    } else if constexpr (kPipe) {
      // wgmma's FP8 accumulation keeps fewer bits than fp32: each 128-deep stage is summed on its own (p0, p1
      // in turn) and added to the fp32 accumulators once its group is complete, while the next stage's group
      // runs (two-level accumulation, as block-wise scaling does anyway).
      float p0[C::kMT][C::kNT][4], p1[C::kMT][C::kNT][4];
      auto retire = [&](float (&d)[C::kMT][C::kNT][4], int st) {
        if constexpr (kBlock && C::kSwapAB) {  // tile row (column of D) scale x the block's weight scale
          const float* sc = s_scale + (st % C::kStages) * C::kScaleFloats;
          float sx[2 * C::kSwapRowTiles];
#pragma unroll
          for (int q = 0; q < 2 * C::kSwapRowTiles; ++q) sx[q] = sc[8 * (q >> 1) + 2 * t4 + (q & 1)];
#pragma unroll
          for (int nt = 0; nt < C::kNT; ++nt) {
            // gate-up: blocks [0, kSwapBlocks / 2) are gate rows (scale BM), the rest up rows (BM + 1); down:
            // one 128-row weight block (BN = 128)
            const float sw = sc[BM + ((kGateUp && nt >= C::kNT / 2) ? 1 : 0)];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              wgmma_fence_operand(d[0][nt][i]);
              acc[0][nt][i] += d[0][nt][i] * (sx[2 * (nt % C::kSwapRowTiles) + (i & 1)] * sw);
            }
          }
        } else if constexpr (kBlock) {  // scaled by (activation row scale x weight block scale) of the stage's K block
          static_assert(!kGateUp, "block-scaled gate-up has two weight scales (gate, up) per stage");
          const float* sc = s_scale + (st % C::kStages) * C::kScaleFloats;
          const float sw = sc[BM];
#pragma unroll
          for (int mt = 0; mt < C::kMT; ++mt) {
            const float s0 = sc[wm * C::kWM + mt * 16 + g] * sw, s1 = sc[wm * C::kWM + mt * 16 + g + 8] * sw;
#pragma unroll
            for (int nt = 0; nt < C::kNT; ++nt)
#pragma unroll
              for (int i = 0; i < 4; ++i) {
                wgmma_fence_operand(d[mt][nt][i]);
                acc[mt][nt][i] += d[mt][nt][i] * (i < 2 ? s0 : s1);
              }
          }
        } else {
          for_each_acc<C::kMT, C::kNT>([&](int mt, int nt, int i) {
            wgmma_fence_operand(d[mt][nt][i]);
            acc[mt][nt][i] += d[mt][nt][i];
          });
        }
        release(st);  // after the scales are read: they live in the stage
      };
      const int n = kb1 - kb0;  // >= 1: the host rejects K = 0, and a split slice holds at least one stage
      if constexpr (kSerialSwap) {
        // one partial: each stage's group is waited for and added before the next stage is issued
        for (int j = 0; j < n; ++j) {
          mma_stage_at(step + j, p0);
          if (j == 0) load_epilogue_inputs();
          wgmma_wait<0>();
          retire(p0, step + j);
        }
      } else {
        mma_stage_at(step, p0);
        load_epilogue_inputs();
        int j = 0;
        for (; j + 2 < n; j += 2) {  // stage j is in flight in p0
          mma_stage_at(step + j + 1, p1);
          wgmma_wait<1>();
          retire(p0, step + j);
          mma_stage_at(step + j + 2, p0);
          wgmma_wait<1>();
          retire(p1, step + j + 1);
        }
        if (j + 1 < n) {  // the last two stages: j in flight in p0
          mma_stage_at(step + j + 1, p1);
          wgmma_wait<1>();
          retire(p0, step + j);
          wgmma_wait<0>();
          retire(p1, step + j + 1);
        } else {
          wgmma_wait<0>();
          retire(p0, step + j);
        }
      }
      step += n;
    }

    // ---- end of a work item
    HK_MT_ONLY(if (tid == 0 && u < kMoeTraceItems) HK_MT(kMtItemKDone + u);)
    const int task = task_of(item, u);
    // the task's pieces (slices, or CTAs in stream-K mode: the first one and where its range begins)
    int pieces = S, first_cta = 0, first_begin = 0;
    if (stream_k) {
      first_cta = sk_cta_of_step(task * nk);
      first_begin = sk_begin(first_cta);
      pieces = stream_k_pieces(task, first_cta, tasks, nk, G);
    }
    if (pieces > 1) {  // split K: park this piece's partial tile; the last piece to arrive sums all in K order
      const int slot = stream_k ? stream_k_slot(blockIdx.x, task == sk_task0) : item;
      float* mine = split_partial(slot);
      for_each_acc<C::kMT, C::kNT>([&](int mt, int nt, int i) {
        __stcg(mine + ((mt * C::kNT + nt) * 4 + i) * C::kConsumerThreads + tid, acc[mt][nt][i]);
      });
      // one acquire-release atomic per CTA after the barrier publishes every consumer's partials (ordered before
      // it by the bar.sync) and, for the last slice, acquires the other slices' (shared with its threads by the
      // next bar.sync); it replaces a sequentially consistent fence in every thread on both sides
      consumer_sync();
      // the hand-off warp takes the arrival (and the last piece's merge) where this CTA has a next item to go on
      // to; a CTA's last item keeps its own arrival and merge below (4 warps merge faster than the one, and nothing
      // waits on them). Both sides count on the same split counter and sum in slot order: the result is the same.
      if (handoff && item + item_stride() < items) {
        if (tid == 0) push_hand(make_int2(task, u), &tile);  // after the barrier above: every partial
        HK_MT_ONLY(if (tid == 0 && u < kMoeTraceItems) HK_MT(kMtItemStored + u);)  // its partial handed on
        zero_acc();
        continue;
      }
      if (tid == 0) s_last_slice = ptx::atom_add_acq_rel_gpu(a.split_counters + task, 1) == pieces - 1;
      consumer_sync();
      const bool last = s_last_slice;
      consumer_sync();  // everyone has read the flag before the next item may overwrite it
      HK_MT_ONLY(if (tid == 0 && u < kMoeTraceItems) HK_MT(kMtItemArrived + u);)
      if (!last) {
        HK_MT_ONLY(if (tid == 0 && u < kMoeTraceItems) HK_MT(kMtItemStored + u);)  // its partial parked
        zero_acc();
        continue;
      }
      zero_acc();
      for (int sl = 0; sl < pieces; ++sl) {
        const int at = stream_k ? stream_k_piece_slot(task, sl, first_cta, first_begin, nk) : task * S + sl;
        const float* part = split_partial(at);
        for_each_acc<C::kMT, C::kNT>([&](int mt, int nt, int i) {
          acc[mt][nt][i] += __ldcg(part + ((mt * C::kNT + nt) * 4 + i) * C::kConsumerThreads + tid);
        });
      }
      if (tid == 0) a.split_counters[task] = 0;  // ready for the next kernel
      HK_MT_ONLY(if (tid == 0 && u < kMoeTraceItems) {
        asm volatile("" ::"f"(acc[0][0][0]));  // (the timer after this thread's merged sum has arrived)
        HK_MT(kMtItemMerged + u);
      })
    }
    if (!kBlock) out_scale = scale_x * scale_w;
    const int row_begin = tile.y, rows = tile.z;
    const int n0 = col_blk(task) * cols_per_task;
    if constexpr (kGateUp && C::kSwapAB && !kBlock) {  // per-tensor swapped: the act codes (as the hand-off warp's)
      swap_gate_up_act_store<C::kSwapRowTiles>(acc[0], out_scale, a2, rows, row_begin, n0, I, a.act, warp, lane);
      if (a.tile_ready != nullptr) {  // this task's act columns are stored: publish
        consumer_sync();
        if (tid == 0) {
          HK_MT_ONLY(if (u < kMoeTraceItems) HK_MT(kMtItemActDone + u);)
          publish_tile_ready(task, n0);
        }
      }
    } else if (kGateUp) {
      constexpr int kHalf = C::kNT / 2;
      float h[C::kMT][kHalf][4];
#pragma unroll
      for (int mt = 0; mt < C::kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kHalf; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            // tile row of the element (swapped: 8 j + 2 t4 + (i & 1), nt = J b + j, J = kSwapRowTiles). A padding
            // row's zero would
            // send silu's IEEE division down its slow path (a subroutine call per element): feed it 1 and store
            // 0, which is what a zero row gives (silu(0) * up = 0); the stores skip those rows anyway.
            const int r = C::kSwapAB ? 8 * (nt % C::kSwapRowTiles) + 2 * t4 + (i & 1)
                                     : wm * C::kWM + mt * 16 + g + 8 * (i >> 1);
            const bool valid = r < rows;
            const float gate = valid ? acc[mt][nt][i] * out_scale : 1.f;
            h[mt][nt][i] = valid ? silu(gate) * (acc[mt][nt + kHalf][i] * out_scale) : 0.f;
          }
      float row_scale[C::kMT][2];
      if constexpr (kBlock && !C::kSwapAB) {  // amax per row over 128 columns: quad, then the warps via shared memory
        consumer_sync();  // the previous item's reset of s_amax is done
#pragma unroll
        for (int mt = 0; mt < C::kMT; ++mt) {
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            float m = 0.f;
#pragma unroll
            for (int nt = 0; nt < kHalf; ++nt)
              m = fmaxf(m, fmaxf(fabsf(h[mt][nt][2 * hh]), fabsf(h[mt][nt][2 * hh + 1])));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
            if (t4 == 0) atomicMax(&s_amax[wm * C::kWM + mt * 16 + g + hh * 8], __float_as_uint(m));
          }
        }
        consumer_sync();
#pragma unroll
        for (int mt = 0; mt < C::kMT; ++mt) {
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int r = wm * C::kWM + mt * 16 + g + hh * 8;
            row_scale[mt][hh] = fmaxf(__uint_as_float(s_amax[r]), kActMinAmax) / kActFp8Max;
            if (wn == 0 && t4 == 0 && r < rows) {
              a.act_scale[static_cast<int64_t>(row_begin + r) * (I / kScaleBlock) + n0 / kScaleBlock] =
                  row_scale[mt][hh];
            }
          }
        }
        consumer_sync();  // every row's amax is read before it is cleared for the next task
        if (tid < BM) s_amax[tid] = 0u;
      }
      if constexpr (C::kSwapAB) {
        // h[0][nt][i], nt = J b + j (J = kSwapRowTiles): intermediate column n0 + 64 b + 16 warp + g + 8 (i >> 1)
        // of tile row 8 j + 2 t4 + (i & 1) (n0 + BN / 2 <= I: I % 64 == 0, and block-wise I % 128 == 0)
        constexpr int J = C::kSwapRowTiles;
        // block-wise only (the per-tensor swapped tiles store through swap_gate_up_act_store, above); the
        // per-tensor initial value is kept: without it the block-wise kernels' SASS changed (session 59)
        float sx[2 * J];  // the act scale per tile row (index 2 j + q)
#pragma unroll
        for (int q = 0; q < 2 * J; ++q) sx[q] = a2;
        if constexpr (kBlock) {  // amax per tile row over this tile's 128 columns: own values, the 8 g lanes, warps
          float m[2 * J];
#pragma unroll
          for (int q = 0; q < 2 * J; ++q) {
            m[q] = 0.f;
#pragma unroll
            for (int nt = q >> 1; nt < kHalf; nt += J)
#pragma unroll
              for (int hi = 0; hi < 2; ++hi) m[q] = fmaxf(m[q], fabsf(h[0][nt][2 * hi + (q & 1)]));
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) m[q] = fmaxf(m[q], __shfl_xor_sync(0xffffffffu, m[q], o));
          }
          consumer_sync();  // the previous item's reset of s_amax is done
          if (g == 0) {
#pragma unroll
            for (int q = 0; q < 2 * J; ++q) {
              atomicMax(&s_amax[8 * (q >> 1) + 2 * t4 + (q & 1)], __float_as_uint(m[q]));
            }
          }
          consumer_sync();
#pragma unroll
          for (int q = 0; q < 2 * J; ++q) {
            const int r = 8 * (q >> 1) + 2 * t4 + (q & 1);
            sx[q] = fmaxf(__uint_as_float(s_amax[r]), kActMinAmax) / kActFp8Max;
            if (warp == 0 && g == 0 && r < rows) {
              a.act_scale[static_cast<int64_t>(row_begin + r) * (I / kScaleBlock) + n0 / kScaleBlock] = sx[q];
            }
          }
          consumer_sync();  // every row's amax is read before it is cleared for the next task
          if (tid < BM) s_amax[tid] = 0u;
        }
        // The codes as the accumulators hold them, each in the low byte of a b16 element, through
        // swap_store_pairs: each lane stores 4 consecutive codes of its row (4 lanes: 16 bytes per row) instead
        // of 4 single bytes.
        const int col = n0 + swap_store_col(warp, t4);  // + 64 b
#pragma unroll
        for (int nt = 0; nt < kHalf; ++nt) {
          const int j = nt % J, r = 8 * j + g;
          uint32_t c[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {  // padding rows divide 1, not their 0 (IEEE division's slow path, as for
            // SiLU above); their codes are never stored
            const float v = 8 * j + 2 * t4 + (i & 1) < rows ? h[0][nt][i] : 1.f;
            c[i] = __nv_cvt_float_to_fp8(v / sx[2 * j + (i & 1)], __NV_SATFINITE, __NV_E4M3);
          }
          const uint2 w = swap_store_pairs(c[0] | (c[1] << 16), c[2] | (c[3] << 16), t4);
          if (r < rows) {  // bytes 0 and 2 of each word are the codes (0x6420: x.b0, x.b2, y.b0, y.b2)
            *reinterpret_cast<uint32_t*>(a.act + static_cast<int64_t>(row_begin + r) * I + col + 64 * (nt / J)) =
                __byte_perm(w.x, w.y, 0x6420);
          }
        }
        if (a.tile_ready != nullptr) {  // this task's act columns (and block-wise scales) are stored: publish
          consumer_sync();
          if (tid == 0) {
            HK_MT_ONLY(if (u < kMoeTraceItems) HK_MT(kMtItemActDone + u);)
            publish_tile_ready(task, n0);
          }
        }
      } else {
#pragma unroll
        for (int mt = 0; mt < C::kMT; ++mt) {
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int r = wm * C::kWM + mt * 16 + g + hh * 8;
            // I % 64 == 0: a warp's kWN / 2 columns are all in or all past I; only per-tensor 256-row tiles can
            // reach past it (I % 128 == 64: the last column block's second warpgroup computes from up rows and
            // rows past the tensor, zero-filled)
            constexpr bool kColsPastI = C::kWgmma && BN == 256 && !kBlock;
            if (r >= rows || (kColsPastI && n0 + wn * (C::kWN / 2) >= I)) continue;
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
      }  // 64-row tiles
    } else if constexpr (C::kStagedOut) {
      uint8_t* blk = s_out + warp * C::kOutWarpBytes;  // this warp's rows wm * kWM.., columns wn * kWN..
      constexpr int kRoundNT = C::kNT / C::kOutRounds;  // n8 tiles per staging round
#pragma unroll
      for (int q = 0; q < C::kOutRounds; ++q) {  // columns wn * kWN + q * kOutCols ..
        __syncwarp();  // every lane has stored the previous round's (or item's) block
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
#pragma unroll
          for (int nt = 0; nt < kRoundNT; ++nt) {
            const float(&d)[4] = acc[0][q * kRoundNT + nt];
            *reinterpret_cast<uint32_t*>(blk + (g + hh * 8) * C::kOutStride + (nt * 8 + 2 * t4) * 2) =
                pack_bf16x2(d[2 * hh] * out_scale, d[2 * hh + 1] * out_scale);
          }
        __syncwarp();
#pragma unroll
        for (int j = 0; j < C::kOutChunks; ++j) {
          const int c = lane + 32 * j;
          const int r = c / C::kOutRowChunks, ch = c % C::kOutRowChunks;
          const int n = n0 + wn * C::kWN + q * C::kOutCols + ch * 8;  // H % 8 == 0: a chunk is all in or all out
          if (out_rid[j] >= 0 && n < H) {
            *reinterpret_cast<uint4*>(a.y + static_cast<int64_t>(out_rid[j]) * H + n) =
                *reinterpret_cast<const uint4*>(blk + r * C::kOutStride + ch * 16);
          }
        }
      }
    } else if constexpr (C::kSwapAB) {
      // acc[0][J b + j][i] (J = kSwapRowTiles): output column n0 + 64 b + 16 warp + g + 8 (i >> 1) of tile row
      // 8 j + 2 t4 + (i & 1), through swap_store_pairs: the 4 lanes of a row store its 16 columns (32 bytes, one
      // sector) with 8-byte stores, a quarter of the 2-byte stores this took before.
      if constexpr (kLateRowIds) load_row_ids();
      const int col = n0 + swap_store_col(warp, t4);  // + 64 b
#pragma unroll
      for (int j = 0; j < C::kSwapRowTiles; ++j) {
        const int rid = srow_id[j];
#pragma unroll
        for (int b = 0; b < C::kSwapBlocks; ++b) {
          const float(&d)[4] = acc[0][C::kSwapRowTiles * b + j];
          const uint2 w = swap_store_pairs(pack_bf16x2(d[0] * out_scale, d[1] * out_scale),
                                           pack_bf16x2(d[2] * out_scale, d[3] * out_scale), t4);
          const int n = col + 64 * b;  // H % 64 == 0 (validated), n % 4 == 0: all 4 columns in or out
          if (rid >= 0 && n < H) *reinterpret_cast<uint2*>(a.y + static_cast<int64_t>(rid) * H + n) = w;
        }
      }
    }
    HK_MT_ONLY(if (tid == 0 && u < kMoeTraceItems) HK_MT(kMtItemStored + u);)
    zero_acc();
  }
  // no more pieces: the hand-off warp leaves after the ones handed
  if (handoff && tid == 0) push_hand(make_int2(-1, 0), nullptr);
  HK_MT_ONLY(if (tid == 0) {
    HK_MT(kMtConsumersDone);
    HK_MT_SET(kMtItems, tr_items);
  })
}

}  // namespace moe
}  // namespace hopperkit
