// CPU tests of the decode scheduling heuristics (shared by the device planner and the kernels).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "hopperkit/decode/heuristics.h"

using namespace hopperkit::decode;

TEST(Heuristics, NumTiles) {
  EXPECT_EQ(num_tiles(-5), 0);
  EXPECT_EQ(num_tiles(0), 0);
  EXPECT_EQ(num_tiles(1), 1);
  EXPECT_EQ(num_tiles(63), 1);
  EXPECT_EQ(num_tiles(64), 1);
  EXPECT_EQ(num_tiles(65), 2);
  EXPECT_EQ(num_tiles(262144), 4096);
}

TEST(Heuristics, RowsBucket) {
  EXPECT_EQ(rows_bucket(1), 16);
  EXPECT_EQ(rows_bucket(16), 16);
  EXPECT_EQ(rows_bucket(17), 32);
  EXPECT_EQ(rows_bucket(64), 64);
  EXPECT_EQ(rows_bucket(65), 128);
  EXPECT_EQ(rows_bucket(128), 128);
  EXPECT_EQ(rows_bucket(129), -1);
}

TEST(Heuristics, DynamicCtasRespectMinimumWorkAndCap) {
  EXPECT_EQ(dynamic_num_ctas(0, 132), 0);
  EXPECT_EQ(dynamic_num_ctas(1, 132), 1);
  EXPECT_EQ(dynamic_num_ctas(kMinTilesPerCta - 1, 132), 1);
  EXPECT_EQ(dynamic_num_ctas(100000, 132), 132);
  for (int64_t T = 1; T < 5000; T += 7) {
    const int C = dynamic_num_ctas(T, 132);
    ASSERT_GE(C, 1);
    ASSERT_LE(C, 132);
    if (T >= kMinTilesPerCta) ASSERT_GE(T / C, kMinTilesPerCta) << "T=" << T;
    const int C8 = dynamic_num_ctas(T, 264, kMinTilesPerCtaFp8);  // FP8 KV: fewer tiles per CTA
    ASSERT_GE(C8, C);
    if (T >= kMinTilesPerCtaFp8) ASSERT_GE(T / C8, kMinTilesPerCtaFp8) << "T=" << T;
  }
  EXPECT_EQ(dynamic_num_ctas(512, 264, kMinTilesPerCtaFp8), 256);  // uniform_512: 2 tiles per CTA (BF16: 128)
  EXPECT_EQ(dynamic_num_ctas(512, 264), 128);
}

TEST(Heuristics, LongPairsCapTheCtas) {
  const int u = kLongPairRuleUniform;  // session 37's rule (the session 39 rule: below)
  // off (0) or not long enough on average: every resident CTA
  EXPECT_EQ(dynamic_cta_cap(1000000, 8, 264, 0, false, 0, u), 264);
  EXPECT_EQ(dynamic_cta_cap(int64_t{kLongPairTiles} * 64 - 1, 64, 264, 132, false, 0, u), 264);
  // long pairs: the cap
  EXPECT_EQ(dynamic_cta_cap(int64_t{kLongPairTiles} * 64, 64, 264, 132, false, 0, u), 132);
  EXPECT_EQ(dynamic_cta_cap(2048 + 31 * 64, 32, 264, 132, false, 0, u), 132);  // 1 x 128K + 31 x 4K: 126 tiles per pair
  // the session-8 scenarios the threshold separates: 32 x 128 + 32 x 4K (33 tiles per pair) stays on 264
  EXPECT_EQ(dynamic_cta_cap(32 * 2 + 32 * 64, 64, 264, 132, false, 0, u), 264);
  EXPECT_EQ(dynamic_cta_cap(64 * 64, 64, 264, 132, false, 0, u), 132);  // 64 x 4K, were its pairs not uniform
  // uniform batches (every non-empty pair the same count) are not capped: 64 x 4K, vLLM's 64 x 4K x 8 heads
  EXPECT_EQ(dynamic_cta_cap(64 * 64, 64, 264, 132, true, 0, u), 264);
  EXPECT_EQ(dynamic_cta_cap(512 * 64, 512, 264, 132, true, 0, u), 264);
  // ... of at least kUniformMinPairs pairs: one long request (or a few equal ones) keeps the cap
  EXPECT_EQ(dynamic_cta_cap(1025, 1, 264, 132, true, 0, u), 132);
  EXPECT_EQ(dynamic_cta_cap(int64_t{64} * (kUniformMinPairs - 1), kUniformMinPairs - 1, 264, 132, true, 0, u), 132);
  EXPECT_EQ(dynamic_cta_cap(int64_t{64} * kUniformMinPairs, kUniformMinPairs, 264, 132, true, 0, u), 264);
  // never above max_ctas, no pairs: max_ctas
  EXPECT_EQ(dynamic_cta_cap(100000, 4, 100, 132, false, 0, u), 100);
  EXPECT_EQ(dynamic_cta_cap(0, 0, 264, 132, false, 0, u), 264);
}

TEST(Heuristics, MergeRounds) {
  EXPECT_EQ(merge_rounds(0), 1);
  EXPECT_EQ(merge_rounds(kMergeGroup), 1);
  EXPECT_EQ(merge_rounds(kMergeGroup + 1), 2);                 // two groups, read in one round
  EXPECT_EQ(merge_rounds(kMergeGroup * kMergeGroup), 2);
  EXPECT_EQ(merge_rounds(kMergeGroup * kMergeGroup + 1), 3);   // 9 groups: two rounds at level 2
  EXPECT_EQ(merge_rounds(int64_t{kMergeGroup} * kMergeGroup * 2), 3);
  EXPECT_EQ(merge_rounds(int64_t{kMergeGroup} * kMergeGroup * 2 + 1), 4);
  // the division-free form the plan uses: merge_rounds(floor(x / t))
  for (int64_t t = 1; t <= 700; t += 3) {
    for (int64_t x = 0; x <= 300 * t + 5; x += 1 + t / 7) {
      ASSERT_EQ(merge_rounds_of_share(x, t), merge_rounds(x / t)) << x << " / " << t;
    }
  }
  EXPECT_EQ(merge_rounds_of_share((int64_t{1} << 34) * 264, int64_t{1} << 34), merge_rounds(264));
}

TEST(Heuristics, SliceMergeRule) {
  // one level over the last kSliceMergers arrivals (where pieces are resident): at <= 16 rows, from
  // kSliceMinPieces (72) pieces
  EXPECT_TRUE(slice_merge(kSliceMinPieces, kSliceMaxRows));
  EXPECT_TRUE(slice_merge(183, 8));   // one_64k_7x4k FP8
  EXPECT_TRUE(slice_merge(127, 8));   // skewed_extreme BF16 (134 CTAs, not claimed by SM)
  EXPECT_TRUE(slice_merge(100000, 1));
  EXPECT_FALSE(slice_merge(kSliceMinPieces - 1, 8));
  EXPECT_FALSE(slice_merge(70, 8));   // two_32k_30x4k FP8: two levels (session 61: 1.015x sliced)
  EXPECT_FALSE(slice_merge(kSliceMinPieces, kSliceMaxRows + 1));
  EXPECT_FALSE(slice_merge(0, 0));
  // the mergers are distinct pieces, and a slice is a whole number of 8-dim units per row
  static_assert(kSliceMinPieces >= kSliceMergers, "");
  static_assert(kSliceMergers == 16, "merge_slice splits rows x 16 units of 8 dims over 16 CTAs");
}

TEST(Heuristics, SliceFreeLaunchOnlyWhereNoPairCanSlice) {
  // a caller's bound on the lengths: below kSliceMinPieces tiles no pair has that many pieces (>= 1 tile each)
  EXPECT_TRUE(slice_free_launch(1));
  EXPECT_TRUE(slice_free_launch(512));                                    // uniform_512
  EXPECT_TRUE(slice_free_launch(4096));                                   // uniform_4096, skewed_mix
  EXPECT_TRUE(slice_free_launch((kSliceMinPieces - 1) * kTileTokens));    // 4544: 71 tiles
  EXPECT_FALSE(slice_free_launch((kSliceMinPieces - 1) * kTileTokens + 1));  // 72 tiles: may slice
  EXPECT_FALSE(slice_free_launch(16384));                                 // skewed_extreme
  EXPECT_FALSE(slice_free_launch(0));                                     // no bound given
  EXPECT_FALSE(slice_free_launch(-5));
  for (int len = 1; len <= 20000; len += 37) {  // the rule against the pieces it bounds
    if (slice_free_launch(len)) EXPECT_FALSE(slice_merge(num_tiles(len), 1)) << len;
  }
}

TEST(Heuristics, LongPairCapIsOptIn) {
  // the default (session 62): no cap; the switch on: one CTA per SM for BF16 where two or more fit
  EXPECT_EQ(long_pair_cta_count(kLongPairCapDefault, true, 2, 132), 0);
  EXPECT_EQ(long_pair_cta_count(1, true, 2, 132), 132);
  EXPECT_EQ(long_pair_cta_count(7, true, 3, 114), 114);
  EXPECT_EQ(long_pair_cta_count(1, true, 1, 132), 0);   // one CTA per SM already
  EXPECT_EQ(long_pair_cta_count(1, false, 2, 132), 0);  // FP8 KV: never
}

TEST(Heuristics, LongPairCapWhereItSavesMergeRounds) {
  const int r = kLongPairRuleRounds;
  // session 39's batches (BF16, 264 resident CTAs, 132 SMs; pieces of the longest pair capped / not) and what the
  // cap measured there. Capped: one round instead of two, or a dominant pair (>= 1/3 of the tiles)
  EXPECT_EQ(dynamic_cta_cap(16 * 128 + 16 * 256, 32, 264, 132, false, 256, r), 132);  // 16 x 8K + 16 x 16K: 5 / 11
  EXPECT_EQ(dynamic_cta_cap(16 * 128, 16, 264, 132, true, 128, r), 132);           // 16 x 8K uniform: 8 / 16
  EXPECT_EQ(dynamic_cta_cap(12 * 128 + 20 * 64, 32, 264, 132, false, 128, r), 132);  // 12 x 8K + 20 x 4K: 6 / 12
  EXPECT_EQ(dynamic_cta_cap(1024 + 31 * 64, 32, 264, 132, false, 1024, r), 132);   // 1 x 64K + 31 x 4K: 44 / 89
  EXPECT_EQ(dynamic_cta_cap(512 + 15 * 64, 16, 264, 132, false, 512, r), 132);     // 1 x 32K + 15 x 4K: 45 / 91
  EXPECT_EQ(dynamic_cta_cap(3 * 512, 3, 264, 132, true, 512, r), 132);             // 3 x 32K: exactly 1 / 3
  // not capped: the same rounds either way
  EXPECT_EQ(dynamic_cta_cap(2 * 512 + 30 * 64, 32, 264, 132, false, 512, r), 264);  // 2 x 32K + 30 x 4K: 22 / 45
  EXPECT_EQ(dynamic_cta_cap(512 + 31 * 64, 32, 264, 132, false, 512, r), 264);      // 1 x 32K + 31 x 4K
  EXPECT_EQ(dynamic_cta_cap(4 * 256 + 28 * 64, 32, 264, 132, false, 256, r), 264);  // 4 x 16K + 28 x 4K
  EXPECT_EQ(dynamic_cta_cap(8 * 128 + 24 * 32, 32, 264, 132, false, 128, r), 264);  // 8 x 8K + 24 x 2K: 9 / 18
  EXPECT_EQ(dynamic_cta_cap(8 * 256, 8, 264, 132, true, 256, r), 264);             // 8 x 16K uniform: 16 / 33
  // ... nor 2 -> 3 rounds for pairs of less than 1/3 of the tiles
  EXPECT_EQ(dynamic_cta_cap(2 * 1024 + 30 * 64, 32, 264, 132, false, 1024, r), 264);  // 2 x 64K + 30 x 4K: 34 / 68
  EXPECT_EQ(dynamic_cta_cap(4 * 512, 4, 264, 132, true, 512, r), 264);                // 4 x 32K: 33 / 66
  // session 37's points: the one-long-request scenarios keep the cap, uniform 64 x 4K and 512 x 4K run uncapped
  EXPECT_EQ(dynamic_cta_cap(1024 + 7 * 64, 8, 264, 132, false, 1024, r), 132);
  EXPECT_EQ(dynamic_cta_cap(1024 + 15 * 64, 16, 264, 132, false, 1024, r), 132);
  EXPECT_EQ(dynamic_cta_cap(2048 + 31 * 64, 32, 264, 132, false, 2048, r), 132);
  EXPECT_EQ(dynamic_cta_cap(64 * 64, 64, 264, 132, true, 64, r), 264);
  EXPECT_EQ(dynamic_cta_cap(512 * 64, 512, 264, 132, true, 64, r), 264);
  // one long request: capped; short pairs on average: never
  EXPECT_EQ(dynamic_cta_cap(4096, 1, 264, 132, true, 4096, r), 132);
  EXPECT_EQ(dynamic_cta_cap(32 * 2 + 32 * 64, 64, 264, 132, false, 64, r), 264);
  // session 37's rule on the same batches (HOPPERKIT_DECODE_LONG_RULE=0)
  EXPECT_EQ(dynamic_cta_cap(2 * 512 + 30 * 64, 32, 264, 132, false, 512, kLongPairRuleUniform), 132);
  EXPECT_EQ(dynamic_cta_cap(8 * 256, 8, 264, 132, true, 256, kLongPairRuleUniform), 132);
  // 64-bit products (pieces past 2^32 / CTAs) take the same path
  EXPECT_EQ(dynamic_cta_cap(int64_t{1} << 34, 1, 264, 132, true, int64_t{1} << 34, r), 132);
  // by-SM claims follow the cap
  EXPECT_FALSE(dynamic_by_sm(2 * 512 + 30 * 64, 32, 132, 264, 132, false, 512, r));
  EXPECT_TRUE(dynamic_by_sm(1024 + 31 * 64, 32, 126, 264, 132, false, 1024, r));
}

TEST(Heuristics, UniformPairs) {
  uint32_t o = 0, mn = 0xffffffffu, mx = 0;
  EXPECT_FALSE(dynamic_uniform_pairs(o, mn, mx));  // no tiles
  for (uint32_t t : {64u, 0u, 64u}) dynamic_align_add(t, o, mn, mx);
  EXPECT_TRUE(dynamic_uniform_pairs(o, mn, mx));  // empty pairs do not count
  dynamic_align_add(63u, o, mn, mx);
  EXPECT_FALSE(dynamic_uniform_pairs(o, mn, mx));
}

TEST(Heuristics, ClaimsBySmOnlyUnderTheLongPairCap) {
  const int u = kLongPairRuleUniform;  // session 37's rule (the session 39 rule: below)
  const int64_t long_T = int64_t{kLongPairTiles} * 32;  // 32 pairs at the threshold
  EXPECT_TRUE(dynamic_by_sm(long_T, 32, 132, 264, 132, false, 0, u));          // capped long pairs
  EXPECT_TRUE(dynamic_by_sm(2048 + 31 * 64, 32, 132, 264, 132, false, 0, u));  // 1 x 128K + 31 x 4K
  EXPECT_FALSE(dynamic_by_sm(64 * 8, 64, 128, 264, 132, false, 0, u));         // uniform_512: few tiles, not long
  EXPECT_FALSE(dynamic_by_sm(271, 16, 67, 264, 132, false, 0, u));             // skewed_extreme: 17 tiles per pair
  EXPECT_FALSE(dynamic_by_sm(long_T, 32, 132, 132, 132, false, 0, u));         // the grid is one per SM already
  EXPECT_FALSE(dynamic_by_sm(long_T, 32, 132, 264, 0, false, 0, u));           // off (FP8, or one CTA per SM)
  EXPECT_FALSE(dynamic_by_sm(0, 0, 0, 264, 132, false, 0, u));                 // nothing to claim
  EXPECT_FALSE(dynamic_by_sm(64 * 64, 64, 132, 264, 132, true, 0, u));         // uniform: not capped, not claimed
}

TEST(Heuristics, CtaBeginAndCtaOfTileAgreeWithTheir64BitFormulas) {
  // the 32-bit fast path (T * C < 2^32) and the 64-bit one, on both sides of the switch
  std::mt19937_64 rng(11);
  for (int iter = 0; iter < 20000; ++iter) {
    const int64_t C = 1 + static_cast<int64_t>(rng() % 2048);
    const int64_t limit = iter % 2 ? (int64_t{1} << 32) / C + 2 : int64_t{1} << 33;
    const int64_t T = C + static_cast<int64_t>(rng() % static_cast<uint64_t>(limit));
    const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(C + 1));
    const int64_t x = static_cast<int64_t>(rng() % static_cast<uint64_t>(T));
    ASSERT_EQ(dynamic_cta_begin(i, T, C), (i * T) / C) << T << " " << C << " " << i;
    ASSERT_EQ(dynamic_cta_of_tile(x, T, C), static_cast<int>(((x + 1) * C - 1) / T)) << T << " " << C << " " << x;
    ASSERT_EQ(dynamic_cta_of_tile(T - 1, T, C), C - 1);
  }
}

TEST(Heuristics, CtaOfTileInvertsCtaBegin) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 2000; ++iter) {
    const int64_t T = 1 + rng() % 300000;
    const int64_t C = 1 + rng() % std::min<int64_t>(T, 300);
    int64_t prev = -1;
    for (int64_t i = 0; i < C; ++i) {
      const int64_t b = dynamic_cta_begin(i, T, C), e = dynamic_cta_begin(i + 1, T, C);
      ASSERT_GT(e, b);
      ASSERT_LE(e - b, (T + C - 1) / C);
      ASSERT_GE(e - b, T / C);
      ASSERT_GT(b, prev);
      prev = b;
      ASSERT_EQ(dynamic_cta_of_tile(b, T, C), i);
      ASSERT_EQ(dynamic_cta_of_tile(e - 1, T, C), i);
    }
    ASSERT_EQ(dynamic_cta_begin(C, T, C), T);
  }
}

TEST(Heuristics, ChunksOfACtaRange) {
  // pairs of 3, 0 (empty), 1, 1, 5 tiles
  const int prefix[] = {0, 3, 3, 4, 5, 10};
  EXPECT_EQ(pair_of_tile(prefix, 5, 0), 0);
  EXPECT_EQ(pair_of_tile(prefix, 5, 2), 0);
  EXPECT_EQ(pair_of_tile(prefix, 5, 3), 2);  // the empty pair 1 shares its start with pair 2
  EXPECT_EQ(pair_of_tile(prefix, 5, 4), 3);
  EXPECT_EQ(pair_of_tile(prefix, 5, 9), 4);
  // 2 CTAs over 10 tiles: [0, 5) touches pairs 0..3 (the empty one counts), [5, 10) pair 4
  EXPECT_EQ(dynamic_cta_chunks(prefix, 5, 10, 2, 0), 4);
  EXPECT_EQ(dynamic_cta_chunks(prefix, 5, 10, 2, 1), 1);
  // 10 CTAs: one tile each, one chunk each
  for (int i = 0; i < 10; ++i) EXPECT_EQ(dynamic_cta_chunks(prefix, 5, 10, 10, i), 1);
}

TEST(Heuristics, PairViewOfTheChunkRuleMatchesTheCtaWalk) {
  // the device planner's per-pair test (dynamic_pair_crowds) against the twin's per-CTA count, on random
  // batches with empty, one-tile and long pairs, every C up to the tiles and limits 1..5
  std::mt19937 rng(7);
  for (int iter = 0; iter < 3000; ++iter) {
    const int P = 1 + rng() % 40;
    std::vector<int> prefix(P + 1, 0);
    for (int p = 0; p < P; ++p) {
      const int kind = rng() % 4;
      const int tiles = kind == 0 ? 0 : kind == 1 ? 1 : kind == 2 ? 1 + rng() % 4 : 1 + rng() % 100;
      prefix[p + 1] = prefix[p] + tiles;
    }
    const int64_t T = prefix[P];
    if (T == 0) continue;
    const int C = 1 + static_cast<int>(rng() % T);
    for (int L = 1; L <= 5; ++L) {
      bool by_cta = false, by_pair = false;
      for (int i = 0; i < C; ++i) by_cta |= dynamic_cta_chunks(prefix.data(), P, T, C, i) > L;
      for (int p = 0; p < P; ++p) by_pair |= dynamic_pair_crowds(prefix.data(), P, T, C, L, p);
      ASSERT_EQ(by_pair, by_cta) << "P " << P << " T " << T << " C " << C << " L " << L;
    }
  }
  EXPECT_FALSE(dynamic_pair_crowds(nullptr, 4, 10, 2, 0, kLongPairRuleUniform));  // limit 0: the rule is off
}

TEST(Heuristics, NextCtaCountDoublesUpToTheCapAndTheTiles) {
  EXPECT_EQ(dynamic_next_ctas(67, 264, 271), 134);
  EXPECT_EQ(dynamic_next_ctas(134, 264, 271), 264);
  EXPECT_EQ(dynamic_next_ctas(264, 264, 271), 0);
  EXPECT_EQ(dynamic_next_ctas(2, 264, 8), 4);
  EXPECT_EQ(dynamic_next_ctas(4, 264, 8), 8);
  EXPECT_EQ(dynamic_next_ctas(8, 264, 8), 0);  // one tile per CTA
  EXPECT_EQ(dynamic_next_ctas(5, 6, 100), 6);
  EXPECT_EQ(dynamic_next_ctas(0, 6, 100), 0);
}

TEST(Heuristics, StaticSplits) {
  EXPECT_EQ(static_num_splits(32, 132, 2048), 5);
  EXPECT_EQ(static_num_splits(256, 132, 64), 1);
  EXPECT_EQ(static_num_splits(1, 132, 3), 3);  // never more splits than tiles
  EXPECT_EQ(static_num_splits(1, 1000, 100000), kMaxStaticSplits);
  EXPECT_EQ(static_chunk_tiles(2048, 5), 410);
  EXPECT_EQ(static_split_begin(100, 10, 3, 4), 110);  // clamped at the pair's end
  EXPECT_EQ(static_split_begin(100, 10, 2, 4), 108);
}
