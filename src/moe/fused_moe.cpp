// hopperkit fused FP8 MoE: the host launcher (workspace carving, tile-height choice, four or five PDL-chained
// launches: the routing index takes a second kernel above kIndexCtaRows entries).
// Invariant: kernel 1 (launch_moe_prep) is a plain launch, never a PDL one. The GEMM-built index (a.gemm_index)
// writes the tile list, the offsets and the rows of this call before the gate-up's grid-dependency wait; that is
// safe only because the previous call's down and reduce (which read them) completed before kernel 1 started.
#include <array>
#include <cstdlib>
#include <string>

#include "common/env_switch.h"
#include "common/resident_ctas.h"
#include "hopperkit/error.h"
#include "hopperkit/moe/moe.h"
#include "moe/launch.h"
#include "moe/routing_checks.h"
#include "moe/workspace_layout.h"

#ifdef HOPPERKIT_MOE_TRACE
#include <algorithm>

#include "moe/trace.h"
namespace {
unsigned long long* g_moe_trace = nullptr;  // [2 GEMMs][kMoeTraceMaxCtas][kMoeTraceSlots], at the first traced call
int g_moe_trace_grid[2] = {0, 0};           // CTAs of the last traced launch of each GEMM
}  // namespace

// Profiling builds only: copies the last call's per-CTA events of one GEMM (which: 0 gate-up, 1 down; moe/trace.h)
// to `host` ([max_ctas, kMoeTraceSlots] u64) after synchronising the device, or (which = 2) kernel 1's row.
// Returns the rows written, or -1.
extern "C" __attribute__((visibility("default"))) int hopperkit_moe_trace_read(unsigned long long* host, int which,
                                                                              int max_ctas) {
  using namespace hopperkit::moe;
  if (g_moe_trace == nullptr || host == nullptr || which < 0 || which > 2 || max_ctas < 1) return -1;
  const int n = which == 2 ? std::min(1, max_ctas) : std::min(g_moe_trace_grid[which], max_ctas);
  if (cudaDeviceSynchronize() != cudaSuccess) return -1;
  const size_t row = sizeof(unsigned long long) * kMoeTraceSlots;
  const size_t first = which == 2 ? static_cast<size_t>(kMoeTracePrepRow) * kMoeTraceSlots
                                  : static_cast<size_t>(which) * kMoeTraceMaxCtas * kMoeTraceSlots;
  if (cudaMemcpy(host, g_moe_trace + first, row * n, cudaMemcpyDeviceToHost) != cudaSuccess) return -1;
  return n;
}
#endif

namespace hopperkit {
namespace moe {

size_t moe_workspace_bytes(int max_tokens, int top_k, int hidden, int intermediate, int num_local_experts,
                           MoeScaling scaling) {
  HK_CHECK(kValue, max_tokens >= 0 && max_tokens <= kMaxTokens, "max_tokens", "0.." + std::to_string(kMaxTokens),
           max_tokens);
  HK_CHECK(kValue, top_k >= 1 && top_k <= kMaxTopK, "top_k", "1.." + std::to_string(kMaxTopK), top_k);
  HK_CHECK(kValue, hidden > 0 && intermediate > 0, "hidden / intermediate", "> 0",
           std::to_string(hidden) + " / " + std::to_string(intermediate));
  HK_CHECK(kValue, num_local_experts >= 1 && num_local_experts <= kMaxExperts, "num_local_experts",
           "1.." + std::to_string(kMaxExperts), num_local_experts);
  (void)scaling;  // the layout reserves scale space for both schemes
  return moe_workspace_layout(max_tokens, top_k, hidden, intermediate, num_local_experts).total_bytes;
}

namespace {
// block_m() for arguments already checked (fused_moe validated them; moe_tile_rows checks its own)
int tile_rows(int num_tokens, int top_k, int num_global_experts, int num_local_experts, int hidden, int intermediate,
              bool block) {
  const int sms = device_sm_count();
  return block_m(num_tokens, top_k, num_global_experts, block,
                 few_gate_up_tasks(num_local_experts, intermediate, sms),
                 few_down_tasks(num_local_experts, hidden, sms));
}
}  // namespace

int moe_tile_rows(int num_tokens, int top_k, int num_global_experts, int num_local_experts, int hidden,
                  int intermediate, MoeScaling scaling) {
  check_routing_counts(num_tokens, top_k, num_global_experts, num_local_experts);
  HK_CHECK(kValue, hidden > 0, "hidden", "> 0", hidden);
  HK_CHECK(kValue, intermediate > 0, "intermediate", "> 0", intermediate);
  return tile_rows(num_tokens, top_k, num_global_experts, num_local_experts, hidden, intermediate,
                   scaling == MoeScaling::kBlock128);
}

void fused_moe(const MoeParams& p) {
  validate_moe(p);
  if (p.num_tokens == 0) return;
  const MoeWorkspaceLayout l =
      moe_workspace_layout(p.num_tokens, p.top_k, p.hidden_size, p.intermediate, p.num_local_experts);
  HK_CHECK(kShape, p.workspace != nullptr && p.workspace_bytes >= l.total_bytes, "workspace",
           "at least " + std::to_string(l.total_bytes) + " bytes (moe_workspace_bytes)",
           std::to_string(p.workspace ? p.workspace_bytes : 0) + " bytes");
  HK_CHECK(kAlignment, reinterpret_cast<uintptr_t>(p.workspace) % 256 == 0, "workspace", "a 256-byte aligned pointer",
           "address offset " + std::to_string(reinterpret_cast<uintptr_t>(p.workspace) % 256));
  uint8_t* ws = static_cast<uint8_t*>(p.workspace);
  const bool block = p.scaling == MoeScaling::kBlock128;
  const bool quantise = p.hidden_dtype == DType::kBF16;

  MoeKernelArgs a{};
  if (quantise) {
    a.hidden = static_cast<const uint16_t*>(p.hidden);
    a.hidden_stride = p.hidden_stride;
    a.a_in = ws + l.xq;
    a.a_in_stride = p.hidden_size;
    a.a_in_scale = block ? reinterpret_cast<const float*>(ws + l.xq_scale) : p.a13_scale;
  } else {
    a.a_in = static_cast<const uint8_t*>(p.hidden);
    a.a_in_stride = p.hidden_stride;
    a.a_in_scale = p.hidden_scale;
  }
  a.a13_scale = p.a13_scale;
  a.topk_ids = p.topk_ids;
  a.topk_weights = p.topk_weights;
  a.expert_map = p.expert_map;
  a.w13 = static_cast<const uint8_t*>(p.w13);
  a.w2 = static_cast<const uint8_t*>(p.w2);
  a.w13_scale = p.w13_scale;
  a.w2_scale = p.w2_scale;
  a.a2_scale = p.a2_scale;
  a.shared_output = static_cast<const uint16_t*>(p.shared_output);
  a.shared_stride = p.shared_stride;
  a.out = static_cast<uint16_t*>(p.out);
  a.out_stride = p.out_stride;
  a.num_tokens = p.num_tokens;
  a.hidden_size = p.hidden_size;
  a.intermediate = p.intermediate;
  a.num_local_experts = p.num_local_experts;
  a.num_global_experts = p.num_global_experts;
  a.top_k = p.top_k;
  // Profiling aid (not for serving): HOPPERKIT_MOE_BLOCK_M=16, 32, 48 (per-tensor) or 64 sets the routing index's
  // tile height (the workspace holds the 16-row count); unset, block_m() picks.
  static const int block_m_forced = env_int("HOPPERKIT_MOE_BLOCK_M", 0, 0, 64);
  const bool forced_ok = block_m_forced == 16 || block_m_forced == 32 || block_m_forced == 64 ||
                         (block_m_forced == 48 && !block);
  a.block_m = forced_ok ? block_m_forced
                        : tile_rows(p.num_tokens, p.top_k, p.num_global_experts, p.num_local_experts,
                                    p.hidden_size, p.intermediate, block);
  a.block_scaled = block ? 1 : 0;
  // Profiling aid (not for serving): HOPPERKIT_MOE_NARROW_TILES=down keeps the down GEMM at 128 weight rows per
  // tile; set to anything else (even empty), both GEMMs wherever the heuristic may pick 256, except block-scaled
  // gate-up, which needs 256 (to measure one against the other in one device run).
  static const int narrow =
      !env_set("HOPPERKIT_MOE_NARROW_TILES") ? 0 : (env_is("HOPPERKIT_MOE_NARROW_TILES", "down") ? 1 : 2);
  const int64_t rows_per_expert = mean_rows_per_expert(p.num_tokens, p.top_k, p.num_global_experts);
  // Profiling and test aid (not for serving): HOPPERKIT_MOE_GATEUP_BM=64 keeps the gate-up on the routing
  // index's 64-row tiles, =128 takes 128-row tiles wherever they apply (per-tensor, 64-row index tiles);
  // unset, gate_up_block_m() in heuristics.h picks.
  static const int gate_up_bm_forced = env_int("HOPPERKIT_MOE_GATEUP_BM", 0, 0, 128);
  // (forced, the 32- and 48-row heights take the 64-row index instead: those switches compare 64- and 128-row
  // tiles)
  if ((gate_up_bm_forced == 64 || gate_up_bm_forced == 128) && (a.block_m == 32 || a.block_m == 48) &&
      block_m_forced != a.block_m) {
    a.block_m = 64;
  }
  const int wide_ok = gate_up_block_m(block, a.block_m, kWideGateUpMinRows) == 128;  // where 128 may apply
  a.gate_up_bm = gate_up_bm_forced == 64    ? a.block_m
                 : gate_up_bm_forced == 128 ? (wide_ok ? 128 : a.block_m)
                                            : gate_up_block_m(block, a.block_m, rows_per_expert);
  // Profiling aid (not for serving): HOPPERKIT_MOE_GATEUP_BN=128 keeps per-tensor 128-row gate-up tiles at 128
  // weight rows where wide_gate_up_tile_n() would pick 192; =192 takes 192 wherever I % 96 == 0 (e.g. I = 1536,
  // where the heuristic keeps 128).
  static const int gate_up_bn_forced = env_int("HOPPERKIT_MOE_GATEUP_BN", 0, 0, 256);
  int wide_n = wide_gate_up_tile_n(block, p.intermediate);
  if (!block && gate_up_bn_forced == 128) wide_n = 128;
  if (!block && gate_up_bn_forced == 192 && p.intermediate % 96 == 0) wide_n = 192;
  a.gate_up_tile_n = a.gate_up_bm == 128 ? wide_n
                     : narrow == 2 && !block ? 128
                                             : gate_up_tile_n(block, a.block_m, p.intermediate, rows_per_expert);
  // Profiling and test aid (not for serving): HOPPERKIT_MOE_PAIRS=0 keeps the 128-row gate-up on single CTAs,
  // =1 runs it in clusters of two wherever it runs per-tensor; unset, gate_up_pairs() in heuristics.h picks.
  static const int pairs_forced = env_int("HOPPERKIT_MOE_PAIRS", -1, 0, 1);
  a.gate_up_pairs = pairs_forced == 0   ? 0
                    : pairs_forced == 1 ? (!block && a.gate_up_bm == 128 ? 1 : 0)
                                        : gate_up_pairs(block, a.gate_up_bm, a.gate_up_tile_n, rows_per_expert);
  // The swapped gate-up's items over even rounds (gate_up_even_rounds in heuristics.h). Profiling and test aid:
  // HOPPERKIT_MOE_EVEN_ROUNDS=0 / =1 forces it off / on for every swapped gate-up.
  static const int even_forced = env_int("HOPPERKIT_MOE_EVEN_ROUNDS", -1, 0, 1);
  a.even_rounds = even_forced >= 0 ? even_forced
                                   : gate_up_even_rounds(block, a.gate_up_bm,
                                                         few_down_tasks(p.num_local_experts, p.hidden_size,
                                                                        device_sm_count()));
  // Profiling and test aid (not for serving): HOPPERKIT_MOE_DOWN_BM=64 keeps the down GEMM on 64-row tiles where
  // the gate-up runs 128-row ones; unset, down_block_m() in heuristics.h picks.
  static const int down_bm_forced = env_int("HOPPERKIT_MOE_DOWN_BM", 0, 0, 128);
  a.down_bm = down_bm_forced == 64 ? a.block_m : down_block_m(a.block_m, a.gate_up_bm, block, p.intermediate);
  // Profiling aid (not for serving): HOPPERKIT_MOE_DOWN_BN=256 takes 256 weight rows per 64- or 128-row down
  // tile wherever H % 256 == 0 (e.g. 64-row tiles at I = 192, where down_tile_n() keeps 128); =128 keeps 128.
  static const int down_bn_forced = env_int("HOPPERKIT_MOE_DOWN_BN", 0, 0, 256);
  a.down_tile_n = narrow ? 128 : down_tile_n(block, a.down_bm, p.hidden_size, p.intermediate);
  if (!narrow && down_bn_forced == 128) a.down_tile_n = 128;
  if (!narrow && down_bn_forced == 256 && a.down_bm >= 64 && p.hidden_size % 256 == 0) a.down_tile_n = 256;
  a.counters = reinterpret_cast<int32_t*>(ws + l.counters);
  a.expert_offset = reinterpret_cast<int32_t*>(ws + l.expert_offset);
  a.tiles = reinterpret_cast<int4*>(ws + l.tiles);
  a.tiles_wide = reinterpret_cast<int4*>(ws + l.tiles_wide);
  // The per-tensor 128 x 256 down's K-tail kernel at K = 192 (down_k_tail_fits in heuristics.h) runs over row
  // groups of two 128-row tiles (grouped_gemm.cuh, kATiles), which the index build writes here. Measurement and
  // test aid: HOPPERKIT_MOE_DOWN_KTAIL=0 keeps the generic kernel (over 128-row tiles).
  static const int k_tail = env_int("HOPPERKIT_MOE_DOWN_KTAIL", 1, 0, 1);
  a.tiles_pair = k_tail && !block && a.down_bm == 128 && a.down_tile_n == 256 && down_k_tail_fits(p.intermediate)
                     ? reinterpret_cast<int4*>(ws + l.tiles_pair)
                     : nullptr;
  a.sorted_rows = reinterpret_cast<int32_t*>(ws + l.sorted_rows);
  a.xq = ws + l.xq;
  a.xq_scale = reinterpret_cast<float*>(ws + l.xq_scale);
  a.act = ws + l.act;
  a.act_scale = reinterpret_cast<float*>(ws + l.act_scale);
  a.y = reinterpret_cast<uint16_t*>(ws + l.y);
  a.split_counters = reinterpret_cast<int32_t*>(ws + l.split_counters);
  a.split_partials = reinterpret_cast<float*>(ws + l.split_partials);
  // Profiling and test aid (not for serving): HOPPERKIT_MOE_INDEX=one builds the routing index in one CTA at any
  // size, =chunks in chunks whenever there is more than one (index_chunked in heuristics.h picks by default).
  static const int index_mode =
      env_is("HOPPERKIT_MOE_INDEX", "one") ? 1 : (env_is("HOPPERKIT_MOE_INDEX", "chunks") ? 2 : 0);
  const int64_t index_rows = static_cast<int64_t>(p.num_tokens) * p.top_k;
  const bool chunked = index_mode == 2 || (index_mode == 0 && index_chunked(index_rows, p.num_local_experts,
                                                                             p.num_global_experts));
  a.index_ctas = chunked ? index_ctas(index_rows) : 1;
  a.index_hist = reinterpret_cast<int32_t*>(ws + l.index_hist);
  // Per-tile ready counts between the swapped (16- to 48-row) gate-up and down GEMMs (grouped_gemm.cuh);
  // profiling and test aid: HOPPERKIT_MOE_TILE_READY=0 turns them off (the down then waits for the whole
  // gate-up grid).
  static const int tile_ready = env_int("HOPPERKIT_MOE_TILE_READY", 1, 0, 1);
  a.tile_ready = tile_ready && a.gate_up_bm <= 48 ? reinterpret_cast<int32_t*>(ws + l.tile_ready) : nullptr;

  // The routing index built inside the GEMMs (gemm_index in heuristics.h; kernel 1 keeps the resets and the
  // quantisation). Profiling and test aid: HOPPERKIT_MOE_GEMM_INDEX=0 keeps kernel 1's index build everywhere, =1
  // takes the GEMMs' wherever it can run (gemm_index_can); unset, gemm_index() picks. Off under
  // HOPPERKIT_MOE_PREP_BOUND (below), which reuses kernel 1's index of a previous call.
  static const int gemm_index_forced = env_int("HOPPERKIT_MOE_GEMM_INDEX", -1, 0, 1);
  // (HOPPERKIT_MOE_PREP_BOUND: the measurement aid described below, where kernel 1 is launched)
  static const int prep_bound = env_int("HOPPERKIT_MOE_PREP_BOUND", 0, 0, 3);
  const int index_can = gemm_index_can(a.block_m, a.gate_up_bm, a.index_ctas, index_rows, p.num_local_experts);
  a.gemm_index = prep_bound != 0 || gemm_index_forced == 0 ? 0
                 : gemm_index_forced == 1
                     ? index_can
                     : gemm_index(block, a.block_m, a.gate_up_bm, a.index_ctas, index_rows, p.num_local_experts,
                                  p.expert_map != nullptr);
  // Profiling aid (not for serving): HOPPERKIT_MOE_STAGES=n runs only the first n of the four stages (stage 1:
  // the prep kernel, and the index placement when there is one; with the GEMM index, stage 1 builds no index).
  static const int stages = env_int("HOPPERKIT_MOE_STAGES", 4, 1, 4);
  // Profiling aids: HOPPERKIT_MOE_NO_SPLIT turns the decode tiles' split-K off; HOPPERKIT_MOE_SPLIT=n (1..8)
  // sets the items per CTA the split aims at (split_k_slices in heuristics.h).
  static const int split_waves =
      env_set("HOPPERKIT_MOE_NO_SPLIT") ? 0 : env_int("HOPPERKIT_MOE_SPLIT", kSplitWaves, 1, kMaxSplit);
  a.allow_split = split_waves;
  // The per-tensor swapped gate-up's split hand-off warp (grouped_gemm.cuh, kHandoffWarp); test and profiling aid:
  // HOPPERKIT_MOE_HANDOFF=0 keeps the consumers' own hand-off (the outputs are bitwise the same).
  static const int split_handoff = env_int("HOPPERKIT_MOE_HANDOFF", 1, 0, 1);
  a.split_handoff = split_handoff;
  // the GEMMs' host-side inputs first: a failure there (occupancy query, tensor-map encoding) throws before
  // any kernel of the op is queued
  const MoeGemmPlan gate_up = stages >= 2 ? plan_moe_gate_up(a) : MoeGemmPlan{};
  const MoeGemmPlan down = stages >= 3 ? plan_moe_down(a) : MoeGemmPlan{};
  // Measurement aid (not for serving; results are wrong): HOPPERKIT_MOE_PREP_BOUND=1 replaces kernel 1 by its
  // per-call resets, the GEMMs reusing the index and quantised input of the previous call; =2 runs the index
  // build alone (the quantised input reused), =3 the resets and the quantisation (the index reused; prep.cu).
  // The first call on a workspace (or after its shape or tile choice changed) runs the full prep, so that there is
  // an index of this layout (one key per process: a measurement of one stream and device).
  static const void* bound_ws = nullptr;
  static std::array<int64_t, 8> bound_key = {};
  const std::array<int64_t, 8> key = {p.num_tokens,   p.top_k,      p.num_local_experts, p.hidden_size,
                                      p.intermediate, a.block_m,    a.gate_up_bm,        a.block_scaled};
  const bool bound_ready = bound_ws == static_cast<const void*>(ws) && bound_key == key;
  if (prep_bound) bound_ws = ws, bound_key = key;
#ifdef HOPPERKIT_MOE_TRACE
  // profiling builds: each GEMM's CTAs record their events in rows of their own (a grid past the buffer: none),
  // kernel 1 in the gate-up region's last row (kMoeTracePrepRow)
  if (g_moe_trace == nullptr) {
    HK_CUDA_CHECK(cudaMalloc(&g_moe_trace, sizeof(unsigned long long) * 2 * kMoeTraceMaxCtas * kMoeTraceSlots));
    HK_CUDA_CHECK(cudaMemset(g_moe_trace, 0, sizeof(unsigned long long) * 2 * kMoeTraceMaxCtas * kMoeTraceSlots));
  }
  a.trace = g_moe_trace + static_cast<size_t>(kMoeTracePrepRow) * kMoeTraceSlots;
#endif
  if (prep_bound && bound_ready && a.index_ctas == 1) {
    launch_moe_prep_bound(a, prep_bound, p.stream);
  } else {
    launch_moe_prep(a, p.stream);
  }
#ifdef HOPPERKIT_MOE_TRACE
  MoeKernelArgs a_up = a, a_down = a;
  a_up.trace = gate_up.grid < kMoeTraceMaxCtas ? g_moe_trace : nullptr;
  a_down.trace = down.grid <= kMoeTraceMaxCtas ? g_moe_trace + kMoeTraceMaxCtas * kMoeTraceSlots : nullptr;
  g_moe_trace_grid[0] = a_up.trace ? static_cast<int>(gate_up.grid) : 0;
  g_moe_trace_grid[1] = a_down.trace && stages >= 3 ? static_cast<int>(down.grid) : 0;
  if (stages >= 2) launch_moe_gate_up(a_up, gate_up, p.stream);
  if (stages >= 3) launch_moe_down(a_down, down, p.stream);
#else
  if (stages >= 2) launch_moe_gate_up(a, gate_up, p.stream);
  if (stages >= 3) launch_moe_down(a, down, p.stream);
#endif
  if (stages >= 4) launch_moe_reduce(a, p.stream);
}

}  // namespace moe
}  // namespace hopperkit
