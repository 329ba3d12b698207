// hopperkit decode attention: the scheduling heuristics, shared by the device planner, its CPU twin and the
// attention kernel. Pure integer functions of their arguments; unit-tested on the CPU.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HK_HD __host__ __device__ __forceinline__
#else
#define HK_HD inline
#endif

namespace hopperkit {
namespace decode {

constexpr int kTileTokens = 64;    // KV tokens per tile: the unit of scheduling and of one pipeline stage
constexpr int kHeadDim = 128;      // the only head dim supported
constexpr int kMaxQLen = 8;        // query tokens per request (speculative decoding / MTP)
constexpr int kMaxGroup = 16;      // query heads per KV head
constexpr int kMaxRows = kMaxQLen * kMaxGroup;  // query rows of one (request, KV head) pair
// L2 promotion of the K / V tensor maps, bytes (0 = none; the TMA boxes read 128-byte rows). Session 37 (same
// build, vLLM's shapes): 128 B against the 256 B used before, 0.988x geomean over 36 points, 64 x 4K FP8 KV with
// 8 KV heads 0.938x (its 128-byte rows are one head of a token: 256 B also pulled the next head's row into L2);
// no promotion measured the same as 128 B. HOPPERKIT_DECODE_L2PROMO = 0 / 64 / 128 / 256 overrides it (profiling).
constexpr int kKvL2PromotionBytes = 128;
// Minimum tiles per CTA in dynamic mode: below this a CTA spends more on start-up and on the merge of its
// partial result than on reading KV, so short batches use fewer CTAs instead of splitting further (unless
// that would leave a CTA walking more than kMaxChunksPerCta chunks, see dynamic_next_ctas).
constexpr int kMinTilesPerCta = 4;
// FP8 KV: an FP8 tile is half the bytes at about a BF16 tile's latency (a lone CTA streams one per ~0.7 us), so
// the dynamic plan spreads short batches over more CTAs. Session 17's decode.json: the static plan (2 tiles per
// CTA at uniform_512) beat the dynamic one (4) on FP8, 10.97 vs 11.28 us, and lost on BF16, 12.25 vs 11.97.
// Measured on an H200 (session 19, run 2, FP8 KV, against 4): uniform_512 10.67 vs 11.27 us (0.947x), the other
// FP8 scenarios 0.997-1.005x; on the same build 1 tile gave 13.48 us and 3 gave 14.64 us at uniform_512.
constexpr int kMinTilesPerCtaFp8 = 2;
// The largest minimum a plan config accepts (the profiling switch below it, HOPPERKIT_DECODE_MIN_TILES).
constexpr int kMaxMinTilesPerCta = 64;
// Static split-KV baseline: at most this many splits per pair.
constexpr int kMaxStaticSplits = 64;

// Pieces of a split pair are merged in groups of this many (the last piece of a group merges the group,
// the last group merges the groups), so no CTA reads more than max(kMergeGroup, pieces / kMergeGroup)
// partials.
constexpr int kMergeGroup = 8;

// Long pairs merge in one level over their last kSliceMergers arrivers instead of two (merge_slice in
// src/decode/attention_kernel.cuh): each merger takes a 16th of the pair's rows x dims over all its pieces, and
// all but the last arrival wait for it. Only where every piece runs on its own resident CTA (ChunkInfo::no_wait
// = 0: a dynamic plan not claimed by SM; by-SM plans run several items on one CTA in turn and a static grid may exceed
// the resident CTAs, so a wait there could deadlock), at most kSliceMaxRows query rows (the 16-row variants), and
// from kSliceMinPieces pieces. Measured on an H200 (session 61 calls 3-4, against two levels): from 16 pieces,
// skewed_extreme BF16 0.910x (127 pieces), one_64k_7x4k FP8 0.973x (183), but two_32k_30x4k FP8 1.015x (~70 per
// long pair, whose merges do not end the launch there); from 96: 0.912x / 0.972x, geomean 0.995 over 18 points.
// Session 62 (calls 1 and 4, the mended form): geomean 1.001-1.002 with the BF16 long-pair cap (which keeps BF16's
// long batches on two levels), 0.993 with it off (BF16 one_64k_7x4k 0.950x, skewed_extreme 0.935x; uniform_512
// 1.022x from the 16-row kernels' new schedule), hence the cap off by default. Session 63 call 1 (with
// slice_free_launch): from 72 pieces instead of 96, one_64k_31x4k (80 pieces) BF16 0.940x, FP8 0.986x, the other 16
// points 0.98-1.00x (geomean 0.992 against 0.996 from 96).
constexpr int kSliceMergers = 16;
constexpr int kSliceMinPieces = 72;
constexpr int kSliceMaxRows = 16;
static_assert(kSliceMinPieces >= kSliceMergers, "the mergers are the last kSliceMergers arrivals of distinct pieces");
// Whether a split pair of `pieces` pieces and `rows` query rows (q_len x group, or the variant's padded rows)
// merges in slices where its pieces are resident (the kernel tests that flag after this rule).
HK_HD bool slice_merge(int pieces, int rows) { return pieces >= kSliceMinPieces && rows <= kSliceMaxRows; }

enum class PlanMode : int32_t { kDynamic = 0, kStatic = 1 };

// Pair order. A pair is (request b, KV head h). Dynamic plans number them KV head major, p = h x batch + b, and
// take a CTA count that is a multiple of the KV heads (dynamic_head_aligned_ctas), so that each head's pairs fill
// the same share of the CTAs with the same budgets: the CTAs that read head h of a request's token range run at
// the same time as those reading its other heads, and each page's rows (all KV heads of 64 tokens, NHD) are read
// together. Static plans keep request major order (p = b x H + h), under which a launch's first CTAs read all
// heads of the first requests together anyway. Measured on an H200 (session 36 call 3, vLLM's 64 x 4K decode
// shape, 64 query / 8 KV heads, request-major dynamic plan): FP8 KV 188.8 us against the static plan's 140.0
// (each CTA's 124-tile budget started at a different offset of a different head's pages), BF16 267.9 / 263.5;
// head major (call 4, cross-build A/B): FP8 185.1 -> 142.9 us, BF16 262.0 -> 258.6, 32 x 4 x 2K BF16 0.948x.
HK_HD bool head_major_pairs(int mode) { return mode == static_cast<int>(PlanMode::kDynamic); }
// Request and KV head of pair p (batch requests, H KV heads).
HK_HD void pair_coords(int p, int batch, int H, bool head_major, int& b, int& h) {
  if (head_major) {
    h = p / batch;
    b = p - h * batch;
  } else {
    b = p / H;
    h = p - b * H;
  }
}
// Dynamic mode: the CTA count made a multiple of the KV heads: rounded up where the cap and the minimum tiles per
// CTA allow (more CTAs never crowd one with chunks, dynamic_next_ctas), else down; unchanged for one head or at
// most H CTAs.
HK_HD int dynamic_head_aligned_ctas(int C, int H, int cap, int total_tiles, int min_tiles) {
  if (H <= 1 || C <= H || C % H == 0) return C;
  const int up = C + (H - C % H);
  const int m = min_tiles > 0 ? min_tiles : 1;
  return up <= cap && static_cast<int64_t>(up) * m <= total_tiles ? up : C - C % H;
}

// Tiles of a sequence of `len` cached tokens (0 for len <= 0).
HK_HD int num_tiles(int64_t len) { return len <= 0 ? 0 : static_cast<int>((len + kTileTokens - 1) / kTileTokens); }

// Whether a dynamic step whose requests all hold at most `max_seq_len` tokens (the caller's host bound,
// DecodePlanParams::max_seq_len; 0 = not given) may run the 16-row kernels without the sliced merge: a piece
// holds at least one tile, so no pair then reaches kSliceMinPieces pieces (up to 4544 tokens), and both kernels
// give the same output (session 62: the slice path cost 1-2% at points where it never runs).
HK_HD bool slice_free_launch(int max_seq_len) { return max_seq_len > 0 && num_tiles(max_seq_len) < kSliceMinPieces; }

// Query rows of one pair, rounded up to what a kernel variant handles: 16, 32, 64 or 128; -1 if too many.
HK_HD int rows_bucket(int rows) {
  return rows <= 16 ? 16 : rows <= 32 ? 32 : rows <= 64 ? 64 : rows <= 128 ? 128 : -1;
}

// Dynamic mode: the number of CTAs that share `total_tiles` tiles. Every CTA gets at least `min_tiles` tiles
// (kMinTilesPerCta, kMinTilesPerCtaFp8: DecodePlanConfig::min_tiles_per_cta; one CTA takes everything when there
// are fewer), and no more CTAs than fit on the GPU at once.
HK_HD int dynamic_num_ctas(int64_t total_tiles, int max_ctas, int min_tiles = kMinTilesPerCta) {
  if (total_tiles <= 0 || max_ctas <= 0) return 0;
  const int m = min_tiles > 0 ? min_tiles : 1;
  // the cap first, so that the division is a 32-bit one (a 64-bit division by a run-time value is a called
  // routine in the planner's SASS: session 19 measured the plan 0.13 us slower with it)
  if (total_tiles >= static_cast<int64_t>(max_ctas) * m) return max_ctas;
  const int by_work = static_cast<int>(total_tiles) / m;
  return by_work < 1 ? 1 : by_work;
}

// Dynamic mode, BF16 KV, under the opt-in long-pair cap (HOPPERKIT_DECODE_LONG_CTAS=1 since session 62): when the
// pairs average at least this many tiles, the plan spreads them over one CTA per SM instead of every resident CTA
// (config.long_pair_ctas). Long pairs keep a CTA's pipeline streaming, so
// the second CTA per SM buys little latency hiding, while halving the CTAs halves the pieces of every split
// pair and the partials merged at the end. Short pairs lose: each CTA then walks twice as many chunks one
// after another. Measured on an H200 (session 8, same build, 1 vs 2 CTAs per SM): BF16 0.88-0.97x the time on
// the scenarios with 64-184 tiles per pair, 1.04-1.14x at 17-33, 1.00x at 8; FP8 KV lost at 64+ (1.09-1.16x).
// Uniform batches of at least kUniformMinPairs pairs (every non-empty pair the same tile count; empty pairs count
// towards the number) are not capped
// since session 37: with aligned budgets and L2 promotion 128 B, the cap off (same build, call 6) took
// uniform_4096 BF16 (64 pairs) 0.961x and vLLM's 64 x 4K with 8 KV heads (512 pairs) 0.961x, while it cost the
// one-long-request scenarios 1.004-1.011x (their cap stays). Fewer equal pairs (down to one long request, whose
// pieces the cap halves) were not measured without it: the cap stays for them.
// Since session 39 (config.long_pair_rule = kLongPairRuleRounds, the default) the cap applies, uniform batch or
// not, where it takes the longest pair's merge to fewer dependent rounds (merge_rounds) and either to a single
// one or for a pair that holds at least 1 / kLongPairDominantDiv of the tiles: halving the CTAs halves its
// pieces, and what the second CTA per SM buys otherwise (more warps streaming) was worth more wherever the rounds
// stayed the same, and where several long pairs went from 2 to 3 rounds. Same build, BF16, time without the cap
// / with it (the longest pair's estimated pieces with / without it; bench/scenarios/decode_long_cap.json,
// session 39 calls 1-3, in the notes): no change in rounds, 2 x 32K + 30 x 4K 0.978-0.982 (22 / 45), 4 x 16K +
// 28 x 4K 0.964, 8 x 8K + 24 x 2K 0.975-0.984, 8 x 16K uniform 0.975 (16 / 33), 1 x 16K + 31 x 4K 0.987; 2 -> 3
// rounds for several long pairs: 2 x 64K + 30 x 4K 0.980-0.985 (34 / 68), 3 x 32K + 13 x 2K 0.976-0.978, 4 x 32K
// 0.987-0.993, 2 x 48K + 20 x 4K 0.985; but 1 -> 2 rounds: 16 x 8K uniform 1.027-1.028 (8 / 16), 16 x 8K + 16 x
// 16K 1.010-1.014 (5 / 11), 12 x 8K + 20 x 4K 1.008; and one dominant pair: 1 x 64K + 31 x 4K 1.010-1.037 (44 /
// 89), 1 x 32K + 15 x 4K 1.005-1.009 (and 0.998-1.001 at 1 x 64K + 24 x 4K, 1 x 48K + 40 x 2K, 3 x 32K). Its
// first form (fewer rounds alone) missed three of call 2's held-out batches (the 2 -> 3-round ones above); this
// form held on call 3's new ones. kLongPairRuleUniform is session 37's rule (HOPPERKIT_DECODE_LONG_RULE=0).
constexpr int kLongPairTiles = 48;
constexpr int kUniformMinPairs = 32;
constexpr int kLongPairRuleUniform = 0;  // session 37: not for uniform batches of >= kUniformMinPairs pairs
constexpr int kLongPairRuleRounds = 1;   // session 39: where it saves merge rounds (above)
constexpr int kLongPairDominantDiv = 3;

// Dependent rounds of partial loads that merging `pieces` pieces of a pair takes in the BF16 16-row variants (the
// long-pair cap's only users): one per level-1 group (kMergeGroup pieces), then the groups, kMergeGroup at a time
// (merge_slots<2, 8, false>; FP8 KV merges 16 per round in groups of 16, DecodeTraits::kMergeGroup).
HK_HD int merge_rounds(int64_t pieces) {
  if (pieces <= kMergeGroup) return 1;
  const int64_t groups = (pieces + kMergeGroup - 1) / kMergeGroup;
  return 1 + static_cast<int>((groups + kMergeGroup - 1) / kMergeGroup);
}

// merge_rounds(floor(x / t)) for t > 0, x >= 0, by products and comparisons only (the plan kernel's form: a
// division there cost it ~0.3-0.6 us, session 39 call 4). floor(x / t) <= n exactly when x < (n + 1) t; above
// kMergeGroup pieces the rounds are 1 + ceil(pieces / kMergeGroup^2).
HK_HD int merge_rounds_of_share(int64_t x, int64_t t) {
  constexpr int64_t kStep = static_cast<int64_t>(kMergeGroup) * kMergeGroup;
  if (x < (kMergeGroup + 1) * t) return 1;
  int rounds = 2;
  for (int64_t n = kStep; x >= (n + 1) * t; n += kStep) ++rounds;
  return rounds;
}

// Whether every non-empty pair has the same tile count (from dynamic_align_add's three reductions; false with
// no tiles).
HK_HD bool dynamic_uniform_pairs(uint32_t tiles_or, uint32_t min_nonzero, uint32_t max) {
  return tiles_or != 0u && min_nonzero == max;
}

// Dynamic mode: the CTA cap for a batch of `num_pairs` pairs holding `total_tiles` tiles: `long_pair_ctas` when
// that is set (> 0; since session 62 the planner sets it, for BF16 KV, only under HOPPERKIT_DECODE_LONG_CTAS=1),
// the pairs average >= kLongPairTiles tiles and, by `rule`: (kLongPairRuleRounds) the longest pair
// (`max_pair_tiles`) merges in fewer rounds at its share of long_pair_ctas than of max_ctas CTAs (its pieces
// estimated as max_pair_tiles x CTAs / total_tiles, rounded down: aligned budgets take up to C / 8 fewer CTAs),
// in one round or holding >= 1 / kLongPairDominantDiv of the tiles; (kLongPairRuleUniform) they are not a
// uniform batch of at least kUniformMinPairs pairs (`uniform`: dynamic_uniform_pairs). Else `max_ctas`.
// The long-pair cap's CTA count (DecodePlanConfig::long_pair_ctas) for a device of `sms` SMs running `per_sm`
// attention CTAs each: one per SM for BF16 KV where two or more fit, only when `switch_value` (the planner's
// HOPPERKIT_DECODE_LONG_CTAS, default kLongPairCapDefault) is nonzero; else 0 (no cap). Off by default since
// session 62 (the sliced merge; docs/decode_attention.md, Measurements, session 62).
constexpr int kLongPairCapDefault = 0;
HK_HD int long_pair_cta_count(int switch_value, bool bf16_kv, int per_sm, int sms) {
  return switch_value != 0 && bf16_kv && per_sm >= 2 ? sms : 0;
}

HK_HD int dynamic_cta_cap(int64_t total_tiles, int num_pairs, int max_ctas, int long_pair_ctas, bool uniform,
                          int64_t max_pair_tiles, int rule) {
  if (long_pair_ctas <= 0 || long_pair_ctas >= max_ctas || num_pairs <= 0 ||
      total_tiles < static_cast<int64_t>(kLongPairTiles) * num_pairs) {
    return max_ctas;
  }
  bool cap;
  if (rule == kLongPairRuleRounds) {
    const int rounds_capped = merge_rounds_of_share(max_pair_tiles * long_pair_ctas, total_tiles);
    cap = rounds_capped < merge_rounds_of_share(max_pair_tiles * max_ctas, total_tiles) &&
          (rounds_capped == 1 || max_pair_tiles * kLongPairDominantDiv >= total_tiles);
  } else {
    cap = !(uniform && num_pairs >= kUniformMinPairs);
  }
  return cap ? long_pair_ctas : max_ctas;
}

// Dynamic mode: whether the attention CTAs claim the plan's C work items by SM (the first CTA resident on an
// SM claims items until none are left, the others exit): when the long-pair cap applies (C <= long_pair_ctas,
// the SM count) in a larger grid, so that the items run one per SM wherever the hardware placed the grid's
// blocks. A plan of C items in a larger grid otherwise runs on blocks 0..C-1, which the block scheduler does
// not place one per SM (session 8, run 3: the cap alone lost 3-4% on two_32k_30x4k / uniform_4096 where a
// launched one-per-SM grid won). Measured in session 8 run 6 (BF16): with the claims the cap is 5-11% faster
// than no cap on the four long-request scenarios and within 1-2% of a launched one-per-SM grid. Short batches
// (C < SMs because there are few tiles) are not claimed by SM: the claim's extra round trips (SM counter, item
// counter, item range) cost them 3-4.5% (uniform_512, skewed_extreme) in the same run.
// `cap`: the plan's dynamic_cta_cap (the planner and its twin pass the one they computed: evaluating the rule a
// second time cost the plan kernel 0.21-0.25 µs on BF16 long batches, session 40 call 1).
HK_HD bool dynamic_by_sm_at(int num_ctas, int max_ctas, int long_pair_ctas, int cap) {
  return long_pair_ctas > 0 && long_pair_ctas < max_ctas && num_ctas > 0 && num_ctas <= long_pair_ctas &&
         cap == long_pair_ctas;
}
// The same from a batch's figures (the CPU tests' form; the planner and its twin pass the cap they computed).
HK_HD bool dynamic_by_sm(int64_t total_tiles, int num_pairs, int num_ctas, int max_ctas, int long_pair_ctas,
                         bool uniform, int64_t max_pair_tiles, int rule) {
  return dynamic_by_sm_at(num_ctas, max_ctas, long_pair_ctas,
                          dynamic_cta_cap(total_tiles, num_pairs, max_ctas, long_pair_ctas, uniform, max_pair_tiles,
                                          rule));
}

// Dynamic mode: first linear tile of CTA i; budgets floor(T/C) or ceil(T/C), so equal within one tile.
// (Both in 32-bit arithmetic where the product fits, as it does for every plan of fewer than 2^32 / C tiles: on
// the GPU a 64-bit division is a subroutine call. Session 14 added it for the chunk rule's tests, suspecting
// them of the ~0.9 us the rule added to the plan; the plan's time did not change (runs 2 and 3), so the
// divisions were not the cost. Kept: exact, and what the GPU suite ran.)
HK_HD int64_t dynamic_cta_begin(int64_t i, int64_t total_tiles, int64_t num_ctas) {
  if (i >= 0 && i <= num_ctas && total_tiles * num_ctas <= 0xffffffffLL) {  // i * T <= C * T
    return static_cast<uint32_t>(i) * static_cast<uint32_t>(total_tiles) / static_cast<uint32_t>(num_ctas);
  }
  return (i * total_tiles) / num_ctas;
}

// Dynamic mode: the CTA whose range holds linear tile x (inverse of dynamic_cta_begin).
HK_HD int dynamic_cta_of_tile(int64_t x, int64_t total_tiles, int64_t num_ctas) {
  if (x >= 0 && x < total_tiles && total_tiles * num_ctas <= 0xffffffffLL) {  // (x + 1) * C <= T * C
    return static_cast<int>((static_cast<uint32_t>(x + 1) * static_cast<uint32_t>(num_ctas) - 1u) /
                            static_cast<uint32_t>(total_tiles));
  }
  return static_cast<int>(((x + 1) * num_ctas - 1) / total_tiles);
}

// Dynamic mode: a CTA walks its chunks (the pairs its tile range touches) one after another, and a chunk costs
// the consumers about three tiles' time on top of its own tiles (session 13's per-CTA trace: ~2.6 us for a
// one-tile chunk against ~0.7 us per further tile). With equal tile budgets, short requests that sit next to
// each other in the tile order crowd into a few CTAs: on skewed_extreme (1 x 16K + 15 x 64 tokens) the CTAs
// holding the 15 one-tile requests walked 4-5 chunks and finished at ~16 us while every other CTA had finished
// at ~8.6 us. So the plan doubles its CTA count (up to the cap) while some CTA would walk more than this many
// chunks. Measured on the H200 (session 14, run 1): at 2, skewed_extreme went from 67 to 264 CTAs and 16.38 /
// 17.97 us (BF16 / FP8) to 16.25 / 15.54; at 3 it stops at 134 CTAs and took 14.14 / 13.80 (0.870x / 0.888x
// the time at 2), every other scenario within 0.5%. (DecodePlanConfig::max_chunks_per_cta carries it, so that
// a profiling switch can change it for the planner and its twin alike; 0 turns the rule off.)
constexpr int kMaxChunksPerCta = 3;
// FP8 KV: 2. Its consumers' chunk costs the same ~2.6 us while its tiles are cheaper, so on skewed_extreme the CTA
// walking three one-tile requests, not the long pair's sliced merge, ends last (session 64's trace: it exits at
// 11.3 us, the slice mergers have stored by 10.2). Measured on the H200 (session 64 call 2, 4 rotated rounds, limit
// 2 against 3 on every scenario): FP8 skewed_extreme 10.54 -> 10.25 us (0.973x; 135 -> 264 CTAs, the long pair in 250
// sliced pieces), every other FP8 point 0.999-1.002x; BF16 skewed_extreme took 1.047x at 2 (its merge CTAs end
// last), so BF16 keeps 3.
constexpr int kMaxChunksPerCtaFp8 = 2;
// The largest limit a plan accepts (decode_plan checks it; with the pair count's own bound it keeps p + L in range).
constexpr int kMaxChunksLimit = 1 << 16;

// The pair holding linear tile x: the last pair p in [0, P) whose first tile prefix[p] <= x (prefix: the
// exclusive prefix of tiles per pair, P + 1 entries; an empty pair shares its start with the next pair).
HK_HD int pair_of_tile(const int* prefix, int P, int64_t x) {
  int lo = 0, hi = P;
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (prefix[mid] <= x) lo = mid; else hi = mid;
  }
  return lo;
}

// Chunks of CTA i in a dynamic plan of C CTAs over T tiles: the pairs its range touches (empty pairs between
// two of them, which the kernel skips, count too: an overestimate only in batches with empty requests).
HK_HD int dynamic_cta_chunks(const int* prefix, int P, int64_t T, int C, int i) {
  const int64_t b = dynamic_cta_begin(i, T, C), e = dynamic_cta_begin(i + 1, T, C);
  return e <= b ? 0 : pair_of_tile(prefix, P, e - 1) - pair_of_tile(prefix, P, b) + 1;
}

// The CTA count to try after C when some CTA of C walks too many chunks: twice as many, at most `cap` and at
// most one tile per CTA; 0 when C cannot grow.
HK_HD int dynamic_next_ctas(int C, int cap, int64_t T) {
  int64_t n = 2 * static_cast<int64_t>(C);
  if (n > cap) n = cap;
  if (n > T) n = T;
  return n > C ? static_cast<int>(n) : 0;
}

// The chunk rule seen from pair p, so that the device planner decides it with one thread per pair and no search:
// some CTA of a C-CTA plan walks more than L >= 1 chunks (dynamic_cta_chunks > L) exactly when, for some p with
// p + L < P, the last tile before prefix[p + 1] and tile prefix[p + L] (< T) fall in the same CTA. (That CTA
// touches a pair q <= p and the first non-empty pair at or after p + L; conversely, a CTA whose range runs from
// pair q to a pair >= q + L is found at p = q.) The twin walks the CTAs instead (dynamic_cta_chunks); a CPU test
// checks the two agree.
HK_HD bool dynamic_pair_crowds(const int* prefix, int P, int64_t T, int C, int L, int p) {
  if (L <= 0 || p < 0 || p + L >= P) return false;  // no overflow: L <= kMaxChunksLimit, p < P (checked by decode_plan)
  const int64_t last = static_cast<int64_t>(prefix[p + 1]) - 1, far = prefix[p + L];
  return last >= 0 && far < T && dynamic_cta_of_tile(last, T, C) == dynamic_cta_of_tile(far, T, C);
}

// Dynamic mode, aligned budgets: where a CTA count a little below the chosen one C makes every non-empty pair
// start where a CTA starts, the plan takes it: each CTA then walks one chunk, and a pair splits into as many
// pieces as its tiles span budgets, instead of most CTAs walking the end of one pair and the start of the next
// (two chunk epilogues, one more piece per pair to merge). Budgets stay equal within one tile.
// The rule in closed form: if a unit D divides every pair's tile count, every pair starts at a multiple of D, and
// with Q = T / D units in all, any count C' = m Q puts tile s exactly at the start of CTA i = (s / D) m (i T / C'
// = s). So the plan takes the largest multiple of Q at or below C, if it lies within C / div of C
// (dynamic_aligned_ctas). D is what the planner can learn in its first pass at no extra barrier
// (dynamic_align_unit): the pairs' tile count if every non-empty pair has the same, else the largest power of
// two that divides every count. It fires on uniform batches and on a long request beside uniform ones, of at
// most C non-empty pairs (Q is at least their number); on ragged batches D is small, Q > C and nothing changes.
// Measured on an H200 (session 30 call 5, window C / 8, same-build A/B against the rule off; that build tested
// every candidate count on every pair, which also found these counts): FP8 uniform_4096 (64 x 64 tiles, 256 CTAs
// of 16 instead of 264 of 15.5) 27.90 -> 25.13 us (0.901x), one_64k_15x4k (1024 + 15 x 64 tiles, 248 of 8) 22.12 ->
// 19.44 (0.879x), one_128k_31x4k 0.964x, one_64k_31x4k (235 CTAs) 0.981x, one_64k_7x4k 0.987x; BF16 under the
// long-pair cap (132 -> 128 / 124 / 126) uniform_4096 0.979x, one_64k_15x4k 0.987x, one_128k_31x4k 1.000x; every
// other point 0.993-1.004x. Counts far below the cap lose the tiles' parallelism (two_32k_30x4k FP8 on 184 CTAs:
// 1.051x, call 2, the minimum tiles per CTA forced), hence a window. That per-pair test cost the plan kernel
// 0.65-1.3 us (session 30; session 31 call 1, ncu: 13.7k -> 21.2k warp instructions at batch 256), the closed form
// 0.27-0.61 us on the 1024-thread plan block (session 31 call 3: 12.8k -> 15.2k), which is why it is on.
constexpr int kAlignWindowDiv = 8;            // the window measured (DecodePlanConfig::align_window_div; 0 = off)
constexpr int kMaxAlignWindowDiv = 1 << 16;   // the largest divisor a plan config accepts

// The unit of aligned budgets, from the OR, the minimum over non-zero ones and the maximum of the pairs' tile
// counts: the count itself when every non-empty pair has the same (min == max), else the lowest set bit of the OR
// (the largest power of two dividing every count); 0 when there are no tiles. (A common divisor, not always the
// greatest: pairs of 96 and 48 tiles get 16, not 48; sound, with fewer counts to choose from. Three reductions
// the planner's first pass makes at no extra barrier, where a gcd would cost a loop per step.)
// One pair's tile count into those three reductions (the device planner per thread, the CPU twin per pair).
HK_HD void dynamic_align_add(uint32_t tiles, uint32_t& tiles_or, uint32_t& min_nonzero, uint32_t& max) {
  tiles_or |= tiles;
  max = tiles > max ? tiles : max;
  min_nonzero = tiles != 0u && tiles < min_nonzero ? tiles : min_nonzero;
}
HK_HD int dynamic_align_unit(uint32_t tiles_or, uint32_t min_nonzero, uint32_t max) {
  if (tiles_or == 0u) return 0;
  if (min_nonzero == max) return static_cast<int>(max);
  return static_cast<int>(tiles_or & (0u - tiles_or));
}

// The CTA count after aligned budgets: the largest multiple of Q = T / D at or below C when it is at least
// C - C / div, else C (also when div <= 0: the rule off). D must divide T (dynamic_align_unit does).
HK_HD int dynamic_aligned_ctas(int C, int T, int D, int div) {
  // Q > C (no multiple) tested first, by a product: ragged batches skip both divisions (32-bit ones)
  if (div <= 0 || D <= 0 || C < 2 || T <= 0 || T > static_cast<int64_t>(C) * D) return C;
  const int Q = T / D;
  const int k = C % Q;
  return static_cast<int64_t>(k) * div <= C ? C - k : C;
}

// Static mode: splits per pair, chosen from the batch shape alone (the classic split-KV rule: enough
// pieces to fill the GPU if every request were as long as the longest), never more than the longest
// request has tiles.
HK_HD int static_num_splits(int num_pairs, int sm_ctas, int max_tiles) {
  if (num_pairs <= 0 || max_tiles <= 0) return 1;
  int s = (sm_ctas + num_pairs - 1) / num_pairs;
  if (s > max_tiles) s = max_tiles;
  if (s > kMaxStaticSplits) s = kMaxStaticSplits;
  return s < 1 ? 1 : s;
}

// Static mode: tiles per split, from the longest request.
HK_HD int static_chunk_tiles(int max_tiles, int splits) {
  if (max_tiles <= 0) return 1;
  return (max_tiles + splits - 1) / splits;
}

// Static mode: first linear tile of split s of a pair whose tiles start at pair_begin; the last split runs
// to the end of the pair even when the host's max_seq_len was too small.
HK_HD int64_t static_split_begin(int64_t pair_begin, int pair_tiles, int s, int chunk_tiles) {
  int64_t off = static_cast<int64_t>(s) * chunk_tiles;
  return pair_begin + (off < pair_tiles ? off : pair_tiles);
}

}  // namespace decode
}  // namespace hopperkit
