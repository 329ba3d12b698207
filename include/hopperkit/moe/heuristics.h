// hopperkit fused FP8 MoE: tile heuristics shared by the routing index build (device and CPU twin) and the
// grouped GEMMs. Pure integer functions; unit-tested on the CPU.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HK_MOE_HD __host__ __device__ __forceinline__
#else
#define HK_MOE_HD inline
#endif

namespace hopperkit {
namespace moe {

constexpr int kScaleBlock = 128;    // block-wise scaling: 128x128 weight blocks, 1x128 activation groups
constexpr int kMaxExperts = 512;
constexpr int kMaxTopK = 16;
constexpr int kMaxTokens = 16384;

// Rows (token, k) a local expert sees on average: tokens * top_k spread over the global experts.
HK_MOE_HD int64_t mean_rows_per_expert(int64_t num_tokens, int top_k, int num_global_experts) {
  return num_global_experts > 0 ? (num_tokens * top_k + num_global_experts - 1) / num_global_experts : 0;
}

// GEMM tile height (rows of one expert per tile: 16, 32, 48 or 64): decode (a few rows per expert) uses short
// tiles so that the weights, not padding rows, dominate; 64-row tiles (8 warps, 2 x 4) do 4x the MMA work per
// weight byte. Between them, 32-row tiles (the 16-row tiles' swapped wgmma at N = 32). Measured on an H200
// (session 19, runs 4 and 5: each height forced on one build, all models and modes at 64-2048 tokens):
//  * 16 rows per expert (deepseek 512 tokens, qwen3 TP8 256): 32-row tiles 0.85-0.88x the 16-row ones' time
//    (16-row tiles split each expert past 16 rows into two tiles that each stream its weights), qwen3 EP8 256
//    0.98-1.04x; 22 rows (hy3 512): 0.84-0.88x the 64-row tiles' (one CTA per SM over mostly padding rows);
//  * 11 rows (hy3 256): the 16-row tiles 7-9% faster; 32 rows (512-1024 tokens): the 64-row tiles 10-19%
//    faster on deepseek and qwen3 TP8, 13-15% slower on qwen3 EP8 (then kept at 64; per-tensor 48-row tiles
//    since session 20, below).
constexpr int64_t kMaxRowsBlockM16 = 15;  // mean rows per expert up to which the tiles have 16 rows (few tasks)
constexpr int64_t kMaxRowsBlockM32BlockManyTasks = 24;  // ... 32 rows (block-wise, many gate-up tasks); then 64
// 48-row tiles (per-tensor only: the block-wise gate-up's 256 weight rows would need 288 accumulator and partial
// registers): the swapped path at N = 48, so that an expert of up to 48 rows (from past the 32-row limit: 23, 29
// or 33 rows per expert on average, below) is one tile streamed by a CTA of the
// 2-per-SM decode kind instead of a 64-row tile at one CTA per SM (session 19 run 4: the 64-row tiles at 32-43
// rows per expert 1.7-2.5x the floor). Measured on an H200 (session 20 run 1: 32, 48 and 64 forced on one build,
// per-tensor, every model and mode at 256-2048 tokens; mean rows per expert as computed here):
//  * 32 rows (deepseek 1024, qwen3 512): 48-row tiles 0.88-0.98x the 64-row tiles' time on all four, the
//    fastest height on three (qwen3 EP8: 1.05x the 32-row's); 42 rows (hy3 1024): 0.88-0.96x the 64-row's;
//  * 64 rows (deepseek 2048, qwen3 1024): the 64-row tiles 0.73-0.84x the 48-row tiles' (two 48-row tiles per
//    expert); 21 and fewer rows: the 32-row tiles 0.91-0.98x the 48-row tiles'.
// Session 21 run 1 (48 and 64 forced on one build, per-tensor, every model and mode at 768-1792 tokens) moved the
// limit down from 48: at a mean of 48 rows about half the experts take a second 48-row tile, and the 64-row
// tiles took 0.83-0.96x the 48-row tiles' time (qwen3 768, deepseek 1536, hy3 1152 tokens; TP8 and EP8); at 43
// (hy3 1024) the 48-row tiles 0.91-0.97x the 64-row tiles'; at 36-42 (deepseek 1152-1344) the 48-row tiles
// 0.89-0.98x under EP8 but 1.04-1.07x under TP8 (kept at 48: mixed). 44-47 rows were not measured.
constexpr int64_t kMaxRowsBlockM48 = 43;

// Task counts per SM. At the same mean rows per expert, a smaller tile height wins where the GEMMs have few
// tasks per SM (an expert's extra tile fills a CTA slot the first row of tiles leaves idle) and loses where
// they have many. Gate-up tasks at one tile per expert: local experts x I / 128 (256 weight rows per
// block-wise task, 128 gate + 128 up); down tasks: local experts x H / 128. Measured on an H200 (session 21
// runs 3-4: 16 / 32 / 48 / 64 forced on one build, every model and mode at 192-2048 tokens):
//  * Qwen3-235B EP8 (16 local experts x 12 = 192 gate-up tasks, 1.5 per SM) and Hy3 EP8 (24 x 12 = 288, 2.2
//    per SM), block-wise at 24-32 rows: the 64-row tiles 1.14-1.18x the 32-row tiles' time;
//  * DeepSeek-V3 EP8 and TP8 (32 x 16 and 256 x 2 = 512 tasks, 3.9 per SM): block-wise at 32 rows the
//    32-row tiles lose (the 64-row tiles 0.86-0.90x their time); per-tensor at 26-32 rows 5-27% slower than
//    the 48-row tiles; the 32-row tiles faster than the 16-row tiles from 12 rows on;
//  * Hy3 / Qwen3 (few gate-up tasks): the 16-row tiles the fastest up to 14 rows on Hy3 and 12 on Qwen3 (15
//    not measured; the limit stays 15, as before); per-tensor at 27-32 rows the
//    32-row tiles 4-5% faster than the 48-row tiles under EP8 (few down tasks: 16-24 x 32 = 512-768, at most
//    5.8 per SM) and 8-13% slower under TP8 at 32 rows (128-192 x 32 = 4096-6144 down tasks, 31-47 per SM).
// The cut for the gate-up at 3 tasks per SM lies between the measured 2.2 and 3.9; the down's at 8 per SM between
// 5.8 and 31. These limits were fitted on the points above; session 22 checked them on batch sizes between them.
constexpr int64_t kGateUpFewTasksPerSm = 3;
constexpr int64_t kDownFewTasksPerSm = 8;
HK_MOE_HD bool few_gate_up_tasks(int num_local_experts, int intermediate, int num_sms) {
  return static_cast<int64_t>(num_local_experts) * ((static_cast<int64_t>(intermediate) + 127) / 128) <=
         kGateUpFewTasksPerSm * static_cast<int64_t>(num_sms);
}
HK_MOE_HD bool few_down_tasks(int num_local_experts, int hidden, int num_sms) {
  return static_cast<int64_t>(num_local_experts) * ((static_cast<int64_t>(hidden) + 127) / 128) <=
         kDownFewTasksPerSm * static_cast<int64_t>(num_sms);
}
constexpr int64_t kMaxRowsBlockM16ManyTasks = 11;  // many gate-up tasks: 32-row tiles from 12 rows
// Per-tensor 32 / 48: 32-row tiles up to 22 rows with many gate-up tasks, 28 with few gate-up but many down
// tasks, 32 with few of both (an expert past 32 rows takes a second 32-row tile).
constexpr int64_t kMaxRowsBlockM32ManyTasks = 22;
constexpr int64_t kMaxRowsBlockM32ManyDown = 28;
constexpr int64_t kMaxRowsBlockM32FewTasks = 32;
// Block-wise has no 48-row tiles: with few gate-up tasks it keeps the 32-row tiles up to 32 rows per expert, then
// 64 (38-48 rows: the 64-row tiles 0.91-1.01x the 32-row tiles' on Qwen3 and Hy3); with many, 64 from 25 rows.
constexpr int64_t kMaxRowsBlockM32Block = 32;
// few_gate_up / few_down: few_gate_up_tasks() / few_down_tasks() for the call's shape and device (fused_moe and
// moe_tile_rows pass them).
HK_MOE_HD int block_m(int64_t num_tokens, int top_k, int num_global_experts, bool block_scaled, bool few_gate_up,
                      bool few_down) {
  const int64_t r = mean_rows_per_expert(num_tokens, top_k, num_global_experts);
  if (r <= (few_gate_up ? kMaxRowsBlockM16 : kMaxRowsBlockM16ManyTasks)) return 16;
  if (block_scaled) return r <= (few_gate_up ? kMaxRowsBlockM32Block : kMaxRowsBlockM32BlockManyTasks) ? 32 : 64;
  const int64_t max32 = !few_gate_up ? kMaxRowsBlockM32ManyTasks
                        : few_down   ? kMaxRowsBlockM32FewTasks
                                     : kMaxRowsBlockM32ManyDown;
  if (r <= max32) return 32;
  return r <= kMaxRowsBlockM48 ? 48 : 64;
}

// Weight rows one GEMM tile covers (the N extent): 128 or 256. Gate-up tiles hold matching gate and up rows
// (half each) so that SiLU(gate) * up is formed in registers; block-wise scaling needs all 128 columns of an
// activation quantisation group in one tile, hence 256 rows there. 64-row tiles take 256 weight rows: each A
// stage then feeds twice the MMA work (per-tensor at >= 1024 tokens up to 20% faster where I % 128 == 0,
// session 5 run 2). At I % 128 == 64 (TP8 shards, I = 192) the last column block's second warpgroup computes
// 64 columns past I that are not stored (25% more MMA work at I = 192; its up rows past the tensor come back
// zero-filled): measured 3-10% faster from 64 rows per expert on (hy3 / qwen3 TP8 at 1024-16384 tokens), but
// 5% slower at qwen3 TP8 512 tokens (32 rows per expert: one tile per expert, weight-streaming, where the
// wasted quarter is not repaid), so below 64 rows per expert those shapes keep 128 (session 6, run 4).
// Down tiles need H % 256 == 0; 64-row ones with K = 192 (TP8 shards) measured 1-3% slower with 256 rows (the
// 128-row tile keeps a stage in flight), so they keep 128 (128-row down tiles: down_tile_n below).
HK_MOE_HD int gate_up_tile_n(bool block_scaled, int bm, int intermediate, int64_t rows_per_expert) {
  // intermediate: a multiple of 64 (validated); rows_per_expert: mean_rows_per_expert()
  return block_scaled || (bm == 64 && (intermediate % 128 == 0 || rows_per_expert >= 64)) ? 256 : 128;
}
// Gate-up tile height at prefill. The 64 x 256 per-tensor gate-up tile starves on its stage ring (session 9,
// ncu per-instruction samples at hy3 TP8 4096 tokens: the consumers wait on full stages with the ring full,
// L2 at 64%): each 40 KB stage (8 KB of A rows, 32 KB of weights) feeds 64 x 256 x 128 MMAs. A 128-row tile over
// 128 weight rows (64 gate + 64 up; each consumer warpgroup 64 of the rows against all 128 weight rows) feeds
// the same MMA work from 32 KB, and reads an expert's weights once per 128 rows instead of once per 64
// (session 17 run 3, per-tensor from 96 rows per expert: 0.80-0.92x the time at 2048-16384 tokens). Block-wise,
// the 128-row tile spans 256 weight rows (a whole 128-column activation group; wide_gate_up_tile_n). From
// kWideGateUpMinRows rows per expert on average: an expert of 65-128 rows is two 64-row tiles or one 128-row
// tile, the same MMA row slots, but the weights staged once instead of twice (HOPPERKIT_MOE_GATEUP_BM=64 turns
// it off, =128 forces it wherever it applies).
constexpr int64_t kWideGateUpMinRows = 64;
HK_MOE_HD int gate_up_block_m(bool block_scaled, int bm, int64_t rows_per_expert) {
  (void)block_scaled;  // both scalings
  return bm == 64 && rows_per_expert >= kWideGateUpMinRows ? 128 : bm;
}
// Weight rows of a 128-row gate-up tile: per-tensor 128 (64 gate + 64 up: each consumer warpgroup's 64 rows
// against all of them fit 168 registers), block-wise 256 (128 gate + 128 up; its consumers take 224 registers
// by setmaxnreg).
// Per-tensor where I % 192 == 0 and I % 128 != 0 (I = 192: Hy3 and Qwen3-235B at TP8): 192 (96 gate + 96 up
// rows: 96 columns per task, two blocks at I = 192 instead of three of 64), so each tile's 128 A rows are staged
// once per 96 columns instead of once per 64 (consumers 224 registers by setmaxnreg: 96 accumulators and two
// 48-register partials). Elsewhere 128. Measured on an H200 (session 19, run 1, against 128 x 128, same build
// and across builds): hy3 / qwen3 TP8 0.936-0.978x from 2048 tokens, 0.985-0.998x at 1024. At I = 1536 (their
// full intermediate under EP8) it was mixed, so I % 128 == 0 keeps 128: hy3 EP8 2048 0.930x, qwen3 EP8 2048
// 1.036-1.040x, 1024 1.000x / 0.979x.
HK_MOE_HD int wide_gate_up_tile_n(bool block_scaled, int intermediate) {
  return block_scaled ? 256 : (intermediate % 192 == 0 && intermediate % 128 != 0 ? 192 : 128);
}
// The per-tensor 128 x 192 gate-up in clusters of two CTAs that share each weight stage (grouped_gemm.cuh,
// kPairs): a cluster computes two consecutive 128-row tiles of the tile list, and where they belong to one
// expert each SM pulls 12 of the stage's 24 KB of weights from L2 (its 16 KB of gathered A rows stay its own).
// From kGateUpPairMinRows rows per expert on average, where most experts have two or more tiles. Measured on an
// H200 (session 51 calls 5 and 6, same build, HOPPERKIT_MOE_PAIRS=0 / =1 and the rule, three runs of single CTAs
// and two or three paired per point): hy3 / qwen3 TP8 per-tensor (I = 192, 192 weight rows) at 4096-16384 tokens
// 0.97-0.99x the time in 10 of 11 paired runs (hy3 4096 536.0-536.8 -> 519.4-525.0 us, 8192 835.5-839.0 ->
// 821.1-827.4; qwen3 4096 449.8-451.2 -> 442.9-446.4), one 1.01-1.03x (qwen3 8192, 839.8 against 815.0-829.5);
// at the 128 x 128 tiles (DeepSeek-V3 TP8 per-tensor, I = 256: 8 of 16 KB of weights shared) 1.00-1.09x (8192
// tokens: paired 1871-1976 us, single 1810-1942), and EP8 (I = 1536, 128 x 128) 1.03-1.05x at 1024-2048 tokens
// forced: there single CTAs stay. The threshold is not calibrated between the measured points: the rule pairs
// from 2560 tokens at qwen3 TP8 and 3840 at hy3 TP8, none measured; forced at 2048 tokens (128 / 86 rows per
// expert) pairs took 0.98x / 0.995x (one run each). HOPPERKIT_MOE_PAIRS=0 turns pairs off, =1
// forces them wherever the per-tensor 128-row gate-up runs (both tile widths: a test and profiling aid).
constexpr int64_t kGateUpPairMinRows = 160;
HK_MOE_HD int gate_up_pairs(bool block_scaled, int gate_up_bm, int gate_up_tile_n, int64_t rows_per_expert) {
  return !block_scaled && gate_up_bm == 128 && gate_up_tile_n == 192 && rows_per_expert >= kGateUpPairMinRows ? 1 : 0;
}
// Even rounds for the per-tensor swapped (16- to 48-row) gate-up (grouped_gemm.cuh, a.even_rounds): its items go to
// ceil(items / ceil(items / grid)) CTAs, so that a last round of a few CTAs (e.g. 384 tasks on 264 CTAs: 264 +
// 120) becomes rounds of equal width (192 + 192), and the CTAs past them leave at once, their SM slots taking
// down CTAs from the start. Only with few down tasks (few_down_tasks: EP8 shapes), where the down's items are
// long and few. Measured on an H200 (session 52 call 3, same build, the switch forced on against off, twice, 50
// points at 4-256 tokens, MoE decode tests 76/76 under it): qwen3 EP8 per-tensor 128 / 256 tokens 0.964-0.965x /
// 0.961-0.964x, hy3 EP8 per-tensor 128 0.970-0.971x, hy3 EP8 256 0.996-0.999x, the other EP8 per-tensor points
// 0.999-1.015x (hy3 EP8 64 1.015 in one of the two runs); where the down has many tasks it lost: qwen3 TP8 256
// 1.019-1.020x (its down runs finished tiles in the SM slots a short last round leaves free, which even rounds
// take away; session 34 saw the same for stream-K), deepseek EP8 per-tensor 16 1.031-1.034x (32 x 56 down tasks:
// not few). Block-wise points 0.99-1.01x: left as they are. HOPPERKIT_MOE_EVEN_ROUNDS=0 / =1 forces it off / on.
HK_MOE_HD int gate_up_even_rounds(bool block_scaled, int gate_up_bm, bool few_down) {
  return !block_scaled && gate_up_bm <= 48 && few_down ? 1 : 0;
}
// The routing index built inside the GEMMs (session 53): where the gate-up runs swapped (16- to 48-row) tiles over
// the routing index's own tiles and the index fits one CTA, every gate-up CTA can build the expert counts and the
// tile list in its shared memory from topk_ids (an input, complete before the op started) and find its tiles'
// rows itself, while kernel 1 is reduced to the per-call resets and the input quantisation; the gate-up's last
// CTA publishes the tile list for the down GEMM and the tests (grouped_gemm.cuh, gemm_index.cuh). It can run up to
// kGemmIndexMaxExperts local experts (its tables: two uint16 per expert, 1 KB) and kGemmIndexMaxRows routing
// entries (gemm_index_can). It is taken per-tensor up to kGemmIndexRuleRows = 64 routing entries with an expert
// map and kGemmIndexRuleRowsNoMap = 512 without one (8 / 64 tokens at top-8; HOPPERKIT_MOE_GEMM_INDEX=1 forces it
// wherever it can run, =0 keeps kernel 1's build). Measured on an H200,
// same-build A/Bs against kernel 1's index: session 53 call 2 (a build with the index inlined, 4 entries per thread
// and pass in the histogram, 8 per lane in the row scan): per-tensor 4 tokens 0.931-0.982x at all 6 model shapes,
// 16 tokens 0.964-1.019x; calls 3 / 4 (16 per pass, twice the code in the item loops) 1.005-1.108x slower at
// 4-16 tokens. Session 54 call 1 (the index as a template parameter, call 2's sizes, aac1e68): per-tensor 4 tokens
// 0.950-0.992x (qwen3 TP8 29.8 against 31.4 us), 8 tokens 0.970-1.008x, 16 tokens 0.965-1.049x, 128-256 tokens
// 1.01-1.21x slower (every CTA's histogram of 1024-2048 entries and its row scans sit on the gate-up's path);
// block-wise 4-256 tokens 0.954-1.233x (geomean slower), so off there.
constexpr int kGemmIndexMaxExperts = 256;
constexpr int64_t kGemmIndexMaxRows = 4096;
constexpr int64_t kGemmIndexRuleRows = 64;
// Without an expert map (every expert local, tensor-parallel) each entry's expert is its id: one round trip per pass
// instead of two (id, then map). Session 54 call 1 measured the index per-tensor at TP8 16 / 32 / 64 tokens (128-512
// entries) at 0.965-0.998x on all three TP8 shapes (hy3 0.975 / 0.987 / 0.982, qwen3 0.965 / 0.990 / 0.998, deepseek
// 0.993 / 0.993 / 0.994), while qwen3 / hy3 EP8 lost there (qwen3 EP8 1.04-1.05x, hy3 EP8 16 tokens 1.02x; deepseek
// EP8 0.986-1.002); 1024 entries lost at TP8 too (1.013-1.044x). Session 55 call 1 (same build, this rule against
// kernel 1's index everywhere): TP8 16 / 32 / 64 tokens hy3 0.975 / 0.994 / 0.981, qwen3 0.974 / 1.000 / 0.998,
// deepseek 0.991 / 0.990 / 0.997; the index at TP8 128 tokens 1.011-1.038x and at EP8 16-128 tokens up to 1.09x
// (hence the map's lower limit). Timed only at top-8 over 128-256 local experts (16- and 32-row tiles): shapes with
// few experts that take 48-row tiles within 512 entries (e.g. 8 experts at top-2) run it untimed (tested). A caller
// whose experts are all local should pass no map (an identity map gets the 64-entry limit).
constexpr int64_t kGemmIndexRuleRowsNoMap = 512;
HK_MOE_HD int gemm_index_can(int block_m, int gate_up_bm, int index_ctas_, int64_t rows, int num_local_experts) {
  return gate_up_bm == block_m && block_m <= 48 && index_ctas_ == 1 && rows <= kGemmIndexMaxRows &&
                 num_local_experts <= kGemmIndexMaxExperts
             ? 1
             : 0;
}
HK_MOE_HD int gemm_index(bool block_scaled, int block_m, int gate_up_bm, int index_ctas_, int64_t rows,
                         int num_local_experts, bool expert_map) {
  return !block_scaled && rows >= 1 && rows <= (expert_map ? kGemmIndexRuleRows : kGemmIndexRuleRowsNoMap) &&
                 gemm_index_can(block_m, gate_up_bm, index_ctas_, rows, num_local_experts)
             ? 1
             : 0;
}
// Down tile height: 128 rows wherever the gate-up runs 128-row tiles (it drains the same 128-row tile list; its
// A rows arrive by TMA), which stages each expert's W2 once per 128 rows instead of once per 64. Measured on an
// H200 (session 18, runs 1 and 4, against 64-row down tiles): per-tensor 0.907-0.999x the time (hy3 / qwen3 TP8
// at I = 192 0.91-0.95x from 2048 tokens), block-wise over a long K (I = 1536-2048, EP8) 0.955-1.005x; block-wise
// at I = 256 (DeepSeek-V3 TP8: two 128-deep stages per 128 x 256 item) 1.019-1.022x at 2048, 8192 and 16384
// tokens (0.996x at 4096), so block-wise below I = 512 keeps 64-row down tiles (I = 256 the only shape measured
// there; I = 1536-2048 above it).
constexpr int kWideDownBlockMinK = 512;
HK_MOE_HD int down_block_m(int bm, int gate_up_bm, bool block_scaled, int intermediate) {
  return gate_up_bm == 128 && (!block_scaled || intermediate >= kWideDownBlockMinK) ? 128 : bm;
}
// 128-row down tiles take 256 weight rows wherever H % 256 == 0, K = 192 included: each item stages its 128 A
// rows once per 256 output columns instead of once per 128, and the down is bound by L2 traffic there (session
// 20 run 4, ncu: L2 at 81-85% at qwen3 TP8 1024-2048 and hy3 TP8 4096 tokens). Measured on an H200 (session 20
// run 5, same build, HOPPERKIT_MOE_DOWN_BN=256 against the rule before it, which kept 128 at I = 192): hy3 / qwen3 TP8
// per-tensor 0.92-1.00x the time from 64 rows per expert (qwen3 1024 tokens 175.8 -> 171.0 us, 16384 1660 ->
// 1598; hy3 16384 1724 -> 1590); 128 forced where the rule already took 256: 0.99-1.09x (deepseek TP8
// block-wise 16384 tokens 3398 -> 3715 us).
// 16-row per-tensor down tiles (decode batches) take 256 weight rows where K is short (I <= 256: TP8, two
// 128-deep stages per item), so each item's epilogue and hand-offs serve twice the MMA work and half the items
// run. Measured on an H200 (session 27 run 3, cross-build A/B, MoE tests green under it): hy3 / qwen3 TP8
// per-tensor 0.966-0.986x the time at 8-128 tokens (qwen3 64 tokens 89.5 -> 86.8 us), deepseek TP8 (I = 256)
// 0.975-0.998x (1.010x at 256 tokens); at EP8 (I = 1536-2048, 12-16 stages per item: the epilogue weighs
// little, and half the items fill fewer CTAs) 1.003-1.051x, so long K keeps 128. With 6 stages at one CTA per
// SM instead of 3 at two, TP8 gained nothing (0.99-1.02x). Block-wise 16-row tiles keep 128 (one weight scale
// per 128-row block); the 64- and 128-row tiles take 256 in both scalings (one weight scale per warpgroup).
// 32-row per-tensor tiles take the same rule: at 256 weight rows their 64 accumulators leave room for one stage
// partial, so their stages run one after the other (kSerialSwap in grouped_gemm.cuh; 165 registers, no spills).
// Measured on an H200 (session 28 call 1, cross-build A/B, 74 MoE tests green under it): qwen3 TP8 256 tokens
// 110.3 -> 107.5 us (0.975x), 384 0.988x; hy3 TP8 384 0.980x, 512 0.991x; deepseek TP8 384-512 0.999-1.001x.
constexpr int kWideSwapDownMaxK = 256;
HK_MOE_HD int down_tile_n(bool block_scaled, int down_bm, int hidden, int intermediate) {
  if (hidden % 256 != 0) return 128;
  const bool wide_swapped =
      (down_bm == 16 || down_bm == 32) && !block_scaled && intermediate <= kWideSwapDownMaxK;
  return (down_bm == 64 && intermediate % 128 == 0) || down_bm == 128 || wide_swapped ? 256 : 128;
}
constexpr int kTileK = 128;

// Split-K of the swapped (16- to 48-row) tiles: when the tasks (tile x weight block) are fewer than the resident
// CTAs, or just past one wave of them over a long K (below), each task's K range is cut into S slices (S <= kMaxSplit, each >= one 128-deep step), the slices' fp32
// partial tiles go to the workspace and the last slice to arrive sums them in slice order (deterministic).
// S is chosen on the device from the actual task count: split_k_slices() below.
constexpr int kMaxSplit = 8;
constexpr int kSplitSlices = 1024;            // partial tiles the workspace holds (tasks x S never exceed it)
constexpr int kSplitSliceFloats = 32 * 256;   // the largest split tile (32 rows x 256 weight rows)
// waves: items per CTA the split aims at. 1 (at most one item per resident CTA, except just past one wave of
// long-K tasks: 2 slices, up to 2.25 items per CTA): session 7's same-build A/B at
// 4-32 tokens (36 points) measured 1 at 0.935x the time of 2 (geomean; 0.73-0.94x at 4-8 tokens, never above
// 1.02x) and 8 at 1.23x. The profiling switch HOPPERKIT_MOE_SPLIT=n sets it, to re-measure.
constexpr int kSplitWaves = 1;
// Just past one wave (tasks in (ctas, ctas + ctas / 8]) of long items (K of at least kSplitTailMinSteps 128-deep
// steps: the gate-up at H >= 4096, a down at I >= 4096 too), two slices: the few items of a second round of whole tasks ran alone for a whole task's time; halves
// make three rounds of half length. Measured on an H200 (session 22 run 4, cross-build against the rule without
// it, 140 points at 4-200 tokens, MoE tests 119/119): the gate-up (K = 4096 or 7168: 32 or 56 steps) 0.940-0.979x
// the time where it applied (deepseek EP8 per-tensor 10 / 16 tokens 0.940 / 0.942, block-wise 10 / 16 0.954 /
// 0.950 (1 CTA per SM: 144 tasks on 132), TP8 10 tokens 0.954-0.956, hy3 TP8 16 0.968, qwen3 EP8 16 / 32
// 0.958-0.979, qwen3 TP8 18-24 0.970-0.976); the down over K = 1536-2048 (12-16 steps), 1.012-1.075x (hy3 EP8
// 10 tokens 1.061 / 1.075, deepseek EP8 block-wise 4 tokens 1.067), so short K keeps one slice. Session 22 run 2
// (HOPPERKIT_MOE_SPLIT) measured S = 2 from 1.14 waves on at 0.996-1.007x: no gain further out.
constexpr int kSplitTailMinSteps = 32;
HK_MOE_HD int split_k_slices(int tasks, int ctas, int k_steps, int waves = kSplitWaves) {
  if (tasks <= 0) return 1;
  int s = waves * ctas / tasks;               // up to `waves` slices per CTA
  if (s == 0 && k_steps >= kSplitTailMinSteps && 8 * tasks <= 9 * ctas) s = 2;  // just past one wave, long K
  s = s < kMaxSplit ? s : kMaxSplit;
  s = s < k_steps ? s : k_steps;
  s = s < kSplitSlices / tasks ? s : kSplitSlices / tasks;
  return s > 1 ? s : 1;
}  // bytes (fp8 elements) of K per pipeline stage = one 128-block of block scaling

// Balanced K ranges (stream-K) for a swapped gate-up running one CTA per SM (the block-wise 16 x 256 one): when
// the tasks outnumber the CTAs and the last round of whole tasks would keep at most half of them busy, CTA c takes
// the K steps [stream_k_begin(c), stream_k_begin(c + 1)) of all tasks x k_steps steps laid end to end, so every
// CTA streams the same bytes; a task is then shared by 1 or 2 CTAs ("pieces", in K order: each range holds at
// least k_steps steps), whose partial tiles the split-K hand-off sums. A CTA parks at most two partials (its first task and its last): workspace slot 2c or
// 2c + 1 (stream_k_slot), so ctas <= kSplitSlices / 2. Measured on an H200 (session 29 call 9, cross-build A/B of
// the block-wise sweep at 4-512 tokens, the whole GPU suite green under it): where it applies, deepseek EP8 16
// tokens 120.7 -> 112.0 us (0.928x), hy3 EP8 128 129.0 -> 120.6 (0.935x), qwen3 EP8 16 / 32 / 64 0.937 / 0.940 /
// 0.969x; where it does not, the kernel's added code costs 1-3% at 4-8 tokens (hy3 EP8 4 1.033x, qwen3 EP8 4
// 1.020x; session 29 call 8's first form, with more code, 1.5-4%). The same kernel at 2 CTAs per SM instead
// (one round for ~144 tasks) gained at 16-64 tokens but lost 4-8% elsewhere (calls 3, 4, 6).
HK_MOE_HD bool stream_k_applies(int tasks, int k_steps, int ctas) {
  const int tail = ctas > 0 ? tasks % ctas : 0;
  return tasks > ctas && tasks <= kSplitSlices && 2 * ctas <= kSplitSlices && tail != 0 && 2 * tail <= ctas &&
         static_cast<int64_t>(tasks) * k_steps * ctas < (int64_t{1} << 31);  // the functions below in 32 bits
}
HK_MOE_HD int stream_k_begin(int cta, int tasks, int k_steps, int ctas) {
  return static_cast<int>(static_cast<unsigned>(cta * tasks * k_steps) / static_cast<unsigned>(ctas));
}
// the CTA whose range holds step `step` (0 <= step < tasks x k_steps)
HK_MOE_HD int stream_k_cta_of_step(int step, int tasks, int k_steps, int ctas) {
  return static_cast<int>(static_cast<unsigned>((step + 1) * ctas - 1) / static_cast<unsigned>(tasks * k_steps));
}
// the K steps [kb0, kb1) of `task` inside the range [begin, end) of a CTA that holds part of it
HK_MOE_HD void stream_k_task_steps(int task, int begin, int end, int k_steps, int& kb0, int& kb1) {
  const int t0 = task * k_steps;
  kb0 = begin > t0 ? begin - t0 : 0;
  kb1 = end - t0 < k_steps ? end - t0 : k_steps;
}
// how many CTAs share `task`, the first of them being `first_cta` (= stream_k_cta_of_step(task * k_steps))
HK_MOE_HD int stream_k_pieces(int task, int first_cta, int tasks, int k_steps, int ctas) {
  return stream_k_cta_of_step(task * k_steps + k_steps - 1, tasks, k_steps, ctas) - first_cta + 1;
}
// Workspace slots of the partials: CTA c parks its first task's at 2c and its last task's at 2c + 1. For the CTA
// that merges `task` (first piece at CTA `first_cta`, whose range begins at step `first_begin`): piece p > 0 is
// CTA first_cta + p's first task; piece 0 is first_cta's first task only if its range begins at the task.
HK_MOE_HD int stream_k_slot(int cta, bool cta_first_task) { return 2 * cta + (cta_first_task ? 0 : 1); }
HK_MOE_HD int stream_k_piece_slot(int task, int piece, int first_cta, int first_begin, int k_steps) {
  return stream_k_slot(first_cta + piece, piece > 0 || first_begin == task * k_steps);
}

// The routing index build: up to kIndexCtaRows routing entries (token, k) it is one CTA of the prep kernel (the
// count, the per-expert offsets and the placement in one block); above that, the entries are cut into chunks of
// kIndexCtaRows, one CTA each, which count their chunk in the prep kernel (per-chunk histograms in the
// workspace) and place it in a second kernel (moe_index_place). One CTA placing 32768 entries took most of the
// prep kernel's 43 us at hy3 TP8 4096 tokens (session 6: its scattered 4-byte stores come from one SM).
constexpr int kIndexCtaRows = 4096;
constexpr int kMaxIndexCtas = (kMaxTokens * kMaxTopK + kIndexCtaRows - 1) / kIndexCtaRows;
HK_MOE_HD int index_ctas(int64_t rows) {
  return rows <= kIndexCtaRows ? 1 : static_cast<int>((rows + kIndexCtaRows - 1) / kIndexCtaRows);
}
// Whether the op builds the index in chunks (index_ctas(rows) CTAs) rather than in one CTA: from
// kIndexChunkedMinLocalRows local entries expected under even routing (rows x local / global experts).
// The chunked build's count is a kernel of its own and the input quantisation runs beside the placement (extra
// CTAs of the placement kernel). Same-build A/B on an H200 (session 8, HOPPERKIT_MOE_INDEX), chunks against one
// CTA: hy3 / qwen3 TP8 2.4-3.5% faster at 4096-16384 tokens (32768+ local entries), 1.1-1.3% faster at
// 1024-2048 (8192-16384); DeepSeek TP8 (256 experts) -0.9..+0.7%; EP8 at 512-2048 tokens (<= 2048 local
// entries) within +-1.1%. (Session 7, placement after the whole prep grid: EP8 1.6-2.4% slower in chunks.)
constexpr int64_t kIndexChunkedMinLocalRows = 8192;
HK_MOE_HD bool index_chunked(int64_t rows, int num_local_experts, int num_global_experts) {
  return rows > kIndexCtaRows && rows * num_local_experts >= kIndexChunkedMinLocalRows * num_global_experts;
}

// Upper bound of the tiles of one routing: every expert's last tile may be partial.
HK_MOE_HD int64_t max_tiles(int64_t num_tokens, int top_k, int num_local_experts, int bm) {
  return (num_tokens * top_k + bm - 1) / bm + num_local_experts;
}

// The top-k reduce (kernel 4) gives each thread one 8-column vector of one token (tokens x hidden / 8 vectors,
// 256 threads per CTA). Its looping kernel (3 CTAs per SM at top_k <= 8) strides over the vectors with its
// resident grid; the one-round kernel (4 per SM, no loop) runs where that grid would leave vectors for a second
// round and its own grid holds them all. Measured on an H200 (session 67 call 1, cross-build, the one-round kernel
// wherever it fit): 0.982-0.989x the call's time at hy3 / qwen3 TP8 and EP8 256 tokens (1.29 vectors per loop
// thread) and 0.994-0.998x at DeepSeek 128 tokens (1.13); where the loop ran one round, 0.982-1.010x (hy3 / qwen3
// TP8 128 tokens 1.009-1.010x in both rounds), so those keep the loop. Arguments: CTAs the call needs, and the
// resident CTAs of each kernel on the device.
HK_MOE_HD bool reduce_one_round(int64_t ctas, int64_t loop_resident, int64_t one_round_resident) {
  return ctas > loop_resident && ctas <= one_round_resident;
}

// The per-tensor 128 x 256 down's K-tail kernel (kKTail in grouped_gemm.cuh): it runs exactly two K stages per item
// and issues half of the last one's k32 steps, so it fits a down K (= intermediate) of one and a half stages only:
// 192, the TP8 shards of Hy3 and Qwen3-235B. Measured on an H200 (session 68 call 2): 0.9948x the call's time over
// hy3 / qwen3 TP8 per-tensor 1024-8192 tokens, hy3 4096 0.976x.
HK_MOE_HD bool down_k_tail_fits(int64_t k) { return k == kTileK + kTileK / 2; }

}  // namespace moe
}  // namespace hopperkit
