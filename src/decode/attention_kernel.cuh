// hopperkit decode attention: the persistent, plan-driven kernel (device code).
//
// One CTA = 4 consumer warps + 1 producer warp.
//   Producer: walks the CTA's linear tile range from the plan; per chunk (a pair's tiles inside this CTA) it
//     stages the query rows and the chunk's metadata into one of two Q slots (cp.async, completing on an
//     mbarrier), then streams the chunk's 64-token K and V tiles through a ring of shared-memory stages with
//     TMA (one box per page; pages past the sequence are not loaded).
//   Consumers: per tile, S = Q K^T and O += P V with mma.sync m16n8k16 (BF16 KV: bf16 operands; FP8 KV: f16
//     operands, fp8 -> f16 exactly), online softmax in the log2 domain. All query rows of a (request, KV head)
//     pair -- q_len tokens x group heads -- sit in the MMA's M dimension, so GQA reads each KV tile once.
//     Warps split rows (16 per m-tile) and, when rows are few, split each tile's tokens (kTW groups); token
//     groups are merged through shared memory at the end of a chunk. The fp8-query variant (fp8q_r16) computes
//     S^T = K Q^T on wgmma with the warps splitting the tile's tokens, then exchanges P through shared memory
//     each tile so that the warps split the head dims for P V: no token-group merge.
//   A pair finished in this CTA is written straight to `out`; a piece of a split pair is written to the
//   plan's FP32 partial slot with its LSE, and the CTA that finishes the pair's last piece merges them.
//
// FP8 layouts without a transpose: for S the reduction over head dims is permuted (each thread's 4
// consecutive fp8 dims feed logical k pairs (2c, 2c+1) and (8+2c, 9+2c)), the same permutation is applied to
// Q; for P V, ldmatrix.trans over fp8 pairs gives each thread two tokens x two dims, which become two n-tiles
// (even and odd dims). The accumulator's dim mapping is un-permuted when results are written.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "common/ptx.cuh"
#include "common/wgmma.cuh"
#include "decode/kernel_args.h"
#include "hopperkit/decode/heuristics.h"

// Per-CTA event trace (decode/trace.h): compiled only with -DHOPPERKIT_DECODE_TRACE.
#ifdef HOPPERKIT_DECODE_TRACE
#include "decode/trace.h"
#define HK_TRACE_ONLY(...) __VA_ARGS__
#define HK_TR_SET(args, ev, val)                                                                   \
  do {                                                                                             \
    if ((args).trace) (args).trace[blockIdx.x * kTraceSlots + (ev)] = (unsigned long long)(val);  \
  } while (0)
#else
#define HK_TRACE_ONLY(...)
#define HK_TR_SET(args, ev, val) \
  do {                           \
  } while (0)
#endif
#define HK_TR(args, ev) HK_TR_SET(args, ev, clock64())

namespace hopperkit {
namespace decode {

constexpr int kConsumerWarps = 4;
constexpr int kQRowBytes = 272;  // 256 bytes of a bf16 row + 16 bytes of padding (conflict-free ldmatrix)
constexpr int kSmemPerBlockMax = 227 * 1024;        // largest dynamic smem of one CTA
constexpr int kSmemTwoPerSm = (228 * 1024) / 2 - 1024;  // two CTAs per SM (1 KB reserved per CTA)
constexpr int kConsumerBarrier = 1;  // named barrier id used by the 128 consumer threads
// The two-warpgroup variant (DecodeTraits::kWg2): warpgroup 1's own barrier, and the chunk-end hand-off of its
// accumulators to warpgroup 0 (ready: written; done: read)
constexpr int kWg1Barrier = 2;
constexpr int kCombineReadyBarrier = 3;
constexpr int kCombineDoneBarrier = 4;
// How far (log2) a tile's scores may exceed a query row's running max before the max (P's reference) moves: P is
// then up to 2^8 (exact in f16 / bf16 relative terms), and the cross-lane maxima are taken only when some score is
// past it. Used by the transposed fp8-query variants (fp8q_r16, fp8q_r32; per warp and column) and by the BF16 KV
// variants' mma-layout softmax (per row); session 42.
constexpr float kRefSlack = 8.f;

// Metadata of one chunk, written by the producer next to the chunk's query rows.
struct ChunkInfo {
  int done;        // 1: the CTA has no more chunks
  int pair;
  int batch_idx;
  int kv_head;
  int tile_lo;     // tiles [tile_lo, tile_hi) of the pair
  int tile_hi;
  int seq_len;     // live length, clamped to the block table's capacity
  int q_start;     // first query token of the request
  int q_len;       // query tokens of the request (0..max_q_len)
  int split;       // 1: this chunk is one piece of a split pair
  int slot;        // partial slot of this piece
  int first_slot;  // partial slot of the pair's first piece
  int num_pieces;
  int stale;       // 1: the plan's tile count disagrees with seq_lens (output NaN)
  int no_wait;     // 1: no piece may wait for another piece's CTA (merge_slice): items claimed by SM (one CTA
                   //    may run several in sequence) or a static plan (its grid may exceed the resident CTAs)
  int pad;
};

// kSliceIn = false: the kernel without the sliced merge (launched where no pair can reach kSliceMinPieces pieces,
// slice_free_launch in heuristics.h; it then gives the same output as the kernel with it).
template <bool kFp8Kv, int kMT, int kTW, bool kQFp8In = false, bool kSliceIn = true>
struct DecodeTraits {
  static constexpr bool kFp8 = kFp8Kv;
  static constexpr bool kQFp8 = kQFp8In;  // launched only for an fp8 query
  static constexpr int MT = kMT;                         // m16 tiles per warp
  static constexpr int TW = kTW;                         // token groups per tile
  static constexpr int RW = kConsumerWarps / kTW;        // row groups
  static constexpr int kRowsPerWarp = 16 * kMT;
  static constexpr int kMPad = kRowsPerWarp * RW;        // query rows handled per pair
  static constexpr int kWarpTokens = kTileTokens / kTW;  // tokens of a tile per warp
  static constexpr int NT = kWarpTokens / 8;             // n8 tiles of S per warp
  static constexpr int KSPV = kWarpTokens / 16;          // k16 steps of P V per warp
  static constexpr int kElt = kFp8Kv ? 1 : 2;
  static constexpr int kKvTileBytes = kTileTokens * kHeadDim * kElt;  // one K (or V) tile
  static constexpr int kStageBytes = 2 * kKvTileBytes;
  // The transposed fp8-query variants (FP8 KV, 16 or 32 rows, launched only for an fp8 query: fp8q_r16 with one
  // m-tile, fp8q_r32 with two): S^T = K Q^T runs on wgmma (m64nNk32 e4m3, N = the rows, both operands in shared
  // memory; the chunk's query rows are copied into a 128-byte-swizzled buffer once), pipelined one tile ahead.
  // Their warps split the tile's tokens for S^T and the head dims for P V (P exchanged through shared memory each
  // tile), so they have no token-group merge at a chunk's end.
  static constexpr bool kWgQk = kFp8Kv && kQFp8 && (kMT == 1 || kMT == 2) && kTW == 4;
  static_assert(!kQFp8 || (kFp8Kv && ((kMT == 1 && (kTW == 4 || kTW == 1)) || (kMT == 2 && kTW == 4))),
                "the fp8-query variants are the FP8-KV 16-, 32- and 64-row ones");
  // Rows on wgmma (64 rows: one m-tile per warp over whole tiles): S = Q K^T as m64n64k16 with each warp's query
  // fragments as A (registers) and the K tile as B, then O += P V as m64n128k16 with P from registers and the V
  // tile N-major. The accumulators land in the mma.sync layout of the other variants (warp w: rows 16 w .. 16 w +
  // 15), so the softmax and the epilogue are theirs. The tile loop (consumer_warps) is pipelined by one tile.
  // FP8 KV (kCvt): each tile is converted to f16 once, by the four warps a quarter each, into a K / V tile pair
  // in the BF16 layout, and the products run on f16 (the query as f16, as in the fp8 variants). Three pairs
  // (kCvtBytes), in turn: the tile loop (consumer_warps) converts one tile ahead and rewrites a pair three tiles
  // after its use, once a barrier has shown every warp's products of that tile complete. With an fp8 query (the
  // variant launched only for one, kQFp8) S = Q K^T runs on e4m3 straight from the stage and only V is converted.
  static constexpr bool kWgRows = kMT == 1 && kTW == 1;
  static constexpr bool kCvt = kWgRows && kFp8Kv;
  static constexpr bool kCvtK = kCvt && !kQFp8;
  // Two consumer warpgroups (fp8q_r64): one warpgroup alone runs each tile's chain (S -> softmax -> P -> P V, the V
  // conversion, a barrier) with one warp per scheduler, so every dependent step waits its full latency; with two,
  // warpgroup w takes the chunk's tiles tile_lo + w, + 2, ... (each its own three f16 V pairs and barrier), and at
  // the chunk's end warpgroup 1 hands its O, running max and row sums to warpgroup 0 through shared memory, which
  // combines them (same rows and dims per thread) and runs the epilogue, the split handshake and any merge alone.
  static constexpr bool kWg2 = kWgRows && kQFp8;
  static constexpr int kConsumerWGs = kWg2 ? 2 : 1;
  static constexpr int kConsumerThreads = kConsumerWGs * kConsumerWarps * 32;
  // + the producer warp; with two consumer warpgroups a producer warpgroup (one working warp), so that setmaxnreg
  // can move registers: 384 threads at one CTA per SM get 168 each, the producer warpgroup gives up to
  // kProducerRegs and the consumers take kConsumerRegs (288 threads would be capped at 168 too: 9 warps hold
  // registers as 12)
  static constexpr int kBlockThreads = kWg2 ? kConsumerThreads + 128 : kConsumerThreads + 32;
  static constexpr int kProducerRegs = 72, kConsumerRegs = 216;
  static_assert(!kWg2 || kProducerRegs * 128 + kConsumerRegs * kConsumerThreads <= 168 * kBlockThreads,
                "setmaxnreg: the warpgroups' registers fit what the launch allocated");
  // Q slot rows: bf16 rows with padding (kQRowBytes); kWg2 keeps its e4m3 rows unpadded in 128 bytes, which leaves
  // room for a seventh ring stage (its 4-byte fragment reads, once per chunk, then meet 8-way bank conflicts:
  // ~16 reads per thread and chunk; 144-byte rows, conflict-free, fit six stages)
  static constexpr int kQRowStride = kWg2 ? 128 : kQRowBytes;
  static constexpr int kQSlotBytes = kMPad * kQRowStride;
  static constexpr int kCvtPairBytes = (kCvtK ? 2 : 1) * kTileTokens * kHeadDim * 2;  // [K] V, f16
  static constexpr int kCvtBytes = kCvt ? 3 * kConsumerWGs * kCvtPairBytes : 0;
  // warpgroup 1's chunk-end hand-off (64 O values, 2 maxima, 2 row sums per thread) reuses its own pairs
  static_assert(!kWg2 || 68 * 128 * 4 <= 3 * kCvtPairBytes, "hand-off buffer");
  static constexpr int kQwBytes = kWgQk ? kMPad * 128 : 0;
  // the transposed fp8-query variants' P exchange: two [rows][64 tokens] f16 buffers (128-byte swizzled rows), two
  // [rows][4 warps] float buffers of the max each warp's P was computed against, one [rows][4 warps] of row sums
  static constexpr int kPBufBytes = kMPad * kTileTokens * 2;
  static constexpr int kPxBytes = kWgQk ? 2 * kPBufBytes + 3 * kMPad * kConsumerWarps * 4 : 0;
  // merge_slots' shape: R rows per warp x G partials per round (R x G = 16 loads per lane in flight). 16 rows or
  // fewer: 2 x 8 (8 rows: one round per 8 partials); more rows: 8 x 2, so a 64-row pair split in two merges in
  // 2 rounds instead of 8. Rounds = ceil(rows / 4R) x ceil(count / G): at 32 or 64 rows never more than 2 x 8
  // takes; at rows between, many partials can take more (24 rows, 8 partials: 4 rounds against 3).
  static constexpr int kMergeRows = kMPad >= 32 ? 8 : 2;
  // FP8 KV keeps its partials in f16 (kHalfPartials: half the bytes, so at 16 rows twice the partials per round in
  // the same registers, 2 x 16, and groups of 16 pieces (kMergeGroup): two levels reach 256 pieces in two rounds;
  // at 32+ rows 8 x 2 stays: 8 x 4 spilled 108 bytes in fp8_r32 when the f16 merge still had 4 dims per lane).
  // Its partial is a weighted mean of e4m3 codes (|x| <= 448; v_scale is applied only at the final store), which
  // f16 holds to ~2^-12 relative against the bf16 output's 2^-9. merge_slots_f16 loads them on half-warps.
  static constexpr bool kHalfPartials = kFp8Kv;
  static constexpr int kMergeLoads = (kHalfPartials && kMPad <= 16 ? 32 : 16) / kMergeRows;
  static constexpr int kMergeGroup = kMergeLoads >= 16 ? 16 : hopperkit::decode::kMergeGroup;
  // Long pairs at <= kSliceMaxRows rows merge in one level over kSliceMergers CTAs, each 1 / 16 of the rows x dims
  // (merge_slice; the rule: slice_merge() in heuristics.h), instead of two levels in one CTA; kSliceLoads pieces
  // per lane and round (f16: 16 x 5 registers, fp32: 8 x 9).
  static constexpr bool kSliceMerge = kSliceIn && kMPad <= kSliceMaxRows;
  static constexpr int kSliceLoads = kHalfPartials ? 16 : 8;
  static constexpr int kMergeOBytes = (kTW > 1 && !kWgQk) ? kConsumerWarps * 16 * (kHeadDim + 4) * 4 : 0;
  static constexpr int kMergeMLBytes = (kTW > 1 && !kWgQk) ? kConsumerWarps * 16 * 2 * 4 : 0;
  // Fixed part: Q slots (+ their scales), merge buffers, chunk infos, barriers, flags; 1 KB alignment slack.
  static constexpr int kFixedBytes = 2 * (kQSlotBytes + kMPad * 4) + kMergeOBytes + kMergeMLBytes +
                                     2 * static_cast<int>(sizeof(ChunkInfo)) + 64 * 8 + 64 + 1024 + kQwBytes +
                                     kPxBytes + kCvtBytes;
  // Two CTAs per SM when each still gets two pipeline stages: eight consumer warps per SM hide the latency
  // of the per-tile dependency chain (S -> softmax -> P V) that four warps cannot.
  static constexpr int kStagesTwoPerSm = (kSmemTwoPerSm - kFixedBytes) / kStageBytes;
  // (Variants with a warp per 16 rows x whole tile need more registers than two CTAs per SM allow.)
  static constexpr int kSmemLimit = (kStagesTwoPerSm >= 2 && kTW > 1) ? kSmemTwoPerSm : kSmemPerBlockMax;
  static constexpr int kMinBlocksPerSm = kSmemLimit == kSmemTwoPerSm ? 2 : 1;  // register cap to match
  static constexpr int kStagesFit = (kSmemLimit - kFixedBytes) / kStageBytes;
  // (the fp8-query variant keeps 4 stages: the 5 that its fixed part now allows measured 1.011x in session 24,
  // and 6 in a timing-only build streamed no faster)
  static constexpr int kStageCap = kWgQk ? 4 : 8;
  static constexpr int kStages = kStagesFit > kStageCap ? kStageCap : kStagesFit;
  static constexpr int kSmemBytes = kFixedBytes + kStages * kStageBytes;
  static_assert(kStages >= 2, "not enough shared memory for two pipeline stages");
  static_assert(kTW == 1 || kMT == 1 || kWgQk, "token groups only with one m-tile per warp");
};

// Shared-memory carve-up (offsets from a 1024-byte aligned base).
template <class T>
struct SmemLayout {
  static constexpr int kStagesOff = 0;
  static constexpr int kQwOff = kStagesOff + T::kStages * T::kStageBytes;  // 1 KB aligned (stages are 16 KB)
  static constexpr int kCvtOff = kQwOff + T::kQwBytes;  // 1 KB aligned too (kQwBytes is 0, 2 or 4 KB)
  static constexpr int kPxOff = kCvtOff + T::kCvtBytes;  // (kCvtBytes is 0, 48 or 96 KB)
  static constexpr int kQOff = kPxOff + T::kPxBytes;
  static constexpr int kQScaleOff = kQOff + 2 * T::kQSlotBytes;
  static constexpr int kMergeOOff = kQScaleOff + 2 * T::kMPad * 4;
  static constexpr int kMergeMLOff = kMergeOOff + T::kMergeOBytes;
  static constexpr int kInfoOff = kMergeMLOff + T::kMergeMLBytes;
  static constexpr int kBarOff = (kInfoOff + 2 * static_cast<int>(sizeof(ChunkInfo)) + 7) / 8 * 8;
  static constexpr int kFlagOff = kBarOff + 64 * 8;
  static constexpr int kEnd = kFlagOff + 64;
  static_assert(kEnd + 1024 <= T::kSmemBytes, "layout exceeds the budget");
};

struct Barriers {
  uint64_t* full;    // [kStages] TMA landed
  uint64_t* empty;   // [kStages] consumers done with the stage
  uint64_t* qfull;   // [2] query slot + chunk info staged
  uint64_t* qempty;  // [2] consumers done with the query slot
  uint64_t* done;    // (T::kWgRows) phase 0 completed at set-up and never again: a wait on it returns at once
};

// Coordinates (dims 1..3) of one page's box in a cache tensor map whose dims are sorted by stride.
__device__ __forceinline__ void page_coords(int pos_tok, int pos_head, int tok, int head, int blk, int& c1, int& c2,
                                            int& c3) {
  c1 = pos_tok == 1 ? tok : (pos_head == 1 ? head : blk);
  c2 = pos_tok == 2 ? tok : (pos_head == 2 ? head : blk);
  c3 = pos_tok == 3 ? tok : (pos_head == 3 ? head : blk);
}

__device__ __forceinline__ int clamp_len(int len, int64_t capacity) {
  return len < 0 ? 0 : (len > capacity ? static_cast<int>(capacity) : len);
}

// Query tokens of request b: [qs, qs + ql). Untrusted query_start_loc: a range outside [0, num_tokens) gives
// ql = 0, more than max_q_len tokens gives the first max_q_len; both set kPlanErrorQueryLoc in err.
__device__ __forceinline__ void query_range(const DecodeKernelArgs& a, int b, int& qs, int& ql, int& err) {
  if (a.query_start_loc != nullptr) {
    qs = a.query_start_loc[b];
    const int qe = a.query_start_loc[b + 1];
    ql = qe - qs;
    if (ql < 0 || ql > a.max_q_len || qs < 0 || qe > a.num_tokens) {
      err |= kPlanErrorQueryLoc;
      ql = (qs < 0 || qe > a.num_tokens || ql < 0) ? 0 : a.max_q_len;
    }
  } else {
    qs = b * a.max_q_len;
    ql = a.max_q_len;
  }
}

__device__ __forceinline__ float nan_f() { return __int_as_float(0x7fc00000); }

// ------------------------------------------------------------------------------------------------------------
// Producer warp.
// ------------------------------------------------------------------------------------------------------------
template <class T>
__device__ __forceinline__ void producer_warp(const CUtensorMap* tmap_k, const CUtensorMap* tmap_v,
                                              const DecodeKernelArgs& a, uint8_t* smem, const Barriers& bars,
                                              ChunkInfo* infos) {
  using L = SmemLayout<T>;
  const int lane = threadIdx.x & 31;
  const DecodePlanView& plan = a.plan;
  // The work item (a range of the plan's tiles): this CTA's own, or, by SM, each one this CTA claims.
  int cta = blockIdx.x;
  // one round trip for everything the CTA needs to start (arrays are sized for every launched CTA)
  const int num_ctas = plan.header[kHdrNumCtas];
  const int num_pairs = plan.header[kHdrNumPairs];
  const bool by_sm = plan.header[kHdrBySm] != 0;
  // (no piece waits for another unless every piece has its own resident CTA: by-SM plans run several items on one
  //  CTA in turn, a static grid may exceed the resident CTAs, and the launcher checks the dynamic grid's fit)
  const int no_wait =
      by_sm || plan.header[kHdrMode] != static_cast<int>(PlanMode::kDynamic) || a.pieces_resident == 0 ? 1 : 0;
  const int batch = plan.header[kHdrBatch];
  const bool head_major = head_major_pairs(plan.header[kHdrMode]);  // the plan's pair order (pair_coords)
  int cta_t0 = plan.cta_tile_start[cta];
  int cta_t1 = plan.cta_tile_start[cta + 1];
  int cta_first_pair = plan.cta_first_pair[cta];
  const int H = a.num_kv_heads;
  const int G = a.group;
  const int64_t capacity = static_cast<int64_t>(a.max_blocks_per_seq) * a.block_size;
  const int bs = a.block_size;
  const int bs_eff = bs < kTileTokens ? bs : kTileTokens;
  const int q_row_bytes = a.q_is_fp8 ? kHeadDim : 2 * kHeadDim;
  const int q_chunks_per_row = q_row_bytes / 16;
  const uint64_t policy = ptx::policy_evict_first();
  if (lane == 0) {
    ptx::prefetch_tensormap(tmap_k);
    ptx::prefetch_tensormap(tmap_v);
  }

  uint32_t chunk_count = 0;
  int stage = 0;
  uint32_t phase = 0;
  HK_TRACE_ONLY(bool tr_first_tma = true;)

  // By SM: the first CTA resident on each SM claims items until none are left; the others have none. A CTA
  // that claims nothing more counts itself done; the launch's last one claims whatever is still left (nothing,
  // unless no CTA became a claimer, e.g. counters a misused plan left behind) and then resets the counters.
  // Debug bit 4 (tests): only block 0 claims, so one CTA runs every item in sequence.
  bool claiming = false, counted = false, last_cta = false;
  if (by_sm) {
    int first = 0;
    if (lane == 0) first = atomicAdd(&plan.sm_claims[ptx::sm_id() % kMaxSmSlots], 1) == 0;
    claiming = (a.debug_flags & 4) ? blockIdx.x == 0 : __shfl_sync(0xffffffffu, first, 0) != 0;
  }
  for (;;) {
    if (by_sm) {
      if (!claiming) {
        if (counted) break;
        counted = true;
        int last = 0;
        if (lane == 0) {
          last = ptx::atom_add_acq_rel_gpu(&plan.header[kHdrClaimDone], 1) == static_cast<int>(gridDim.x) - 1;
        }
        last_cta = __shfl_sync(0xffffffffu, last, 0) != 0;
        __syncwarp();  // the other lanes' later accesses ordered after lane 0's acquire
        if (!last_cta) break;
        claiming = true;
      }
      int x = 0;
      if (lane == 0) x = atomicAdd(&plan.header[kHdrClaimNext], 1);
      cta = __shfl_sync(0xffffffffu, x, 0);
      if (cta >= num_ctas) {
        claiming = false;
        continue;
      }
      cta_t0 = plan.cta_tile_start[cta];
      cta_t1 = plan.cta_tile_start[cta + 1];
      cta_first_pair = plan.cta_first_pair[cta];
    } else if (cta >= num_ctas) {
      break;
    }
    int t = cta_t0;
    const int tend = cta_t1;
    int p = cta_first_pair;
    // Window of per-pair metadata: lane i holds pair wp0 + i.
    int wp0 = -(1 << 30);
    int w_start = 0, w_end = 0, w_len = 0, w_qs = 0, w_ql = 0, w_first_slot = 0, w_pieces = 0, w_err = 0;
    while (t < tend) {
      if (p - wp0 >= 32 || p < wp0) {
        wp0 = p;
        const int qp = wp0 + lane;
        w_err = 0;
        if (qp < num_pairs) {
          w_start = plan.pair_tile_start[qp];
          w_end = plan.pair_tile_start[qp + 1];
          w_first_slot = plan.pair_first_slot[qp];
          w_pieces = plan.pair_num_pieces[qp];
          int b = 0, hh = 0;
          pair_coords(qp, batch, H, head_major, b, hh);
          w_len = clamp_len(a.seq_lens[b], capacity);
          query_range(a, b, w_qs, w_ql, w_err);
          if (num_tiles(w_len) != w_end - w_start) w_err |= kPlanErrorStale;
        } else {
          w_start = w_end = 0x7fffffff;
          w_len = w_qs = w_ql = w_first_slot = w_pieces = 0;
        }
        const int any_err = __reduce_or_sync(0xffffffffu, w_err);
        if (lane == 0 && any_err != 0) atomicOr(&plan.header[kHdrErrors], any_err);
      }
      const int i = p - wp0;
      const int pstart = __shfl_sync(0xffffffffu, w_start, i);
      const int pend = __shfl_sync(0xffffffffu, w_end, i);
      if (pend <= t) {  // pair with no tiles (or already behind us)
        ++p;
        continue;
      }
      const int len = __shfl_sync(0xffffffffu, w_len, i);
      const int qs = __shfl_sync(0xffffffffu, w_qs, i);
      const int ql = __shfl_sync(0xffffffffu, w_ql, i);
      const int first_slot = __shfl_sync(0xffffffffu, w_first_slot, i);
      const int pieces = __shfl_sync(0xffffffffu, w_pieces, i);
      const int stale = (__shfl_sync(0xffffffffu, w_err, i) & kPlanErrorStale) ? 1 : 0;
      const int lo = t - pstart;
      const int hi = (tend < pend ? tend : pend) - pstart;
      int b = 0, h = 0;
      pair_coords(p, batch, H, head_major, b, h);

      // ---- stage the chunk's query rows and metadata
      HK_TRACE_ONLY(if (lane == 0 && chunk_count == 0) HK_TR(a, kTrFirstMeta);
                    if (lane == 0 && chunk_count < kTrChunks) HK_TR(a, kTrChunkMeta + chunk_count);
                    bool tr_chunk_tma = chunk_count < kTrChunks;)
      const int slot = chunk_count & 1;
      ptx::mbar_wait(&bars.qempty[slot], ((chunk_count >> 1) & 1) ^ 1);
      uint8_t* qdst = smem + L::kQOff + slot * T::kQSlotBytes;
      float* sdst = reinterpret_cast<float*>(smem + L::kQScaleOff) + slot * T::kMPad;
      const int rows = ql * G;
      for (int idx = lane; idx < rows * q_chunks_per_row; idx += 32) {
        const int r = idx / q_chunks_per_row;
        const int c = idx - r * q_chunks_per_row;
        const int token = qs + r / G;
        const int head = h * G + (r % G);
        ptx::cp_async_16(qdst + r * T::kQRowStride + c * 16,
                         a.q + token * a.q_stride_token_bytes + head * a.q_stride_head_bytes + c * 16);
      }
      if (a.q_is_fp8) {
        for (int r = lane; r < rows; r += 32) {
          const int token = qs + r / G;
          const int head = h * G + (r % G);
          ptx::cp_async_4(sdst + r, a.q_scale + static_cast<int64_t>(token) * a.num_q_heads + head);
        }
      }
      if (lane == 0) {
        ChunkInfo& ci = infos[slot];
        ci.done = 0;
        ci.pair = p;
        ci.batch_idx = b;
        ci.kv_head = h;
        ci.tile_lo = lo;
        ci.tile_hi = hi;
        ci.seq_len = len;
        ci.q_start = qs;
        ci.q_len = ql;
        ci.split = pieces > 1 ? 1 : 0;
        // This CTA's piece goes to slot 2*cta if the pair is the CTA's first pair, else 2*cta + 1.
        ci.slot = 2 * cta + (p == cta_first_pair ? 0 : 1);
        ci.first_slot = first_slot;
        ci.num_pieces = pieces;
        ci.stale = stale;
        if constexpr (T::kSliceMerge) ci.no_wait = no_wait;
      }
      ptx::cp_async_mbar_arrive_noinc(&bars.qfull[slot]);
      if (lane == 0) ptx::mbar_arrive(&bars.qfull[slot]);
      ++chunk_count;

      // ---- stream the chunk's KV tiles
      int pw_base = -(1 << 30);  // window of block ids: lane i holds page pw_base + i
      int pw_blk = 0;
      for (int tt = lo; tt < hi; ++tt) {
        const int pos = tt * kTileTokens;
        const int valid = len - pos;  // tokens of this tile inside the sequence (may exceed 64)
        const int npages = valid <= 0 ? 0 : (valid >= kTileTokens ? kTileTokens / bs_eff : (valid + bs_eff - 1) / bs_eff);
        const int pg0 = pos / bs;
        if (npages > 0 && (pg0 < pw_base || pg0 + npages > pw_base + 32)) {
          pw_base = pg0;
          const int pg = pg0 + lane;
          const bool used = pg < a.max_blocks_per_seq && static_cast<int64_t>(pg) * bs < len;
          pw_blk = used ? a.block_table[static_cast<int64_t>(b) * a.block_table_stride + pg] : 0;
          // an out-of-range id reads zeros through TMA: flag it, never fault
          if (__any_sync(0xffffffffu, used && (pw_blk < 0 || pw_blk >= a.num_blocks)) && lane == 0) {
            atomicOr(&plan.header[kHdrErrors], kPlanErrorBlockId);
          }
        }
        const int my_blk = __shfl_sync(0xffffffffu, pw_blk, (pg0 - pw_base + lane) & 31);
        ptx::mbar_wait(&bars.empty[stage], phase ^ 1);
        uint8_t* ks = smem + L::kStagesOff + stage * T::kStageBytes;
        uint8_t* vs = ks + T::kKvTileBytes;
        if (lane == 0) {
          ptx::mbar_arrive_expect_tx(&bars.full[stage],
                                     static_cast<uint32_t>(npages * bs_eff * kHeadDim * T::kElt * 2));
        }
        __syncwarp();
        if (lane < npages) {
          const int tok_off = bs > kTileTokens ? (pos % bs) : 0;
          const int row0 = lane * bs_eff;
          int k1, k2, k3, v1, v2, v3;
          page_coords(a.k_pos_tok, a.k_pos_head, tok_off, h, my_blk, k1, k2, k3);
          page_coords(a.v_pos_tok, a.v_pos_head, tok_off, h, my_blk, v1, v2, v3);
          if constexpr (T::kFp8) {
            ptx::tma_load_4d(ks + row0 * 128, tmap_k, &bars.full[stage], 0, k1, k2, k3, policy);
            ptx::tma_load_4d(vs + row0 * 128, tmap_v, &bars.full[stage], 0, v1, v2, v3, policy);
          } else {
            constexpr int kHalf = kTileTokens * 128;  // bytes of one 64-dim half tile
            ptx::tma_load_4d(ks + row0 * 128, tmap_k, &bars.full[stage], 0, k1, k2, k3, policy);
            ptx::tma_load_4d(ks + kHalf + row0 * 128, tmap_k, &bars.full[stage], 64, k1, k2, k3, policy);
            ptx::tma_load_4d(vs + row0 * 128, tmap_v, &bars.full[stage], 0, v1, v2, v3, policy);
            ptx::tma_load_4d(vs + kHalf + row0 * 128, tmap_v, &bars.full[stage], 64, v1, v2, v3, policy);
          }
          HK_TRACE_ONLY(if (lane == 0) {
            if (tr_first_tma) HK_TR(a, kTrFirstTma);
            if (tr_chunk_tma) HK_TR(a, kTrChunkTma + chunk_count - 1);
            tr_first_tma = tr_chunk_tma = false;
            HK_TR(a, kTrLastTma);
          })
        }
        if (++stage == T::kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
      t = pstart + hi;
      ++p;
    }
    if (!by_sm) break;
  }
  if (last_cta) {  // the launch's last CTA, every item claimed: the counters start the next launch at zero
    for (int i = lane; i < kMaxSmSlots; i += 32) plan.sm_claims[i] = 0;
    if (lane == 0) {
      plan.header[kHdrClaimNext] = 0;
      plan.header[kHdrClaimDone] = 0;
    }
  }
  // ---- no more chunks
  const int slot = chunk_count & 1;
  ptx::mbar_wait(&bars.qempty[slot], ((chunk_count >> 1) & 1) ^ 1);
  if (lane == 0) infos[slot].done = 1;
  ptx::cp_async_mbar_arrive_noinc(&bars.qfull[slot]);
  if (lane == 0) ptx::mbar_arrive(&bars.qfull[slot]);
}

// ------------------------------------------------------------------------------------------------------------
// Consumer helpers.
// ------------------------------------------------------------------------------------------------------------

// Swizzled byte offset of (row, 16-byte chunk) inside a tile region written by TMA with 128-byte swizzle.
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return static_cast<uint32_t>(row * 128 + ((chunk ^ (row & 7)) << 4));
}

// Head dim of accumulator element (n-tile L, element c) for this lane.
template <bool kFp8>
__device__ __forceinline__ int o_dim(int L, int c, int lane) {
  if constexpr (kFp8) {
    return 16 * (L >> 1) + 4 * (lane & 3) + 2 * (c & 1) + (L & 1);
  } else {
    return 8 * L + 2 * (lane & 3) + (c & 1);
  }
}

// Where the result of one query row goes.
struct RowDest {
  int valid;
  int64_t out_off;  // element offset into out
  int64_t lse_off;  // element offset into lse
};

__device__ __forceinline__ RowDest row_dest(const DecodeKernelArgs& a, const ChunkInfo& ci, int r) {
  RowDest d;
  const int rows = ci.q_len * a.group;
  d.valid = r < rows;
  const int rr = d.valid ? r : 0;
  const int token = ci.q_start + rr / a.group;
  const int head = ci.kv_head * a.group + rr % a.group;
  d.out_off = static_cast<int64_t>(token) * a.out_stride_token + static_cast<int64_t>(head) * a.out_stride_head;
  d.lse_off = static_cast<int64_t>(token) * a.lse_stride_token + head;
  return d;
}

// The masks of a lane's V fragment registers: keep_lo for the "lo" registers (tokens ta in the low 16 bits,
// ta + 1 in the high), keep_hi for the "hi" ones (ta + 8, ta + 9). All ones, or with mask_v (the tile reaches
// past the sequence) zero for tokens at or past len, so that stale or NaN V rows never reach the P V products.
__device__ __forceinline__ void v_pair_keep(int ta, int len, bool mask_v, uint32_t& keep_lo, uint32_t& keep_hi) {
  keep_lo = 0xffffffffu;
  keep_hi = 0xffffffffu;
  if (mask_v) {
    keep_lo = (ta < len ? 0x0000ffffu : 0u) | (ta + 1 < len ? 0xffff0000u : 0u);
    keep_hi = (ta + 8 < len ? 0x0000ffffu : 0u) | (ta + 9 < len ? 0xffff0000u : 0u);
  }
}

// zero the V pairs that keep_lo / keep_hi drop (fragments of ldmatrix.trans over fp8 byte pairs: w0 / w2 hold
// this lane's tokens ta, ta + 1, w1 / w3 tokens ta + 8, ta + 9)
__device__ __forceinline__ void v_pair_mask(uint32_t keep_lo, uint32_t keep_hi, uint32_t& w0, uint32_t& w1,
                                            uint32_t& w2, uint32_t& w3) {
  w0 &= keep_lo;
  w2 &= keep_lo;
  w1 &= keep_hi;
  w3 &= keep_hi;
}

__device__ __forceinline__ uint16_t f2bf(float x) {
  __nv_bfloat16 b = __float2bfloat16_rn(x);
  return *reinterpret_cast<uint16_t*>(&b);
}

// Partial slot of piece j of the chunk's pair.
__device__ __forceinline__ int piece_slot(int first_slot, int j) {
  return j == 0 ? first_slot : (first_slot & ~1) + 2 * j;
}

// f16 partial outputs (DecodeTraits::kHalfPartials, FP8 KV): the partial buffer is sized for fp32 and indexed by
// element either way; four (or two) consecutive dims per access. The fp32 paths keep their own code at each use,
// so the BF16 variants compile exactly as before.
__device__ __forceinline__ float4 f16x4_to_f4(uint2 v) {
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&v.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&v.y));
  return make_float4(a.x, a.y, b.x, b.y);
}

__device__ __forceinline__ void store_partial4_f16(float* base, int64_t elem, float x0, float x1, float x2,
                                                   float x3) {
  const __half2 a = __floats2half2_rn(x0, x1);
  const __half2 b = __floats2half2_rn(x2, x3);
  uint2 u;
  u.x = *reinterpret_cast<const uint32_t*>(&a);
  u.y = *reinterpret_cast<const uint32_t*>(&b);
  *reinterpret_cast<uint2*>(reinterpret_cast<__half*>(base) + elem) = u;
}

__device__ __forceinline__ void store_partial2_f16(float* base, int64_t elem, float x0, float x1) {
  *reinterpret_cast<__half2*>(reinterpret_cast<__half*>(base) + elem) = __floats2half2_rn(x0, x1);
}

// What merge_slots reads, by value. merge_slots is not inlined, and a non-inlined function that reads the
// kernel's parameters through a reference does so with generic loads: one memory round trip (re-issued per
// piece) before the partials' loads can even be addressed. Session 13's per-CTA trace measured ~2.8 us from
// the last piece's handshake to the end of a two-piece merge that way.
struct MergeArgs {
  float* partial_o;          // [slots, partial_rows, 128]
  float* partial_lse;        // [slots, partial_rows]
  uint16_t* out;             // final outputs (bf16 bits)
  float* lse;                // or null
  int64_t out_stride_token;
  int64_t out_stride_head;
  int64_t lse_stride_token;
  int partial_rows;
  int group;
  int rows;                  // q_len * group
  int q_start;
  int head0;                 // kv_head * group
  int first_slot;
  int stale;
  float v_scale;
  HK_TRACE_ONLY(unsigned long long* trace;)  // decode/trace.h (trace builds only)
};

__device__ __forceinline__ MergeArgs merge_args(const DecodeKernelArgs& a, const ChunkInfo& ci, float v_scale) {
  MergeArgs m;
  m.partial_o = a.plan.partial_o;
  m.partial_lse = a.plan.partial_lse;
  m.out = a.out;
  m.lse = a.lse;
  m.out_stride_token = a.out_stride_token;
  m.out_stride_head = a.out_stride_head;
  m.lse_stride_token = a.lse_stride_token;
  m.partial_rows = a.partial_rows;
  m.group = a.group;
  m.rows = ci.q_len * a.group;
  m.q_start = ci.q_start;
  m.head0 = ci.kv_head * a.group;
  m.first_slot = ci.first_slot;
  m.stale = ci.stale;
  m.v_scale = v_scale;
  HK_TRACE_ONLY(m.trace = a.trace;)
  return m;
}

// batches of 8 partials in a merge round of G
template <int G>
constexpr int kMergeBatches = G > 8 ? G / 8 : 1;

// The merge's per-row steps, shared by merge_slots_f16 and merge_slots. A round's new running max (log2 units):
// the previous one and the round's G pieces' LSEs.
template <int G>
__device__ __forceinline__ float merge_round_max(float mx, const float (&lse)[G]) {
  float cm = mx;
#pragma unroll
  for (int i = 0; i < G; ++i) cm = fmaxf(cm, lse[i]);
  return cm;
}
// The max that exp2 weights are taken against (softmax rows, merges): 0 while no value was finite (all weights 0).
__device__ __forceinline__ float ref_max(float mx) { return mx == -INFINITY ? 0.f : mx; }

// A merged output row's 8 dims d0..d0+7 (bf16: acc x sc, NaN for a stale plan) and, from the lane that asks
// (`lse_lane`) where an LSE output is given, its natural-log LSE from the log2 `lse2` (merge_slots_f16, merge_slice).
__device__ __forceinline__ void store_merged8(const MergeArgs& m, int r, int d0, const float (&acc)[8], float sc,
                                              float lse2, bool lse_lane) {
  const int token = m.q_start + r / m.group;
  const int head = m.head0 + r % m.group;
  float x[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) x[c] = m.stale ? nan_f() : acc[c] * sc;
  uint4 packed;
  packed.x = static_cast<uint32_t>(f2bf(x[0])) | (static_cast<uint32_t>(f2bf(x[1])) << 16);
  packed.y = static_cast<uint32_t>(f2bf(x[2])) | (static_cast<uint32_t>(f2bf(x[3])) << 16);
  packed.z = static_cast<uint32_t>(f2bf(x[4])) | (static_cast<uint32_t>(f2bf(x[5])) << 16);
  packed.w = static_cast<uint32_t>(f2bf(x[6])) | (static_cast<uint32_t>(f2bf(x[7])) << 16);
  const int64_t out_off =
      static_cast<int64_t>(token) * m.out_stride_token + static_cast<int64_t>(head) * m.out_stride_head;
  *reinterpret_cast<uint4*>(m.out + out_off + d0) = packed;
  if (m.lse != nullptr && lse_lane) {
    m.lse[static_cast<int64_t>(token) * m.lse_stride_token + head] = m.stale ? nan_f() : lse2 * 0.69314718055994531f;
  }
}

// merge_slots' f16 path (FP8 KV): a half-warp per row, each lane 8 consecutive dims (16-byte loads of f16, half
// the load instructions and exp2s of 4 dims per lane). The warp's R rows per pass are the float path's (rb + j x
// 4 warps), its half h taking j = h, h + 2, ...; G partials per round as two batches of 8 when G = 16, the
// second only when the round has more than 8 (a uniform branch).
template <int R, int G>
__device__ __forceinline__ void merge_slots_f16(const MergeArgs& m, int k0, int step, int count, bool final,
                                                int dst_slot HK_TRACE_ONLY(, int tr_i)) {
  constexpr int RH = R / 2;
  static_assert(R % 2 == 0, "merge_slots_f16: two rows per warp pass at least");
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int hw = lane >> 4;
  const int rows = m.rows;
  const int64_t slot_stride_o = static_cast<int64_t>(m.partial_rows) * kHeadDim;
  const uint32_t prow = static_cast<uint32_t>(m.partial_rows);
  const int d8 = (lane & 15) * 8;
  const __half* po = reinterpret_cast<const __half*>(m.partial_o);
  for (int rb = warp; rb < rows; rb += R * kConsumerWarps) {
    float mx[RH], wsum[RH], acc[RH][8];
#pragma unroll
    for (int j = 0; j < RH; ++j) {
      mx[j] = -INFINITY;
      wsum[j] = 0.f;
#pragma unroll
      for (int c = 0; c < 8; ++c) acc[j][c] = 0.f;
    }
    for (int c0 = 0; c0 < count; c0 += G) {
      float lse[RH][G];
      uint4 o[RH][G];
      // the round's pieces p0 + i x step: piece p >= 1 sits in slot (first_slot & ~1) + 2p (piece_slot), so their
      // slots' offsets step by a constant; only i = 0 can be piece 0 (slot first_slot)
      const uint32_t p0 = static_cast<uint32_t>(k0 + c0 * step);
      const uint32_t lstep = 2u * static_cast<uint32_t>(step) * prow;
      const uint32_t lnext = (static_cast<uint32_t>(m.first_slot & ~1) + 2u * p0) * prow;  // + i x lstep: i >= 1
      const uint32_t lfirst = p0 == 0 ? static_cast<uint32_t>(m.first_slot) * prow : lnext;
#pragma unroll
      for (int sb = 0; sb < kMergeBatches<G>; ++sb) {
        constexpr int kB = G / kMergeBatches<G>;
        if (sb > 0 && c0 + sb * kB >= count) {
#pragma unroll
          for (int i = sb * kB; i < sb * kB + kB; ++i) {
#pragma unroll
            for (int j = 0; j < RH; ++j) {
              lse[j][i] = -INFINITY;
              o[j][i] = make_uint4(0u, 0u, 0u, 0u);
            }
          }
          continue;
        }
#pragma unroll
        for (int i = sb * kB; i < sb * kB + kB; ++i) {
          const bool have = c0 + i < count;
          // (an offset past the round's pieces is formed but never loaded)
          const uint32_t lbase = i == 0 ? lfirst : lnext + static_cast<uint32_t>(i) * lstep;
          const uint32_t obase = lbase * kHeadDim + d8;
#pragma unroll
          for (int j = 0; j < RH; ++j) {
            const int r = rb + (2 * j + hw) * kConsumerWarps;
            lse[j][i] = -INFINITY;
            o[j][i] = make_uint4(0u, 0u, 0u, 0u);
            if (have && r < rows) {
              lse[j][i] = ptx::ld_cg_f(m.partial_lse + (lbase + r));
              o[j][i] = __ldcg(reinterpret_cast<const uint4*>(po + (obase + static_cast<uint32_t>(r) * kHeadDim)));
            }
          }
        }
      }
#pragma unroll
      for (int j = 0; j < RH; ++j) {
        const float cm = merge_round_max<G>(mx[j], lse[j]);
        const float m_use = ref_max(cm);
        const float keep = ptx::exp2_approx(mx[j] - m_use);  // rescale what was accumulated so far
        wsum[j] *= keep;
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[j][c] *= keep;
#pragma unroll
        for (int i = 0; i < G; ++i) {
          if (i >= G / kMergeBatches<G> && c0 + G / kMergeBatches<G> >= count) break;
          const float w = ptx::exp2_approx(lse[j][i] - m_use);
          const float4 a = f16x4_to_f4(make_uint2(o[j][i].x, o[j][i].y));
          const float4 b = f16x4_to_f4(make_uint2(o[j][i].z, o[j][i].w));
          acc[j][0] += w * a.x;
          acc[j][1] += w * a.y;
          acc[j][2] += w * a.z;
          acc[j][3] += w * a.w;
          acc[j][4] += w * b.x;
          acc[j][5] += w * b.y;
          acc[j][6] += w * b.z;
          acc[j][7] += w * b.w;
          wsum[j] += w;
        }
        mx[j] = cm;
      }
      // (the condition reads the loaded values, so the clock is read after they returned)
      HK_TRACE_ONLY(if (threadIdx.x == 0 && c0 == 0 && mx[0] != 1.2345f) HK_TR(m, kTrMergeLoaded + tr_i);)
    }
#pragma unroll
    for (int j = 0; j < RH; ++j) {
      const int r = rb + (2 * j + hw) * kConsumerWarps;
      if (r >= rows) continue;
      const float m_use = ref_max(mx[j]);
      const float inv = wsum[j] > 0.f ? 1.f / wsum[j] : 0.f;
      const float lse2 = wsum[j] > 0.f ? m_use + __log2f(wsum[j]) : -INFINITY;
      if (final) {
        store_merged8(m, r, d8, acc[j], inv * m.v_scale, lse2, (lane & 15) == 0);
      } else {
        const int64_t elem = dst_slot * slot_stride_o + static_cast<int64_t>(r) * kHeadDim + d8;
        store_partial4_f16(m.partial_o, elem, acc[j][0] * inv, acc[j][1] * inv, acc[j][2] * inv, acc[j][3] * inv);
        store_partial4_f16(m.partial_o, elem + 4, acc[j][4] * inv, acc[j][5] * inv, acc[j][6] * inv,
                           acc[j][7] * inv);
        if ((lane & 15) == 0) m.partial_lse[static_cast<int64_t>(dst_slot) * m.partial_rows + r] = lse2;
      }
    }
  }
}

// Merges `count` partials -- pieces k0, k0 + step, ... of the chunk's pair -- by their log2-sum-exp2 weights.
// `final`: writes the pair's output rows (bf16, v_scale, natural-log LSE); else writes the merged partial
// (normalised, fp32 or f16 (kHalf), + log2 LSE) into `dst_slot`. fp32: one warp per row, lane l owns dims
// 4l..4l+3; f16: merge_slots_f16 above. Each round reads G partials of R rows per warp with every load in flight
// before any use (the latency of L2 and the loads' own issue are what this costs: a merge takes ceil(rows / 4R) x
// ceil(count / G) dependent rounds). R x G = 16 float4 per lane (DecodeTraits::kMergeRows, kMergeLoads); f16: R / 2
// x G 16-byte vectors per lane (2 x 16 at 16 rows: 16 vectors; 8 x 2 at 32+ rows: 8).
template <int R, int G, bool kHalf>
static __device__ __noinline__ void merge_slots(const MergeArgs m, int k0, int step, int count, bool final,
                                                int dst_slot) {
  // trace: this CTA's first merge records at +0, later ones at +1
  HK_TRACE_ONLY(const int tr_i = m.trace != nullptr && m.trace[blockIdx.x * kTraceSlots + kTrMergeIn] != 0 ? 1 : 0;
                if (threadIdx.x == 0) HK_TR(m, kTrMergeIn + tr_i);)
  if constexpr (kHalf) {
    merge_slots_f16<R, G>(m, k0, step, count, final, dst_slot HK_TRACE_ONLY(, tr_i));
  } else {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int rows = m.rows;
    const int64_t slot_stride_o = static_cast<int64_t>(m.partial_rows) * kHeadDim;
    const uint32_t prow = static_cast<uint32_t>(m.partial_rows);
    const int d4 = lane * 4;
    for (int rb = warp; rb < rows; rb += R * kConsumerWarps) {
      float mx[R], wsum[R], acc[R][4];
#pragma unroll
      for (int j = 0; j < R; ++j) {
        mx[j] = -INFINITY;
        wsum[j] = 0.f;
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
      }
      for (int c0 = 0; c0 < count; c0 += G) {
        float lse[R][G];
        float4 o[R][G];
#pragma unroll
        for (int i = 0; i < G; ++i) {
          const bool have = c0 + i < count;
          // 32-bit element offsets (the partial buffers hold < 2^32 floats: 2 x max_ctas slots of <= 128 rows):
          // one wide multiply-add per address instead of 64-bit products per (piece, row)
          const uint32_t lbase =
              have ? static_cast<uint32_t>(piece_slot(m.first_slot, k0 + (c0 + i) * step)) * prow : 0u;
          const uint32_t obase = lbase * kHeadDim + d4;
#pragma unroll
          for (int j = 0; j < R; ++j) {
            const int r = rb + j * kConsumerWarps;
            lse[j][i] = -INFINITY;
            o[j][i] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (have && r < rows) {
              lse[j][i] = ptx::ld_cg_f(m.partial_lse + (lbase + r));
              o[j][i] = ptx::ld_cg_f4(m.partial_o + (obase + static_cast<uint32_t>(r) * kHeadDim));
            }
          }
        }
#pragma unroll
        for (int j = 0; j < R; ++j) {
          const float cm = merge_round_max<G>(mx[j], lse[j]);
          const float m_use = ref_max(cm);
          const float keep = ptx::exp2_approx(mx[j] - m_use);  // rescale what was accumulated so far
          wsum[j] *= keep;
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[j][c] *= keep;
#pragma unroll
          for (int i = 0; i < G; ++i) {
            const float w = ptx::exp2_approx(lse[j][i] - m_use);
            acc[j][0] += w * o[j][i].x;
            acc[j][1] += w * o[j][i].y;
            acc[j][2] += w * o[j][i].z;
            acc[j][3] += w * o[j][i].w;
            wsum[j] += w;
          }
          mx[j] = cm;
        }
        // (the condition reads the loaded values, so the clock is read after they returned)
        HK_TRACE_ONLY(if (threadIdx.x == 0 && c0 == 0 && mx[0] != 1.2345f) HK_TR(m, kTrMergeLoaded + tr_i);)
      }
#pragma unroll
      for (int j = 0; j < R; ++j) {
        const int r = rb + j * kConsumerWarps;
        if (r >= rows) continue;
        const float m_use = ref_max(mx[j]);
        const float inv = wsum[j] > 0.f ? 1.f / wsum[j] : 0.f;
        const float lse2 = wsum[j] > 0.f ? m_use + __log2f(wsum[j]) : -INFINITY;
        if (final) {
          const int token = m.q_start + r / m.group;
          const int head = m.head0 + r % m.group;
          const float sc = inv * m.v_scale;
          float o0 = acc[j][0] * sc, o1 = acc[j][1] * sc, o2 = acc[j][2] * sc, o3 = acc[j][3] * sc;
          if (m.stale) o0 = o1 = o2 = o3 = nan_f();
          uint2 packed;
          packed.x = static_cast<uint32_t>(f2bf(o0)) | (static_cast<uint32_t>(f2bf(o1)) << 16);
          packed.y = static_cast<uint32_t>(f2bf(o2)) | (static_cast<uint32_t>(f2bf(o3)) << 16);
          const int64_t out_off = static_cast<int64_t>(token) * m.out_stride_token +
                                  static_cast<int64_t>(head) * m.out_stride_head;
          *reinterpret_cast<uint2*>(m.out + out_off + d4) = packed;
          if (m.lse != nullptr && lane == 0) {
            m.lse[static_cast<int64_t>(token) * m.lse_stride_token + head] =
                m.stale ? nan_f() : lse2 * 0.69314718055994531f;
          }
        } else {
          *reinterpret_cast<float4*>(m.partial_o + dst_slot * slot_stride_o + static_cast<int64_t>(r) * kHeadDim +
                                     d4) =
              make_float4(acc[j][0] * inv, acc[j][1] * inv, acc[j][2] * inv, acc[j][3] * inv);
          if (lane == 0) m.partial_lse[static_cast<int64_t>(dst_slot) * m.partial_rows + r] = lse2;
        }
      }
    }
  }
  HK_TRACE_ONLY(if (threadIdx.x == 0) HK_TR(m, kTrMergeOut + tr_i);)
}

// The merge of a long pair (more than kMergeGroup pieces, at most 16 rows) in one level over kSliceMergers CTAs.
// A pair's output is rows x 16 units of 8 dims, contiguous in every partial slot ([rows][128]); the CTA of slice s
// merges units s x rows .. s x rows + rows - 1 over all `count` pieces, so each piece's share is one contiguous
// run of rows x 8 values (16 rows: one row; 8 rows: half a row). Thread t takes unit t % W (W = rows rounded up
// to a power of two) and pieces t / W, t / W + 128 / W, ..., G at a time with every load of a round in flight: a
// warp's load covers 32 / W pieces' runs, whole lines (the s60 form gave every lane its own piece and 8 dims, a
// sector per lane and load: its loads took 2-3.5 us, session 61's trace). The piece lanes of a unit then combine
// by shuffles inside the warp and across the 4 warps through `scratch` (consumer shared memory, idle at a
// chunk's end: [4 warps][10][16] floats) in a fixed order, so the result is deterministic.
// G x (16 B + 4 B) per lane for f16 partials, G x (32 B + 4 B) for fp32 (DecodeTraits::kSliceLoads).
template <bool kHalf, int G>
static __device__ __noinline__ void merge_slice(const MergeArgs m, int count, int slice, float* scratch) {
  // trace: this CTA's first merge records at +0, later ones at +1 (as merge_slots)
  HK_TRACE_ONLY(const int tr_i = m.trace != nullptr && m.trace[blockIdx.x * kTraceSlots + kTrMergeIn] != 0 ? 1 : 0;
                if (threadIdx.x == 0) HK_TR(m, kTrMergeIn + tr_i);)
  const int t = threadIdx.x;
  const int lane = t & 31;
  const int warp = t >> 5;
  const int rows = m.rows;
  int w = 1;
  while (w < rows) w <<= 1;
  const int j = t & (w - 1);
  const int q = t / w;
  const int nq = kConsumerWarps * 32 / w;
  const bool active = j < rows;
  const int u = slice * rows + j;  // the unit: row u / 16, dims (u % 16) x 8
  const int r = u >> 4;
  const uint32_t prow = static_cast<uint32_t>(m.partial_rows);
  const uint32_t uoff = static_cast<uint32_t>(u) * 8;  // its offset inside a slot's [rows][128]
  float mx = -INFINITY, wsum = 0.f, acc[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) acc[c] = 0.f;
  for (int c0 = active ? q : count; c0 < count; c0 += G * nq) {
    // kHalf: 8 f16 in one uint4 (converted at use); fp32: two float4
    float lse[G];
    uint4 raw[G][kHalf ? 1 : 2];
#pragma unroll
    for (int i = 0; i < G; ++i) {
      const int p = c0 + i * nq;
      lse[i] = -INFINITY;
#pragma unroll
      for (int h = 0; h < (kHalf ? 1 : 2); ++h) raw[i][h] = make_uint4(0u, 0u, 0u, 0u);
      if (p < count) {
        const uint32_t sbase = static_cast<uint32_t>(piece_slot(m.first_slot, p)) * prow;
        lse[i] = ptx::ld_cg_f(m.partial_lse + (sbase + static_cast<uint32_t>(r)));
        const uint32_t e = sbase * kHeadDim + uoff;
        if constexpr (kHalf) {
          raw[i][0] = __ldcg(reinterpret_cast<const uint4*>(reinterpret_cast<const __half*>(m.partial_o) + e));
        } else {
#pragma unroll
          for (int h = 0; h < 2; ++h) raw[i][h] = __ldcg(reinterpret_cast<const uint4*>(m.partial_o + e + 4 * h));
        }
      }
    }
    const float cm = merge_round_max<G>(mx, lse);
    const float m_use = ref_max(cm);
    const float keep = ptx::exp2_approx(mx - m_use);
    wsum *= keep;
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[c] *= keep;
#pragma unroll
    for (int i = 0; i < G; ++i) {
      const float wt = ptx::exp2_approx(lse[i] - m_use);
      float x[8];
      if constexpr (kHalf) {
        const float4 a = f16x4_to_f4(make_uint2(raw[i][0].x, raw[i][0].y));
        const float4 b = f16x4_to_f4(make_uint2(raw[i][0].z, raw[i][0].w));
        x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          x[4 * h + 0] = __uint_as_float(raw[i][h].x);
          x[4 * h + 1] = __uint_as_float(raw[i][h].y);
          x[4 * h + 2] = __uint_as_float(raw[i][h].z);
          x[4 * h + 3] = __uint_as_float(raw[i][h].w);
        }
      }
#pragma unroll
      for (int c = 0; c < 8; ++c) acc[c] += wt * x[c];
      wsum += wt;
    }
    mx = cm;
    // (the condition reads the loaded values, so the clock is read after they returned)
    HK_TRACE_ONLY(if (threadIdx.x == 0 && c0 == q && mx != 1.2345f) HK_TR(m, kTrMergeLoaded + tr_i);)
  }
  // combines (mx, wsum, acc) with another lane's or warp's (fixed order: this one's terms first)
  auto combine = [&](float omx, float ows, const float (&oacc)[8]) {
    const float cm = fmaxf(mx, omx);
    const float m_use = ref_max(cm);
    const float f0 = ptx::exp2_approx(mx - m_use);
    const float f1 = ptx::exp2_approx(omx - m_use);
    wsum = wsum * f0 + ows * f1;
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[c] = acc[c] * f0 + oacc[c] * f1;
    mx = cm;
  };
  // the warp's piece lanes of one unit (lanes j, j + w, ...): pairwise, halving the distance
  for (int off = 16; off >= w; off >>= 1) {
    float oacc[8];
#pragma unroll
    for (int c = 0; c < 8; ++c) oacc[c] = __shfl_xor_sync(0xffffffffu, acc[c], off);
    const float omx = __shfl_xor_sync(0xffffffffu, mx, off);
    const float ows = __shfl_xor_sync(0xffffffffu, wsum, off);
    combine(omx, ows, oacc);
  }
  // the 4 warps: lanes j < w of each warp hold its result; warp 0's lanes combine warps 1..3 in order
  if (warp > 0 && lane < w) {
    float* sw = scratch + warp * 10 * 16;
    sw[j] = mx;
    sw[16 + j] = wsum;
#pragma unroll
    for (int c = 0; c < 8; ++c) sw[(2 + c) * 16 + j] = acc[c];
  }
  ptx::named_bar_sync(kConsumerBarrier, kConsumerWarps * 32);
  if (warp == 0 && lane < w) {
#pragma unroll
    for (int k = 1; k < kConsumerWarps; ++k) {
      const float* sw = scratch + k * 10 * 16;
      float oacc[8];
#pragma unroll
      for (int c = 0; c < 8; ++c) oacc[c] = sw[(2 + c) * 16 + j];
      combine(sw[j], sw[16 + j], oacc);
    }
  }
  if (t < rows) {  // warp 0's lanes j < W hold the combined units (its other lanes only warp 0's pieces)
    const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
    const float lse2 = wsum > 0.f ? ref_max(mx) + __log2f(wsum) : -INFINITY;
    const int d0 = (u & 15) * 8;
    store_merged8(m, r, d0, acc, inv * m.v_scale, lse2, d0 == 0);
  }
  HK_TRACE_ONLY(if (threadIdx.x == 0) HK_TR(m, kTrMergeOut + tr_i);)
}

// The consumer threads' arrival on `counter`: thread 0's acq_rel add, `f(the count before it)` in every consumer
// thread. Everything this CTA wrote before is visible to a CTA that arrives later. (bar.sync orders the CTA's
// writes before thread 0's add; a later arriver's acquire plus bar.sync orders every earlier CTA's writes before
// this CTA's reads, which bypass L1.)
template <class F>
__device__ __forceinline__ int arrive(int* counter, int* flag, F f) {
  ptx::named_bar_sync(kConsumerBarrier, kConsumerWarps * 32);
  if (threadIdx.x == 0) *flag = f(ptx::atom_add_acq_rel_gpu(counter, 1));
  ptx::named_bar_sync(kConsumerBarrier, kConsumerWarps * 32);
  return *flag;
}

// Counts one more finished piece on `counter` and returns how many had finished before it (the same value in
// every consumer thread).
__device__ __forceinline__ int arrive_rank(int* counter, int* flag) {
  return arrive(counter, flag, [](int before) { return before; });
}

// Counts one more finished input on `counter`; true in every consumer thread of the CTA that finished the
// last of `expected` inputs, which then sees everything the others wrote before.
__device__ __forceinline__ bool arrive_last(int* counter, int expected, int* flag) {
  return arrive(counter, flag, [expected](int before) { return before == expected - 1 ? 1 : 0; }) != 0;
}

// Writes 4 consecutive dims of row r: final (bf16, scaled by v_scale) or partial (fp32 or f16, normalised).
template <bool kHalf>
__device__ __forceinline__ void store_row4(const DecodeKernelArgs& a, const ChunkInfo& ci, int r, int d,
                                           float o0, float o1, float o2, float o3, float inv_l, float v_scale) {
  if (ci.split) {
    const int64_t elem = (static_cast<int64_t>(ci.slot) * a.partial_rows + r) * kHeadDim + d;
    if constexpr (kHalf) {
      store_partial4_f16(a.plan.partial_o, elem, o0 * inv_l, o1 * inv_l, o2 * inv_l, o3 * inv_l);
    } else {
      *reinterpret_cast<float4*>(a.plan.partial_o + elem) = make_float4(o0 * inv_l, o1 * inv_l, o2 * inv_l, o3 * inv_l);
    }
  } else {
    const RowDest dst = row_dest(a, ci, r);
    if (!dst.valid) return;
    const float s = inv_l * v_scale;
    float x0 = o0 * s, x1 = o1 * s, x2 = o2 * s, x3 = o3 * s;
    if (ci.stale) x0 = x1 = x2 = x3 = nan_f();
    uint2 packed;
    packed.x = static_cast<uint32_t>(f2bf(x0)) | (static_cast<uint32_t>(f2bf(x1)) << 16);
    packed.y = static_cast<uint32_t>(f2bf(x2)) | (static_cast<uint32_t>(f2bf(x3)) << 16);
    *reinterpret_cast<uint2*>(a.out + dst.out_off + d) = packed;
  }
}

template <bool kHalf>
__device__ __forceinline__ void store_row2(const DecodeKernelArgs& a, const ChunkInfo& ci, int r, int d,
                                           float o0, float o1, float inv_l, float v_scale) {
  if (ci.split) {
    const int64_t elem = (static_cast<int64_t>(ci.slot) * a.partial_rows + r) * kHeadDim + d;
    if constexpr (kHalf) {
      store_partial2_f16(a.plan.partial_o, elem, o0 * inv_l, o1 * inv_l);
    } else {
      *reinterpret_cast<float2*>(a.plan.partial_o + elem) = make_float2(o0 * inv_l, o1 * inv_l);
    }
  } else {
    const RowDest dst = row_dest(a, ci, r);
    if (!dst.valid) return;
    const float s = inv_l * v_scale;
    float x0 = o0 * s, x1 = o1 * s;
    if (ci.stale) x0 = x1 = nan_f();
    *reinterpret_cast<uint32_t*>(a.out + dst.out_off + d) =
        static_cast<uint32_t>(f2bf(x0)) | (static_cast<uint32_t>(f2bf(x1)) << 16);
  }
}

// Row LSE (log2 domain, -inf when the row saw no key) to the partial buffer or, natural log, to `lse`.
__device__ __forceinline__ void store_lse(const DecodeKernelArgs& a, const ChunkInfo& ci, int r, float lse2) {
  if (ci.split) {
    a.plan.partial_lse[static_cast<int64_t>(ci.slot) * a.partial_rows + r] = lse2;
  } else if (a.lse != nullptr) {
    const RowDest dst = row_dest(a, ci, r);
    if (dst.valid) a.lse[dst.lse_off] = ci.stale ? nan_f() : lse2 * 0.69314718055994531f;
  }
}

// Query A-fragment (m16 x k16) for k-step ks of the 16 rows starting at row r0 of the Q slot.
template <class T>
__device__ __forceinline__ void load_q_frag(uint32_t (&qa)[4], const uint8_t* qslot, int r0, int ks, int rows,
                                            int lane, int q_is_fp8, float inv_pow2_lo, float inv_pow2_hi) {
  if constexpr (T::kCvt) {
    // f16 in the natural k order (the converted tiles): a0 / a2 row lo, dims d, d + 1 / d + 8, d + 9; a1 / a3 row hi
    const int rlo = r0 + (lane >> 2);
    const int rhi = rlo + 8;
    const int d = ks * 16 + 2 * (lane & 3);
    if (q_is_fp8) {
      const uint8_t* plo = qslot + rlo * kQRowBytes + d;
      const uint8_t* phi = qslot + rhi * kQRowBytes + d;
      qa[0] = rlo < rows ? ptx::e4m3x2_to_f16x2(*reinterpret_cast<const uint16_t*>(plo)) : 0u;
      qa[2] = rlo < rows ? ptx::e4m3x2_to_f16x2(*reinterpret_cast<const uint16_t*>(plo + 8)) : 0u;
      qa[1] = rhi < rows ? ptx::e4m3x2_to_f16x2(*reinterpret_cast<const uint16_t*>(phi)) : 0u;
      qa[3] = rhi < rows ? ptx::e4m3x2_to_f16x2(*reinterpret_cast<const uint16_t*>(phi + 8)) : 0u;
    } else {
      uint32_t w[4] = {0u, 0u, 0u, 0u};
      if (rlo < rows) {
        w[0] = *reinterpret_cast<const uint32_t*>(qslot + rlo * kQRowBytes + d * 2);
        w[2] = *reinterpret_cast<const uint32_t*>(qslot + rlo * kQRowBytes + (d + 8) * 2);
      }
      if (rhi < rows) {
        w[1] = *reinterpret_cast<const uint32_t*>(qslot + rhi * kQRowBytes + d * 2);
        w[3] = *reinterpret_cast<const uint32_t*>(qslot + rhi * kQRowBytes + (d + 8) * 2);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float sc = (i & 1) ? inv_pow2_hi : inv_pow2_lo;
        qa[i] = ptx::pack_f16x2(ptx::bf16_bits_to_float(w[i] & 0xffffu) * sc,
                                ptx::bf16_bits_to_float(w[i] >> 16) * sc);
      }
    }
  } else if constexpr (!T::kFp8) {
    // bf16: ldmatrix x4 over (rows lo, k lo), (rows hi, k lo), (rows lo, k hi), (rows hi, k hi)
    const int mat = lane >> 3;
    const int row = r0 + (mat & 1) * 8 + (lane & 7);
    const int col = ks * 16 + (mat >> 1) * 8;
    ptx::ldmatrix_x4(ptx::smem_addr(qslot + row * kQRowBytes + col * 2), qa[0], qa[1], qa[2], qa[3]);
    const int rlo = r0 + (lane >> 2);
    if (rlo >= rows) qa[0] = qa[2] = 0u;
    if (rlo + 8 >= rows) qa[1] = qa[3] = 0u;
  } else {
    const int rlo = r0 + (lane >> 2);
    const int rhi = rlo + 8;
    const int dim = ks * 16 + 4 * (lane & 3);  // 4 consecutive physical dims
    if (q_is_fp8) {
      const uint32_t wlo = rlo < rows ? *reinterpret_cast<const uint32_t*>(qslot + rlo * kQRowBytes + dim) : 0u;
      const uint32_t whi = rhi < rows ? *reinterpret_cast<const uint32_t*>(qslot + rhi * kQRowBytes + dim) : 0u;
      qa[0] = ptx::e4m3x2_to_f16x2(wlo & 0xffffu);
      qa[1] = ptx::e4m3x2_to_f16x2(whi & 0xffffu);
      qa[2] = ptx::e4m3x2_to_f16x2(wlo >> 16);
      qa[3] = ptx::e4m3x2_to_f16x2(whi >> 16);
    } else {
      uint2 vlo = make_uint2(0u, 0u), vhi = make_uint2(0u, 0u);
      if (rlo < rows) vlo = *reinterpret_cast<const uint2*>(qslot + rlo * kQRowBytes + dim * 2);
      if (rhi < rows) vhi = *reinterpret_cast<const uint2*>(qslot + rhi * kQRowBytes + dim * 2);
      qa[0] = ptx::pack_f16x2(ptx::bf16_bits_to_float(vlo.x & 0xffffu) * inv_pow2_lo,
                              ptx::bf16_bits_to_float(vlo.x >> 16) * inv_pow2_lo);
      qa[2] = ptx::pack_f16x2(ptx::bf16_bits_to_float(vlo.y & 0xffffu) * inv_pow2_lo,
                              ptx::bf16_bits_to_float(vlo.y >> 16) * inv_pow2_lo);
      qa[1] = ptx::pack_f16x2(ptx::bf16_bits_to_float(vhi.x & 0xffffu) * inv_pow2_hi,
                              ptx::bf16_bits_to_float(vhi.x >> 16) * inv_pow2_hi);
      qa[3] = ptx::pack_f16x2(ptx::bf16_bits_to_float(vhi.y & 0xffffu) * inv_pow2_hi,
                              ptx::bf16_bits_to_float(vhi.y >> 16) * inv_pow2_hi);
    }
  }
}

// FP8 KV with a bf16 query: the query is carried in f16 as q * 2^-e per row, e chosen so the row's largest
// magnitude lands in [2^14, 2^15). Returns e for the 16 rows of the m-tile starting at r0, for this lane's
// two rows (lo = r0 + lane/4, hi = lo + 8).
__device__ __forceinline__ void bf16_row_exponents(const uint8_t* qslot, int r0, int rows, int lane, int& e_lo,
                                                   int& e_hi) {
  // lane pair (2i, 2i+1) scans row r0 + i, 64 dims each
  const int row = r0 + (lane >> 1);
  float amax = 0.f;
  if (row < rows) {
    const uint8_t* src = qslot + row * kQRowBytes + (lane & 1) * 128;
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const uint4 v = *reinterpret_cast<const uint4*>(src + c * 16);
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        amax = fmaxf(amax, fabsf(ptx::bf16_bits_to_float(w[j] & 0xffffu)));
        amax = fmaxf(amax, fabsf(ptx::bf16_bits_to_float(w[j] >> 16)));
      }
    }
  }
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  int e = 0;
  if (amax > 0.f && amax <= FLT_MAX) e = max(ilogbf(amax) - 14, -112);  // 2^-e stays finite
  e_lo = __shfl_sync(0xffffffffu, e, 2 * (lane >> 2));
  e_hi = __shfl_sync(0xffffffffu, e, 2 * ((lane >> 2) + 8));
}

// ------------------------------------------------------------------------------------------------------------
// Consumer warps.
// ------------------------------------------------------------------------------------------------------------
template <class T>
__device__ __forceinline__ void consumer_warps(const DecodeKernelArgs& a, uint8_t* smem, const Barriers& bars,
                                               const ChunkInfo* infos) {
  using L = SmemLayout<T>;
  constexpr int MT = T::MT;
  constexpr int NT = T::NT;
  const int lane = threadIdx.x & 31;
  // (T::kWg2: the warp within its warpgroup, which warpgroup, the thread within it; else the consumer warp / thread)
  const int warp = T::kWg2 ? (threadIdx.x >> 5) & 3 : threadIdx.x >> 5;
  const int wg = T::kWg2 ? static_cast<int>(threadIdx.x >> 7) : 0;
  const int ctid = T::kWg2 ? static_cast<int>(threadIdx.x & 127) : static_cast<int>(threadIdx.x);
  const int wg_bar = wg == 1 ? kWg1Barrier : kConsumerBarrier;  // the warpgroup's own barrier
  const int rg = warp / T::TW;
  const int tg = warp % T::TW;
  const int rbase = rg * T::kRowsPerWarp;  // first row of this warp
  const int tok0 = tg * T::kWarpTokens;    // first token of a tile handled by this warp
  const int mat = lane >> 3;
  const int mrow = lane & 7;
  const float k_scale = a.k_scale != nullptr ? *a.k_scale : 1.f;
  const float v_scale = a.v_scale != nullptr ? *a.v_scale : 1.f;
  int* flag = reinterpret_cast<int*>(smem + L::kFlagOff);

  // ---- pairs with no cached tokens: zeros (and LSE -inf)
  if (wg == 0) {
    const int num_empty = a.plan.header[kHdrNumEmpty];
    for (int e = blockIdx.x * kConsumerWarps + warp; e < num_empty; e += gridDim.x * kConsumerWarps) {
      const int p = a.plan.empty_pairs[e];
      ChunkInfo ci{};
      pair_coords(p, a.plan.header[kHdrBatch], a.num_kv_heads, head_major_pairs(a.plan.header[kHdrMode]),
                  ci.batch_idx, ci.kv_head);
      int err = 0;
      query_range(a, ci.batch_idx, ci.q_start, ci.q_len, err);
      // planned empty: a request that has tokens now means the plan is stale -> NaN, flagged
      const int64_t capacity = static_cast<int64_t>(a.max_blocks_per_seq) * a.block_size;
      if (num_tiles(clamp_len(a.seq_lens[ci.batch_idx], capacity)) != 0) err |= kPlanErrorStale;
      if (err != 0 && lane == 0) atomicOr(&a.plan.header[kHdrErrors], err);
      const bool stale = (err & kPlanErrorStale) != 0;
      const uint32_t fill = stale ? 0x7fc07fc0u : 0u;  // bf16 NaN pairs, or zeros
      const int rows = ci.q_len * a.group;
      for (int r = 0; r < rows; ++r) {
        const RowDest d = row_dest(a, ci, r);
        *reinterpret_cast<uint2*>(a.out + d.out_off + lane * 4) = make_uint2(fill, fill);
        if (a.lse != nullptr && lane == 0) a.lse[d.lse_off] = stale ? nan_f() : -INFINITY;
      }
    }
  }

  uint32_t chunk_count = 0;
  int stage = 0;
  uint32_t phase = 0;
  uint32_t pbuf = 0;  // the fp8-query variant's P exchange buffer (parity)
  int cvt_pair = 0;  // T::kCvt: the f16 pair the next tile is converted into (0, 1, 2)
  HK_TRACE_ONLY(unsigned long long tr_counts = 0;)
  while (true) {
    const int slot = chunk_count & 1;
    ptx::mbar_wait(&bars.qfull[slot], (chunk_count >> 1) & 1);
    const ChunkInfo ci = infos[slot];
    if (ci.done) break;
    HK_TRACE_ONLY(if (threadIdx.x == 0) {
      if (chunk_count == 0) HK_TR(a, kTrFirstQ);
      if (chunk_count < kTrChunks) HK_TR(a, kTrChunkQ + chunk_count);
      tr_counts += 1;
    })
    const uint8_t* qslot = smem + L::kQOff + slot * T::kQSlotBytes;
    const float* qsc = reinterpret_cast<const float*>(smem + L::kQScaleOff) + slot * T::kMPad;
    const int rows = ci.q_len * a.group;
    const int len = ci.seq_len;

    // Per-row softmax scale (log2 domain) and causal end (exclusive) for this lane's rows.
    float rs[MT][2];
    int row_end[MT][2];
    float inv_pow2[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      int e_lo = 0, e_hi = 0;
      if constexpr (T::kFp8) {
        if (!T::kWgQk && !a.q_is_fp8) bf16_row_exponents(qslot, rbase + mt * 16, rows, lane, e_lo, e_hi);
      }
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = rbase + mt * 16 + hh * 8 + (lane >> 2);
        const bool valid = r < rows;
        row_end[mt][hh] = valid ? len - ci.q_len + r / a.group + 1 : len;
        float s = a.scale_log2;
        if constexpr (T::kFp8) {
          s *= k_scale;
          if (a.q_is_fp8) {
            s *= valid ? qsc[r] : 0.f;
          } else {
            s *= exp2f(static_cast<float>(hh ? e_hi : e_lo));
          }
          inv_pow2[mt][hh] = exp2f(-static_cast<float>(hh ? e_hi : e_lo));
        } else {
          inv_pow2[mt][hh] = 1.f;
        }
        rs[mt][hh] = s;
      }
    }
    const int min_row_end = len - ci.q_len + 1;  // the first query token's causal end

    // S^T = K Q^T on wgmma (T::kWgQk, fp8 query): the accumulator of warp w holds tokens 16 w + g, 16 w + g + 8
    // (g = lane / 4) of the tile for query rows (columns) 8 j + 2 t4 + c (t4 = lane % 4, j, c in {0, 1}): the
    // scale and causal end per column, the running max per column (shared by the 4 warps) and this lane's part of
    // the column's sum until the chunk's end.
    // With two m-tiles (fp8q_r32) the same for columns 16-31, and O's rows g + 16, g + 24.
    constexpr bool use_wg = T::kWgQk;  // the launcher picks this variant only for an fp8 query
    constexpr int JB = 2 * MT;         // its n8 column blocks (N = 16 or 32 query rows)
    float rs_c[JB][2], m_c[JB][2], l_c[JB][2], m_row[MT][2];
    int re_c[JB][2];
    if constexpr (T::kWgQk) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) m_row[mt][0] = m_row[mt][1] = -INFINITY;  // O's rows g, g + 8 (+ 16 mt)
#pragma unroll
      for (int j = 0; j < JB; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int r = 8 * j + 2 * (lane & 3) + c;
          const bool valid = r < rows;
          re_c[j][c] = valid ? len - ci.q_len + r / a.group + 1 : len;
          rs_c[j][c] = valid ? a.scale_log2 * k_scale * qsc[r] : 0.f;
          m_c[j][c] = -INFINITY;
          l_c[j][c] = 0.f;
        }
    }

    // Query fragments: kept in registers for one m-tile, re-read from shared memory per tile otherwise.
    uint32_t qf[MT == 1 ? 8 : 1][4];
    if constexpr (MT == 1 || use_wg) {
      if constexpr (use_wg) {
        // the 16 (32) query rows into the wgmma operand buffer (128-byte rows, 128-byte swizzle; rows past `rows`
        // zero): one (two) 16-byte chunk(s) per consumer thread. Every warp waited for the previous chunk's wgmmas
        // (wgmma_wait<0> after its tile loop) before the chunk-end row-sum barrier, so the buffer is free (that
        // barrier is what orders this write after those reads: keep one there).
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const int r = (threadIdx.x >> 3) + 16 * mt, c = threadIdx.x & 7;
          uint4 v = make_uint4(0u, 0u, 0u, 0u);
          if (r < rows) v = *reinterpret_cast<const uint4*>(qslot + r * kQRowBytes + c * 16);
          *reinterpret_cast<uint4*>(smem + L::kQwOff + swz(r, c)) = v;
        }
        ptx::fence_proxy_async_shared();  // generic-proxy writes, read by wgmma (async proxy)
        ptx::named_bar_sync(kConsumerBarrier, kConsumerWarps * 32);
      } else if constexpr (T::kWgRows && T::kQFp8) {
        // e4m3 A fragments, k32 steps: a0 / a2 row lo, dims 32 kk + 4 t4 (+ 16); a1 / a3 row hi
        const int rlo = rbase + (lane >> 2), rhi = rlo + 8;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const int d = kk * 32 + 4 * (lane & 3);
          qf[kk][0] = rlo < rows ? *reinterpret_cast<const uint32_t*>(qslot + rlo * T::kQRowStride + d) : 0u;
          qf[kk][1] = rhi < rows ? *reinterpret_cast<const uint32_t*>(qslot + rhi * T::kQRowStride + d) : 0u;
          qf[kk][2] = rlo < rows ? *reinterpret_cast<const uint32_t*>(qslot + rlo * T::kQRowStride + d + 16) : 0u;
          qf[kk][3] = rhi < rows ? *reinterpret_cast<const uint32_t*>(qslot + rhi * T::kQRowStride + d + 16) : 0u;
        }
      } else {
#pragma unroll
        for (int ks = 0; ks < 8; ++ks) {
          load_q_frag<T>(qf[ks], qslot, rbase, ks, rows, lane, a.q_is_fp8, inv_pow2[0][0], inv_pow2[0][1]);
        }
      }
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(&bars.qempty[slot]);
    }

    float m_run[MT][2], l_run[MT][2];
    float o[MT][16][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        m_run[mt][hh] = -INFINITY;
        l_run[mt][hh] = 0.f;
      }
#pragma unroll
      for (int n = 0; n < 16; ++n) {
#pragma unroll
        for (int c = 0; c < 4; ++c) o[mt][n][c] = 0.f;
      }
    }

    // O += P V for FP8 V over the warp's 16 tokens from tokb (ta: this lane's first token): ldmatrix.trans
    // over fp8 byte pairs gives each thread two tokens x two dims, split into an even-dim and an odd-dim n-tile
    auto fp8_pv = [&](const uint32_t (&pa)[MT][4], int ta, int tokb, const uint8_t* vs_base, bool mask_v) {
      uint32_t keep_lo, keep_hi;
      v_pair_keep(ta, len, mask_v, keep_lo, keep_hi);
#pragma unroll
      for (int q32 = 0; q32 < 4; ++q32) {
        const int token = tokb + (mat & 1) * 8 + mrow;
        const uint32_t addr = ptx::smem_addr(vs_base) + swz(token, 2 * q32 + (mat >> 1));
        uint32_t w0, w1, w2, w3;
        ptx::ldmatrix_x4_trans(addr, w0, w1, w2, w3);
        v_pair_mask(keep_lo, keep_hi, w0, w1, w2, w3);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const uint32_t wl = half ? w2 : w0;  // tokens lo
          const uint32_t wh = half ? w3 : w1;  // tokens hi
          const uint32_t pl = __byte_perm(wl, 0u, 0x3120);
          const uint32_t ph = __byte_perm(wh, 0u, 0x3120);
          const uint32_t be0 = ptx::e4m3x2_to_f16x2(pl & 0xffffu);
          const uint32_t be1 = ptx::e4m3x2_to_f16x2(ph & 0xffffu);
          const uint32_t bo0 = ptx::e4m3x2_to_f16x2(pl >> 16);
          const uint32_t bo1 = ptx::e4m3x2_to_f16x2(ph >> 16);
          const int blk = 2 * q32 + half;
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            ptx::mma_f16(o[mt][2 * blk], pa[mt], be0, be1);
            ptx::mma_f16(o[mt][2 * blk + 1], pa[mt], bo0, bo1);
          }
        }
      }
    };

    if constexpr (use_wg) {
      // ---- S^T = K Q^T on wgmma, one tile ahead: tile t's product runs during tile t - 1's P V. Per tile:
      // wait for its product, online softmax per column (query row), then issue the next tile's product
      // (after its full-barrier wait), then O += P V and the stage's release.
      const uint64_t db0 = ptx::gmma_desc_sw128(ptx::smem_addr(smem + L::kQwOff));
      auto issue = [&](float (&d)[JB][4], int stg) {
        const uint64_t da0 = ptx::gmma_desc_sw128(ptx::smem_addr(smem + L::kStagesOff + stg * T::kStageBytes));
        ptx::wgmma_fence();
        ptx::wgmma_m64k32_e4m3_first<8 * JB, 0>(d, da0, db0);
#pragma unroll
        for (int kk = 1; kk < kHeadDim / 32; ++kk) {
          ptx::wgmma_m64k32_e4m3<8 * JB, 0>(d, ptx::gmma_desc_add(da0, kk * 32), ptx::gmma_desc_add(db0, kk * 32));
        }
        ptx::wgmma_commit();
      };
      // column block j > 0 holds query rows only if rows > 8 j (else padding: skipped)
      // P V with the warps splitting the head dims: warp w computes O's 32 dims 32 w .. 32 w + 31 over all 64
      // tokens of a tile, so each warp's P (its 16 tokens of S^T) goes through shared memory, [16 rows][64
      // tokens] f16 in 128-byte swizzled rows, double-buffered (a buffer is rewritten two tiles later, after a
      // barrier every warp reached once done with it). The warps share one running max per row, M: a warp
      // computes its P against M, or against its own tile max where that exceeds M by more than kRefSlack
      // (log2), and writes that reference; the barrier after the writes ORs "some warp raised it", and only
      // then does each thread read the references, take the new M and scale each warp's P fragment (and O, and
      // its row sums) to it. In the common case (the max settled) nothing is read or scaled.
      float* pref = reinterpret_cast<float*>(smem + L::kPxOff + 2 * T::kPBufBytes);  // [2][rows][4 warps]
      const int g = lane >> 2, t4 = lane & 3;
      // Every wgmma instruction sits outside data-dependent branches: with the issue inside an `if`, ptxas
      // serialises every wgmma (C7518). So the last tile of a chunk also issues a product (of its own K tile,
      // discarded) and its stage is released after the loop's final wait.
      float sn[JB][4];  // the product in flight (the next tile's)
      if (a.debug_flags & 1) {  // experiment: data pipeline only (as in the generic loop below)
        for (int tt = ci.tile_lo; tt < ci.tile_hi; ++tt) {
          ptx::mbar_wait(&bars.full[stage], phase);
          __syncwarp();
          if (lane == 0) ptx::mbar_arrive(&bars.empty[stage]);
          if (++stage == T::kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      } else {
        ptx::mbar_wait(&bars.full[stage], phase);  // a chunk has at least one tile (empty pairs never get here)
        HK_TRACE_ONLY(if (threadIdx.x == 0 && chunk_count == 0) HK_TR(a, kTrFirstKv);
                      if (threadIdx.x == 0 && chunk_count < kTrChunks) HK_TR(a, kTrChunkKv + chunk_count);)
        issue(sn, stage);
        int last_stage = stage;
        for (int tt = ci.tile_lo; tt < ci.tile_hi; ++tt) {
          const int pos = tt * kTileTokens;
          ptx::wgmma_wait<0>();
          float cur[JB][4];
#pragma unroll
          for (int j = 0; j < JB; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              ptx::wgmma_fence_operand(sn[j][i]);
              cur[j][i] = sn[j][i];
            }
          const bool need_mask = pos + kTileTokens > min_row_end;
          const int kv0 = pos + tok0 + g;  // token of cur[j][c]; cur[j][2 + c] is kv0 + 8
          // Each column's reference stays M unless this warp's tokens exceed it by more than kRefSlack (log2): P is
          // then up to 2^kRefSlack, and the column maxima (3 shuffles each) are taken only when some lane's value
          // is that far above M (every column at a chunk's first tile; rarely once M has settled).
          float ref[JB][2], psum[JB][2];
          bool raised = false, over = false;
#pragma unroll
          for (int j = 0; j < JB; ++j)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              ref[j][c] = m_c[j][c];
              psum[j][c] = 0.f;
              if (j > 0 && rows <= 8 * j) continue;  // padding columns
              float v0 = cur[j][c] * rs_c[j][c], v1 = cur[j][2 + c] * rs_c[j][c];
              if (need_mask) {
                v0 = kv0 < re_c[j][c] ? v0 : -INFINITY;
                v1 = kv0 + 8 < re_c[j][c] ? v1 : -INFINITY;
              }
              cur[j][c] = v0;
              cur[j][2 + c] = v1;
              over |= fmaxf(v0, v1) > m_c[j][c] + kRefSlack;
            }
          if (__any_sync(0xffffffffu, over)) {
#pragma unroll
            for (int j = 0; j < JB; ++j)
#pragma unroll
              for (int c = 0; c < 2; ++c) {
                if (j > 0 && rows <= 8 * j) continue;
                float mx = fmaxf(cur[j][c], cur[j][2 + c]);  // over the column's 16 tokens: the 8 lanes of this t4
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
                if (mx > m_c[j][c] + kRefSlack) {
                  ref[j][c] = mx;
                  raised = true;
                }
              }
          }
#pragma unroll
          for (int j = 0; j < JB; ++j)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              if (j > 0 && rows <= 8 * j) {
                cur[j][c] = cur[j][2 + c] = 0.f;
                continue;
              }
              const float r_use = ref_max(ref[j][c]);
              cur[j][c] = ptx::exp2_approx(cur[j][c] - r_use);
              cur[j][2 + c] = ptx::exp2_approx(cur[j][2 + c] - r_use);
              psum[j][c] = cur[j][c] + cur[j][2 + c];
            }
          // this warp's P, transposed to [row][token]: fragment matrices (tokens 0-7 | 8-15) x (rows 0-7 | 8-15),
          // per m-tile (rows + 16 mt)
          uint8_t* pb = smem + L::kPxOff + (pbuf & 1) * T::kPBufBytes;
          float* rb = pref + (pbuf & 1) * (T::kMPad * kConsumerWarps);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const int m = lane >> 3;
            ptx::stmatrix_x4_trans(
                ptx::smem_addr(pb) + swz(16 * mt + (m >> 1) * 8 + (lane & 7), 2 * warp + (m & 1)),
                ptx::pack_f16x2(cur[2 * mt][0], cur[2 * mt][1]), ptx::pack_f16x2(cur[2 * mt][2], cur[2 * mt][3]),
                ptx::pack_f16x2(cur[2 * mt + 1][0], cur[2 * mt + 1][1]),
                ptx::pack_f16x2(cur[2 * mt + 1][2], cur[2 * mt + 1][3]));
          }
          if (lane < 4) {
#pragma unroll
            for (int j = 0; j < JB; ++j)
#pragma unroll
              for (int c = 0; c < 2; ++c) rb[(8 * j + 2 * t4 + c) * kConsumerWarps + warp] = ref[j][c];
          }
          // the next tile's product runs during this tile's exchange and P V
          const bool has_next = tt + 1 < ci.tile_hi;
          const int nstage = stage + 1 == T::kStages ? 0 : stage + 1;
          const uint32_t nphase = nstage == 0 ? phase ^ 1 : phase;
          if (has_next) ptx::mbar_wait(&bars.full[nstage], nphase);
          issue(sn, has_next ? nstage : stage);
          raised = ptx::named_bar_sync_or(kConsumerBarrier, kConsumerWarps * 32, raised);
          ++pbuf;
          uint32_t fac[4][MT][2];  // f16x2 factor per source warp (k16 step) for O's rows g, g + 8 (+ 16 mt)
          if (raised) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              const float4 r4 = *reinterpret_cast<const float4*>(rb + (16 * mt + 8 * hh + g) * kConsumerWarps);
              const float mn = fmaxf(fmaxf(r4.x, r4.y), fmaxf(r4.z, r4.w));
              const float mu = ref_max(mn);
              const float al = ptx::exp2_approx(m_row[mt][hh] - mu);
              m_row[mt][hh] = mn;
              const float f0 = ptx::exp2_approx(r4.x - mu), f1 = ptx::exp2_approx(r4.y - mu);
              const float f2 = ptx::exp2_approx(r4.z - mu), f3 = ptx::exp2_approx(r4.w - mu);
              fac[0][mt][hh] = ptx::pack_f16x2(f0, f0);
              fac[1][mt][hh] = ptx::pack_f16x2(f1, f1);
              fac[2][mt][hh] = ptx::pack_f16x2(f2, f2);
              fac[3][mt][hh] = ptx::pack_f16x2(f3, f3);
#pragma unroll
              for (int n = 0; n < 4; ++n) {
                o[mt][n][2 * hh] *= al;
                o[mt][n][2 * hh + 1] *= al;
              }
            }
#pragma unroll
            for (int j = 0; j < JB; ++j)
#pragma unroll
              for (int c = 0; c < 2; ++c) {
                const float4 r4 = *reinterpret_cast<const float4*>(rb + (8 * j + 2 * t4 + c) * kConsumerWarps);
                const float mn = fmaxf(fmaxf(r4.x, r4.y), fmaxf(r4.z, r4.w));
                const float mu = ref_max(mn);
                l_c[j][c] = l_c[j][c] * ptx::exp2_approx(m_c[j][c] - mu) +
                            psum[j][c] * ptx::exp2_approx(ref[j][c] - mu);
                m_c[j][c] = mn;
              }
          } else {
#pragma unroll
            for (int j = 0; j < JB; ++j)
#pragma unroll
              for (int c = 0; c < 2; ++c) l_c[j][c] += psum[j][c];
          }
          // O (rows x this warp's 32 dims) += P V, one k16 step per source warp's 16 tokens (V's conversion shared
          // by the m-tiles)
          const uint8_t* vs_base = smem + L::kStagesOff + stage * T::kStageBytes + T::kKvTileBytes;
          const bool mask_v = pos + kTileTokens > len;
#pragma unroll
          for (int kb = 0; kb < kConsumerWarps; ++kb) {
            // P's fragments, scaled where the max moved (fp8q_r16 without the m-tile loop: a one-trip loop here
            // reorders its whole kernel)
            uint32_t pa[MT][4];
            if constexpr (MT == 1) {
              ptx::ldmatrix_x4(ptx::smem_addr(pb) + swz(((lane >> 3) & 1) * 8 + (lane & 7), 2 * kb + (lane >> 4)),
                               pa[0][0], pa[0][1], pa[0][2], pa[0][3]);
              if (raised) {
                pa[0][0] = ptx::hmul2(pa[0][0], fac[kb][0][0]);
                pa[0][2] = ptx::hmul2(pa[0][2], fac[kb][0][0]);
                pa[0][1] = ptx::hmul2(pa[0][1], fac[kb][0][1]);
                pa[0][3] = ptx::hmul2(pa[0][3], fac[kb][0][1]);
              }
            } else {
#pragma unroll
              for (int mt = 0; mt < MT; ++mt) {
                ptx::ldmatrix_x4(
                    ptx::smem_addr(pb) + swz(16 * mt + ((lane >> 3) & 1) * 8 + (lane & 7), 2 * kb + (lane >> 4)),
                    pa[mt][0], pa[mt][1], pa[mt][2], pa[mt][3]);
                if (raised) {
                  pa[mt][0] = ptx::hmul2(pa[mt][0], fac[kb][mt][0]);
                  pa[mt][2] = ptx::hmul2(pa[mt][2], fac[kb][mt][0]);
                  pa[mt][1] = ptx::hmul2(pa[mt][1], fac[kb][mt][1]);
                  pa[mt][3] = ptx::hmul2(pa[mt][3], fac[kb][mt][1]);
                }
              }
            }
            const int token = 16 * kb + (mat & 1) * 8 + mrow;
            uint32_t w0, w1, w2, w3;
            ptx::ldmatrix_x4_trans(ptx::smem_addr(vs_base) + swz(token, 2 * warp + (mat >> 1)), w0, w1, w2, w3);
            if (mask_v) {  // only a sequence's last tile: the common path has no masking work
              uint32_t keep_lo, keep_hi;
              v_pair_keep(pos + 16 * kb + 2 * t4, len, true, keep_lo, keep_hi);
              v_pair_mask(keep_lo, keep_hi, w0, w1, w2, w3);
            }
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const uint32_t pl = __byte_perm(half ? w2 : w0, 0u, 0x3120);  // tokens lo
              const uint32_t ph = __byte_perm(half ? w3 : w1, 0u, 0x3120);  // tokens hi
              if constexpr (MT == 1) {
                ptx::mma_f16(o[0][2 * half], pa[0], ptx::e4m3x2_to_f16x2(pl & 0xffffu),
                             ptx::e4m3x2_to_f16x2(ph & 0xffffu));
                ptx::mma_f16(o[0][2 * half + 1], pa[0], ptx::e4m3x2_to_f16x2(pl >> 16),
                             ptx::e4m3x2_to_f16x2(ph >> 16));
              } else {
                const uint32_t be0 = ptx::e4m3x2_to_f16x2(pl & 0xffffu), be1 = ptx::e4m3x2_to_f16x2(ph & 0xffffu);
                const uint32_t bo0 = ptx::e4m3x2_to_f16x2(pl >> 16), bo1 = ptx::e4m3x2_to_f16x2(ph >> 16);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                  ptx::mma_f16(o[mt][2 * half], pa[mt], be0, be1);
                  ptx::mma_f16(o[mt][2 * half + 1], pa[mt], bo0, bo1);
                }
              }
            }
          }
          if (has_next) {
            __syncwarp();
            if (lane == 0) ptx::mbar_arrive(&bars.empty[stage]);
          } else {
            last_stage = stage;
          }
          stage = nstage;
          phase = nphase;
        }
        ptx::wgmma_wait<0>();  // the discarded product of the chunk's last tile has read its stage
        __syncwarp();
        if (lane == 0) ptx::mbar_arrive(&bars.empty[last_stage]);
      }
    }

    // Online softmax of one tile's S (this warp's rows x tokens from tok0): scale, causal / length mask, running max
    // and sum, O rescaled when the max moved; S becomes P (unnormalised, fp32). finish_row: P, the row sum and O's
    // rescale once the row's new max is known.
    // (T::kWg2: O's rescale is left to the caller, in alpha_d: P V of the previous tile is still in flight on O)
    float alpha_d[MT][2];
    // O's columns of row (mt, hh) times alpha, skipped when no lane's factor moved (the running max rarely moves
    // after a few tiles)
    auto rescale_o_row = [&](int mt, int hh, float alpha) {
      if (__any_sync(0xffffffffu, alpha != 1.f)) {
  #pragma unroll
        for (int n = 0; n < 16; ++n) {
          o[mt][n][hh * 2] *= alpha;
          o[mt][n][hh * 2 + 1] *= alpha;
        }
      }
    };
    auto finish_row = [&](float (&s)[MT][NT][4], int mt, int hh, float m_new) {
      const float m_use = ref_max(m_new);
      const float alpha = ptx::exp2_approx(m_run[mt][hh] - m_use);
      m_run[mt][hh] = m_new;
      float rowsum = 0.f;
  #pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
  #pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float pv = ptx::exp2_approx(s[mt][nt][hh * 2 + c] - m_use);
          s[mt][nt][hh * 2 + c] = pv;
          rowsum += pv;
        }
      }
      l_run[mt][hh] = l_run[mt][hh] * alpha + rowsum;
      if constexpr (T::kWg2) {
        alpha_d[mt][hh] = alpha;
      } else {
        rescale_o_row(mt, hh, alpha);
      }
    };
    // this lane's max of row (mt, hh) over its tokens, S scaled and masked in place
    auto row_max = [&](float (&s)[MT][NT][4], int mt, int hh, bool need_mask, int pos) {
      float mx = -INFINITY;
  #pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
  #pragma unroll
        for (int c = 0; c < 2; ++c) {
          float v = s[mt][nt][hh * 2 + c] * rs[mt][hh];
          if (need_mask) {
            const int kv = pos + tok0 + nt * 8 + 2 * (lane & 3) + c;
            v = kv < row_end[mt][hh] ? v : -INFINITY;
          }
          s[mt][nt][hh * 2 + c] = v;
          mx = fmaxf(mx, v);
        }
      }
      return mx;
    };
    auto online_softmax = [&](float (&s)[MT][NT][4], int pos) {
      const bool need_mask = pos + kTileTokens > min_row_end;
      if constexpr (T::kFp8) {
        // FP8 KV: the max moves with every larger score (the slack below measured no gain there: session 42)
  #pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
  #pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            float mx = row_max(s, mt, hh, need_mask, pos);
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            finish_row(s, mt, hh, fmaxf(m_run[mt][hh], mx));
          }
        }
      } else {
        // BF16 KV: a row's max moves only when this tile exceeds it by more than kRefSlack (log2; P is then up to
        // 2^kRefSlack), and the quad maxima (2 shuffles per row) are taken only when some lane's value is that
        // far above its row's max (every row at a chunk's first tile; rarely once the max has settled)
        float mrow[MT][2];
        bool over = false;
  #pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
  #pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            mrow[mt][hh] = row_max(s, mt, hh, need_mask, pos);
            over |= mrow[mt][hh] > m_run[mt][hh] + kRefSlack;
          }
        }
        if (__any_sync(0xffffffffu, over)) {
  #pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
  #pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              float mx = mrow[mt][hh];
              mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
              mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
              mrow[mt][hh] = mx > m_run[mt][hh] + kRefSlack ? mx : m_run[mt][hh];
            }
          }
        } else {
  #pragma unroll
          for (int mt = 0; mt < MT; ++mt) mrow[mt][0] = m_run[mt][0], mrow[mt][1] = m_run[mt][1];
        }
  #pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
  #pragma unroll
          for (int hh = 0; hh < 2; ++hh) finish_row(s, mt, hh, mrow[mt][hh]);
        }
      }
    };

    // ---- rows on wgmma (T::kWgRows), pipelined by one tile. Per tile t: (FP8) convert tile t + 1 into its f16
    // pair; wait for S(t) and P V(t - 1); (FP8) a barrier: every warp's products of tile t - 1 have completed and
    // tile t + 1's pair is written (so a pair is rewritten three tiles later: three pairs), then its stage is
    // released; issue S(t + 1) (on a chunk's last tile a discarded product of tile t's K: no wgmma inside a
    // data-dependent branch), which runs during the softmax of S(t); issue P V(t), which runs during the next
    // tile's conversion. BF16 releases a tile's stage once its P V has completed. (fp8q_r64, two warpgroups: its own
    // order, overlapping P V with the softmax, below.)
    if constexpr (T::kWgRows) {
      // this warp's quarter of an FP8 K and V tile (16-byte chunks of 16 dims) into an f16 pair in the BF16 layout,
      // tokens from `pos` past the sequence as zeros (V: P = 0 there must not meet a NaN)
      auto convert = [&](const uint8_t* src, uint8_t* dst, int pos) {
        const bool tail = pos + kTileTokens > len;
#pragma unroll
        for (int j0 = T::kCvtK ? 0 : 4; j0 < 8; j0 += 4) {  // chunks j < 4: K, j >= 4: V
          uint4 w[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int i = (j0 + j) * (kConsumerWarps * 32) + ctid;  // kv, token, chunk
            w[j] = *reinterpret_cast<const uint4*>(src + (i >> 9) * T::kKvTileBytes + swz((i >> 3) & 63, i & 7));
          }
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int i = (j0 + j) * (kConsumerWarps * 32) + ctid;
            const int token = (i >> 3) & 63, ch = i & 7;
            uint32_t h[8];
            const uint32_t ws[4] = {w[j].x, w[j].y, w[j].z, w[j].w};
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              h[2 * q] = ptx::e4m3x2_to_f16x2(ws[q] & 0xffffu);
              h[2 * q + 1] = ptx::e4m3x2_to_f16x2(ws[q] >> 16);
            }
            if (tail && pos + token >= len) {
#pragma unroll
              for (int q = 0; q < 8; ++q) h[q] = 0u;
            }
            const int kv = (i >> 9) - (T::kCvtK ? 0 : 1);  // the pair's K, then V (only V with an fp8 query)
            uint8_t* d = dst + kv * (kTileTokens * kHeadDim * 2) + (ch >> 2) * (kTileTokens * 128);
            *reinterpret_cast<uint4*>(d + swz(token, (ch & 3) * 2)) = make_uint4(h[0], h[1], h[2], h[3]);
            *reinterpret_cast<uint4*>(d + swz(token, (ch & 3) * 2 + 1)) = make_uint4(h[4], h[5], h[6], h[7]);
          }
        }
      };
      // S reads K from the stage (BF16, or FP8 with an fp8 query) or from the tile's f16 pair (FP8, a bf16 query);
      // P V reads V from the stage (BF16) or from the pair (FP8)
      auto pair_base = [&](int pair) -> uint8_t* { return smem + L::kCvtOff + (3 * wg + pair) * T::kCvtPairBytes; };
      auto k_base = [&](int stg, int pair) -> const uint8_t* {
        return T::kCvtK ? pair_base(pair) : smem + L::kStagesOff + stg * T::kStageBytes;
      };
      auto v_base = [&](int stg, int pair) -> const uint8_t* {
        return T::kCvt ? pair_base(pair) + (T::kCvtK ? kTileTokens * kHeadDim * 2 : 0)
                       : smem + L::kStagesOff + stg * T::kStageBytes + T::kKvTileBytes;
      };
      // Accumulators are pinned by wgmma_fence_operand around each issue, so that no other instruction on them is
      // moved into it (ptxas then serialises every wgmma, C7515).
      auto fence_acc = [&](auto& d) {
#pragma unroll
        for (int n = 0; n < static_cast<int>(sizeof(d) / sizeof(d[0])); ++n)
#pragma unroll
          for (int c = 0; c < 4; ++c) ptx::wgmma_fence_operand(d[n][c]);
      };
      // S = Q K^T: 8 k16 steps over the head dims, K tile halves (64 dims, 64 tokens x 128 B) 8 KB apart; with an
      // fp8 query 4 e4m3 k32 steps over the FP8 tile's 128-byte rows
      auto issue_s = [&](float (&d)[NT][4], const uint8_t* kb) {
        const uint64_t dk = ptx::gmma_desc_sw128(ptx::smem_addr(kb));
        fence_acc(d);
        ptx::wgmma_fence();
        if constexpr (T::kQFp8) {
          ptx::wgmma_m64n64k32_e4m3_rs<true>(d, qf[0], dk);
#pragma unroll
          for (int kk = 1; kk < 4; ++kk) {
            ptx::wgmma_m64n64k32_e4m3_rs<false>(d, qf[kk], ptx::gmma_desc_add(dk, kk * 32));
          }
        } else {
          ptx::wgmma_m64n64k16_rs<T::kFp8, true>(d, qf[0], dk);
#pragma unroll
          for (int ks = 1; ks < 8; ++ks) {
            const uint32_t off = (ks >> 2) * (kTileTokens * 128) + (ks & 3) * 32;
            ptx::wgmma_m64n64k16_rs<T::kFp8, false>(d, qf[ks], ptx::gmma_desc_add(dk, off));
          }
        }
        ptx::wgmma_commit();
        fence_acc(d);
      };
      // O += P V: 4 k16 steps over the tile's tokens; V N-major, its 64-dim halves 8 KB apart, 8 tokens 1 KB
      auto issue_pv = [&](const uint32_t (&p)[T::KSPV][4], const uint8_t* vb) {
        const uint64_t dv = ptx::gmma_desc_sw128_mn(ptx::smem_addr(vb), kTileTokens * 128, 1024);
        fence_acc(o[0]);
        ptx::wgmma_fence();
#pragma unroll
        for (int j = 0; j < T::KSPV; ++j) {
          ptx::wgmma_m64n128k16_rs_tn<T::kFp8>(o[0], p[j], ptx::gmma_desc_add(dv, j * 2048));
        }
        ptx::wgmma_commit();
        fence_acc(o[0]);
      };
      auto advance = [&]() {
        if (++stage == T::kStages) {
          stage = 0;
          phase ^= 1;
        }
      };
      // this warpgroup's tiles: tile_lo + wg, tile_lo + wg + tstep, ... (T::kWg2: every other tile). The one-
      // warpgroup variants call advance() itself: calling it through advance_own changed their SASS (bf16_r64's
      // instruction order, fp8_r64 237 -> 241 registers)
      constexpr int tstep = T::kWg2 ? 2 : 1;
      auto advance_own = [&]() {
        advance();
        if constexpr (T::kWg2) advance();
      };
      const int stage0 = stage;
      const uint32_t phase0 = phase;
      if constexpr (T::kWg2) {
        if (wg == 1) advance();
      }
      const int t_first = ci.tile_lo + wg;
      if (a.debug_flags & 1) {  // experiment: data pipeline only
        for (int tt = t_first; tt < ci.tile_hi; tt += tstep) {
          ptx::mbar_wait(&bars.full[stage], phase);
          __syncwarp();
          if (lane == 0) ptx::mbar_arrive(&bars.empty[stage]);
          if constexpr (T::kWg2) advance_own(); else advance();
        }
      } else if constexpr (T::kWg2) {
        // Two warpgroups (fp8q_r64): P V of the previous tile runs during this tile's softmax, and S of this tile
        // during the V conversion (only the newest product is in flight when a product's result is read, so ptxas
        // keeps the pipeline). Per tile t of this warpgroup: t landed; O rescaled (nothing in flight); issue S(t)
        // (K straight from the stage); convert V(t) into its pair; a barrier (every warp's part of the pair
        // written; a pair is rewritten three tiles later, after P V of that tile completed and a barrier since);
        // issue P V(t - 2) (on the first tile: P = 0 on tile t's own pair, finite); S(t) complete; the stage
        // released; the softmax of S(t) (O's rescale deferred); P V(t - 2) complete; P packed. The last tile's
        // P V after the loop. (The other variants' order, below, issues S(t + 1) before the softmax of S(t) and
        // waits for S(t) and P V(t - 1) together.)
        if (t_first < ci.tile_hi) {
          float sn[NT][4];
          uint32_t pa[T::KSPV][4];
#pragma unroll
          for (int j = 0; j < T::KSPV; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) pa[j][c] = 0u;
          float alpha_prev[2] = {1.f, 1.f};
          int prev_pair = cvt_pair;
          auto rescale_o = [&]() {
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) rescale_o_row(0, hh, alpha_prev[hh]);
          };
          fence_acc(o[0]);  // O's zeros (and pa's) before the first product: not moved into the pipeline (C7515)
          fence_acc(pa);
          for (int tt = t_first; tt < ci.tile_hi; tt += 2) {
            const int pos = tt * kTileTokens;
            const int cur_stage = stage, cur_pair = cvt_pair;
            const uint8_t* st = smem + L::kStagesOff + cur_stage * T::kStageBytes;
            ptx::mbar_wait(&bars.full[cur_stage], phase);
            HK_TRACE_ONLY(if (threadIdx.x == 0 && tt == t_first && chunk_count == 0) HK_TR(a, kTrFirstKv);
                          if (threadIdx.x == 0 && tt == t_first && chunk_count < kTrChunks)
                            HK_TR(a, kTrChunkKv + chunk_count);)
            rescale_o();  // (before S(t) is issued: nothing in flight on any accumulator)
            issue_s(sn, st);
            convert(st, pair_base(cur_pair), pos);
            ptx::fence_proxy_async_shared();
            ptx::named_bar_sync(wg_bar, kConsumerWarps * 32);
            issue_pv(pa, pair_base(prev_pair));
            ptx::wgmma_wait<1>();  // S(t)
            fence_acc(sn);
            __syncwarp();
            if (lane == 0) ptx::mbar_arrive(&bars.empty[cur_stage]);
            float s[MT][NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
              for (int c = 0; c < 4; ++c) s[0][nt][c] = sn[nt][c];
            online_softmax(s, pos);
            ptx::wgmma_wait<0>();  // P V(t - 2)
            fence_acc(o[0]);
            fence_acc(pa);
#pragma unroll
            for (int j = 0; j < T::KSPV; ++j) {
              pa[j][0] = ptx::pack_f16x2(s[0][2 * j][0], s[0][2 * j][1]);
              pa[j][1] = ptx::pack_f16x2(s[0][2 * j][2], s[0][2 * j][3]);
              pa[j][2] = ptx::pack_f16x2(s[0][2 * j + 1][0], s[0][2 * j + 1][1]);
              pa[j][3] = ptx::pack_f16x2(s[0][2 * j + 1][2], s[0][2 * j + 1][3]);
            }
            alpha_prev[0] = alpha_d[0][0];
            alpha_prev[1] = alpha_d[0][1];
            prev_pair = cur_pair;
            cvt_pair = cvt_pair == 2 ? 0 : cvt_pair + 1;
            advance_own();
          }
          rescale_o();
          issue_pv(pa, pair_base(prev_pair));
          ptx::wgmma_wait<0>();
          fence_acc(o[0]);
        }
      } else {  // one warpgroup (bf16_r64, fp8_r64)
        float sn[NT][4];          // the S product in flight
        uint32_t pa[T::KSPV][4];  // P of the tile whose P V is in flight
#pragma unroll
        for (int j = 0; j < T::KSPV; ++j)
#pragma unroll
          for (int c = 0; c < 4; ++c) pa[j][c] = 0u;
        ptx::mbar_wait(&bars.full[stage], phase);  // a chunk has at least one tile (empty pairs never get here)
        HK_TRACE_ONLY(if (threadIdx.x == 0 && chunk_count == 0) HK_TR(a, kTrFirstKv);
                      if (threadIdx.x == 0 && chunk_count < kTrChunks) HK_TR(a, kTrChunkKv + chunk_count);)
        int cur_stage = stage, cur_pair = cvt_pair;
        if constexpr (T::kCvt) {
          convert(smem + L::kStagesOff + stage * T::kStageBytes, pair_base(cur_pair), t_first * kTileTokens);
          ptx::fence_proxy_async_shared();
          ptx::named_bar_sync(wg_bar, kConsumerWarps * 32);
          if constexpr (T::kCvtK) {  // (an fp8 query's S reads K from the stage: released once S has completed)
            __syncwarp();
            if (lane == 0) ptx::mbar_arrive(&bars.empty[stage]);
          }
          cvt_pair = cvt_pair == 2 ? 0 : cvt_pair + 1;
        }
        // every product in flight complete, its registers (S, O, P) pinned after the wait
        auto wait_products = [&]() {
          ptx::wgmma_wait<0>();
          fence_acc(sn);
          fence_acc(o[0]);
          fence_acc(pa);
        };
        fence_acc(o[0]);  // O's zeros (and pa's) before the first product: not moved into the pipeline (C7515)
        fence_acc(pa);
        issue_s(sn, k_base(cur_stage, cur_pair));
        advance();
        for (int tt = t_first; tt < ci.tile_hi; tt += tstep) {
          const int pos = tt * kTileTokens;
          const bool has_next = tt + tstep < ci.tile_hi;
          const int next_stage = stage, next_pair = cvt_pair;
          // the next tile landed (FP8: converted into its pair). No branch around a wait loop or the conversion
          // while products are in flight (ptxas then serialised every wgmma, C7518): on a chunk's last tile the wait
          // is on `done` and the conversion of whatever the next stage holds goes to the next pair, which no product
          // reads (it was last read three tiles ago) and which the next chunk rewrites before use.
          ptx::mbar_wait(has_next ? &bars.full[next_stage] : bars.done, has_next ? phase : 0u);
          if constexpr (T::kCvt) {
            convert(smem + L::kStagesOff + next_stage * T::kStageBytes, pair_base(next_pair),
                    pos + tstep * kTileTokens);
          }
          wait_products();  // S(t), and P V(t - 1) for this warp's rows
          if constexpr (T::kCvt) {
            ptx::fence_proxy_async_shared();
            ptx::named_bar_sync(wg_bar, kConsumerWarps * 32);
            __syncwarp();
            // the stage done with: the next tile's once converted, or (an fp8 query) this tile's once S(t) has
            // completed and its V was converted, unless the last tile's discarded product re-reads it
            if constexpr (T::kCvtK) {
              if (has_next && lane == 0) ptx::mbar_arrive(&bars.empty[next_stage]);
            } else {
              if (has_next && lane == 0) ptx::mbar_arrive(&bars.empty[cur_stage]);
            }
            if (has_next) cvt_pair = cvt_pair == 2 ? 0 : cvt_pair + 1;
          } else if (tt > ci.tile_lo) {  // the previous tile's P V has completed: its stage is free
            const int prev = cur_stage == 0 ? T::kStages - 1 : cur_stage - 1;
            __syncwarp();
            if (lane == 0) ptx::mbar_arrive(&bars.empty[prev]);
          }
          const uint8_t* vb = v_base(cur_stage, cur_pair);
          if (!T::kCvt && pos + kTileTokens > len) {
            // BF16: V past the sequence (a stale page, NaN) must not reach O through P = 0: zero those token rows
            // (a sequence's last tile only), for the whole warpgroup before its P V reads them; here, where no product
            // is in flight (a store loop under a product in flight made ptxas serialise every wgmma: C7518)
            uint8_t* vz = const_cast<uint8_t*>(vb);
            const int vl = len - pos;
            for (int i = threadIdx.x; i < 2 * kTileTokens * 8; i += kConsumerWarps * 32) {
              if (((i >> 3) & (kTileTokens - 1)) >= vl) {
                *reinterpret_cast<uint4*>(vz + i * 16) = make_uint4(0u, 0u, 0u, 0u);
              }
            }
            ptx::fence_proxy_async_shared();
            ptx::named_bar_sync(kConsumerBarrier, kConsumerWarps * 32);
          }
          float s[MT][NT][4];
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int c = 0; c < 4; ++c) s[0][nt][c] = sn[nt][c];
          issue_s(sn, has_next ? k_base(next_stage, next_pair) : k_base(cur_stage, cur_pair));
          online_softmax(s, pos);
#pragma unroll
          for (int j = 0; j < T::KSPV; ++j) {
            if constexpr (T::kFp8) {
              pa[j][0] = ptx::pack_f16x2(s[0][2 * j][0], s[0][2 * j][1]);
              pa[j][1] = ptx::pack_f16x2(s[0][2 * j][2], s[0][2 * j][3]);
              pa[j][2] = ptx::pack_f16x2(s[0][2 * j + 1][0], s[0][2 * j + 1][1]);
              pa[j][3] = ptx::pack_f16x2(s[0][2 * j + 1][2], s[0][2 * j + 1][3]);
            } else {
              pa[j][0] = ptx::pack_bf16x2(s[0][2 * j][0], s[0][2 * j][1]);
              pa[j][1] = ptx::pack_bf16x2(s[0][2 * j][2], s[0][2 * j][3]);
              pa[j][2] = ptx::pack_bf16x2(s[0][2 * j + 1][0], s[0][2 * j + 1][1]);
              pa[j][3] = ptx::pack_bf16x2(s[0][2 * j + 1][2], s[0][2 * j + 1][3]);
            }
          }
          issue_pv(pa, vb);
          if (has_next) {
            cur_stage = next_stage;
            cur_pair = next_pair;
            advance();
          }
        }
        wait_products();
        if constexpr (!T::kCvtK) {  // the last tile's stage
          __syncwarp();
          if (lane == 0) ptx::mbar_arrive(&bars.empty[cur_stage]);
        }
      }
      if constexpr (T::kWg2) {  // both warpgroups go on from the stage after the chunk's last tile
        const int s = stage0 + (ci.tile_hi - ci.tile_lo);
        stage = s % T::kStages;
        phase = phase0 ^ static_cast<uint32_t>((s / T::kStages) & 1);
      }
    }

    // (the fp8-query variant ran its tiles above)
    // (and the rows-on-wgmma variants below)
    for (int tt = ci.tile_lo; !use_wg && !T::kWgRows && tt < ci.tile_hi; ++tt) {
      ptx::mbar_wait(&bars.full[stage], phase);
      HK_TRACE_ONLY(if (threadIdx.x == 0 && chunk_count == 0 && tt == ci.tile_lo) HK_TR(a, kTrFirstKv);
                    if (threadIdx.x == 0 && chunk_count < kTrChunks && tt == ci.tile_lo)
                        HK_TR(a, kTrChunkKv + chunk_count);)
      if (a.debug_flags & 1) {  // experiment: data pipeline only
        __syncwarp();
        if (lane == 0) ptx::mbar_arrive(&bars.empty[stage]);
        if (++stage == T::kStages) {
          stage = 0;
          phase ^= 1;
        }
        continue;
      }
      const uint8_t* ks_base = smem + L::kStagesOff + stage * T::kStageBytes;
      const uint8_t* vs_base = ks_base + T::kKvTileBytes;
      const int pos = tt * kTileTokens;

      // ---- S = Q K^T for this warp's tokens
      float s[MT][NT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c) s[mt][nt][c] = 0.f;

      if constexpr (!T::kFp8) {
        // NT == 2: even and odd k-steps accumulate separately (two independent MMA chains per n-tile)
        float s_odd[MT][NT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int c = 0; c < 4; ++c) s_odd[mt][nt][c] = 0.f;
#pragma unroll
        for (int ks = 0; ks < 8; ++ks) {
          uint32_t qa[MT][4];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            if constexpr (MT == 1) {
#pragma unroll
              for (int j = 0; j < 4; ++j) qa[mt][j] = qf[ks][j];
            } else {
              load_q_frag<T>(qa[mt], qslot, rbase + mt * 16, ks, rows, lane, 0, 1.f, 1.f);
            }
          }
#pragma unroll
          for (int ntp = 0; ntp < NT / 2; ++ntp) {
            const int token = tok0 + ntp * 16 + (mat >> 1) * 8 + mrow;
            const int dim = ks * 16 + (mat & 1) * 8;
            const uint32_t addr = ptx::smem_addr(ks_base + (dim >> 6) * (kTileTokens * 128)) +
                                  swz(token, (dim & 63) >> 3);
            uint32_t b0, b1, b2, b3;
            ptx::ldmatrix_x4(addr, b0, b1, b2, b3);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              if (NT == 2 && (ks & 1)) {
                ptx::mma_bf16(s_odd[mt][2 * ntp], qa[mt], b0, b1);
                ptx::mma_bf16(s_odd[mt][2 * ntp + 1], qa[mt], b2, b3);
              } else {
                ptx::mma_bf16(s[mt][2 * ntp], qa[mt], b0, b1);
                ptx::mma_bf16(s[mt][2 * ntp + 1], qa[mt], b2, b3);
              }
            }
          }
        }
        if constexpr (NT == 2) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
              for (int c = 0; c < 4; ++c) s[mt][nt][c] += s_odd[mt][nt][c];
        }
      } else {
        float s_odd[MT][NT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int c = 0; c < 4; ++c) s_odd[mt][nt][c] = 0.f;
#pragma unroll
        for (int kg = 0; kg < 2; ++kg) {  // 4 k-steps (64 dims) per ldmatrix
          uint32_t qa[MT][4][4];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              if constexpr (MT == 1) {
#pragma unroll
                for (int j = 0; j < 4; ++j) qa[mt][i][j] = qf[kg * 4 + i][j];
              } else {
                load_q_frag<T>(qa[mt][i], qslot, rbase + mt * 16, kg * 4 + i, rows, lane, a.q_is_fp8,
                               inv_pow2[mt][0], inv_pow2[mt][1]);
              }
            }
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const int token = tok0 + nt * 8 + mrow;
            const uint32_t addr = ptx::smem_addr(ks_base) + swz(token, kg * 4 + mat);
            uint32_t w[4];
            ptx::ldmatrix_x4(addr, w[0], w[1], w[2], w[3]);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const uint32_t b0 = ptx::e4m3x2_to_f16x2(w[i] & 0xffffu);
              const uint32_t b1 = ptx::e4m3x2_to_f16x2(w[i] >> 16);
#pragma unroll
              for (int mt = 0; mt < MT; ++mt) {
                if (NT == 2 && (i & 1)) {
                  ptx::mma_f16(s_odd[mt][nt], qa[mt][i], b0, b1);
                } else {
                  ptx::mma_f16(s[mt][nt], qa[mt][i], b0, b1);
                }
              }
            }
          }
        }
        if constexpr (NT == 2) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
              for (int c = 0; c < 4; ++c) s[mt][nt][c] += s_odd[mt][nt][c];
        }
      }

      // ---- scale, mask, online softmax
      online_softmax(s, pos);

      // ---- O += P V
      const bool mask_v = pos + kTileTokens > len;
#pragma unroll
      for (int j = 0; j < T::KSPV; ++j) {
        uint32_t pa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if constexpr (T::kFp8) {
            pa[mt][0] = ptx::pack_f16x2(s[mt][2 * j][0], s[mt][2 * j][1]);
            pa[mt][1] = ptx::pack_f16x2(s[mt][2 * j][2], s[mt][2 * j][3]);
            pa[mt][2] = ptx::pack_f16x2(s[mt][2 * j + 1][0], s[mt][2 * j + 1][1]);
            pa[mt][3] = ptx::pack_f16x2(s[mt][2 * j + 1][2], s[mt][2 * j + 1][3]);
          } else {
            pa[mt][0] = ptx::pack_bf16x2(s[mt][2 * j][0], s[mt][2 * j][1]);
            pa[mt][1] = ptx::pack_bf16x2(s[mt][2 * j][2], s[mt][2 * j][3]);
            pa[mt][2] = ptx::pack_bf16x2(s[mt][2 * j + 1][0], s[mt][2 * j + 1][1]);
            pa[mt][3] = ptx::pack_bf16x2(s[mt][2 * j + 1][2], s[mt][2 * j + 1][3]);
          }
        }
        const int tokb = tok0 + j * 16;
        // tokens of this lane's V fragment halves: lo regs -> tokb + 2(l%4) + {0,1}; hi regs -> +8
        const int ta = pos + tokb + 2 * (lane & 3);
        if constexpr (!T::kFp8) {
          uint32_t keep_lo, keep_hi;
          v_pair_keep(ta, len, mask_v, keep_lo, keep_hi);
#pragma unroll
          for (int dp = 0; dp < 8; ++dp) {
            const int token = tokb + (mat & 1) * 8 + mrow;
            const int dim = dp * 16 + (mat >> 1) * 8;
            const uint32_t addr = ptx::smem_addr(vs_base + (dim >> 6) * (kTileTokens * 128)) +
                                  swz(token, (dim & 63) >> 3);
            uint32_t v0, v1, v2, v3;
            ptx::ldmatrix_x4_trans(addr, v0, v1, v2, v3);
            v0 &= keep_lo;
            v2 &= keep_lo;
            v1 &= keep_hi;
            v3 &= keep_hi;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              ptx::mma_bf16(o[mt][2 * dp], pa[mt], v0, v1);
              ptx::mma_bf16(o[mt][2 * dp + 1], pa[mt], v2, v3);
            }
          }
        } else {
          fp8_pv(pa, ta, tokb, vs_base, mask_v);
        }
      }
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(&bars.empty[stage]);
      if (++stage == T::kStages) {
        stage = 0;
        phase ^= 1;
      }
    }
    if constexpr (MT != 1 && !use_wg) {
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(&bars.qempty[slot]);
    }
    HK_TRACE_ONLY(if (threadIdx.x == 0) HK_TR(a, kTrLastTile);
                  if (threadIdx.x == 0 && chunk_count < kTrChunks) HK_TR(a, kTrChunkTiles + chunk_count);
                  if (lane == 0 && chunk_count == 1) HK_TR(a, kTrWarpTiles + warp);)

    if constexpr (use_wg) {  // row sums over the 8 g-lanes, then over the 4 warps through shared memory
      float* lx = reinterpret_cast<float*>(smem + L::kPxOff + 2 * T::kPBufBytes) + 2 * T::kMPad * kConsumerWarps;
#pragma unroll
      for (int j = 0; j < JB; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float l = l_c[j][c];
          l += __shfl_xor_sync(0xffffffffu, l, 4);
          l += __shfl_xor_sync(0xffffffffu, l, 8);
          l += __shfl_xor_sync(0xffffffffu, l, 16);
          if (lane < 4) lx[(8 * j + 2 * lane + c) * kConsumerWarps + warp] = l;
        }
      ptx::named_bar_sync(kConsumerBarrier, kConsumerWarps * 32);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = 16 * mt + hh * 8 + (lane >> 2);
        const float4 l4 = *reinterpret_cast<const float4*>(lx + r * kConsumerWarps);
        const float l = (l4.x + l4.y) + (l4.z + l4.w);
        const float inv = l > 0.f ? 1.f / l : 0.f;
        if (r < rows) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int d = 16 * (2 * warp + half) + 4 * (lane & 3);
            store_row4<T::kHalfPartials>(a, ci, r, d, o[mt][2 * half][2 * hh], o[mt][2 * half + 1][2 * hh],
                                         o[mt][2 * half][2 * hh + 1], o[mt][2 * half + 1][2 * hh + 1], inv, v_scale);
          }
          if (warp == 0 && (lane & 3) == 0) store_lse(a, ci, r, l > 0.f ? m_row[mt][hh] + __log2f(l) : -INFINITY);
        }
      }
    }

    if constexpr (T::kWg2) {
      // warpgroup 1's O, running max and per-lane row sums to warpgroup 0: thread i of either holds the same rows
      // and dims (the mma layout), so the buffer is [68 values][128 threads] (conflict-free) in warpgroup 1's own
      // f16 pairs, free now that its products completed; it rewrites them only after warpgroup 0 has read them.
      // Ready: warpgroup 1 arrives once written, warpgroup 0 waits before reading. Done: both wait, warpgroup 0
      // once it has read (warpgroup 1 is already there, so it costs warpgroup 0 nothing; with an arrive there
      // compute-sanitizer 2025.3's racecheck reported warpgroup 0's reads against warpgroup 1's next writes), at
      // one instruction for both (bar.sync is .aligned: reached from two places, synccheck reported divergent
      // threads there, session 43)
      float* hb = reinterpret_cast<float*>(smem + L::kCvtOff + 3 * T::kCvtPairBytes);
      if (wg == 1) {
#pragma unroll
        for (int n = 0; n < 16; ++n)
#pragma unroll
          for (int c = 0; c < 4; ++c) hb[(n * 4 + c) * 128 + ctid] = o[0][n][c];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          hb[(64 + hh) * 128 + ctid] = m_run[0][hh];
          hb[(66 + hh) * 128 + ctid] = l_run[0][hh];
        }
        ptx::named_bar_arrive(kCombineReadyBarrier, 2 * kConsumerWarps * 32);
      } else {
        ptx::named_bar_sync(kCombineReadyBarrier, 2 * kConsumerWarps * 32);
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const float m1 = hb[(64 + hh) * 128 + ctid];
          const float l1 = hb[(66 + hh) * 128 + ctid];
          const float mx = fmaxf(m_run[0][hh], m1);
          const float m_use = ref_max(mx);
          const float f0 = ptx::exp2_approx(m_run[0][hh] - m_use);
          const float f1 = ptx::exp2_approx(m1 - m_use);
          m_run[0][hh] = mx;
          l_run[0][hh] = l_run[0][hh] * f0 + l1 * f1;
#pragma unroll
          for (int n = 0; n < 16; ++n)
#pragma unroll
            for (int c = 2 * hh; c < 2 * hh + 2; ++c) {
              o[0][n][c] = o[0][n][c] * f0 + hb[(n * 4 + c) * 128 + ctid] * f1;
            }
        }
      }
      ptx::named_bar_sync(kCombineDoneBarrier, 2 * kConsumerWarps * 32);
      if (wg == 1) {
        ++chunk_count;
        continue;  // warpgroup 0 stores the rows and runs the split handshake
      }
    }

    if constexpr (!use_wg) {  // (the fp8-query variant stored its rows above)
    // ---- row sums over the quad
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float l = l_run[mt][hh];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        l_run[mt][hh] = l;
      }

    // ---- epilogue
    if constexpr (T::TW == 1) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int r = rbase + mt * 16 + hh * 8 + (lane >> 2);
          const float l = l_run[mt][hh];
          const float inv = l > 0.f ? 1.f / l : 0.f;
          const float lse2 = l > 0.f ? m_run[mt][hh] + __log2f(l) : -INFINITY;
          if (r < rows) {
            if constexpr (T::kFp8 && !T::kWgRows) {  // the fp8 P V's dim permutation (o_dim<true>)
#pragma unroll
              for (int bd = 0; bd < 8; ++bd) {
                const int d = 16 * bd + 4 * (lane & 3);
                store_row4<T::kHalfPartials>(a, ci, r, d, o[mt][2 * bd][hh * 2], o[mt][2 * bd + 1][hh * 2],
                                             o[mt][2 * bd][hh * 2 + 1], o[mt][2 * bd + 1][hh * 2 + 1], inv, v_scale);
              }
            } else {
#pragma unroll
              for (int n = 0; n < 16; ++n) {
                store_row2<T::kHalfPartials>(a, ci, r, o_dim<false>(n, 0, lane), o[mt][n][hh * 2],
                                             o[mt][n][hh * 2 + 1], inv, v_scale);
              }
            }
            if ((lane & 3) == 0) store_lse(a, ci, r, lse2);
          }
        }
      }
    } else {
      // token groups -> shared memory, then each thread combines (row, 4 dims) items
      float* mo = reinterpret_cast<float*>(smem + L::kMergeOOff);
      float* mml = reinterpret_cast<float*>(smem + L::kMergeMLOff);
      constexpr int kOStride = kHeadDim + 4;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int rl = hh * 8 + (lane >> 2);
        float* dst = mo + (warp * 16 + rl) * kOStride;
#pragma unroll
        for (int n = 0; n < 16; ++n) {
          dst[o_dim<T::kFp8>(n, 0, lane)] = o[0][n][hh * 2];
          dst[o_dim<T::kFp8>(n, 1, lane)] = o[0][n][hh * 2 + 1];
        }
        if ((lane & 3) == 0) {
          mml[(warp * 16 + rl) * 2 + 0] = m_run[0][hh];
          mml[(warp * 16 + rl) * 2 + 1] = l_run[0][hh];
        }
      }
      ptx::named_bar_sync(kConsumerBarrier, kConsumerWarps * 32);
      HK_TRACE_ONLY(if (threadIdx.x == 0 && chunk_count < kTrChunks) HK_TR(a, kTrChunkEpiBar + chunk_count);)
      const int ctid = threadIdx.x;
      for (int item = ctid; item < T::kMPad * 32; item += kConsumerWarps * 32) {
        const int r = item >> 5;
        const int d = (item & 31) * 4;
        if (r >= rows) continue;
        const int g = r >> 4;  // row group
        const int rl = r & 15;
        float mx = -INFINITY;
#pragma unroll
        for (int t2 = 0; t2 < T::TW; ++t2) mx = fmaxf(mx, mml[((g * T::TW + t2) * 16 + rl) * 2]);
        const float m_use = ref_max(mx);
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        float lsum = 0.f;
#pragma unroll
        for (int t2 = 0; t2 < T::TW; ++t2) {
          const int w2 = g * T::TW + t2;
          const float w = ptx::exp2_approx(mml[(w2 * 16 + rl) * 2] - m_use);
          lsum += w * mml[(w2 * 16 + rl) * 2 + 1];
          const float4 v = *reinterpret_cast<const float4*>(mo + (w2 * 16 + rl) * kOStride + d);
          acc[0] += w * v.x;
          acc[1] += w * v.y;
          acc[2] += w * v.z;
          acc[3] += w * v.w;
        }
        const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
        store_row4<T::kHalfPartials>(a, ci, r, d, acc[0], acc[1], acc[2], acc[3], inv, v_scale);
        if (d == 0) store_lse(a, ci, r, lsum > 0.f ? m_use + __log2f(lsum) : -INFINITY);
      }
    }

    }  // !use_wg

    // ---- split pair: the last piece of each group of kMergeGroup pieces merges the group, the last group
    //      merges the groups (a single level when there are at most kMergeGroup pieces)
    HK_TRACE_ONLY(if (threadIdx.x == 0) HK_TR(a, kTrEpilogue);
                  if (threadIdx.x == 0 && chunk_count < kTrChunks) HK_TR(a, kTrChunkEpi + chunk_count);)
    // trace: a split handshake returned; `merges`: this CTA merges next
    HK_TRACE_ONLY(auto tr_handshake = [&](bool merges) {
      if (threadIdx.x != 0) return;
      HK_TR(a, kTrHandshake);
      tr_counts += 1ull << 32;
      if (merges) {
        HK_TR(a, kTrMergeStart);
        tr_counts += 1ull << 16;
      }
    };)
    if (ci.split && !(a.debug_flags & 2)) {
      const int n = ci.num_pieces;
      const int k = ci.slot == ci.first_slot ? 0 : (ci.slot - (ci.first_slot & ~1)) / 2;
      if (n <= T::kMergeGroup) {
        const bool last = arrive_last(&a.plan.merge_counters[ci.pair], n, flag);
        HK_TRACE_ONLY(tr_handshake(last);)
        if (last) {
          merge_slots<T::kMergeRows, T::kMergeLoads, T::kHalfPartials>(
              merge_args(a, ci, v_scale), 0, 1, n, true, 0);
          if (threadIdx.x == 0) a.plan.merge_counters[ci.pair] = 0;
        }
      } else if (T::kSliceMerge && slice_merge(n, T::kMPad) && !ci.no_wait) {
        // the last kSliceMergers arrivers merge a 16th of the rows x dims each; all but the last wait for the last
        // arrival.
        // Every merger then counts once more, and the last of those resets the counter (n + kSliceMergers).
        int* counter = &a.plan.merge_counters[ci.pair];
        const int slice = arrive_rank(counter, flag) - (n - kSliceMergers);
        HK_TRACE_ONLY(tr_handshake(slice >= 0);)
        if (slice >= 0) {
          if (slice < kSliceMergers - 1) {
            if (threadIdx.x == 0) ptx::wait_count_at_least(counter, n);
            ptx::named_bar_sync(kConsumerBarrier, kConsumerWarps * 32);
          }
          HK_TRACE_ONLY(if (threadIdx.x == 0) HK_TR(a, kTrMergeNext);)  // (sliced: the wait for the last arrival returned)
          // (scratch: the P exchange or the token-group merge buffer, idle at a chunk's end; arrive_rank's barrier
          //  orders it after the epilogue's use)
          static_assert(!T::kSliceMerge || (T::kWgQk ? 2 * T::kPBufBytes : T::kMergeOBytes) >= kConsumerWarps * 10 * 16 * 4,
                        "merge_slice's scratch: within the P buffers (kWgQk) or the token-group merge buffer");
          float* scratch = reinterpret_cast<float*>(smem + (T::kWgQk ? L::kPxOff : L::kMergeOOff));
          merge_slice<T::kHalfPartials, T::kSliceLoads>(merge_args(a, ci, v_scale), n, slice, scratch);
          if (threadIdx.x == 0 && atomicAdd(counter, 1) == n + kSliceMergers - 1) {
            *counter = 0;
            atomicAdd(&a.plan.header[kHdrSliceMerges], 1);  // (tests: the path ran)
          }
        }
      } else {
        const int g0 = (k / T::kMergeGroup) * T::kMergeGroup;
        const int gcount = n - g0 < T::kMergeGroup ? n - g0 : T::kMergeGroup;
        const int groups = (n + T::kMergeGroup - 1) / T::kMergeGroup;
        const int gslot = piece_slot(ci.first_slot, g0);
        const bool glast = arrive_last(&a.plan.slot_counters[gslot], gcount, flag);
        HK_TRACE_ONLY(tr_handshake(glast);)
        if (glast) {
          merge_slots<T::kMergeRows, T::kMergeLoads, T::kHalfPartials>(
              merge_args(a, ci, v_scale), g0, 1, gcount, false, gslot);
          if (threadIdx.x == 0) a.plan.slot_counters[gslot] = 0;
          const bool flast = arrive_last(&a.plan.merge_counters[ci.pair], groups, flag);
          HK_TRACE_ONLY(if (threadIdx.x == 0) HK_TR(a, kTrMergeNext);)
          HK_TRACE_ONLY(if (threadIdx.x == 0 && flast) {
            HK_TR(a, kTrMergeStart);
            tr_counts += 1ull << 16;
          })
          if (flast) {
            merge_slots<T::kMergeRows, T::kMergeLoads, T::kHalfPartials>(
                merge_args(a, ci, v_scale), 0, T::kMergeGroup, groups, true, 0);
            if (threadIdx.x == 0) a.plan.merge_counters[ci.pair] = 0;
          }
        }
      }
    }
    // the merge buffers and the flag are reused by the next chunk
    if ((T::TW > 1 && !use_wg) || ci.split) ptx::named_bar_sync(kConsumerBarrier, kConsumerWarps * 32);
    ++chunk_count;
  }
  HK_TRACE_ONLY(if (threadIdx.x == 0) {
    HK_TR(a, kTrExit);
    HK_TR_SET(a, kTrExitTimer, ptx::globaltimer());
    HK_TR_SET(a, kTrCounts, tr_counts);
  })
}

// ------------------------------------------------------------------------------------------------------------
template <class T>
__global__ void __launch_bounds__(T::kBlockThreads, T::kMinBlocksPerSm)
    decode_attention_kernel(const __grid_constant__ CUtensorMap tmap_k, const __grid_constant__ CUtensorMap tmap_v,
                            const __grid_constant__ DecodeKernelArgs args) {
  extern __shared__ uint8_t smem_raw[];
  // Aligned by an offset from smem_raw (not through an integer cast of the pointer), so the compiler still knows
  // every access through smem is to shared memory: LDS / STS rather than generic LD.E / ST.E with 64-bit
  // address arithmetic (the integer cast had made e.g. the fp8q exchange's reference stores generic).
  uint8_t* smem = smem_raw + ((1024u - (ptx::smem_addr(smem_raw) & 1023u)) & 1023u);
  using L = SmemLayout<T>;
  uint64_t* bar_base = reinterpret_cast<uint64_t*>(smem + L::kBarOff);
  Barriers bars;
  bars.full = bar_base;
  bars.empty = bar_base + T::kStages;
  bars.qfull = bar_base + 2 * T::kStages;
  bars.qempty = bar_base + 2 * T::kStages + 2;
  bars.done = bar_base + 2 * T::kStages + 4;
  static_assert(2 * T::kStages + 5 <= 64, "barrier slots");
  ChunkInfo* infos = reinterpret_cast<ChunkInfo*>(smem + L::kInfoOff);
  if (threadIdx.x == 0) {
    for (int s = 0; s < T::kStages; ++s) {
      ptx::mbar_init(&bars.full[s], 1);
      ptx::mbar_init(&bars.empty[s], kConsumerWarps);
    }
    for (int s = 0; s < 2; ++s) {
      ptx::mbar_init(&bars.qfull[s], 33);
      ptx::mbar_init(&bars.qempty[s], kConsumerWarps * T::kConsumerWGs);
    }
    if constexpr (T::kWgRows) {
      ptx::mbar_init(bars.done, 1);
      ptx::mbar_arrive(bars.done);
    }
    ptx::fence_barrier_init();
    HK_TRACE_ONLY(for (int e = kTrFirstMeta; e < kTraceSlots; ++e) HK_TR_SET(args, e, 0);)
  }
  __syncthreads();
  HK_TRACE_ONLY(if (threadIdx.x == 0) {
    HK_TR_SET(args, kTrEntryTimer, ptx::globaltimer());
    HK_TR(args, kTrEntry);
    HK_TR_SET(args, kTrSm, ptx::sm_id());
  })
  // With programmatic dependent launch this CTA may start before the previous kernel in the stream has
  // finished: everything above touched shared memory only; from here on we read its results.
  ptx::grid_dependency_wait();
  ptx::launch_dependents();
  HK_TRACE_ONLY(if (threadIdx.x == 0) HK_TR(args, kTrDepWait);)
  // By SM (the plan's kHdrBySm): the first CTA resident on each SM claims the work items, so a plan of at most
  // one item per SM runs one per SM wherever the grid's blocks were placed. The claim counters live in the plan
  // workspace; the launch's last CTA resets them (the next launch reads them after its grid_dependency_wait,
  // i.e. after this grid completed; the planner resets them too).
  // The producer warp makes the claims and the reset (producer_warp); the consumers only follow its chunks.
  if (threadIdx.x >= T::kConsumerThreads) {
    if constexpr (T::kWg2) {  // the producer warpgroup: one warp works, the other three have nothing to do
      ptx::setmaxnreg_dec<T::kProducerRegs>();
      if (threadIdx.x >= T::kConsumerThreads + 32) return;
    }
    producer_warp<T>(&tmap_k, &tmap_v, args, smem, bars, infos);
  } else {
    if constexpr (T::kWg2) ptx::setmaxnreg_inc<T::kConsumerRegs>();
    consumer_warps<T>(args, smem, bars, infos);
  }
}

}  // namespace decode
}  // namespace hopperkit
