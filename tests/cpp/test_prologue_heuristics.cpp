// CPU tests of the prologue's kernel choice (include/hopperkit/prologue/heuristics.h).
#include <gtest/gtest.h>

#include <cstdint>

#include "hopperkit/prologue/heuristics.h"

using namespace hopperkit::prologue;

namespace {
int64_t vectors(int64_t tokens, int hq, int hkv, int head_dim) { return tokens * (hq + 2 * hkv) * (head_dim / 8); }
}  // namespace

TEST(PrologueHeuristics, PairKernelFromTheThreshold) {
  EXPECT_FALSE(use_pair_kernel(0));
  EXPECT_FALSE(use_pair_kernel(kPairKernelMinVectors - 1));
  EXPECT_TRUE(use_pair_kernel(kPairKernelMinVectors));
  EXPECT_TRUE(use_pair_kernel(int64_t{1} << 31));
}

TEST(PrologueHeuristics, MeasuredPointsFallOnTheirSide) {
  // session 9 run 3: the pair kernel lost at 81,920 vectors and below and won from 655,360
  EXPECT_FALSE(use_pair_kernel(vectors(64, 64, 8, 128)));   // hy3_full, 64 tokens: 81,920
  EXPECT_FALSE(use_pair_kernel(vectors(512, 8, 1, 128)));   // hy3_tp8, 512 tokens: 81,920
  EXPECT_TRUE(use_pair_kernel(vectors(512, 64, 8, 128)));   // hy3_full, 512 tokens: 655,360
  EXPECT_TRUE(use_pair_kernel(vectors(4096, 8, 1, 128)));   // hy3_tp8, 4096 tokens: 655,360
  // and the switch lies between one and two waves of the one-vector kernel on an H200
  const int64_t wave = int64_t{132} * 6 * 256;
  EXPECT_GT(kPairKernelMinVectors, wave);
  EXPECT_LT(kPairKernelMinVectors, 2 * wave);
}

TEST(PrologueHeuristics, PairModes) {
  // the two specialised paths: NeoX, q and cache both bf16 or both fp8, bf16 norm weights or none
  EXPECT_EQ(pair_mode(true, false, false, true, false), kModeNeoxBf16);
  EXPECT_EQ(pair_mode(true, true, true, true, false), kModeNeoxFp8);
  EXPECT_EQ(pair_mode(true, false, false, false, false), kModeNeoxBf16);
  // no weights: their dtype does not matter
  EXPECT_EQ(pair_mode(true, true, true, false, true), kModeNeoxFp8);
  // everything else is generic: GPT-J, mixed q / cache dtypes, float32 weights
  for (int q = 0; q < 2; ++q)
    for (int kv = 0; kv < 2; ++kv)
      for (int w = 0; w < 2; ++w)
        for (int f32 = 0; f32 < 2; ++f32) {
          const bool special = q == kv && !(w && f32);
          EXPECT_EQ(pair_mode(false, q, kv, w, f32), kModeAny);
          EXPECT_EQ(pair_mode(true, q, kv, w, f32) != kModeAny, special) << q << kv << w << f32;
        }
}
