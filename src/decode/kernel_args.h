// hopperkit decode attention: what the host launcher hands the device kernels (one struct, by value).
#pragma once

#include <cstdint>

#include "hopperkit/decode/plan.h"

namespace hopperkit {
namespace decode {

struct DecodeKernelArgs {
  const uint8_t* q;              // [num_tokens, num_q_heads, 128] bf16 | fp8 (bytes addressed)
  int64_t q_stride_token_bytes;
  int64_t q_stride_head_bytes;
  const float* q_scale;          // [num_tokens, num_q_heads] fp32 contiguous; fp8 query only
  int q_is_fp8;                  // 1: q is fp8 e4m3 (only with fp8 KV)
  const float* k_scale;          // [1] or null
  const float* v_scale;          // [1] or null
  const int32_t* block_table;    // [batch, max_blocks_per_seq]
  int64_t block_table_stride;
  int max_blocks_per_seq;
  int block_size;                // 16, 32, 64, 128
  int num_blocks;                // pages in the cache (block ids outside [0, num_blocks) are flagged)
  // Position (1..3) of the token / head / block coordinate in each cache's tensor map (dims sorted by stride).
  int k_pos_tok, k_pos_head, k_pos_blk;
  int v_pos_tok, v_pos_head, v_pos_blk;
  const int32_t* seq_lens;       // [batch]
  const int32_t* query_start_loc;  // [batch + 1] or null
  int num_tokens;
  int num_q_heads;
  int num_kv_heads;
  int group;                     // num_q_heads / num_kv_heads
  int max_q_len;
  float scale_log2;              // softmax_scale * log2(e)
  uint16_t* out;                 // [num_tokens, num_q_heads, 128] bf16 bits
  int64_t out_stride_token;      // elements
  int64_t out_stride_head;
  float* lse;                    // [num_tokens, num_q_heads] or null
  int64_t lse_stride_token;
  DecodePlanView plan;
  int partial_rows;              // row stride of the plan's partial buffers (config.max_rows)
  int debug_flags;               // experiments only (env HOPPERKIT_DECODE_DEBUG): 1 skip MMAs, 2 skip merges (both give
                                 // wrong results); 4 by-SM plans claimed by block 0 alone (results stay correct)
  int pieces_resident;           // 1: a dynamic plan whose grid is resident all at once under this variant, so a
                                 // CTA may wait for another's arrival (merge_slice); set by the launcher
#ifdef HOPPERKIT_DECODE_TRACE
  unsigned long long* trace;     // [grid, kTraceSlots] per-CTA event times (trace builds only; decode/trace.h)
#endif
};

struct PlanKernelArgs {
  DecodePlanView plan;
  const int32_t* seq_lens;  // [batch]
  int batch;
  int num_kv_heads;
  int block_size;
  int max_blocks_per_seq;
  int mode;                 // PlanMode
  int max_ctas;             // dynamic: CTA cap
  int long_pair_ctas;       // dynamic: CTA cap for long pairs (dynamic_cta_cap), 0 = none
  int long_pair_rule;       // dynamic: when that cap applies (dynamic_cta_cap: kLongPairRuleRounds / Uniform)
  int max_chunks_per_cta;   // dynamic: grow the CTA count while a CTA walks more chunks (dynamic_next_ctas); 0 = off
  int min_tiles_per_cta;    // dynamic: fewest tiles per CTA (dynamic_num_ctas)
  int align_window_div;     // dynamic: aligned budgets (dynamic_aligned_ctas); 0 = off
  int static_splits;        // static: splits per pair
  int static_chunk_tiles;   // static: tiles per split
};

}  // namespace decode
}  // namespace hopperkit
