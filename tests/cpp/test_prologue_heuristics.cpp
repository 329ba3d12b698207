// CPU tests of the prologue's kernel choice (include/hopperkit/prologue/heuristics.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

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

TEST(PrologueHeuristics, FullRotaryKernel) {
  // the specialised modes' full-rotary kernels run only where every element is rotated
  EXPECT_TRUE(pair_full_rotary(128, 128));
  EXPECT_TRUE(pair_full_rotary(64, 64));
  EXPECT_TRUE(pair_full_rotary(256, 256));
  EXPECT_FALSE(pair_full_rotary(128, 64));
  EXPECT_FALSE(pair_full_rotary(128, 96));
  EXPECT_FALSE(pair_full_rotary(256, 128));
  EXPECT_FALSE(pair_full_rotary(64, 16));
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

namespace {
// The pair kernel's walk over the block order, as the kernel runs it: (token, head) of every item a thread takes.
// Position r of a block holds head r / block_tokens of token bt + r % block_tokens.
struct Walked {
  int64_t token, head;
};
std::vector<std::vector<Walked>> walk_all(int64_t tokens, int hq, int hkv, int head_dim, int ctas, int threads) {
  const int H = hq + 2 * hkv, tph = head_dim / 16, bt_n = pair_block_tokens(hq, hkv, head_dim);
  const int64_t block_heads = static_cast<int64_t>(bt_n) * H;
  const PairWalkStep st = pair_walk_step(ctas, threads, head_dim, hq, hkv, bt_n);
  std::vector<std::vector<Walked>> per_group;
  for (int64_t g = 0; g < static_cast<int64_t>(ctas) * threads / tph; ++g) {
    std::vector<Walked> items;
    int64_t bt = g / block_heads * bt_n, r = g % block_heads;
    while (bt < tokens) {
      const int64_t t = bt + r % bt_n, h = r / bt_n;
      if (t < tokens) items.push_back({t, h});
      bt += st.tokens, r += st.heads;
      if (r >= block_heads) r -= block_heads, bt += bt_n;
    }
    per_group.push_back(items);
  }
  return per_group;
}
}  // namespace

TEST(PrologueHeuristics, BlockOrderGivesWarpsOfOneKind) {
  // token-major where a token's q, k and v heads come in whole warps, blocks of a warp's heads in tokens elsewhere
  EXPECT_EQ(pair_heads_per_warp(64), 8);
  EXPECT_EQ(pair_heads_per_warp(128), 4);
  EXPECT_EQ(pair_heads_per_warp(256), 2);
  EXPECT_EQ(pair_block_tokens(64, 8, 128), 1);  // hy3_full
  EXPECT_EQ(pair_block_tokens(8, 1, 128), 4);   // hy3 at TP8: 8 q, 1 k, 1 v heads
  EXPECT_EQ(pair_block_tokens(8, 2, 128), 4);
  EXPECT_EQ(pair_block_tokens(16, 8, 64), 1);
  EXPECT_EQ(pair_block_tokens(2, 1, 256), 2);
  EXPECT_EQ(pair_block_tokens(4, 2, 256), 1);
  // every warp's heads (consecutive head groups) are of one kind, for every layout, in the order the host picks
  for (int d : {64, 128, 256})
    for (int hq : {1, 2, 3, 4, 8, 12, 64})
      for (int hkv : {1, 2, 3, 8}) {
        const int w = pair_heads_per_warp(d), bt_n = pair_block_tokens(hq, hkv, d), H = hq + 2 * hkv;
        const int64_t block_heads = static_cast<int64_t>(bt_n) * H;
        for (int64_t g0 = 0; g0 < 4 * block_heads; g0 += w) {
          auto kind = [&](int64_t g) {
            const int64_t h = (g % block_heads) / bt_n;
            return h < hq ? 0 : (h < hq + hkv ? 1 : 2);
          };
          for (int64_t g = g0; g < g0 + w; ++g) EXPECT_EQ(kind(g), kind(g0)) << d << " " << hq << " " << hkv;
        }
      }
}

TEST(PrologueHeuristics, WalkTakesEveryHeadOfEveryTokenOnce) {
  // the walk's step and wrap (as the kernel runs them) over small grids, partial last blocks, tiny and wide calls
  struct Case {
    int64_t tokens;
    int hq, hkv, d, ctas;
  };
  for (const Case c : {Case{1, 8, 1, 128, 1}, Case{5, 8, 1, 128, 1}, Case{4097, 8, 1, 128, 3}, Case{37, 8, 2, 128, 2},
                       Case{530, 64, 8, 128, 7}, Case{99, 2, 1, 256, 5}, Case{1003, 4, 2, 64, 4},
                       Case{13, 3, 1, 64, 1}, Case{300, 12, 3, 128, 528}}) {
    const int H = c.hq + 2 * c.hkv;
    std::vector<int> seen(static_cast<size_t>(c.tokens) * H, 0);
    for (const auto& items : walk_all(c.tokens, c.hq, c.hkv, c.d, c.ctas, 256))
      for (const Walked& it : items) {
        ASSERT_LT(it.head, H);
        ++seen[static_cast<size_t>(it.token * H + it.head)];
      }
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << c.tokens << " tokens, item " << i;
  }
}

TEST(PrologueHeuristics, WarpLanesWalkTogether) {
  // The kernel's group reductions shuffle over the whole warp: at every step of the walk, the head groups of a
  // warp must be in the same block (so they leave the loop together, and a partial last block's positions past the
  // last token run to the reductions with the rest) and hold heads of one kind (the same path to the reductions).
  for (int d : {64, 128, 256})
    for (int hq : {1, 2, 3, 4, 8, 12, 64})
      for (int hkv : {1, 2, 3, 8})
        for (int ctas : {1, 3, 528}) {
          const int w = pair_heads_per_warp(d), bt_n = pair_block_tokens(hq, hkv, d), H = hq + 2 * hkv;
          const int64_t block_heads = static_cast<int64_t>(bt_n) * H, tokens = 3 * bt_n + 1;
          const PairWalkStep st = pair_walk_step(ctas, 256, d, hq, hkv, bt_n);
          const int64_t groups = static_cast<int64_t>(ctas) * 256 / (d / 16);
          for (int64_t g0 = 0; g0 < groups; g0 += w) {
            std::vector<int64_t> bt(w), r(w);
            for (int i = 0; i < w; ++i) bt[i] = (g0 + i) / block_heads * bt_n, r[i] = (g0 + i) % block_heads;
            for (int step = 0; bt[0] < tokens; ++step) {
              const int64_t h0 = r[0] / bt_n;
              const int kind0 = h0 < hq ? 0 : (h0 < hq + hkv ? 1 : 2);
              for (int i = 1; i < w; ++i) {
                const int64_t h = r[i] / bt_n;
                ASSERT_EQ(bt[i], bt[0]) << d << " " << hq << " " << hkv << " " << ctas << " step " << step;
                ASSERT_EQ(h < hq ? 0 : (h < hq + hkv ? 1 : 2), kind0) << d << " " << hq << " " << hkv;
              }
              for (int i = 0; i < w; ++i) {
                bt[i] += st.tokens, r[i] += st.heads;
                if (r[i] >= block_heads) r[i] -= block_heads, bt[i] += bt_n;
              }
            }
          }
        }
}
