// hopperkit fused attention prologue: the launch shape, shared by the host launcher and its CPU tests.
//
// A block works on `tokens_per_block` consecutive tokens: their per-token values (position, slot, the cos/sin
// row) and the norm weights are read once into shared memory and reused across the tokens' heads. Its threads
// are head slots of head_dim / 8 lanes (one 16-byte vector each); a pass covers as many heads as there are
// slots, and a block makes `passes_per_block` passes per token. A thread's (token, pass) units are loaded
// kPrologueItems at a time. Few heads: several tokens per block, so that a thread still has a few units. Few
// tokens: the heads are split over several blocks per token (`chunks`), so that the grid still fills the GPU.
#pragma once

namespace hopperkit {
namespace prologue {

constexpr int kPrologueMaxThreads = 256;
constexpr int kPrologueItems = 4;               // units whose loads a thread issues together
constexpr int kPrologueMaxTokensPerBlock = 4;
constexpr int kPrologueBlocksPerSm = 4;         // grid size the shape aims for, per SM

struct PrologueShape {
  int threads;           // block size: a multiple of 32
  int heads_per_pass;    // head slots of a block
  int passes_per_block;  // passes a block makes per token (heads per block = heads_per_pass * passes_per_block)
  int chunks;            // blocks per token group
  int tokens_per_block;  // tokens of a block (chunks > 1 only with 1)
};

inline PrologueShape prologue_shape(int num_tokens, int num_heads, int head_dim, int num_sms) {
  PrologueShape s{};
  const int lanes = head_dim / 8;  // threads per head
  int hpp = kPrologueMaxThreads / lanes;
  hpp = num_heads < hpp ? num_heads : hpp;
  s.heads_per_pass = hpp;
  s.threads = (hpp * lanes + 31) / 32 * 32;
  const int passes = (num_heads + hpp - 1) / hpp;
  const long long target = static_cast<long long>(kPrologueBlocksPerSm) * (num_sms > 0 ? num_sms : 1);
  // several tokens per block when a token has fewer passes than a thread's load batch, as long as the grid
  // keeps `target` blocks
  int tb = 1;
  if (passes < kPrologueItems) {
    tb = (kPrologueItems + passes - 1) / passes;
    tb = tb < kPrologueMaxTokensPerBlock ? tb : kPrologueMaxTokensPerBlock;
    const long long fit = num_tokens / target;
    if (fit < tb) tb = fit > 1 ? static_cast<int>(fit) : 1;
  }
  s.tokens_per_block = tb;
  long long c = 1;
  if (tb == 1 && num_tokens > 0) c = (target + num_tokens - 1) / num_tokens;
  c = c < 1 ? 1 : (c > passes ? passes : c);
  s.passes_per_block = static_cast<int>((passes + c - 1) / c);
  s.chunks = (passes + s.passes_per_block - 1) / s.passes_per_block;
  return s;
}

// Blocks of the launch: token groups x chunks.
inline long long prologue_blocks(int num_tokens, const PrologueShape& s) {
  return (static_cast<long long>(num_tokens) + s.tokens_per_block - 1) / s.tokens_per_block * s.chunks;
}

}  // namespace prologue
}  // namespace hopperkit
