// CPU tests of the fused MoE's host side: tile heuristics, the routing index twin (fuzzed against a direct
// count), and parameter validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <vector>

#include "hopperkit/error.h"
#include "hopperkit/moe/heuristics.h"
#include "hopperkit/moe/moe.h"
#include "hopperkit/moe/routing.h"
#include "moe/workspace_layout.h"

using namespace hopperkit;
using namespace hopperkit::moe;

TEST(MoeHeuristics, BlockMFollowsRowsPerExpert) {
  // gate-up tasks (local experts x I / 128) against 3 per SM, down tasks (local experts x H / 128) against 8
  // (132 SMs: 396 and 1056)
  EXPECT_TRUE(few_gate_up_tasks(16, 1536, 132));    // Qwen3-235B EP8: 192
  EXPECT_TRUE(few_gate_up_tasks(24, 1536, 132));    // Hy3 EP8: 288
  EXPECT_TRUE(few_gate_up_tasks(192, 192, 132));    // Hy3 TP8: 384 (ceil(192 / 128) = 2)
  EXPECT_FALSE(few_gate_up_tasks(32, 2048, 132));   // DeepSeek-V3 EP8: 512
  EXPECT_FALSE(few_gate_up_tasks(256, 256, 132));   // DeepSeek-V3 TP8: 512
  EXPECT_TRUE(few_gate_up_tasks(33, 1536, 132));    // 396: the limit
  EXPECT_FALSE(few_gate_up_tasks(34, 1536, 132));
  EXPECT_FALSE(few_gate_up_tasks(34, 1472, 132));   // I not a multiple of 128: 34 x 12 = 408 (ceil)
  EXPECT_FALSE(few_gate_up_tasks(16, 1536, 60));    // fewer SMs: 192 > 180
  EXPECT_TRUE(few_down_tasks(16, 4096, 132));       // Qwen3-235B EP8: 512
  EXPECT_TRUE(few_down_tasks(24, 4096, 132));       // Hy3 EP8: 768
  EXPECT_FALSE(few_down_tasks(128, 4096, 132));     // Qwen3-235B TP8: 4096
  EXPECT_FALSE(few_down_tasks(32, 7168, 132));      // DeepSeek-V3 EP8: 1792
  EXPECT_TRUE(few_down_tasks(33, 4096, 132));       // 1056: the limit
  EXPECT_FALSE(few_down_tasks(33, 4097, 132));      // ceil: 33 x 33
  // (T, top_k, global experts, block-scaled, few gate-up tasks, few down tasks)
  EXPECT_EQ(block_m(4, 8, 192, false, true, false), 16);     // decode: a fraction of a row per expert
  EXPECT_EQ(block_m(256, 8, 192, false, true, false), 16);   // 11 rows per expert (Hy3 TP8, 256 tokens)
  EXPECT_EQ(block_m(240, 8, 128, true, true, true), 16);     // 15 with few gate-up tasks
  EXPECT_EQ(block_m(241, 8, 128, true, true, true), 32);     // just above
  EXPECT_EQ(block_m(176, 8, 128, false, false, false), 16);  // 11 with many gate-up tasks
  EXPECT_EQ(block_m(177, 8, 128, false, false, false), 32);  // 12: DeepSeek-V3 takes 32-row tiles from here
  EXPECT_EQ(block_m(177, 8, 128, true, false, false), 32);   // ... both scalings
  EXPECT_EQ(block_m(177, 8, 128, false, true, false), 16);   // few gate-up tasks: still 16
  EXPECT_EQ(block_m(256, 8, 128, false, true, false), 32);   // 16 (Qwen3-235B TP8, 256 tokens)
  EXPECT_EQ(block_m(512, 8, 192, false, true, false), 32);   // 22 (Hy3 TP8, 512 tokens)
  // per-tensor 32 / 48
  EXPECT_EQ(block_m(352, 8, 128, false, false, false), 32);  // 22 with many gate-up tasks
  EXPECT_EQ(block_m(353, 8, 128, false, false, false), 48);
  EXPECT_EQ(block_m(448, 8, 128, false, true, false), 32);   // 28 with few gate-up but many down tasks (TP8)
  EXPECT_EQ(block_m(449, 8, 128, false, true, false), 48);
  EXPECT_EQ(block_m(512, 8, 128, false, true, false), 48);   // 32 (Qwen3-235B TP8, 512 tokens)
  EXPECT_EQ(block_m(512, 8, 128, false, true, true), 32);    // 32 with few of both (Qwen3-235B EP8, 512 tokens)
  EXPECT_EQ(block_m(513, 8, 128, false, true, true), 48);
  EXPECT_EQ(block_m(512, 8, 128, false, false, true), 48);   // many gate-up tasks: 48 whatever the down's
  // block-wise 32 / 64 (no 48-row block-wise tiles)
  EXPECT_EQ(block_m(384, 8, 128, true, false, false), 32);   // 24 with many gate-up tasks
  EXPECT_EQ(block_m(385, 8, 128, true, false, false), 64);
  EXPECT_EQ(block_m(385, 8, 128, true, true, false), 32);    // few: up to 32, whatever the down's tasks
  EXPECT_EQ(block_m(512, 8, 128, true, true, true), 32);     // 32 (Qwen3-235B EP8, 512 tokens)
  EXPECT_EQ(block_m(513, 8, 128, true, true, true), 64);     // just above 32 rows per expert
  // 48 / 64 (per-tensor)
  EXPECT_EQ(block_m(688, 8, 128, false, true, true), 48);    // 43
  EXPECT_EQ(block_m(689, 8, 128, false, true, true), 64);    // just above 43 rows per expert
  EXPECT_EQ(block_m(689, 8, 128, false, false, false), 64);
  EXPECT_EQ(block_m(768, 8, 128, false, true, false), 64);   // 48 (Qwen3-235B TP8, 768 tokens: 64-row tiles 0.83x)
  EXPECT_EQ(block_m(1024, 8, 192, false, true, false), 48);  // 43 (Hy3 1024 tokens)
  EXPECT_EQ(block_m(1024, 8, 128, false, true, true), 64);
  EXPECT_EQ(block_m(16384, 8, 256, true, false, false), 64);
  for (int c = 0; c < 8; ++c) {  // per-tensor / block-wise, few or many gate-up tasks, few or many down tasks
    const bool block = c & 1, few_gate_up = c & 2, few_down = c & 4;
    for (int64_t t = 1; t <= 4096; ++t) {  // 16, 32, 48 (per-tensor) or 64, never lower for more rows
      const int bm = block_m(t, 8, 128, block, few_gate_up, few_down);
      EXPECT_TRUE(bm == 16 || bm == 32 || (bm == 48 && !block) || bm == 64) << t;
      EXPECT_LE(block_m(t - 1 > 0 ? t - 1 : 1, 8, 128, block, few_gate_up, few_down), bm) << t;
      if (few_gate_up) {  // many gate-up tasks never get a smaller tile than few (at the same down count)
        EXPECT_GE(block_m(t, 8, 128, block, false, few_down), bm) << t;
      }
      if (!few_down) {  // nor many down tasks than few
        EXPECT_GE(bm, block_m(t, 8, 128, block, few_gate_up, true)) << t;
      }
    }
  }
  EXPECT_EQ(gate_up_tile_n(false, 16, 2048, 8), 128);   // decode tiles: 128 weight rows (2 CTAs per SM)
  EXPECT_EQ(gate_up_tile_n(false, 64, 2048, 17), 256);  // 64-row tiles: 128 intermediate columns per tile
  EXPECT_EQ(gate_up_tile_n(false, 64, 192, 64), 256);   // TP8 shards (I = 192): the last block's second half unused
  EXPECT_EQ(gate_up_tile_n(false, 64, 192, 63), 128);   // ... unless one tile per expert (weight-streaming)
  EXPECT_EQ(gate_up_tile_n(false, 64, 320, 43), 128);
  EXPECT_EQ(gate_up_tile_n(true, 16, 256, 4), 256);     // one tile holds a whole 128-column activation group
  EXPECT_EQ(gate_up_tile_n(true, 64, 1536, 20), 256);
  EXPECT_EQ(down_tile_n(false, 16, 4096, 192), 256);    // 16-row per-tensor tiles at short K: 256 (session 27)
  EXPECT_EQ(down_tile_n(false, 16, 7168, 256), 256);
  EXPECT_EQ(down_tile_n(false, 16, 4096, 320), 128);    // ... not at longer K (EP8: I = 1536 measured slower)
  EXPECT_EQ(down_tile_n(false, 16, 4096, 1536), 128);
  EXPECT_EQ(down_tile_n(true, 16, 4096, 192), 128);     // ... nor block-wise: one weight scale per 128 rows
  EXPECT_EQ(down_tile_n(false, 16, 192, 192), 128);     // ... nor past H
  EXPECT_EQ(down_tile_n(false, 32, 4096, 192), 256);    // 32-row: the same rule (one stage partial, kSerialSwap)
  EXPECT_EQ(down_tile_n(true, 32, 4096, 192), 128);
  EXPECT_EQ(down_tile_n(false, 48, 4096, 192), 128);
  EXPECT_EQ(down_tile_n(false, 64, 4096, 1536), 256);
  EXPECT_EQ(down_tile_n(false, 64, 4096, 192), 128);    // 64-row tiles, K = 192 (TP8): 128 rows measured faster
  EXPECT_EQ(down_tile_n(false, 128, 4096, 192), 256);   // 128-row tiles, K = 192: 256 (session 20 run 5)
  EXPECT_EQ(down_tile_n(false, 128, 192, 192), 128);    // ... but not past H
  EXPECT_EQ(down_tile_n(false, 64, 320, 256), 128);     // hidden 320: 256-column tiles would leave 3/8 empty
  EXPECT_EQ(down_tile_n(true, 64, 7168, 2048), 256);    // block-wise: one weight block per warpgroup
  EXPECT_EQ(down_tile_n(true, 128, 7168, 2048), 256);
  EXPECT_EQ(down_tile_n(true, 16, 7168, 2048), 128);
  // 128-row gate-up tiles: prefill from kWideGateUpMinRows rows per expert, both scalings (hy3 at 4096 tokens:
  // 171 rows per expert; at 2048, 86; at 1024, 43)
  EXPECT_EQ(gate_up_block_m(false, 64, mean_rows_per_expert(4096, 8, 192)), 128);
  EXPECT_EQ(gate_up_block_m(true, 64, mean_rows_per_expert(2048, 8, 192)), 128);
  EXPECT_EQ(gate_up_block_m(false, 64, mean_rows_per_expert(1024, 8, 192)), 64);
  EXPECT_EQ(gate_up_block_m(false, 64, kWideGateUpMinRows), 128);
  EXPECT_EQ(gate_up_block_m(true, 64, kWideGateUpMinRows - 1), 64);
  EXPECT_EQ(down_block_m(64, 128, false, 192), 128);  // the down GEMM follows the gate-up's 128-row tiles
  EXPECT_EQ(down_block_m(64, 128, true, 1536), 128);
  EXPECT_EQ(down_block_m(64, 128, true, 256), 64);    // block-wise over a short K (DeepSeek-V3 TP8) keeps 64
  EXPECT_EQ(down_block_m(64, 128, true, kWideDownBlockMinK), 128);
  EXPECT_EQ(down_block_m(64, 64, false, 2048), 64);
  EXPECT_EQ(down_block_m(16, 16, true, 2048), 16);
  EXPECT_EQ(wide_gate_up_tile_n(false, 192), 192);  // TP8 shards: two 96-column blocks instead of three of 64
  EXPECT_EQ(wide_gate_up_tile_n(false, 1536), 128);  // EP8 shapes: measured mixed
  EXPECT_EQ(wide_gate_up_tile_n(false, 576), 192);
  EXPECT_EQ(wide_gate_up_tile_n(false, 96), 128);  // 96 % 192 != 0
  EXPECT_EQ(wide_gate_up_tile_n(false, 2048), 128);  // 64-column blocks
  EXPECT_EQ(wide_gate_up_tile_n(false, 320), 128);
  EXPECT_EQ(wide_gate_up_tile_n(true, 256), 256);  // block-wise: a whole 128-column activation group per tile
  for (int i = 64; i <= 4096; i += 64) {  // whole column blocks: (tile_n / 2) divides I
    ASSERT_EQ(i % (wide_gate_up_tile_n(false, i) / 2), 0) << i;
  }
  // gate-up pairs (clusters of two sharing weight stages): per-tensor 128 x 192 tiles from kGateUpPairMinRows
  // rows per expert (hy3 TP8 at 4096 tokens: 171; at 2048, 86)
  EXPECT_EQ(gate_up_pairs(false, 128, 192, mean_rows_per_expert(4096, 8, 192)), 1);
  EXPECT_EQ(gate_up_pairs(false, 128, 192, mean_rows_per_expert(2048, 8, 192)), 0);
  EXPECT_EQ(gate_up_pairs(false, 128, 192, kGateUpPairMinRows), 1);
  EXPECT_EQ(gate_up_pairs(false, 128, 192, kGateUpPairMinRows - 1), 0);
  EXPECT_EQ(gate_up_pairs(false, 128, 128, 4096), 0);  // 128 x 128 tiles (DeepSeek-V3 TP8, EP8): measured slower
  EXPECT_EQ(gate_up_pairs(true, 128, 256, 4096), 0);   // block-wise: single CTAs
  EXPECT_EQ(gate_up_pairs(false, 64, 256, 4096), 0);   // 64-row tiles: single CTAs
  EXPECT_EQ(gate_up_block_m(false, 16, 1000), 16);  // (decode tiles never reach it)
  EXPECT_EQ(mean_rows_per_expert(3, 8, 192), 1);
  EXPECT_EQ(max_tiles(100, 8, 24, 16), 50 + 24);
}

TEST(MoeHeuristics, GateUpEvenRoundsWithFewDownTasks) {
  // (block-scaled, gate-up tile height, few down tasks): per-tensor swapped tiles with few down tasks only
  const int sms = 132;
  EXPECT_EQ(gate_up_even_rounds(false, 16, few_down_tasks(16, 4096, sms)), 1);   // Qwen3-235B EP8
  EXPECT_EQ(gate_up_even_rounds(false, 32, few_down_tasks(24, 4096, sms)), 1);   // Hy3 EP8
  EXPECT_EQ(gate_up_even_rounds(false, 48, true), 1);
  EXPECT_EQ(gate_up_even_rounds(false, 32, few_down_tasks(128, 4096, sms)), 0);  // Qwen3-235B TP8
  EXPECT_EQ(gate_up_even_rounds(false, 16, few_down_tasks(32, 7168, sms)), 0);   // DeepSeek-V3 EP8
  EXPECT_EQ(gate_up_even_rounds(true, 16, true), 0);                             // block-wise: unchanged
  EXPECT_EQ(gate_up_even_rounds(false, 64, true), 0);                            // not a swapped tile
  EXPECT_EQ(gate_up_even_rounds(false, 128, true), 0);
}

TEST(MoeHeuristics, ReduceOneRoundWhereTheLoopNeedsASecondRound) {
  // (CTAs of 256 vectors the call needs, resident CTAs of the loop kernel and of the one-round kernel): an H200's
  // 132 SMs at 3 and 4 CTAs per SM; H = 4096 is 2 CTAs per token, DeepSeek-V3's 7168 3.5
  const int64_t loop = 3 * 132, one = 4 * 132;
  EXPECT_FALSE(reduce_one_round(1, loop, one));
  EXPECT_FALSE(reduce_one_round(2 * 128, loop, one));  // 128 tokens: one round of the loop already
  EXPECT_FALSE(reduce_one_round(loop, loop, one));
  EXPECT_TRUE(reduce_one_round(loop + 1, loop, one));
  EXPECT_TRUE(reduce_one_round(2 * 256, loop, one));  // 256 tokens: 1.29 vectors per loop thread
  EXPECT_TRUE(reduce_one_round(448, loop, one));      // DeepSeek-V3 at 128 tokens
  EXPECT_TRUE(reduce_one_round(one, loop, one));      // 264 tokens (test_reduce_one_round_boundary)
  EXPECT_FALSE(reduce_one_round(one + 1, loop, one));
  EXPECT_FALSE(reduce_one_round(2 * 265, loop, one));
  EXPECT_FALSE(reduce_one_round(2 * 16384, loop, one));
  EXPECT_FALSE(reduce_one_round(100, 200, 150));  // a device where the one-round grid is the smaller
}

TEST(MoeHeuristics, DownKTailFitsOneAndAHalfStages) {
  EXPECT_TRUE(down_k_tail_fits(192));   // Hy3 / Qwen3-235B TP8
  EXPECT_FALSE(down_k_tail_fits(128));  // one stage
  EXPECT_FALSE(down_k_tail_fits(256));  // DeepSeek-V3 TP8: two whole stages
  EXPECT_FALSE(down_k_tail_fits(320));  // three stages, the last a half
  EXPECT_FALSE(down_k_tail_fits(64));
}

TEST(MoeHeuristics, GemmIndexOnSwappedTilesOfOneIndexCta) {
  // where it can run: (block_m, gate-up tile height, index CTAs, routing entries, local experts)
  EXPECT_EQ(gemm_index_can(16, 16, 1, 4 * 8, 192), 1);                         // Hy3 TP8 at 4 tokens
  EXPECT_EQ(gemm_index_can(48, 48, 1, 256 * 8, 128), 1);                       // Qwen3 TP8 at 256 tokens
  EXPECT_EQ(gemm_index_can(32, 32, 1, kGemmIndexMaxRows, kGemmIndexMaxExperts), 1);  // both limits
  EXPECT_EQ(gemm_index_can(32, 32, 1, kGemmIndexMaxRows + 1, 16), 0);          // past the entries
  EXPECT_EQ(gemm_index_can(16, 16, 1, 64, kGemmIndexMaxExperts + 1), 0);       // past the tables' experts
  EXPECT_EQ(gemm_index_can(64, 64, 1, 2048, 16), 0);                           // 64-row tiles: kernel 1 builds it
  EXPECT_EQ(gemm_index_can(64, 128, 1, 4096, 16), 0);                          // the wide gate-up
  EXPECT_EQ(gemm_index_can(16, 16, 2, 4096, 16), 0);                           // a chunked index
  // where it is taken: per-tensor up to kGemmIndexRuleRows entries with an expert map (64: 8 tokens at top-8),
  // kGemmIndexRuleRowsNoMap without one (512: 64 tokens at top-8)
  EXPECT_EQ(kGemmIndexRuleRows, 64);
  EXPECT_EQ(kGemmIndexRuleRowsNoMap, 512);
  EXPECT_EQ(gemm_index(false, 16, 16, 1, 4 * 8, 128, false), 1);               // Qwen3 TP8 at 4 tokens
  EXPECT_EQ(gemm_index(false, 16, 16, 1, 4 * 8, 16, true), 1);                 // Qwen3 EP8 at 4 tokens
  EXPECT_EQ(gemm_index(false, 16, 16, 1, kGemmIndexRuleRows, 16, true), 1);
  EXPECT_EQ(gemm_index(false, 16, 16, 1, kGemmIndexRuleRows + 1, 16, true), 0);
  EXPECT_EQ(gemm_index(false, 16, 16, 1, 16 * 8, 16, true), 0);                // Qwen3 EP8 at 16 tokens
  EXPECT_EQ(gemm_index(false, 16, 16, 1, 16 * 8, 128, false), 1);              // Qwen3 TP8 at 16 tokens
  EXPECT_EQ(gemm_index(false, 32, 32, 1, kGemmIndexRuleRowsNoMap, 128, false), 1);
  EXPECT_EQ(gemm_index(false, 32, 32, 1, kGemmIndexRuleRowsNoMap + 1, 128, false), 0);
  EXPECT_EQ(gemm_index(false, 48, 48, 1, 256 * 8, 128, false), 0);             // Qwen3 TP8 at 256 tokens
  EXPECT_EQ(gemm_index(true, 16, 16, 1, 4 * 8, 256, false), 0);                // block-wise: kernel 1
  EXPECT_EQ(gemm_index(false, 64, 64, 1, 64, 16, false), 0);                   // only where it can run
}

TEST(MoeHeuristics, IndexCtas) {
  EXPECT_EQ(index_ctas(1), 1);
  EXPECT_EQ(index_ctas(kIndexCtaRows), 1);      // one CTA builds the whole index
  EXPECT_EQ(index_ctas(kIndexCtaRows + 1), 2);  // a second chunk: count here, place in moe_index_place
  EXPECT_EQ(index_ctas(4096 * 8), 8);           // hy3 TP8 at 4096 tokens
  EXPECT_TRUE(index_chunked(4096 * 8, 192, 192));     // hy3 TP8 at 4096 tokens: 32768 local entries
  EXPECT_TRUE(index_chunked(1024 * 8, 192, 192));     // 1024 tokens: 8192 local entries
  EXPECT_FALSE(index_chunked(1023 * 8, 192, 192));    // one CTA below 8192
  EXPECT_FALSE(index_chunked(2048 * 8, 16, 128));     // qwen3 EP8 at 2048 tokens: ~2048 local entries
  EXPECT_TRUE(index_chunked(16384 * 8, 32, 256));     // deepseek EP8 at 16384 tokens: 16384 local entries
  EXPECT_FALSE(index_chunked(kIndexCtaRows, 1, 1));   // one chunk is never chunked
  EXPECT_EQ(index_ctas(static_cast<int64_t>(kMaxTokens) * kMaxTopK), kMaxIndexCtas);
}

TEST(MoeHeuristics, StreamKAppliesToShortTailRounds) {
  EXPECT_TRUE(stream_k_applies(144, 32, 132));    // qwen3 EP8 block-wise, 16 tokens: a last round of 12 CTAs
  EXPECT_TRUE(stream_k_applies(144, 56, 132));    // deepseek EP8 block-wise, 16 tokens
  EXPECT_TRUE(stream_k_applies(276, 32, 132));    // hy3 EP8 block-wise, 128 tokens
  EXPECT_FALSE(stream_k_applies(252, 32, 132));   // a last round of 120 CTAs: whole tasks keep them busy
  EXPECT_FALSE(stream_k_applies(264, 32, 132));   // whole rounds
  EXPECT_FALSE(stream_k_applies(100, 32, 132));   // one round: the split rule's case
  EXPECT_FALSE(stream_k_applies(kSplitSlices + 1, 32, 132));  // the split counters hold kSplitSlices tasks
  EXPECT_FALSE(stream_k_applies(1000, 32, kSplitSlices / 2 + 1));  // 2 partial slots per CTA
  EXPECT_FALSE(stream_k_applies(1000, 4096, 500));  // tasks x steps x CTAs past 32 bits
}

// Every (task, K step) in exactly one CTA's range; each task's pieces in K order at distinct slots, the merging
// CTA's slot for piece p being where that piece parked it.
TEST(MoeHeuristics, StreamKRangesCoverEveryStepOnce) {
  for (int ctas : {1, 2, 3, 7, 132, 264}) {
    for (int nk : {1, 2, 3, 8, 32, 56}) {
      for (int tasks = ctas + 1; tasks <= std::min(3 * ctas + 4, kSplitSlices); ++tasks) {
        const int steps = tasks * nk;
        std::vector<int> cover(steps, 0), parked(2 * ctas, -1);
        for (int c = 0; c < ctas; ++c) {
          const int b = stream_k_begin(c, tasks, nk, ctas), e = stream_k_begin(c + 1, tasks, nk, ctas);
          ASSERT_LT(b, e) << ctas << " " << nk << " " << tasks;
          for (int t = b / nk; t <= (e - 1) / nk; ++t) {
            int k0 = 0, k1 = 0;
            stream_k_task_steps(t, b, e, nk, k0, k1);
            for (int k = k0; k < k1; ++k) ++cover[t * nk + k];
            const int first = stream_k_cta_of_step(t * nk, tasks, nk, ctas);
            ASSERT_LE(first, c);
            if (stream_k_pieces(t, first, tasks, nk, ctas) > 1) {
              const int slot = stream_k_slot(c, t == b / nk);  // as the parking CTA computes it
              ASSERT_TRUE(slot >= 0 && slot < 2 * ctas && parked[slot] < 0) << slot;
              parked[slot] = t * nk + k0;  // the piece's first step
            }
          }
        }
        for (int st = 0; st < steps; ++st) ASSERT_EQ(cover[st], 1) << "step " << st;
        for (int t = 0; t < tasks; ++t) {
          const int n = stream_k_pieces(t, stream_k_cta_of_step(t * nk, tasks, nk, ctas), tasks, nk, ctas);
          ASSERT_TRUE(n == 1 || n == 2) << "task " << t;  // every range holds at least nk steps
          int next = t * nk;  // pieces in K order, contiguous
          for (int p = 0; n > 1 && p < n; ++p) {
            const int first = stream_k_cta_of_step(t * nk, tasks, nk, ctas);  // as the merging CTA computes it
            const int at = parked[stream_k_piece_slot(t, p, first, stream_k_begin(first, tasks, nk, ctas), nk)];
            ASSERT_EQ(at, next) << "task " << t << " piece " << p;
            const int c = first + p;
            next = std::min(stream_k_begin(c + 1, tasks, nk, ctas), (t + 1) * nk);
          }
        }
      }
    }
  }
}

TEST(MoeHeuristics, SplitKSlices) {
  EXPECT_EQ(split_k_slices(96, 264, 32), 2);    // hy3 TP8 decode gate-up: 96 tasks, 264 resident CTAs, one wave
  EXPECT_EQ(split_k_slices(96, 264, 32, 2), 5); // two items per CTA
  EXPECT_EQ(split_k_slices(600, 264, 32), 1);   // enough tasks: no split
  EXPECT_EQ(split_k_slices(265, 264, 32), 2);   // just past one wave: two slices
  EXPECT_EQ(split_k_slices(297, 264, 32), 2);   // ... up to ctas + ctas / 8
  EXPECT_EQ(split_k_slices(298, 264, 32), 1);
  EXPECT_EQ(split_k_slices(264, 264, 32), 1);   // exactly one wave
  EXPECT_EQ(split_k_slices(280, 264, 1), 1);    // K of one step: nothing to split
  EXPECT_EQ(split_k_slices(280, 264, kSplitTailMinSteps - 1), 1);  // short K (the down at I = 1536): one slice
  EXPECT_EQ(split_k_slices(280, 264, kSplitTailMinSteps), 2);
  EXPECT_EQ(split_k_slices(530, 264, 32, 2), 1);  // two waves asked and more: no split
  EXPECT_EQ(split_k_slices(10, 264, 2), 2);     // never more slices than 128-deep K steps
  EXPECT_EQ(split_k_slices(10, 10000, 64), kMaxSplit);
  EXPECT_EQ(split_k_slices(96, 264, 32, 1), 2);          // one wave: at most one item per CTA (192 items)
  EXPECT_EQ(split_k_slices(96, 264, 32, 8), kMaxSplit);  // the shortest slices
  EXPECT_EQ(split_k_slices(200, 264, 32, 8), 5);         // the workspace holds 1024 partial tiles
  EXPECT_EQ(split_k_slices(0, 264, 32), 1);
  for (int tasks = 1; tasks < 3000; tasks += 7) {  // the partial tiles always fit the workspace
    const int s = split_k_slices(tasks, 1000, 64);
    EXPECT_TRUE(s == 1 || tasks * s <= kSplitSlices) << tasks;
  }
}

namespace {
std::vector<int32_t> random_ids(std::mt19937& rng, int T, int K, int E, int kind) {
  std::vector<int32_t> ids(static_cast<size_t>(T) * K);
  for (int t = 0; t < T; ++t) {
    for (int k = 0; k < K; ++k) {
      int e;
      switch (kind) {
        case 0: e = static_cast<int>(rng() % E); break;                     // uniform
        case 1: e = (rng() % 2) ? 0 : static_cast<int>(rng() % E); break;    // one hot expert
        case 2: e = static_cast<int>(rng() % std::max(1, E / 16)); break;   // many empty experts
        default: e = (rng() % 13 == 0) ? -1 - static_cast<int>(rng() % 3) : static_cast<int>(rng() % (E + 4));
      }
      ids[static_cast<size_t>(t) * K + k] = e;
    }
  }
  return ids;
}
}  // namespace

TEST(MoeRoutingTwin, FuzzAgainstDirectCounts) {
  std::mt19937 rng(99);
  for (int iter = 0; iter < 300; ++iter) {
    const int E = 1 + static_cast<int>(rng() % 512);
    const int K = 1 + static_cast<int>(rng() % std::min(16, E));
    const int T = iter % 10 == 0 ? 1 : static_cast<int>(rng() % 3000);
    const int kind = static_cast<int>(rng() % 4);
    const bool ep = rng() % 2;
    std::vector<int32_t> map(E);
    int local = E;
    if (ep) {  // any subset local, not only a range
      local = 0;
      for (int g = 0; g < E; ++g) map[g] = (rng() % 2) ? local++ : -1;
      if (local == 0) map[0] = local++;
    }
    const int bm = (rng() % 5 == 4) ? 48 : 16 << (rng() % 4);  // every height the index builds
    const std::vector<int32_t> ids = random_ids(rng, T, K, E, kind);
    const MoeRouting r = moe_routing_cpu(ids.data(), T, K, ep ? map.data() : nullptr, E, local, bm);
    // direct count
    std::vector<std::vector<int32_t>> rows(local);
    int dropped = 0;
    for (int i = 0; i < T * K; ++i) {
      const int g = ids[i];
      const int e = (g >= 0 && g < E) ? (ep ? map[g] : g) : -1;
      if (e < 0) {
        ++dropped;
        continue;
      }
      rows[e].push_back(i);
    }
    ASSERT_EQ(r.dropped_rows, dropped);
    ASSERT_EQ(r.expert_offset.front(), 0);
    for (int e = 0; e < local; ++e) {
      ASSERT_EQ(r.expert_count[e], static_cast<int>(rows[e].size()));
      ASSERT_EQ(r.expert_offset[e + 1] - r.expert_offset[e], r.expert_count[e]);
      ASSERT_TRUE(std::equal(rows[e].begin(), rows[e].end(), r.sorted_rows.begin() + r.expert_offset[e]))
          << "rows of an expert in row order";
    }
    // tiles cover every expert's range exactly once, block_m rows at most, in order
    int64_t covered = 0;
    int prev_end = 0;
    for (const MoeTile& t : r.tiles) {
      ASSERT_GE(t.rows, 1);
      ASSERT_LE(t.rows, bm);
      ASSERT_EQ(t.row_begin, prev_end);
      ASSERT_LE(t.row_begin + t.rows, r.expert_offset[t.expert + 1]);
      ASSERT_GE(t.row_begin, r.expert_offset[t.expert]);
      prev_end = t.row_begin + t.rows;
      covered += t.rows;
    }
    ASSERT_EQ(covered, r.expert_offset.back());
    ASSERT_LE(static_cast<int64_t>(r.tiles.size()), max_tiles(T, K, local, bm));
  }
}

TEST(MoeRoutingTwin, AllTokensToOneExpertAndOneToken) {
  std::vector<int32_t> ids(64 * 8, 5);
  const MoeRouting r = moe_routing_cpu(ids.data(), 64, 8, nullptr, 192, 192, 128);
  EXPECT_EQ(r.expert_count[5], 512);
  EXPECT_EQ(r.tiles.size(), 4u);
  const int32_t one[2] = {3, 190};
  const MoeRouting s = moe_routing_cpu(one, 1, 2, nullptr, 192, 192, 16);
  EXPECT_EQ(s.tiles.size(), 2u);
  EXPECT_THROW(moe_routing_cpu(one, 1, 2, nullptr, 192, 96, 16), Error);  // EP without a map
  EXPECT_THROW(moe_routing_cpu(one, 1, 17, nullptr, 192, 192, 16), Error);
  EXPECT_THROW(moe_routing_cpu(one, 1, 2, nullptr, 192, 192, 40), Error);  // not a tile height
}

namespace {
template <typename T>
T* fake(uintptr_t a) {
  return reinterpret_cast<T*>(a);
}
MoeParams valid_moe() {
  MoeParams p;
  p.hidden = fake<void>(0x1000);
  p.hidden_stride = 4096;
  p.topk_ids = fake<int32_t>(0x2000);
  p.topk_weights = fake<float>(0x3000);
  p.w13 = fake<void>(0x4000);
  p.w2 = fake<void>(0x5000);
  p.w13_scale = fake<float>(0x6000);
  p.w2_scale = fake<float>(0x7000);
  p.a13_scale = fake<float>(0x8000);
  p.a2_scale = fake<float>(0x9000);
  p.out = fake<void>(0xa000);
  p.out_stride = 4096;
  p.num_tokens = 16;
  p.hidden_size = 4096;
  p.intermediate = 192;  // Hy3 at TP8: fine per-tensor, rejected block-wise
  p.num_local_experts = 192;
  p.num_global_experts = 192;
  p.top_k = 8;
  return p;
}
}  // namespace

TEST(MoeValidation, ShapesAndSchemes) {
  EXPECT_NO_THROW(validate_moe(valid_moe()));
  const struct {
    const char* what;
    std::function<void(MoeParams&)> mutate;
    ErrorKind kind;
    const char* arg;
  } cases[] = {
      {"block-wise cut 128-block", [](auto& p) { p.scaling = MoeScaling::kBlock128; p.a13_scale = p.a2_scale = nullptr; },
       ErrorKind::kUnsupported, "intermediate"},
      {"intermediate 96", [](auto& p) { p.intermediate = 96; }, ErrorKind::kUnsupported, "intermediate"},
      {"hidden 4000", [](auto& p) { p.hidden_size = 4000; }, ErrorKind::kUnsupported, "hidden"},
      {"top_k 17", [](auto& p) { p.top_k = 17; }, ErrorKind::kValue, "topk_ids"},
      {"too many tokens", [](auto& p) { p.num_tokens = 16385; }, ErrorKind::kValue, "num_tokens"},
      {"EP without map", [](auto& p) { p.num_local_experts = 24; }, ErrorKind::kValue, "expert_map"},
      {"513 experts", [](auto& p) { p.num_global_experts = p.num_local_experts = 513; }, ErrorKind::kValue, "expert_map"},
      {"no activation scales", [](auto& p) { p.a2_scale = nullptr; }, ErrorKind::kValue, "a13_scale / a2_scale"},
      {"fp8 input without scale", [](auto& p) { p.hidden_dtype = DType::kFP8E4M3; p.hidden_stride = 4096; },
       ErrorKind::kValue, "hidden_scale"},
      {"f32 input", [](auto& p) { p.hidden_dtype = DType::kF32; }, ErrorKind::kDtype, "hidden"},
      {"misaligned out", [](auto& p) { p.out = fake<void>(0xa008); }, ErrorKind::kAlignment, "out"},
      {"short rows", [](auto& p) { p.hidden_stride = 2048; }, ErrorKind::kStride, "hidden"},
      {"shared output, negative stride", [](auto& p) { p.shared_output = fake<void>(0xb000); p.shared_stride = -8; },
       ErrorKind::kStride, "shared_output"},
      {"shared output, short rows", [](auto& p) { p.shared_output = fake<void>(0xb000); p.shared_stride = 2048; },
       ErrorKind::kStride, "shared_output"},
  };
  for (const auto& c : cases) {
    MoeParams p = valid_moe();
    c.mutate(p);
    try {
      validate_moe(p);
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), c.kind) << c.what << ": " << e.what();
      EXPECT_EQ(e.arg(), c.arg) << c.what << ": " << e.what();
    }
  }
  MoeParams so = valid_moe();  // a shared-expert output with full rows, or one token's row at any stride
  so.shared_output = fake<void>(0xb000);
  so.shared_stride = 4096;
  EXPECT_NO_THROW(validate_moe(so));
  so.num_tokens = 1;
  so.shared_stride = 0;
  EXPECT_NO_THROW(validate_moe(so));
  MoeParams b = valid_moe();  // block-wise with 128-multiples is fine (DeepSeek-V3 at TP8: 2048 / 8 = 256)
  b.scaling = MoeScaling::kBlock128;
  b.a13_scale = b.a2_scale = nullptr;
  b.intermediate = 256;
  b.hidden_size = b.hidden_stride = b.out_stride = 7168;
  EXPECT_NO_THROW(validate_moe(b));
}

TEST(MoeWorkspace, LayoutAlignedOrderedAndMonotonic) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 200; ++iter) {
    const int T = 1 + static_cast<int>(rng() % kMaxTokens);
    const int K = 1 + static_cast<int>(rng() % kMaxTopK);
    const int H = 64 * (1 + static_cast<int>(rng() % 112));
    const int I = 64 * (1 + static_cast<int>(rng() % 32));
    const int E = 1 + static_cast<int>(rng() % kMaxExperts);
    const MoeWorkspaceLayout l = moe_workspace_layout(T, K, H, I, E);
    const size_t rows = static_cast<size_t>(T) * K;
    // every region 256-byte aligned, in order, each at least as large as its buffer
    const size_t at[] = {l.counters, l.expert_offset, l.tiles, l.tiles_wide, l.sorted_rows, l.xq, l.xq_scale, l.act,
                         l.act_scale, l.y, l.split_counters, l.split_partials, l.index_hist, l.tile_ready,
                         l.tiles_pair, l.total_bytes};
    const size_t need[] = {16 * 4,
                           (E + 1) * 4u,
                           static_cast<size_t>(max_tiles(T, K, E, 16)) * 16,
                           static_cast<size_t>(max_tiles(T, K, E, 128)) * 16,
                           rows * 4,
                           static_cast<size_t>(T) * H,
                           static_cast<size_t>(T) * (H / 128) * 4,
                           rows * I,
                           rows * (I / 128) * 4,
                           rows * H * 2,
                           kSplitSlices * 4u,
                           static_cast<size_t>(kSplitSlices) * kSplitSliceFloats * 4,
                           index_ctas(rows) > 1 ? static_cast<size_t>(index_ctas(rows)) * (E + 1) * 4 : 0,
                           static_cast<size_t>(max_tiles(T, K, E, 16)) * 4,
                           static_cast<size_t>(max_tiles(T, K, E, 256)) * 16};  // the K-tail down's row groups
    static_assert(sizeof(need) / sizeof(need[0]) + 1 == sizeof(at) / sizeof(at[0]), "one size per region");
    for (int i = 0; i < 15; ++i) {
      ASSERT_EQ(at[i] % 256, 0u) << i;
      ASSERT_GE(at[i + 1] - at[i], need[i]) << "region " << i;
    }
    // a workspace sized for T tokens holds every smaller call
    const int T2 = 1 + static_cast<int>(rng() % T);
    ASSERT_LE(moe_workspace_layout(T2, K, H, I, E).total_bytes, l.total_bytes);
    ASSERT_EQ(moe_workspace_bytes(T, K, H, I, E, MoeScaling::kPerTensor), l.total_bytes);
  }
}
