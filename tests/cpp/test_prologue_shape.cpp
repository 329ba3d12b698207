// CPU tests of the fused prologue's launch shape (prologue/heuristics.h).
#include <gtest/gtest.h>

#include "hopperkit/prologue/heuristics.h"

using namespace hopperkit::prologue;

namespace {
// Every (token, head) is covered exactly once by (token group, chunk, pass, head slot).
void expect_covers(int tokens, int heads, int d, int sms) {
  const PrologueShape s = prologue_shape(tokens, heads, d, sms);
  ASSERT_GE(s.heads_per_pass, 1);
  ASSERT_LE(s.threads, kPrologueMaxThreads);
  ASSERT_EQ(s.threads % 32, 0);
  ASSERT_GE(s.threads, s.heads_per_pass * (d / 8));
  ASSERT_GE(s.tokens_per_block, 1);
  ASSERT_LE(s.tokens_per_block, kPrologueMaxTokensPerBlock);
  ASSERT_TRUE(s.chunks == 1 || s.tokens_per_block == 1);
  const int per_chunk = s.heads_per_pass * s.passes_per_block;
  EXPECT_GE(per_chunk * s.chunks, heads);              // all heads covered
  EXPECT_LT(per_chunk * (s.chunks - 1), heads);        // no chunk entirely empty
  const long long blocks = prologue_blocks(tokens, s);
  EXPECT_GE(blocks * s.tokens_per_block, static_cast<long long>(tokens) * s.chunks);
  EXPECT_LT((blocks / s.chunks - 1) * s.tokens_per_block, tokens);  // no token group entirely empty
}
}  // namespace

TEST(PrologueShape, CoversEveryTokenAndHead) {
  for (int d : {64, 128, 256}) {
    for (int heads : {3, 10, 17, 40, 80, 96, 130}) {
      for (int tokens : {1, 2, 7, 64, 527, 528, 4096, 32768}) {
        expect_covers(tokens, heads, d, 132);
      }
    }
  }
}

TEST(PrologueShape, ChoicesForTheBenchmarkShapes) {
  // hy3 full (64 q + 2 x 8 kv heads, d 128): 16 heads a pass, 5 passes; 4096 tokens: one block per token
  PrologueShape s = prologue_shape(4096, 80, 128, 132);
  EXPECT_EQ(s.threads, 256);
  EXPECT_EQ(s.heads_per_pass, 16);
  EXPECT_EQ(s.passes_per_block, 5);
  EXPECT_EQ(s.chunks, 1);
  EXPECT_EQ(s.tokens_per_block, 1);
  // 8 tokens: the passes spread over 5 blocks per token
  s = prologue_shape(8, 80, 128, 132);
  EXPECT_EQ(s.chunks, 5);
  EXPECT_EQ(s.passes_per_block, 1);
  // hy3 TP8 (8 q + 2 x 1 kv heads): 160 threads, one pass; 4096 tokens: 4 tokens per block
  s = prologue_shape(4096, 10, 128, 132);
  EXPECT_EQ(s.threads, 160);
  EXPECT_EQ(s.tokens_per_block, 4);
  EXPECT_EQ(prologue_blocks(4096, s), 1024);
  // few tokens: one token per block
  s = prologue_shape(8, 10, 128, 132);
  EXPECT_EQ(s.tokens_per_block, 1);
  EXPECT_EQ(prologue_blocks(8, s), 8);
}
