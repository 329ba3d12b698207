// hopperkit decode plan: the device planner (one CTA per decode step) and its host launcher.
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>

#include "common/env_switch.h"
#include "common/resident_ctas.h"
#include "common/ptx.cuh"
#include "decode/kernel_args.h"
#include "decode/plan_limits.h"
#include "hopperkit/decode/attention.h"
#include "hopperkit/decode/plan.h"
#include "hopperkit/error.h"

namespace hopperkit {
namespace decode {

template <int kThreads>  // kPlanThreads, or kPlanThreadsSmall for batches of few pairs (plan_threads)
__global__ void __launch_bounds__(kThreads) decode_plan_kernel(const PlanKernelArgs a) {
  extern __shared__ int s_prefix[];  // [P + 1]
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int s_err;
  __shared__ unsigned s_crowded;  // the chunk rule's crowded candidates (bit k: C doubled k times)
  __shared__ unsigned s_tiles_or, s_tiles_max, s_tiles_min;  // dynamic plans: over the pairs' tile counts (the
                                                             // minimum over non-zero ones): aligned budgets and
                                                             // uniform batches (dynamic_uniform_pairs)
  const DecodePlanView& v = a.plan;
  const int tid = threadIdx.x;
  const int H = a.num_kv_heads;
  const int P = a.batch * H;
  const int64_t capacity = static_cast<int64_t>(a.max_blocks_per_seq) * a.block_size;
  if (tid == 0) {
    s_err = 0;
    s_crowded = 0;
    s_tiles_or = 0;
    s_tiles_max = 0;
    s_tiles_min = 0xffffffffu;
  }
  __syncthreads();
  ptx::grid_dependency_wait();  // PDL: seq_lens may come from the previous kernel
  ptx::launch_dependents();

  // ---- tiles per pair -> exclusive prefix (and, for aligned budgets, what dynamic_align_unit needs)
  // (from registers only. Session 31: with a load of the first pair's length ahead of the loop, whose latency was
  // paid before the loop's own loads went out, the rule cost the plan 0.74 us at batch 256 (call 2); without it, and
  // with the loop's loads issued at once, 0.50 us (call 3))
  const bool dynamic = a.mode == static_cast<int>(PlanMode::kDynamic);
  const bool align = dynamic && a.align_window_div > 0;
  const bool head_major = head_major_pairs(a.mode);
  unsigned tiles_or = 0, tiles_max = 0, tiles_min = 0xffffffffu;  // over the pairs; the minimum of non-zero counts
  int carry = 0;
  int err = 0;
  for (int base = 0; base < P; base += kThreads * kPlanItemsPerThread) {
    int t[kPlanItemsPerThread];
    const int p0 = base + tid * kPlanItemsPerThread;
    // the items' lengths first, all loads in flight at once (loads of request 0 for items past P: in range, unused);
    // each item's load and use inside its own branch made the compiler wait for each load before the next
    int32_t lens[kPlanItemsPerThread] = {};
    if (p0 < P) {
      // request and KV head of pair p0 (pair_coords), then stepped (not a division per item) along the coordinate
      // that changes fastest: the request (KV head major pairs) or the KV head
      int b = 0, h = 0;
      pair_coords(p0, a.batch, H, head_major, b, h);
      int fast = head_major ? b : h, slow = head_major ? h : b;
      const int fast_n = head_major ? a.batch : H;
#pragma unroll
      for (int i = 0; i < kPlanItemsPerThread; ++i) {
        lens[i] = a.seq_lens[p0 + i < P ? (head_major ? fast : slow) : 0];
        if (++fast == fast_n) fast = 0, ++slow;
      }
    }
#pragma unroll
    for (int i = 0; i < kPlanItemsPerThread; ++i) {
      t[i] = 0;
      if (p0 + i < P) {
        int64_t len = lens[i];
        if (len < 0 || len > capacity) err = kPlanErrorSeqLenClamped;
        len = len < 0 ? 0 : (len > capacity ? capacity : len);
        t[i] = num_tiles(len);
        if (dynamic) dynamic_align_add(static_cast<uint32_t>(t[i]), tiles_or, tiles_min, tiles_max);
      }
    }
    int agg;
    Scan(scan_tmp).ExclusiveSum(t, t, agg);
#pragma unroll
    for (int i = 0; i < kPlanItemsPerThread; ++i) {
      const int p = base + tid * kPlanItemsPerThread + i;
      if (p < P) s_prefix[p] = carry + t[i];
    }
    carry += agg;
    __syncthreads();
  }
  if (tid == 0) s_prefix[P] = carry;
  if (err) atomicOr(&s_err, err);
  if (dynamic) {
    tiles_or = __reduce_or_sync(0xffffffffu, tiles_or);
    tiles_max = __reduce_max_sync(0xffffffffu, tiles_max);
    tiles_min = __reduce_min_sync(0xffffffffu, tiles_min);
    if ((tid & 31) == 0 && tiles_or != 0) {
      atomicOr(&s_tiles_or, tiles_or);
      atomicMax(&s_tiles_max, tiles_max);
      atomicMin(&s_tiles_min, tiles_min);
    }
  }
  __syncthreads();
  const int T = carry;
  for (int p = tid; p <= P; p += kThreads) v.pair_tile_start[p] = s_prefix[p];

  // ---- CTA ranges
  int C;
  int cap = a.max_ctas;  // dynamic: the CTA cap (dynamic_cta_cap), also what the by-SM claim follows
  if (a.mode == static_cast<int>(PlanMode::kDynamic)) {
    cap = dynamic_cta_cap(T, P, a.max_ctas, a.long_pair_ctas,
                          dynamic_uniform_pairs(s_tiles_or, s_tiles_min, s_tiles_max), s_tiles_max, a.long_pair_rule);
    C = dynamic_num_ctas(T, cap, a.min_tiles_per_cta);
    // The chunk rule (kMaxChunksPerCta): double C while a CTA would walk too many chunks. Every candidate count
    // C, 2C, ... up to the cap is tested at once, one thread per pair (dynamic_pair_crowds), and the plan takes
    // the first uncrowded one (or the cap): one barrier instead of a search per CTA per doubling.
    if (a.max_chunks_per_cta > 0 && dynamic_next_ctas(C, cap, T) != 0) {
      unsigned crowded = 0;  // bit k: candidate k (C doubled k times) has a crowded CTA
      for (int p = tid; p < P; p += kThreads) {
        int k = 0;  // the last candidate (no successor) needs no test
        for (int c = C, n = dynamic_next_ctas(C, cap, T); n != 0; c = n, n = dynamic_next_ctas(c, cap, T), ++k) {
          if (dynamic_pair_crowds(s_prefix, P, T, c, a.max_chunks_per_cta, p)) crowded |= 1u << k;
        }
      }
      crowded = __reduce_or_sync(0xffffffffu, crowded);
      if ((tid & 31) == 0 && crowded != 0) atomicOr(&s_crowded, crowded);
      __syncthreads();
      crowded = s_crowded;
      for (int n = dynamic_next_ctas(C, cap, T); n != 0 && (crowded & 1u); n = dynamic_next_ctas(C, cap, T)) {
        C = n;
        crowded >>= 1;
      }
    }
    // Aligned budgets (heuristics.h): the largest multiple of T / D at or below C, within C / div of it, where D
    // (dynamic_align_unit) divides every pair's tile count; from the first pass's reductions, no extra barrier.
    if (align) C = dynamic_aligned_ctas(C, T, dynamic_align_unit(s_tiles_or, s_tiles_min, s_tiles_max), a.align_window_div);
    C = dynamic_head_aligned_ctas(C, H, cap, T, a.min_tiles_per_cta);  // each KV head's pairs on the same share of the CTAs (pair_coords)
    for (int i = tid; i < C; i += kThreads) {
      const int b = static_cast<int>(dynamic_cta_begin(i, T, C));
      v.cta_tile_start[i] = b;
      v.cta_first_pair[i] = pair_of_tile(s_prefix, P, b);
    }
  } else {
    const int S = a.static_splits;
    C = P * S;
    for (int i = tid; i < C; i += kThreads) {
      const int p = i / S, s = i - (i / S) * S;
      v.cta_tile_start[i] =
          static_cast<int>(static_split_begin(s_prefix[p], s_prefix[p + 1] - s_prefix[p], s, a.static_chunk_tiles));
      v.cta_first_pair[i] = p;
    }
  }
  if (tid == 0) v.cta_tile_start[C] = T;
  for (int i = tid; i < 2 * a.max_ctas; i += kThreads) v.slot_counters[i] = 0;
  for (int i = tid; i < kMaxSmSlots; i += kThreads) v.sm_claims[i] = 0;

  // ---- per pair: pieces and the slot of the first piece
  for (int p = tid; p < P; p += kThreads) {
    const int tiles = s_prefix[p + 1] - s_prefix[p];
    v.merge_counters[p] = 0;
    if (tiles == 0) {
      v.pair_first_slot[p] = -1;
      v.pair_num_pieces[p] = 0;
    } else if (a.mode == static_cast<int>(PlanMode::kDynamic)) {
      const int fc = dynamic_cta_of_tile(s_prefix[p], T, C);
      const int lc = dynamic_cta_of_tile(s_prefix[p + 1] - 1, T, C);
      v.pair_num_pieces[p] = lc - fc + 1;
      v.pair_first_slot[p] = 2 * fc + (dynamic_cta_begin(fc, T, C) >= s_prefix[p] ? 0 : 1);
    } else {
      const int S = a.static_splits;
      const int n = (tiles + a.static_chunk_tiles - 1) / a.static_chunk_tiles;
      v.pair_num_pieces[p] = n < S ? n : S;
      v.pair_first_slot[p] = 2 * (p * S);
    }
  }

  // ---- pairs without tiles, in order
  int ecarry = 0;
  for (int base = 0; base < P; base += kThreads * kPlanItemsPerThread) {
    int f[kPlanItemsPerThread];
#pragma unroll
    for (int i = 0; i < kPlanItemsPerThread; ++i) {
      const int p = base + tid * kPlanItemsPerThread + i;
      f[i] = (p < P && s_prefix[p + 1] == s_prefix[p]) ? 1 : 0;
    }
    int pos[kPlanItemsPerThread];
    int agg;
    Scan(scan_tmp).ExclusiveSum(f, pos, agg);
#pragma unroll
    for (int i = 0; i < kPlanItemsPerThread; ++i) {
      const int p = base + tid * kPlanItemsPerThread + i;
      if (f[i]) v.empty_pairs[ecarry + pos[i]] = p;
    }
    ecarry += agg;
    __syncthreads();
  }
  if (tid == 0) {
    v.header[kHdrNumCtas] = C;
    v.header[kHdrTotalTiles] = T;
    v.header[kHdrNumPairs] = P;
    v.header[kHdrNumEmpty] = ecarry;
    v.header[kHdrBatch] = a.batch;
    v.header[kHdrNumKvHeads] = H;
    v.header[kHdrErrors] = s_err;
    v.header[kHdrMode] = a.mode;
    v.header[kHdrBySm] = a.mode == static_cast<int>(PlanMode::kDynamic) &&
                         dynamic_by_sm_at(C, a.max_ctas, a.long_pair_ctas, cap);
    v.header[kHdrClaimNext] = 0;
    v.header[kHdrClaimDone] = 0;
    v.header[kHdrSliceMerges] = 0;
  }
}

DecodePlanConfig make_decode_plan_config(int max_batch, int num_q_heads, int num_kv_heads, DType kv_dtype,
                                         int max_q_len, PlanMode mode, int device) {
  HK_CHECK(kValue, num_kv_heads >= 1 && num_q_heads >= 1 && num_q_heads % num_kv_heads == 0, "num_q_heads",
           "a positive multiple of num_kv_heads (" + std::to_string(num_kv_heads) + ")", num_q_heads);
  const int rows = max_q_len * (num_q_heads / num_kv_heads);
  HK_CHECK(kUnsupported, rows >= 1 && rows <= kMaxRows, "max_q_len * (num_q_heads / num_kv_heads)",
           "1.." + std::to_string(kMaxRows), rows);
  int sms = 0;
  HK_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int per_sm = decode_ctas_per_sm(kv_dtype, rows, device);
  // BF16 KV: HOPPERKIT_DECODE_LONG_CTAS=1 runs batches of long pairs on one CTA per SM (dynamic_cta_cap,
  // heuristics.h), claimed by SM. Off by default since session 62: its fewer merge rounds no longer pay for the lost
  // CTAs once long pairs merge in slices (long_pair_cta_count, slice_merge; docs/decode_attention.md, Measurements,
  // session 62).
  static const int long_switch = env_int("HOPPERKIT_DECODE_LONG_CTAS", kLongPairCapDefault);
  const int long_ctas = long_pair_cta_count(long_switch, kv_dtype == DType::kBF16, per_sm, sms);
  DecodePlanConfig c = make_decode_plan_config_for(max_batch, num_q_heads, num_kv_heads, kv_dtype, max_q_len, mode,
                                                   sms * per_sm, long_ctas);
  // Profiling aid (not for serving): HOPPERKIT_DECODE_LONG_RULE=0 applies the long-pair cap by session 37's rule
  // (kLongPairRuleUniform) instead of the merge rounds (kLongPairRuleRounds, the default; dynamic_cta_cap).
  static const int rule = env_int("HOPPERKIT_DECODE_LONG_RULE", kLongPairRuleRounds, 0, kLongPairRuleRounds);
  c.long_pair_rule = rule;
  // Profiling aid (not for serving): HOPPERKIT_DECODE_MAX_CHUNKS=n sets the chunks per CTA above which the
  // dynamic plan grows its CTA count (kMaxChunksPerCta, kMaxChunksPerCtaFp8; 0 = never), for either KV dtype.
  // Planner and CPU twin read it from the config.
  static const int max_chunks = env_int("HOPPERKIT_DECODE_MAX_CHUNKS", -1, 0, kMaxChunksLimit);
  if (max_chunks >= 0) c.max_chunks_per_cta = max_chunks;
  // Profiling aid (not for serving): HOPPERKIT_DECODE_MIN_TILES=n sets the dynamic plan's minimum tiles per CTA
  // for either KV dtype (kMinTilesPerCta, kMinTilesPerCtaFp8). Planner and CPU twin read it from the config.
  static const int min_tiles = env_int("HOPPERKIT_DECODE_MIN_TILES", 0, 1, kMaxMinTilesPerCta);
  if (min_tiles > 0) c.min_tiles_per_cta = min_tiles;
  // Profiling aid (not for serving): HOPPERKIT_DECODE_ALIGN_DIV=n sets the window of aligned budgets to C / n
  // (kAlignWindowDiv, the default; 0 = off). Planner and CPU twin read it from the config.
  static const int align_div = env_int("HOPPERKIT_DECODE_ALIGN_DIV", kAlignWindowDiv, 0, kMaxAlignWindowDiv);
  c.align_window_div = align_div;
  return c;
}

DecodePlanLaunch decode_plan(const DecodePlanParams& pp) {
  const DecodePlanConfig& c = pp.config;
  HK_CHECK(kValue, c.max_batch >= 1 && c.num_kv_heads >= 1 && c.max_ctas >= 1, "config",
           "a config made by make_decode_plan_config", "max_batch " + std::to_string(c.max_batch));
  HK_CHECK(kValue, c.long_pair_ctas >= 0 && c.long_pair_ctas <= c.max_ctas, "config",
           "long_pair_ctas 0.." + std::to_string(c.max_ctas), c.long_pair_ctas);
  HK_CHECK(kValue, c.long_pair_rule >= 0 && c.long_pair_rule <= kLongPairRuleRounds, "config",
           "long_pair_rule 0.." + std::to_string(kLongPairRuleRounds), c.long_pair_rule);
  HK_CHECK(kValue, c.max_chunks_per_cta >= 0 && c.max_chunks_per_cta <= kMaxChunksLimit, "config",
           "max_chunks_per_cta 0.." + std::to_string(kMaxChunksLimit), c.max_chunks_per_cta);
  HK_CHECK(kValue, c.min_tiles_per_cta >= 1 && c.min_tiles_per_cta <= kMaxMinTilesPerCta, "config",
           "min_tiles_per_cta 1.." + std::to_string(kMaxMinTilesPerCta), c.min_tiles_per_cta);
  HK_CHECK(kValue, c.align_window_div >= 0 && c.align_window_div <= kMaxAlignWindowDiv, "config",
           "align_window_div 0.." + std::to_string(kMaxAlignWindowDiv), c.align_window_div);
  HK_CHECK(kValue, pp.batch >= 0 && pp.batch <= c.max_batch, "seq_lens", "batch 0.." + std::to_string(c.max_batch),
           pp.batch);
  HK_CHECK(kValue, pp.block_size == 16 || pp.block_size == 32 || pp.block_size == 64 || pp.block_size == 128,
           "block_size", "16, 32, 64 or 128", pp.block_size);
  check_plan_block_table(static_cast<int64_t>(pp.batch) * c.num_kv_heads, pp.max_blocks_per_seq, pp.block_size);
  HK_CHECK(kValue, pp.seq_lens != nullptr || pp.batch == 0, "seq_lens", "a device pointer", "null");
  HK_CHECK(kValue, pp.workspace != nullptr, "workspace", "a device pointer", "null");
  const DecodePlanLayout layout = decode_plan_layout(c);
  HK_CHECK(kShape, pp.workspace_bytes >= layout.total_bytes, "workspace",
           std::to_string(layout.total_bytes) + " bytes", std::to_string(pp.workspace_bytes) + " bytes");
  HK_CHECK(kAlignment, reinterpret_cast<uintptr_t>(pp.workspace) % 256 == 0, "workspace",
           "a 256-byte aligned pointer", reinterpret_cast<uintptr_t>(pp.workspace) % 256);
  HK_CHECK(kValue, pp.max_seq_len >= 0, "max_seq_len", ">= 0", pp.max_seq_len);
  const DecodePlanLaunch launch = decode_plan_launch_info(c, pp.batch, pp.block_size, pp.max_seq_len);
  PlanKernelArgs a;
  a.plan = decode_plan_view(c, pp.workspace);
  a.seq_lens = pp.seq_lens;
  a.batch = pp.batch;
  a.num_kv_heads = c.num_kv_heads;
  a.block_size = pp.block_size;
  a.max_blocks_per_seq = pp.max_blocks_per_seq;
  a.mode = static_cast<int>(c.mode);
  a.max_ctas = c.max_ctas;
  a.long_pair_ctas = c.long_pair_ctas;
  a.long_pair_rule = c.long_pair_rule;
  a.max_chunks_per_cta = c.max_chunks_per_cta;
  a.min_tiles_per_cta = c.min_tiles_per_cta;
  a.align_window_div = c.align_window_div;
  a.static_splits = 1;
  a.static_chunk_tiles = 1;
  if (c.mode == PlanMode::kStatic) static_plan_shape(c, pp.batch, pp.max_seq_len, &a.static_splits, &a.static_chunk_tiles);
  const int pairs = pp.batch * c.num_kv_heads;
  const size_t smem = static_cast<size_t>(pairs + 1) * sizeof(int);
  // Profiling aid (not for serving): HOPPERKIT_DECODE_PLAN_THREADS=1024 plans every batch with the 1024-thread
  // block (plan_threads in plan_limits.h picks 256 threads for batches of at most 512 pairs).
  static const int force_threads = env_int("HOPPERKIT_DECODE_PLAN_THREADS", 0, 0, kPlanThreads);
  const int threads = force_threads == kPlanThreads ? kPlanThreads : plan_threads(pairs);
  void (*kernel)(PlanKernelArgs) =
      threads == kPlanThreadsSmall ? decode_plan_kernel<kPlanThreadsSmall> : decode_plan_kernel<kPlanThreads>;
  static std::atomic<int> smem_set[2][kMaxDevices] = {};  // per block size and device
  set_max_dynamic_smem_once(kernel, static_cast<int>(kMaxPlanPairs + 1) * 4,
                            smem_set[threads == kPlanThreadsSmall ? 0 : 1]);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = pp.stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;  // PDL
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  HK_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, a));
  HK_CHECK_LAUNCH("decode_plan_kernel");
  return launch;
}

int decode_plan_read_errors(const DecodePlanConfig& config, const void* workspace, cudaStream_t stream) {
  const DecodePlanLayout l = decode_plan_layout(config);
  int32_t hdr[kPlanHeaderInts];
  HK_CUDA_CHECK(cudaMemcpyAsync(hdr, static_cast<const uint8_t*>(workspace) + l.header, sizeof(hdr),
                                cudaMemcpyDeviceToHost, stream));
  HK_CUDA_CHECK(cudaStreamSynchronize(stream));
  return hdr[kHdrErrors];
}

}  // namespace decode
}  // namespace hopperkit
