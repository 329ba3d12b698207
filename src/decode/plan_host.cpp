// hopperkit decode plan: workspace layout, configuration and the CPU twin of the device planner.
#include <algorithm>
#include <cstring>
#include <vector>

#include "decode/plan_limits.h"
#include "hopperkit/decode/plan.h"
#include "hopperkit/error.h"

namespace hopperkit {
namespace decode {

static size_t align256(size_t x) { return (x + 255) & ~size_t(255); }

DecodePlanLayout decode_plan_layout(const DecodePlanConfig& c) {
  DecodePlanLayout l;
  const size_t pairs = static_cast<size_t>(c.max_pairs());
  const size_t ctas = static_cast<size_t>(c.max_ctas);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    size_t at = off;
    off = align256(off + bytes);
    return at;
  };
  l.header = take(kPlanHeaderInts * 4);
  l.pair_tile_start = take((pairs + 1) * 4);
  l.pair_first_slot = take(pairs * 4);
  l.pair_num_pieces = take(pairs * 4);
  l.cta_tile_start = take((ctas + 1) * 4);
  l.cta_first_pair = take(ctas * 4);
  l.empty_pairs = take(pairs * 4);
  l.merge_counters = take(pairs * 4);
  l.slot_counters = take(static_cast<size_t>(c.partial_slots()) * 4);
  l.sm_claims = take(static_cast<size_t>(kMaxSmSlots) * 4);
  l.partial_o = take(static_cast<size_t>(c.partial_slots()) * c.max_rows() * kHeadDim * 4);
  l.partial_lse = take(static_cast<size_t>(c.partial_slots()) * c.max_rows() * 4);
  l.total_bytes = off;
  return l;
}

DecodePlanView decode_plan_view(const DecodePlanConfig& c, void* workspace) {
  const DecodePlanLayout l = decode_plan_layout(c);
  uint8_t* b = static_cast<uint8_t*>(workspace);
  DecodePlanView v;
  v.header = reinterpret_cast<int32_t*>(b + l.header);
  v.pair_tile_start = reinterpret_cast<int32_t*>(b + l.pair_tile_start);
  v.pair_first_slot = reinterpret_cast<int32_t*>(b + l.pair_first_slot);
  v.pair_num_pieces = reinterpret_cast<int32_t*>(b + l.pair_num_pieces);
  v.cta_tile_start = reinterpret_cast<int32_t*>(b + l.cta_tile_start);
  v.cta_first_pair = reinterpret_cast<int32_t*>(b + l.cta_first_pair);
  v.empty_pairs = reinterpret_cast<int32_t*>(b + l.empty_pairs);
  v.merge_counters = reinterpret_cast<int32_t*>(b + l.merge_counters);
  v.slot_counters = reinterpret_cast<int32_t*>(b + l.slot_counters);
  v.sm_claims = reinterpret_cast<int32_t*>(b + l.sm_claims);
  v.partial_o = reinterpret_cast<float*>(b + l.partial_o);
  v.partial_lse = reinterpret_cast<float*>(b + l.partial_lse);
  return v;
}

DecodePlanConfig make_decode_plan_config_for(int max_batch, int num_q_heads, int num_kv_heads, DType kv_dtype,
                                             int max_q_len, PlanMode mode, int sm_ctas, int long_pair_ctas) {
  HK_CHECK(kValue, max_batch >= 1, "max_batch", ">= 1", max_batch);
  HK_CHECK(kValue, num_kv_heads >= 1, "num_kv_heads", ">= 1", num_kv_heads);
  HK_CHECK(kValue, num_q_heads >= 1 && num_q_heads % num_kv_heads == 0, "num_q_heads",
           "a positive multiple of num_kv_heads (" + std::to_string(num_kv_heads) + ")", num_q_heads);
  const int group = num_q_heads / num_kv_heads;
  HK_CHECK(kUnsupported, group <= kMaxGroup, "num_q_heads / num_kv_heads", "<= " + std::to_string(kMaxGroup), group);
  HK_CHECK(kValue, max_q_len >= 1 && max_q_len <= kMaxQLen, "max_q_len", "1.." + std::to_string(kMaxQLen),
           max_q_len);
  HK_CHECK(kDtype, kv_dtype == DType::kBF16 || kv_dtype == DType::kFP8E4M3, "kv_dtype",
           "bfloat16 or float8_e4m3fn", dtype_name(kv_dtype));
  HK_CHECK(kValue, mode == PlanMode::kDynamic || mode == PlanMode::kStatic, "mode", "dynamic (0) or static (1)",
           static_cast<int>(mode));
  HK_CHECK(kValue, sm_ctas >= 1, "sm_ctas", ">= 1", sm_ctas);
  HK_CHECK(kValue, long_pair_ctas >= 0 && long_pair_ctas <= sm_ctas, "long_pair_ctas",
           "0.." + std::to_string(sm_ctas), long_pair_ctas);
  const int64_t pairs = static_cast<int64_t>(max_batch) * num_kv_heads;
  HK_CHECK(kUnsupported, pairs <= kMaxPlanPairs, "max_batch * num_kv_heads", "<= " + std::to_string(kMaxPlanPairs),
           pairs);
  DecodePlanConfig c;
  c.max_batch = max_batch;
  c.num_kv_heads = num_kv_heads;
  c.num_q_heads = num_q_heads;
  c.max_q_len = max_q_len;
  c.kv_dtype = kv_dtype;
  c.mode = mode;
  c.sm_ctas = sm_ctas;
  c.long_pair_ctas = mode == PlanMode::kDynamic ? long_pair_ctas : 0;
  c.min_tiles_per_cta = kv_dtype == DType::kFP8E4M3 ? kMinTilesPerCtaFp8 : kMinTilesPerCta;
  c.max_chunks_per_cta = kv_dtype == DType::kFP8E4M3 ? kMaxChunksPerCtaFp8 : kMaxChunksPerCta;
  // Static mode: pairs * splits <= pairs + sm_ctas (see static_num_splits).
  c.max_ctas = mode == PlanMode::kDynamic ? sm_ctas : static_cast<int>(pairs) + sm_ctas;
  // the split merge addresses the partial buffers with 32-bit element offsets (merge_slots)
  const int64_t partial_floats = static_cast<int64_t>(c.partial_slots()) * c.max_rows() * kHeadDim;
  HK_CHECK(kUnsupported, partial_floats < (int64_t{1} << 32), "2 * max CTAs * max_q_len * group * 128",
           "< 2^32 (partial buffer floats)", partial_floats);
  return c;
}

void static_plan_shape(const DecodePlanConfig& config, int batch, int max_seq_len, int* splits, int* chunk_tiles) {
  const int pairs = batch * config.num_kv_heads;
  const int max_tiles = num_tiles(max_seq_len);
  *splits = static_num_splits(pairs, config.sm_ctas, max_tiles);
  *chunk_tiles = static_chunk_tiles(max_tiles, *splits);
}

DecodePlanLaunch decode_plan_launch_info(const DecodePlanConfig& config, int batch, int block_size, int max_seq_len) {
  DecodePlanLaunch launch;
  launch.batch = batch;
  launch.block_size = block_size;
  if (config.mode == PlanMode::kStatic) {
    int chunk = 0;
    static_plan_shape(config, batch, max_seq_len, &launch.static_splits, &chunk);
    launch.grid_ctas = batch * config.num_kv_heads * launch.static_splits;
  } else {
    launch.grid_ctas = config.max_ctas;
    launch.slice_free = slice_free_launch(max_seq_len) ? 1 : 0;
  }
  return launch;
}

void decode_plan_cpu(const DecodePlanConfig& config, const int32_t* seq_lens, int batch, int block_size,
                     int max_blocks_per_seq, int max_seq_len, void* workspace_host) {
  HK_CHECK(kValue, batch >= 0 && batch <= config.max_batch, "batch", "0.." + std::to_string(config.max_batch),
           batch);
  check_plan_block_table(static_cast<int64_t>(batch) * config.num_kv_heads, max_blocks_per_seq, block_size);
  DecodePlanView v = decode_plan_view(config, workspace_host);
  const int H = config.num_kv_heads;
  const int P = batch * H;
  const int64_t capacity = static_cast<int64_t>(max_blocks_per_seq) * block_size;
  int errors = 0;
  std::vector<int> prefix(P + 1, 0);
  const bool head_major = head_major_pairs(static_cast<int>(config.mode));
  for (int p = 0; p < P; ++p) {
    int b = 0, h = 0;
    pair_coords(p, batch, H, head_major, b, h);
    int64_t len = seq_lens[b];
    if (len < 0 || len > capacity) errors |= kPlanErrorSeqLenClamped;
    len = std::min<int64_t>(std::max<int64_t>(len, 0), capacity);
    prefix[p + 1] = prefix[p] + num_tiles(len);
  }
  const int T = prefix[P];
  for (int p = 0; p <= P; ++p) v.pair_tile_start[p] = prefix[p];
  int C = 0, S = 1, chunk = 1;
  int cap = config.max_ctas;  // dynamic plans: the CTA cap (dynamic_cta_cap), also what the by-SM claim follows
  if (config.mode == PlanMode::kDynamic) {
    // the OR, minimum (non-zero) and maximum of the pairs' tile counts (aligned budgets, uniform batches)
    uint32_t tiles_or = 0, tiles_max = 0, tiles_min = 0xffffffffu;
    for (int p = 0; p < P; ++p) {
      dynamic_align_add(static_cast<uint32_t>(prefix[p + 1] - prefix[p]), tiles_or, tiles_min, tiles_max);
    }
    cap = dynamic_cta_cap(T, P, config.max_ctas, config.long_pair_ctas,
                          dynamic_uniform_pairs(tiles_or, tiles_min, tiles_max), tiles_max, config.long_pair_rule);
    C = dynamic_num_ctas(T, cap, config.min_tiles_per_cta);
    // more CTAs while one of them would walk more than max_chunks_per_cta chunks (as the device planner)
    for (int next = dynamic_next_ctas(C, cap, T); config.max_chunks_per_cta > 0 && next != 0;
         next = dynamic_next_ctas(C, cap, T)) {
      bool crowded = false;
      for (int i = 0; i < C && !crowded; ++i) {
        crowded = dynamic_cta_chunks(prefix.data(), P, T, C, i) > config.max_chunks_per_cta;
      }
      if (!crowded) break;
      C = next;
    }
    // aligned budgets, as the device planner: the unit from the OR, minimum (non-zero) and maximum of the counts
    if (config.align_window_div > 0) {
      C = dynamic_aligned_ctas(C, T, dynamic_align_unit(tiles_or, tiles_min, tiles_max), config.align_window_div);
    }
    C = dynamic_head_aligned_ctas(C, H, cap, T, config.min_tiles_per_cta);  // each KV head's pairs on the same share of the CTAs (pair_coords)
    for (int i = 0; i < C; ++i) {
      const int64_t b = dynamic_cta_begin(i, T, C);
      v.cta_tile_start[i] = static_cast<int32_t>(b);
      v.cta_first_pair[i] = pair_of_tile(prefix.data(), P, b);  // the pair holding the CTA's first tile
    }
  } else {
    static_plan_shape(config, batch, max_seq_len, &S, &chunk);
    C = P * S;
    for (int i = 0; i < C; ++i) {
      const int p = i / S, s = i % S;
      v.cta_tile_start[i] = static_cast<int32_t>(static_split_begin(prefix[p], prefix[p + 1] - prefix[p], s, chunk));
      v.cta_first_pair[i] = p;
    }
  }
  v.cta_tile_start[C] = T;
  for (int i = 0; i < config.partial_slots(); ++i) v.slot_counters[i] = 0;
  for (int i = 0; i < kMaxSmSlots; ++i) v.sm_claims[i] = 0;
  int num_empty = 0;
  for (int p = 0; p < P; ++p) {
    const int tiles = prefix[p + 1] - prefix[p];
    v.merge_counters[p] = 0;
    if (tiles == 0) {
      v.pair_first_slot[p] = -1;
      v.pair_num_pieces[p] = 0;
      v.empty_pairs[num_empty++] = p;
    } else if (config.mode == PlanMode::kDynamic) {
      const int fc = dynamic_cta_of_tile(prefix[p], T, C);
      const int lc = dynamic_cta_of_tile(prefix[p + 1] - 1, T, C);
      v.pair_num_pieces[p] = lc - fc + 1;
      v.pair_first_slot[p] = 2 * fc + (dynamic_cta_begin(fc, T, C) >= prefix[p] ? 0 : 1);
    } else {
      v.pair_num_pieces[p] = std::min(S, (tiles + chunk - 1) / chunk);
      v.pair_first_slot[p] = 2 * (p * S);
    }
  }
  v.header[kHdrNumCtas] = C;
  v.header[kHdrTotalTiles] = T;
  v.header[kHdrNumPairs] = P;
  v.header[kHdrNumEmpty] = num_empty;
  v.header[kHdrBatch] = batch;
  v.header[kHdrNumKvHeads] = H;
  v.header[kHdrErrors] = errors;
  v.header[kHdrMode] = static_cast<int>(config.mode);
  v.header[kHdrBySm] =
      config.mode == PlanMode::kDynamic && dynamic_by_sm_at(C, config.max_ctas, config.long_pair_ctas, cap) ? 1 : 0;
  v.header[kHdrClaimNext] = 0;
  v.header[kHdrClaimDone] = 0;
  v.header[kHdrSliceMerges] = 0;
}

}  // namespace decode
}  // namespace hopperkit
