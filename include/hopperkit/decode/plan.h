// hopperkit decode attention: the per-step schedule ("plan") and the planner that computes it on the device.
//
// What a plan is
//   Every (request, KV head) pair -- pair id p = request * num_kv_heads + kv_head -- is cut into 64-token
//   tiles. Tiles are numbered linearly, pair after pair. In dynamic mode CTA i of a persistent grid owns the
//   linear tiles [floor(i*T/C), floor((i+1)*T/C)): equal budgets within one tile, C chosen from the work and
//   from how many attention CTAs fit on the GPU. A pair whose tiles fall into one CTA is finished there;
//   a pair cut by a CTA boundary ("split") has each piece written as an FP32 partial with its log-sum-exp,
//   and the CTA that finishes its last piece merges them. In static mode (the split-KV baseline) every
//   pair is cut into the same number of fixed-size pieces, one CTA each.
//
// Reuse contract
//   A plan made by decode_plan() for a `seq_lens` tensor serves every decode_attention() call of that
//   decode step (every layer), on the same stream, while the contents of `seq_lens`, the batch size, the
//   number of KV heads and the block size stay as they were at planning time. Calls that use one plan must
//   not run concurrently (they share its merge counters and partial buffers). Replan whenever the lengths
//   change (under CUDA graphs: capture the planner in the same graph, before the first layer).
//   Violations are not silent: the attention kernel checks every pair's tile count against the live
//   `seq_lens`; on a mismatch it writes NaN for that pair and sets kPlanErrorStale in the plan header
//   (read it with decode_plan_read_errors, or hopperkit.DecodePlan.check() in Python). The host-side
//   configuration (batch, heads, kv dtype, rows) is checked at every call and rejected with a typed error.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "hopperkit/decode/heuristics.h"
#include "hopperkit/dtype.h"

namespace hopperkit {
namespace decode {

// Header words of a plan (int32 each).
enum PlanHeader : int {
  kHdrNumCtas = 0,     // CTAs that have work (dynamic: <= max_ctas; static: pairs * splits)
  kHdrTotalTiles = 1,  // tiles over all pairs
  kHdrNumPairs = 2,    // batch * num_kv_heads
  kHdrNumEmpty = 3,    // pairs with no tiles (written as zeros by the attention kernel)
  kHdrBatch = 4,
  kHdrNumKvHeads = 5,
  kHdrErrors = 6,      // bit set of PlanError, sticky until the next decode_plan()
  kHdrMode = 7,
  kHdrBySm = 8,        // 1: the attention CTAs claim the plan's work items by SM (one claiming CTA per SM)
  kHdrClaimNext = 9,   // by SM: next unclaimed work item (reset by the launch's last CTA and by the planner)
  kHdrClaimDone = 10,  // by SM: CTAs of the launch that finished
  kHdrSliceMerges = 11,  // pairs merged in slices (merge_slice) by the launches since the plan's update (tests)
  kPlanHeaderInts = 16,
};

// Claim counters of the by-SM mode: one per SM id (%smid modulo this).
constexpr int kMaxSmSlots = 1024;

enum PlanError : int {
  kPlanErrorSeqLenClamped = 1,   // a seq_len was negative or beyond block_table's capacity: clamped
  kPlanErrorStale = 2,           // an attention call found seq_lens changed since planning
  kPlanErrorQueryLoc = 4,        // query_start_loc gave a request more than max_q_len or fewer than 0 tokens
  kPlanErrorBlockId = 8,         // a block_table entry in use was outside [0, num_blocks): its tokens read as 0
};

// What a plan is sized for. Made once (make_decode_plan_config), then fixed for the plan's life.
struct DecodePlanConfig {
  int max_batch = 0;     // largest batch the plan serves
  int num_kv_heads = 0;  // KV heads per layer
  int num_q_heads = 0;   // query heads per layer (a multiple of num_kv_heads)
  int max_q_len = 1;     // query tokens per request, 1..8
  DType kv_dtype = DType::kBF16;
  PlanMode mode = PlanMode::kDynamic;
  int max_ctas = 0;      // dynamic: resident CTAs of the attention kernel on this GPU; static: max grid
  int sm_ctas = 0;       // resident attention CTAs on this GPU (both modes)
  int long_pair_ctas = 0;  // dynamic: CTA cap for batches of long pairs (dynamic_cta_cap); 0 = none
  int long_pair_rule = kLongPairRuleRounds;  // dynamic: when that cap applies (dynamic_cta_cap): kLongPairRule*
  int max_chunks_per_cta = kMaxChunksPerCta;  // dynamic: more CTAs while one would walk more chunks; 0 = off
                                              // (kMaxChunksPerCtaFp8 for FP8 KV)
  int min_tiles_per_cta = kMinTilesPerCta;  // dynamic: fewest tiles per CTA (kMinTilesPerCtaFp8 for FP8 KV)
  int align_window_div = kAlignWindowDiv;  // dynamic: aligned budgets over C - C / div .. C CTAs (heuristics.h,
                                          // dynamic_aligned_ctas); 0 = off
  int max_rows() const { return num_kv_heads > 0 ? max_q_len * (num_q_heads / num_kv_heads) : 0; }
  int max_pairs() const { return max_batch * num_kv_heads; }
  int partial_slots() const { return 2 * max_ctas; }
};

// Byte offsets of the plan's arrays inside one device workspace (each 256-byte aligned).
struct DecodePlanLayout {
  size_t header = 0;           // int32 [kPlanHeaderInts]
  size_t pair_tile_start = 0;  // int32 [max_pairs + 1]  exclusive prefix of tiles per pair
  size_t pair_first_slot = 0;  // int32 [max_pairs]      partial slot of the pair's first piece (split pairs)
  size_t pair_num_pieces = 0;  // int32 [max_pairs]      CTAs that hold a piece of the pair
  size_t cta_tile_start = 0;   // int32 [max_ctas + 1]   first linear tile of each CTA
  size_t cta_first_pair = 0;   // int32 [max_ctas]       pair holding each CTA's first tile
  size_t empty_pairs = 0;      // int32 [max_pairs]      pairs with no tiles
  size_t merge_counters = 0;   // int32 [max_pairs]      pieces (or groups) finished; reset by the merging CTA
  size_t slot_counters = 0;    // int32 [2 * max_ctas]   pieces finished per merge group (keyed by its first slot)
  size_t sm_claims = 0;        // int32 [kMaxSmSlots]     by SM: CTAs of this launch that started on each SM
  size_t partial_o = 0;        // fp32 [2 * max_ctas, max_rows, 128]   normalised partial outputs (FP8 KV: f16)
  size_t partial_lse = 0;      // fp32 [2 * max_ctas, max_rows]        their log2-sum-exp2
  size_t total_bytes = 0;
};

DecodePlanLayout decode_plan_layout(const DecodePlanConfig& config);

// Typed pointers into a workspace laid out by decode_plan_layout.
struct DecodePlanView {
  int32_t* header;           // [kPlanHeaderInts]
  int32_t* pair_tile_start;  // [max_pairs + 1]
  int32_t* pair_first_slot;  // [max_pairs]
  int32_t* pair_num_pieces;  // [max_pairs]
  int32_t* cta_tile_start;   // [max_ctas + 1]
  int32_t* cta_first_pair;   // [max_ctas]
  int32_t* empty_pairs;      // [max_pairs]
  int32_t* merge_counters;   // [max_pairs]
  int32_t* slot_counters;    // [2 * max_ctas]
  int32_t* sm_claims;        // [kMaxSmSlots]
  float* partial_o;          // [2 * max_ctas, max_rows, 128] fp32; FP8 KV: f16, indexed alike (the first half)
  float* partial_lse;        // [2 * max_ctas, max_rows]
};

DecodePlanView decode_plan_view(const DecodePlanConfig& config, void* workspace);

// Builds a config for this GPU: queries the attention kernel's occupancy for (kv_dtype, rows) on `device`.
// Throws hopperkit::Error on bad arguments (no launch).
DecodePlanConfig make_decode_plan_config(int max_batch, int num_q_heads, int num_kv_heads, DType kv_dtype,
                                         int max_q_len, PlanMode mode, int device);

// Same, with the device's resident attention CTAs given (for CPU tests and twins); long_pair_ctas as in
// DecodePlanConfig (0..sm_ctas).
DecodePlanConfig make_decode_plan_config_for(int max_batch, int num_q_heads, int num_kv_heads, DType kv_dtype,
                                             int max_q_len, PlanMode mode, int sm_ctas, int long_pair_ctas = 0);

struct DecodePlanParams {
  DecodePlanConfig config;
  void* workspace = nullptr;     // device, decode_plan_layout(config).total_bytes; zero-filled once at allocation
  size_t workspace_bytes = 0;
  const int32_t* seq_lens = nullptr;  // device [batch] int32: cached tokens per request, new ones included
  int batch = 0;                 // 0..config.max_batch
  int block_size = 0;            // tokens per KV page: 16, 32, 64 or 128
  int max_blocks_per_seq = 0;    // block_table columns: lengths beyond max_blocks_per_seq*block_size are clamped
  int max_seq_len = 0;           // >= 0. Static mode: the longest request (host value), which sets the split
                                 // size. Dynamic mode: an optional upper bound on seq_lens (0 = none); at most
                                 // (kSliceMinPieces - 1) x 64 = 4544 (slice_free_launch in heuristics.h) the
                                 // 16-row kernels without the sliced merge run: the same output while the bound
                                 // holds; a bound below a length stays correct and only costs merge time. A CUDA graph keeps the launch chosen at
                                 // capture: capture with a bound that holds for every replay, or none
  cudaStream_t stream = nullptr;
};

// What the attention launch needs to know about the plan on the host.
struct DecodePlanLaunch {
  int grid_ctas = 0;      // CTAs to launch (dynamic: config.max_ctas; static: batch * heads * splits)
  int static_splits = 0;  // static mode: splits per pair
  int batch = 0;          // batch the plan was made for
  int block_size = 0;
  int slice_free = 0;     // 1: a dynamic plan whose max_seq_len bound lets no pair merge in slices (the launch
                          //    picks the 16-row kernels without that path: decode/variants.h)
};

// Validates, then enqueues the planner kernel on params.stream (no host synchronisation; graph-capturable).
DecodePlanLaunch decode_plan(const DecodePlanParams& params);

// Static-mode split count and tiles per split for a batch (host side of the static planner).
void static_plan_shape(const DecodePlanConfig& config, int batch, int max_seq_len, int* splits, int* chunk_tiles);

// The launch shape decode_plan() returns for these host values (no GPU work; for bindings that must know it
// before enqueueing the planner).
DecodePlanLaunch decode_plan_launch_info(const DecodePlanConfig& config, int batch, int block_size, int max_seq_len);

// Copies the header's error bits to the host (synchronises `stream`).
int decode_plan_read_errors(const DecodePlanConfig& config, const void* workspace, cudaStream_t stream);

// ---- CPU twin ----------------------------------------------------------------------------------------
// The same plan computed on the host from host copies of the inputs, written into a host buffer of
// decode_plan_layout(config).total_bytes bytes (partials untouched). Identical, word for word, to what the
// device planner writes into the plan arrays.
void decode_plan_cpu(const DecodePlanConfig& config, const int32_t* seq_lens_host, int batch, int block_size,
                     int max_blocks_per_seq, int max_seq_len, void* workspace_host);

}  // namespace decode
}  // namespace hopperkit
