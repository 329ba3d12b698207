// CPU tests of the decode planner's twin: the invariants of a plan, fuzzed over random batches.
// (The GPU suite checks that the device planner writes exactly what this twin writes.)
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "decode/plan_limits.h"
#include "hopperkit/decode/plan.h"
#include "hopperkit/error.h"

using namespace hopperkit;
using namespace hopperkit::decode;

namespace {

struct Plan {
  DecodePlanConfig cfg;
  std::vector<uint8_t> ws;
  DecodePlanView v;
};

Plan make_plan(const DecodePlanConfig& cfg, const std::vector<int32_t>& lens, int block_size, int max_blocks,
               int max_seq_len) {
  Plan p;
  p.cfg = cfg;
  p.ws.assign(decode_plan_layout(cfg).total_bytes, 0xAB);  // poison: every word the twin owns gets written
  decode_plan_cpu(cfg, lens.data(), static_cast<int>(lens.size()), block_size, max_blocks, max_seq_len, p.ws.data());
  p.v = decode_plan_view(cfg, p.ws.data());
  return p;
}

// Pairs the tile range [b, e) touches, counted by walking the prefix (independent of pair_of_tile's search;
// as dynamic_cta_chunks, an empty pair between two touched pairs counts).
int chunks_by_walk(const int32_t* prefix, int P, int64_t b, int64_t e) {
  if (e <= b) return 0;
  int first = -1, last = -1;
  for (int q = 0; q < P; ++q) {
    if (prefix[q] <= b) first = q;
    if (prefix[q] <= e - 1) last = q;
  }
  return last - first + 1;
}

int max_chunks_by_walk(const int32_t* prefix, int P, int64_t T, int C) {
  int m = 0;
  for (int i = 0; i < C; ++i) {
    m = std::max(m, chunks_by_walk(prefix, P, dynamic_cta_begin(i, T, C), dynamic_cta_begin(i + 1, T, C)));
  }
  return m;
}

// Whether every non-empty pair starts where some CTA of a C-CTA plan starts (the set of CTA starts walked, not
// dynamic_tile_begins_cta).
bool all_pairs_start_ctas(const int32_t* prefix, int P, int64_t T, int C) {
  std::set<int64_t> starts;
  for (int i = 0; i < C; ++i) starts.insert(dynamic_cta_begin(i, T, C));
  for (int q = 0; q < P; ++q) {
    if (prefix[q + 1] > prefix[q] && starts.count(prefix[q]) == 0) return false;
  }
  return true;
}

int expected_tiles(int32_t len, int64_t capacity) {
  int64_t l = std::min<int64_t>(std::max<int32_t>(len, 0), capacity);
  return num_tiles(l);
}

// Checks every invariant of a plan against the lengths it was made from.
void check_invariants(const Plan& p, const std::vector<int32_t>& lens, int block_size, int max_blocks) {
  const DecodePlanView& v = p.v;
  const int H = p.cfg.num_kv_heads;
  const int B = static_cast<int>(lens.size());
  const int P = B * H;
  const int64_t capacity = static_cast<int64_t>(block_size) * max_blocks;
  ASSERT_EQ(v.header[kHdrNumPairs], P);
  ASSERT_EQ(v.header[kHdrBatch], B);
  ASSERT_EQ(v.header[kHdrNumKvHeads], H);
  // prefix of tiles per pair
  ASSERT_EQ(v.pair_tile_start[0], 0);
  bool clamped = false;
  for (int p = 0; p < P; ++p) {
    int b = 0, h = 0;
    pair_coords(p, B, H, head_major_pairs(v.header[kHdrMode]), b, h);
    const int32_t len = lens[b];
    if (len < 0 || len > capacity) clamped = true;
    ASSERT_EQ(v.pair_tile_start[p + 1] - v.pair_tile_start[p], expected_tiles(len, capacity)) << "pair " << p;
  }
  ASSERT_EQ((v.header[kHdrErrors] & kPlanErrorSeqLenClamped) != 0, clamped);
  const int T = v.pair_tile_start[P];
  ASSERT_EQ(v.header[kHdrTotalTiles], T);
  const int C = v.header[kHdrNumCtas];
  ASSERT_LE(C, p.cfg.max_ctas);
  // every tile exactly once: CTA ranges are contiguous, ordered and cover [0, T)
  ASSERT_EQ(v.cta_tile_start[0], 0);
  ASSERT_EQ(v.cta_tile_start[C], T);
  int min_budget = 1 << 30, max_budget = 0;
  for (int i = 0; i < C; ++i) {
    const int b = v.cta_tile_start[i], e = v.cta_tile_start[i + 1];
    ASSERT_LE(b, e);
    if (p.cfg.mode == PlanMode::kDynamic) {
      ASSERT_LT(b, e) << "dynamic plans have no idle CTA";
      min_budget = std::min(min_budget, e - b);
      max_budget = std::max(max_budget, e - b);
    }
    if (b < e) {
      const int fp = v.cta_first_pair[i];
      ASSERT_GE(fp, 0);
      ASSERT_LT(fp, P);
      ASSERT_LE(v.pair_tile_start[fp], b);
      ASSERT_LT(b, v.pair_tile_start[fp + 1]) << "cta_first_pair must hold the CTA's first tile";
    }
  }
  if (p.cfg.mode == PlanMode::kDynamic && C > 0) {
    ASSERT_LE(max_budget - min_budget, 1) << "budgets equal within one tile";
    uint32_t t_or = 0, t_min = 0xffffffffu, t_max = 0;  // uniform batches are not capped (dynamic_uniform_pairs)
    for (int q = 0; q < P; ++q) {
      dynamic_align_add(static_cast<uint32_t>(v.pair_tile_start[q + 1] - v.pair_tile_start[q]), t_or, t_min, t_max);
    }
    const bool uniform = dynamic_uniform_pairs(t_or, t_min, t_max);
    const int cap = dynamic_cta_cap(T, P, p.cfg.max_ctas, p.cfg.long_pair_ctas, uniform, t_max,
                                    p.cfg.long_pair_rule);
    const int min_tiles = p.cfg.min_tiles_per_cta;
    const int c0 = dynamic_num_ctas(T, cap, min_tiles);
    const int limit = p.cfg.max_chunks_per_cta;
    // the chunk rule's count c1, by walking the CTAs: c0 doubled (capped) while some CTA walks > limit chunks
    int c1 = c0;
    while (limit > 0 && dynamic_next_ctas(c1, cap, T) != 0 && max_chunks_by_walk(v.pair_tile_start, P, T, c1) > limit) {
      c1 = dynamic_next_ctas(c1, cap, T);
    }
    // aligned budgets: the unit D (the count every non-empty pair has, if they all have the same, else the largest
    // power of two dividing them all), then the largest multiple of T / D in [c1 - c1 / div, c1], else c1 (the
    // rule's own closed form, recomputed: what this checks independently is that every pair then starts a CTA)
    int expect_c = c1;
    const int div = p.cfg.align_window_div;
    if (div > 0 && T > 0 && c1 >= 2) {
      int pow2 = 1 << 30;  // the largest power of two dividing every non-zero count
      int same = -1;       // the count every non-empty pair has, or 0 when they differ
      for (int q = 0; q < P; ++q) {
        const int t = v.pair_tile_start[q + 1] - v.pair_tile_start[q];
        while (t % pow2 != 0) pow2 >>= 1;
        if (t != 0) same = same == -1 || same == t ? t : 0;
      }
      const int D = same > 0 ? same : pow2;
      ASSERT_EQ(T % D, 0);
      for (int c = c1; c >= c1 - c1 / div && c >= 1; --c) {
        if (c % (T / D) == 0) {
          expect_c = c;
          break;
        }
      }
    }
    // then a multiple of the KV heads (pair_coords): an aligned count is one already (T / D = H x T_h / D)
    const int aligned_c = expect_c;
    if (H > 1 && expect_c > H && expect_c % H != 0) {  // up where the cap and the minimum work allow, else down
      const int up = expect_c + H - expect_c % H;
      expect_c = up <= cap && static_cast<int64_t>(up) * std::max(min_tiles, 1) <= T ? up : expect_c - expect_c % H;
    }
    if (aligned_c != c1) {
      ASSERT_EQ(expect_c, aligned_c);
      ASSERT_TRUE(all_pairs_start_ctas(v.pair_tile_start, P, T, C)) << "aligned: every pair starts a CTA";
      ASSERT_GE(C, c1 - c1 / div);
    }
    ASSERT_EQ(C, expect_c) << "c0 " << c0 << " c1 " << c1;
    if (aligned_c != c1) ASSERT_EQ(max_chunks_by_walk(v.pair_tile_start, P, T, C), 1) << "aligned: one chunk per CTA";
    // KV head major pairs on a multiple of H CTAs: each head's pairs take the same share of the CTAs with the
    // same budgets (head h's CTA h C / H + g covers what CTA g covers of head 0's pairs, shifted by h T / H)
    if (H > 1 && C % H == 0) {
      ASSERT_EQ(T % H, 0);
      for (int i = 0; i <= C; ++i) {
        const int h = i == C ? H - 1 : i / (C / H), g = i - h * (C / H);
        ASSERT_EQ(v.cta_tile_start[i], h * (T / H) + v.cta_tile_start[g]) << "CTA " << i;
      }
    }
    if (c1 == c0) {
      if (T >= min_tiles) ASSERT_GE(min_budget, min_tiles) << "minimum work per CTA";
    } else {
      // more CTAs than the minimum work allows only because the smaller count crowded a CTA with chunks
      ASSERT_GT(limit, 0) << "the chunk rule is off, yet c1 != c0";
    }
    // (rounded down where the cap or the minimum work stopped it: at most H - 1 CTAs below the chunk rule's count,
    // which may leave a CTA with more chunks than the limit)
    if (limit > 0 && dynamic_next_ctas(C, cap, T) != 0 && C >= aligned_c) {
      ASSERT_LE(max_chunks_by_walk(v.pair_tile_start, P, T, C), limit) << "a CTA walks too many chunks";
    }
    ASSERT_EQ(v.header[kHdrBySm], dynamic_by_sm(T, P, C, p.cfg.max_ctas, p.cfg.long_pair_ctas, uniform, t_max,
                                                p.cfg.long_pair_rule)
                                      ? 1
                                      : 0);
  } else {
    ASSERT_EQ(v.header[kHdrBySm], 0);
  }
  ASSERT_EQ(v.header[kHdrClaimNext], 0);
  ASSERT_EQ(v.header[kHdrClaimDone], 0);
  // pieces: the CTAs whose range meets each pair; slots unique over all pieces
  std::set<int> slots;
  int empties = 0;
  for (int q = 0; q < P; ++q) {
    const int b = v.pair_tile_start[q], e = v.pair_tile_start[q + 1];
    ASSERT_EQ(v.merge_counters[q], 0);
    if (b == e) {
      ASSERT_EQ(v.pair_num_pieces[q], 0);
      ASSERT_LT(empties, v.header[kHdrNumEmpty]);
      ASSERT_EQ(v.empty_pairs[empties], q) << "empty pairs listed in order";
      ++empties;
      continue;
    }
    std::vector<int> ctas;
    for (int i = 0; i < C; ++i) {
      const int cb = v.cta_tile_start[i], ce = v.cta_tile_start[i + 1];
      if (cb < e && ce > b) ctas.push_back(i);
    }
    ASSERT_EQ(static_cast<int>(ctas.size()), v.pair_num_pieces[q]) << "pair " << q;
    for (size_t k = 1; k < ctas.size(); ++k) ASSERT_EQ(ctas[k], ctas[0] + static_cast<int>(k)) << "consecutive CTAs";
    if (ctas.size() > 1) {
      for (size_t k = 0; k < ctas.size(); ++k) {
        const int c = ctas[k];
        // the slot the attention kernel writes for (CTA c, pair q) ...
        const int slot = 2 * c + (v.cta_first_pair[c] == q ? 0 : 1);
        // ... is the one the merge reads
        const int expect = k == 0 ? v.pair_first_slot[q] : (v.pair_first_slot[q] & ~1) + 2 * static_cast<int>(k);
        ASSERT_EQ(slot, expect) << "pair " << q << " piece " << k;
        ASSERT_LT(slot, p.cfg.partial_slots());
        ASSERT_TRUE(slots.insert(slot).second) << "slot " << slot << " written twice";
      }
    }
  }
  ASSERT_EQ(empties, v.header[kHdrNumEmpty]);
}

std::vector<int32_t> random_lens(std::mt19937& rng, int batch, int max_len) {
  static const int specials[] = {0, 1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 4095, 4096, 4097};
  std::vector<int32_t> lens(batch);
  const int kind = rng() % 5;
  // uniform batches (whole tiles, maybe one longer request first): the ones aligned budgets can divide
  const int32_t uniform = 64 * (1 + static_cast<int32_t>(rng() % 128));
  const int32_t first = rng() % 2 ? 64 * (1 + static_cast<int32_t>(rng() % 2048)) : uniform;
  for (int b = 0; b < batch; ++b) {
    switch (kind) {
      case 0: lens[b] = specials[rng() % (sizeof(specials) / sizeof(int))]; break;
      case 1: lens[b] = 1 + rng() % max_len; break;
      case 2: lens[b] = (b == 0) ? max_len : 1 + rng() % 4096; break;  // one long, many short
      case 3: lens[b] = (b == 0) ? first : uniform; break;
      default: lens[b] = (rng() % 3 == 0) ? 0 : 1 + rng() % 512; break;
    }
  }
  return lens;
}

}  // namespace

TEST(PlannerTwin, FuzzDynamicAndStatic) {
  std::mt19937 rng(1234);
  int aligned = 0;
  for (int iter = 0; iter < 600; ++iter) {
    const int H = 1 + rng() % 8;
    const int group = 1 << (rng() % 5);  // 1..16
    const int batch = 1 + (iter % 5 == 0 ? rng() % 1024 : rng() % 64);
    const int block_size = 16 << (rng() % 4);
    const int max_len = 1 + rng() % 262144;
    const int max_blocks = (max_len + block_size - 1) / block_size + (rng() % 3);
    const PlanMode mode = (iter % 3 == 0) ? PlanMode::kStatic : PlanMode::kDynamic;
    const int sm_ctas = 1 + rng() % 264;
    const int long_ctas = iter % 2 ? static_cast<int>(rng() % (sm_ctas + 1)) : 0;
    const DType kv = iter % 5 == 2 ? DType::kFP8E4M3 : DType::kBF16;  // FP8: kMinTilesPerCtaFp8
    DecodePlanConfig cfg =
        make_decode_plan_config_for(batch + rng() % 8, H * group, H, kv, 1, mode, sm_ctas, long_ctas);
    if (iter % 4 == 1) cfg.max_chunks_per_cta = static_cast<int>(rng() % 4);  // the profiling switch's values
    if (iter % 7 == 3) cfg.min_tiles_per_cta = 1 + static_cast<int>(rng() % 8);  // HOPPERKIT_DECODE_MIN_TILES
    if (iter % 3 != 0) cfg.align_window_div = 1 + static_cast<int>(rng() % 16);  // HOPPERKIT_DECODE_ALIGN_DIV
    if (iter % 6 == 0) cfg.align_window_div = 0;  // off (else kAlignWindowDiv, the default)
    if (iter % 5 == 1) cfg.long_pair_rule = kLongPairRuleUniform;  // HOPPERKIT_DECODE_LONG_RULE=0
    std::vector<int32_t> lens = random_lens(rng, batch, max_len);
    int max_seen = 0;
    for (int32_t l : lens) max_seen = std::max(max_seen, l);
    const Plan p = make_plan(cfg, lens, block_size, max_blocks, max_seen);
    ASSERT_NO_FATAL_FAILURE(check_invariants(p, lens, block_size, max_blocks)) << "iter " << iter;
    // deterministic: a second plan of the same inputs is identical, word for word
    const Plan p2 = make_plan(cfg, lens, block_size, max_blocks, max_seen);
    const DecodePlanLayout l = decode_plan_layout(cfg);
    ASSERT_TRUE(std::equal(p.ws.begin(), p.ws.begin() + l.partial_o, p2.ws.begin())) << "iter " << iter;
    if (mode == PlanMode::kDynamic && cfg.align_window_div > 0) {  // how often the rule changed the CTA count
      DecodePlanConfig off = cfg;
      off.align_window_div = 0;
      aligned += make_plan(off, lens, block_size, max_blocks, max_seen).v.header[kHdrNumCtas] != p.v.header[kHdrNumCtas];
    }
  }
  EXPECT_GT(aligned, 5) << "the fuzz should reach plans that aligned budgets change";
}

TEST(PlannerTwin, NoPairReachesTheSliceThresholdUnderASliceFreeBound) {
  // slice_free_launch (heuristics.h) runs the 16-row kernels without the sliced merge when the caller's bound
  // is below kSliceMinPieces tiles: the plans of such batches must then hold no pair of kSliceMinPieces pieces,
  // at any CTA count (up to 1024 resident CTAs), minimum work, chunk limit, head count and block size
  std::mt19937 rng(63);
  const int bound = (kSliceMinPieces - 1) * kTileTokens;
  ASSERT_TRUE(slice_free_launch(bound));
  int most = 0;
  for (int iter = 0; iter < 400; ++iter) {
    const int H = 1 + rng() % 4;
    const int batch = 1 + (iter % 4 == 0 ? rng() % 512 : rng() % 16);
    const int block_size = 16 << (rng() % 4);
    const int max_blocks = (bound + block_size - 1) / block_size;
    const int sm_ctas = 1 + rng() % 1024;
    const DType kv = iter % 2 ? DType::kFP8E4M3 : DType::kBF16;
    DecodePlanConfig cfg =
        make_decode_plan_config_for(batch, H * (1 + rng() % 4), H, kv, 1, PlanMode::kDynamic, sm_ctas);
    if (iter % 3 == 1) cfg.min_tiles_per_cta = 1;
    if (iter % 5 == 2) cfg.max_chunks_per_cta = static_cast<int>(rng() % 4);
    std::vector<int32_t> lens(batch);
    for (auto& l : lens) l = iter % 2 ? bound - static_cast<int32_t>(rng() % 3) : 1 + static_cast<int32_t>(rng() % bound);
    const Plan p = make_plan(cfg, lens, block_size, max_blocks, bound);
    ASSERT_NO_FATAL_FAILURE(check_invariants(p, lens, block_size, max_blocks)) << "iter " << iter;
    for (int q = 0; q < batch * H; ++q) {
      ASSERT_LT(p.v.pair_num_pieces[q], kSliceMinPieces) << "iter " << iter << " pair " << q;
      most = std::max(most, p.v.pair_num_pieces[q]);
    }
  }
  EXPECT_GE(most, kSliceMinPieces - 8) << "the fuzz should reach pairs split nearly tile by tile";
}

TEST(PlannerTwin, ClampsLengthsBeyondTheBlockTable) {
  const DecodePlanConfig cfg = make_decode_plan_config_for(4, 8, 1, DType::kBF16, 1, PlanMode::kDynamic, 132);
  const std::vector<int32_t> lens = {-3, 100, 1000000, 64};
  const Plan p = make_plan(cfg, lens, 64, 4, 0);  // capacity 256 tokens
  ASSERT_NO_FATAL_FAILURE(check_invariants(p, lens, 64, 4));
  EXPECT_NE(p.v.header[kHdrErrors] & kPlanErrorSeqLenClamped, 0);
  EXPECT_EQ(p.v.pair_tile_start[4], 0 + 2 + 4 + 1);
}

TEST(PlannerTwin, LongRequestIsSpreadOverAllCtas) {
  // one 128K request + 31 x 4K (the headline scenario): the dynamic plan uses every CTA with equal
  // budgets; the static plan gives the long request only a few pieces.
  // (aligned budgets off here: with them the plan takes 126 CTAs of 32 tiles, AlignedBudgets below)
  DecodePlanConfig dyn = make_decode_plan_config_for(32, 8, 1, DType::kBF16, 1, PlanMode::kDynamic, 132);
  dyn.align_window_div = 0;
  std::vector<int32_t> lens(32, 4096);
  lens[0] = 131072;
  const Plan p = make_plan(dyn, lens, 64, 2048, 131072);
  ASSERT_NO_FATAL_FAILURE(check_invariants(p, lens, 64, 2048));
  EXPECT_EQ(p.v.header[kHdrNumCtas], 132);
  EXPECT_GT(p.v.pair_num_pieces[0], 60);
  const DecodePlanConfig st = make_decode_plan_config_for(32, 8, 1, DType::kBF16, 1, PlanMode::kStatic, 132);
  const Plan s = make_plan(st, lens, 64, 2048, 131072);
  ASSERT_NO_FATAL_FAILURE(check_invariants(s, lens, 64, 2048));
  EXPECT_EQ(s.v.pair_num_pieces[0], 5);
}

TEST(PlannerTwin, LongPairsRunOnTheCappedCtas) {
  // 1 x 128K + 31 x 4K with two CTAs per SM resident and the long-pair cap at one per SM: 132 CTAs, and the
  // long request in half as many pieces as on 264
  std::vector<int32_t> lens(32, 4096);
  lens[0] = 131072;
  // (aligned budgets off: they would take 252 and 126 CTAs, AlignedBudgets below)
  DecodePlanConfig all = make_decode_plan_config_for(32, 8, 1, DType::kBF16, 1, PlanMode::kDynamic, 264);
  DecodePlanConfig cap = make_decode_plan_config_for(32, 8, 1, DType::kBF16, 1, PlanMode::kDynamic, 264, 132);
  all.align_window_div = cap.align_window_div = 0;
  const Plan pa = make_plan(all, lens, 64, 2048, 131072);
  const Plan pc = make_plan(cap, lens, 64, 2048, 131072);
  ASSERT_NO_FATAL_FAILURE(check_invariants(pc, lens, 64, 2048));
  EXPECT_EQ(pa.v.header[kHdrNumCtas], 264);
  EXPECT_EQ(pc.v.header[kHdrNumCtas], 132);
  EXPECT_LT(pc.v.pair_num_pieces[0], pa.v.pair_num_pieces[0]);
  // short pairs (32 x 128 + 32 x 4K) keep every CTA
  std::vector<int32_t> mix(64, 4096);
  for (int i = 0; i < 32; ++i) mix[i] = 128;
  const DecodePlanConfig cap64 = make_decode_plan_config_for(64, 8, 1, DType::kBF16, 1, PlanMode::kDynamic, 264, 132);
  const Plan pm = make_plan(cap64, mix, 64, 64, 4096);
  ASSERT_NO_FATAL_FAILURE(check_invariants(pm, mix, 64, 64));
  EXPECT_EQ(pm.v.header[kHdrNumCtas], 264);
  // the cap must fit the config
  EXPECT_THROW(make_decode_plan_config_for(32, 8, 1, DType::kBF16, 1, PlanMode::kDynamic, 132, 133), Error);
  EXPECT_THROW(make_decode_plan_config_for(32, 8, 1, DType::kBF16, 1, PlanMode::kDynamic, 132, -1), Error);
  // partial buffers beyond 2^32 floats (the merge's 32-bit offsets): 2 x 131072 slots x 128 rows x 128 dims
  EXPECT_THROW(make_decode_plan_config_for(32, 16, 1, DType::kBF16, 8, PlanMode::kDynamic, 131072), Error);
  EXPECT_NO_THROW(make_decode_plan_config_for(32, 16, 1, DType::kBF16, 8, PlanMode::kDynamic, 131071));
  EXPECT_NO_THROW(make_decode_plan_config_for(49152, 16, 1, DType::kBF16, 8, PlanMode::kStatic, 2048));
}

TEST(PlannerTwin, CrowdedShortRequestsGetMoreCtas) {
  // skewed_extreme (1 x 16K + 15 x 64 tokens): 271 tiles; the minimum work gives 67 CTAs, whose last four walk
  // 4-5 one-tile requests each; the chunk rule doubles to 134 (at most 3 chunks in a CTA; at most 2: the cap)
  std::vector<int32_t> lens(16, 64);
  lens[0] = 16384;
  const DecodePlanConfig cfg = make_decode_plan_config_for(16, 8, 1, DType::kBF16, 1, PlanMode::kDynamic, 264);
  ASSERT_EQ(cfg.max_chunks_per_cta, kMaxChunksPerCta);
  // the plan of this batch with the chunk limit set to `limit`, its invariants checked
  auto plan_with_limit = [&](int limit) {
    DecodePlanConfig c = cfg;
    c.max_chunks_per_cta = limit;
    Plan q = make_plan(c, lens, 64, 256, 16384);
    check_invariants(q, lens, 64, 256);
    return q;
  };
  const Plan p = plan_with_limit(kMaxChunksPerCta);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(dynamic_num_ctas(271, 264), 67);
  EXPECT_EQ(p.v.header[kHdrNumCtas], 134);
  EXPECT_EQ(max_chunks_by_walk(p.v.pair_tile_start, 16, 271, 134), 3);
  const Plan p2 = plan_with_limit(2);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(p2.v.header[kHdrNumCtas], 264);
  EXPECT_LE(max_chunks_by_walk(p2.v.pair_tile_start, 16, 271, 264), 2);
  // the rule off (profiling switch HOPPERKIT_DECODE_MAX_CHUNKS=0): the minimum-work count
  const Plan p0 = plan_with_limit(0);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(p0.v.header[kHdrNumCtas], 67);
  EXPECT_EQ(max_chunks_by_walk(p0.v.pair_tile_start, 16, 271, 67), 5);
  // a batch of 8 one-token requests: 8 tiles, 2 CTAs by the minimum work (4 chunks each), 4 CTAs of 2
  const std::vector<int32_t> ones(8, 1);
  const Plan p8 = make_plan(cfg, ones, 64, 1, 1);
  ASSERT_NO_FATAL_FAILURE(check_invariants(p8, ones, 64, 1));
  EXPECT_EQ(p8.v.header[kHdrNumCtas], 4);
  // FP8 KV limits a CTA to 2 chunks by default (kMaxChunksPerCtaFp8): skewed_extreme runs on all 264 CTAs, none
  // walking more than 2 requests; its minimum work (2 tiles per CTA) gives 135 CTAs
  const DecodePlanConfig f8 = make_decode_plan_config_for(16, 8, 1, DType::kFP8E4M3, 1, PlanMode::kDynamic, 264);
  EXPECT_EQ(f8.max_chunks_per_cta, kMaxChunksPerCtaFp8);
  EXPECT_EQ(kMaxChunksPerCtaFp8, 2);
  const Plan pf = make_plan(f8, lens, 64, 256, 16384);
  ASSERT_NO_FATAL_FAILURE(check_invariants(pf, lens, 64, 256));
  EXPECT_EQ(pf.v.header[kHdrNumCtas], 264);
  EXPECT_LE(max_chunks_by_walk(pf.v.pair_tile_start, 16, 271, 264), 2);
}

TEST(PlannerTwin, ChunkRuleLeavesAlignedAndLargeBatchesAlone) {
  const DecodePlanConfig cfg = make_decode_plan_config_for(256, 8, 1, DType::kBF16, 1, PlanMode::kDynamic, 264);
  // uniform_512: 64 pairs of 8 tiles, 128 CTAs of one chunk each
  const std::vector<int32_t> u512(64, 512);
  const Plan pu = make_plan(cfg, u512, 64, 8, 512);
  ASSERT_NO_FATAL_FAILURE(check_invariants(pu, u512, 64, 8));
  EXPECT_EQ(pu.v.header[kHdrNumCtas], 128);
  // skewed_mix (32 x 128 + 32 x 4K) already uses every CTA: nothing to grow
  std::vector<int32_t> mix(64, 4096);
  for (int i = 0; i < 32; ++i) mix[i] = 128;
  const Plan pm = make_plan(cfg, mix, 64, 64, 4096);
  ASSERT_NO_FATAL_FAILURE(check_invariants(pm, mix, 64, 64));
  EXPECT_EQ(pm.v.header[kHdrNumCtas], 264);
  // 256 x 4K: 256 CTAs of one 64-tile pair each (aligned budgets, the default), 264 with them off
  const std::vector<int32_t> big(256, 4096);
  const Plan pb = make_plan(cfg, big, 64, 64, 4096);
  ASSERT_NO_FATAL_FAILURE(check_invariants(pb, big, 64, 64));
  EXPECT_EQ(pb.v.header[kHdrNumCtas], 256);
  DecodePlanConfig off = cfg;
  off.align_window_div = 0;
  const Plan po = make_plan(off, big, 64, 64, 4096);
  ASSERT_NO_FATAL_FAILURE(check_invariants(po, big, 64, 64));
  EXPECT_EQ(po.v.header[kHdrNumCtas], 264);
}

TEST(PlannerTwin, EmptyBatchAndAllEmpty) {
  const DecodePlanConfig cfg = make_decode_plan_config_for(8, 8, 2, DType::kFP8E4M3, 2, PlanMode::kDynamic, 132);
  const std::vector<int32_t> none;
  const Plan p0 = make_plan(cfg, none, 16, 1, 0);
  EXPECT_EQ(p0.v.header[kHdrNumCtas], 0);
  const std::vector<int32_t> zeros(8, 0);
  const Plan p1 = make_plan(cfg, zeros, 16, 1, 0);
  ASSERT_NO_FATAL_FAILURE(check_invariants(p1, zeros, 16, 1));
  EXPECT_EQ(p1.v.header[kHdrNumEmpty], 16);
}

TEST(PlannerTwin, AlignedBudgets) {
  // the decode scenarios' batches (block 64, one KV head): the CTA count and the pieces of the longest pair
  auto plan_of = [](const std::vector<int32_t>& lens, DType kv, int max_ctas, int long_ctas, int div) {
    DecodePlanConfig cfg = make_decode_plan_config_for(static_cast<int>(lens.size()), 8, 1, kv, 1,
                                                       PlanMode::kDynamic, max_ctas, long_ctas);
    cfg.align_window_div = div;
    int max_len = 0;
    for (int32_t l : lens) max_len = std::max(max_len, l);
    Plan p = make_plan(cfg, lens, 64, (max_len + 63) / 64, max_len);
    check_invariants(p, lens, 64, (max_len + 63) / 64);
    return p;
  };
  auto with_long = [](int long_len, int n_long, int n_4k) {
    std::vector<int32_t> lens(n_long, long_len);
    lens.insert(lens.end(), n_4k, 4096);
    return lens;
  };
  const DType F8 = DType::kFP8E4M3, B16 = DType::kBF16;
  struct Want {
    std::vector<int32_t> lens;
    DType kv;
    int long_ctas, ctas, ctas_off;
  };
  const std::vector<Want> wants = {
      {std::vector<int32_t>(64, 4096), F8, 0, 256, 264},   // uniform_4096: 4 pieces of 16 tiles per pair
      {with_long(65536, 1, 15), F8, 0, 248, 264},          // one_64k_15x4k: 1984 tiles, budgets of 8
      {with_long(65536, 1, 7), F8, 0, 253, 264},           // one_64k_7x4k: 1472 tiles = 253 x 64 / 11
      {with_long(131072, 1, 31), F8, 0, 252, 264},         // one_128k_31x4k: 4032 tiles, budgets of 16
      {with_long(32768, 2, 30), F8, 0, 264, 264},          // two_32k_30x4k: 46 x 64 tiles; 230 is past the window
      {with_long(65536, 1, 31), F8, 0, 235, 264},          // one_64k_31x4k: 3008 = 47 x 64 tiles, budgets of 64 / 5
      {[] {  // an empty request, then 63 of 47 tiles: the common count of the non-empty pairs (Q = 63)
         std::vector<int32_t> l(64, 3000);
         l[0] = 0;
         return l;
       }(),
       F8, 0, 252, 264},
      {std::vector<int32_t>(64, 4096), B16, 132, 256, 264},  // BF16 uniform: not under the long-pair cap
      {with_long(131072, 1, 31), B16, 132, 126, 132},        // BF16 under the long-pair cap
      {with_long(65536, 1, 15), B16, 132, 124, 132},
      {with_long(65536, 1, 7), B16, 132, 132, 132},
      // BF16 without the cap (the default since session 62): every resident CTA, aligned as FP8 (budgets of >= 4)
      {with_long(131072, 1, 31), B16, 0, 252, 264},
      {with_long(65536, 1, 15), B16, 0, 248, 264},
      {std::vector<int32_t>(16, 8192), B16, 0, 256, 264},  // 16 pairs of 128 tiles: Q 16
  };
  for (size_t i = 0; i < wants.size(); ++i) {
    const Want& w = wants[i];
    const Plan on = plan_of(w.lens, w.kv, 264, w.long_ctas, kAlignWindowDiv);
    ASSERT_FALSE(HasFatalFailure()) << "case " << i;
    EXPECT_EQ(on.v.header[kHdrNumCtas], w.ctas) << "case " << i;
    const Plan off = plan_of(w.lens, w.kv, 264, w.long_ctas, 0);
    ASSERT_FALSE(HasFatalFailure()) << "case " << i;
    EXPECT_EQ(off.v.header[kHdrNumCtas], w.ctas_off) << "case " << i;
    if (w.ctas != w.ctas_off) {
      EXPECT_LT(on.v.pair_num_pieces[w.lens.size() - 1], off.v.pair_num_pieces[w.lens.size() - 1]) << "case " << i;
    }
  }
  // batches no count aligns: short pairs next to each other (skewed_mix), ragged lengths, uniform_512 (already
  // aligned at the minimum work's count)
  std::vector<int32_t> mix(64, 4096);
  for (int i = 0; i < 32; ++i) mix[i] = 128;
  EXPECT_EQ(plan_of(mix, F8, 264, 0, kAlignWindowDiv).v.header[kHdrNumCtas], 264);
  EXPECT_EQ(plan_of(std::vector<int32_t>(64, 512), F8, 264, 0, kAlignWindowDiv).v.header[kHdrNumCtas], 256);
  std::mt19937 rng(7);
  std::vector<int32_t> ragged(64);
  for (auto& l : ragged) l = 2048 + static_cast<int32_t>(rng() % 4096);
  EXPECT_EQ(plan_of(ragged, F8, 264, 0, kAlignWindowDiv).v.header[kHdrNumCtas], 264);
}

TEST(PlannerTwin, AlignedUnitAndCounts) {
  // dynamic_align_unit(or, min over non-zero, max): the count when every non-empty pair has the same, else the
  // lowest set bit of the OR
  EXPECT_EQ(dynamic_align_unit(0u, 0xffffffffu, 0u), 0);  // no tiles
  EXPECT_EQ(dynamic_align_unit(47u, 47u, 47u), 47);       // uniform 47-tile pairs (empty ones beside them too)
  EXPECT_EQ(dynamic_align_unit(1024u | 64u, 64u, 1024u), 64);  // one 64K request beside 4K ones
  EXPECT_EQ(dynamic_align_unit(96u | 48u, 48u, 96u), 16);  // a weaker unit than the gcd (48): sound, fewer counts
  EXPECT_EQ(dynamic_align_unit(5u | 8u, 5u, 8u), 1);
  // dynamic_aligned_ctas: the largest multiple of T / D within C / div below C
  EXPECT_EQ(dynamic_aligned_ctas(264, 4096, 64, 8), 256);   // Q 64
  EXPECT_EQ(dynamic_aligned_ctas(264, 3008, 64, 8), 235);   // Q 47
  EXPECT_EQ(dynamic_aligned_ctas(264, 2944, 64, 8), 264);   // Q 46: 230 is past the window (33)
  EXPECT_EQ(dynamic_aligned_ctas(264, 2944, 64, 7), 230);   // window 37
  EXPECT_EQ(dynamic_aligned_ctas(264, 4096, 64, 0), 264);   // off
  EXPECT_EQ(dynamic_aligned_ctas(264, 6400, 1, 8), 264);    // Q > C
  EXPECT_EQ(dynamic_aligned_ctas(256, 512, 8, 8), 256);     // already a multiple
  EXPECT_EQ(dynamic_aligned_ctas(1, 64, 64, 8), 1);
  // every count it returns starts every pair at a CTA start, on random batches whose counts share a unit
  std::mt19937 rng(99);
  int changed = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const int unit = 1 + static_cast<int>(rng() % 70);
    const int P = 1 + static_cast<int>(rng() % 300);
    std::vector<int32_t> prefix(P + 1, 0);
    uint32_t tiles_or = 0, tiles_max = 0, tiles_min = 0xffffffffu;
    for (int q = 0; q < P; ++q) {
      const int mult = iter % 3 == 0 ? 1 : 1 + static_cast<int>(rng() % (iter % 2 ? 3 : 40));  // 1: uniform
      const int t = rng() % 6 == 0 ? 0 : unit * mult;
      prefix[q + 1] = prefix[q] + t;
      tiles_or |= static_cast<uint32_t>(t);
      tiles_max = std::max<uint32_t>(tiles_max, t);
      if (t != 0) tiles_min = std::min<uint32_t>(tiles_min, t);
    }
    const int T = prefix[P];
    const int D = dynamic_align_unit(tiles_or, tiles_min, tiles_max);
    if (T == 0) ASSERT_EQ(D, 0);
    if (T < 2) continue;
    ASSERT_EQ(T % D, 0);
    const int C = 2 + static_cast<int>(rng() % std::min(T - 1, 999));  // 2..T, as dynamic plans
    const int div = 1 + static_cast<int>(rng() % 16);
    const int c = dynamic_aligned_ctas(C, T, D, div);
    ASSERT_LE(c, C);
    ASSERT_GE(c, C - C / div);
    if (c != C) {
      ++changed;
      ASSERT_TRUE(all_pairs_start_ctas(prefix.data(), P, T, c)) << "T " << T << " C " << C << " D " << D;
    }
  }
  EXPECT_GT(changed, 100);
}

TEST(PlannerTwin, PlanBlockSize) {
  // the 256-thread plan block takes batches of at most 512 pairs (measured crossover, plan_limits.h); its scan
  // covers them in one pass (4 pairs per thread)
  static_assert(kPlanSmallMaxPairs <= kPlanThreadsSmall * kPlanItemsPerThread, "one scan pass");
  EXPECT_EQ(plan_threads(0), kPlanThreadsSmall);
  EXPECT_EQ(plan_threads(256), kPlanThreadsSmall);
  EXPECT_EQ(plan_threads(512), kPlanThreadsSmall);
  EXPECT_EQ(plan_threads(513), kPlanThreads);
  EXPECT_EQ(plan_threads(kMaxPlanPairs), kPlanThreads);
}
