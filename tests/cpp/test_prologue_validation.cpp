// CPU tests of the fused prologue's input validation (no CUDA call is made before a rejection).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "hopperkit/error.h"
#include "hopperkit/prologue/prologue.h"

using namespace hopperkit;
using namespace hopperkit::prologue;

namespace {

template <typename T>
T* fake(uintptr_t a) {
  return reinterpret_cast<T*>(a);
}

PrologueParams valid() {
  PrologueParams p;
  p.num_tokens = 16;
  p.num_q_heads = 8;
  p.num_kv_heads = 1;
  p.head_dim = 128;
  p.qkv = fake<void>(0x10000);
  p.qkv_stride_token = 10 * 128;
  p.positions = fake<void>(0x20000);
  p.positions_dtype = DType::kInt64;
  p.cos_sin = fake<void>(0x30000);
  p.cos_sin_dtype = DType::kF32;
  p.cos_sin_stride = 128;
  p.max_position = 4096;
  p.rotary_dim = 128;
  p.k_cache = fake<void>(0x40000);
  p.v_cache = fake<void>(0x50000);
  p.kv_dtype = DType::kBF16;
  p.k_stride_block = p.v_stride_block = 64 * 128;
  p.k_stride_token = p.v_stride_token = 128;
  p.k_stride_head = p.v_stride_head = 128;
  p.num_blocks = 10;
  p.block_size = 64;
  p.slot_mapping = fake<int64_t>(0x60000);
  p.q_out = fake<void>(0x70000);
  p.q_out_stride_token = 8 * 128;
  p.q_out_stride_head = 128;
  p.error_count = fake<int>(0x80000);
  return p;
}

struct Case {
  const char* what;
  std::function<void(PrologueParams&)> mutate;
  ErrorKind kind;
  const char* arg;
};

}  // namespace

TEST(PrologueValidation, ValidPasses) { EXPECT_NO_THROW(validate_attention_prologue(valid())); }

TEST(PrologueValidation, EveryBadInputIsRejectedWithItsArgument) {
  const Case cases[] = {
      {"head dim 96", [](auto& p) { p.head_dim = 96; }, ErrorKind::kUnsupported, "head_dim"},
      {"no kv heads", [](auto& p) { p.num_kv_heads = 0; }, ErrorKind::kValue, "num_q_heads / num_kv_heads"},
      {"rotary 24", [](auto& p) { p.rotary_dim = 24; }, ErrorKind::kValue, "cos_sin_cache"},
      {"rotary > head", [](auto& p) { p.rotary_dim = 256; }, ErrorKind::kValue, "cos_sin_cache"},
      {"empty table", [](auto& p) { p.max_position = 0; }, ErrorKind::kValue, "cos_sin_cache"},
      {"eps 0", [](auto& p) { p.eps = 0.f; }, ErrorKind::kValue, "eps"},
      {"float positions", [](auto& p) { p.positions_dtype = DType::kF32; }, ErrorKind::kDtype, "positions"},
      {"int8 table", [](auto& p) { p.cos_sin_dtype = DType::kUInt8; }, ErrorKind::kDtype, "cos_sin_cache"},
      {"f16 cache", [](auto& p) { p.kv_dtype = DType::kF16; }, ErrorKind::kDtype, "k_cache"},
      {"f32 q out", [](auto& p) { p.q_out_dtype = DType::kF32; }, ErrorKind::kDtype, "q_out"},
      {"misaligned qkv", [](auto& p) { p.qkv = fake<void>(0x10008); }, ErrorKind::kAlignment, "qkv"},
      {"short qkv rows", [](auto& p) { p.qkv_stride_token = 8 * 128; }, ErrorKind::kStride, "qkv"},
      {"table stride", [](auto& p) { p.cos_sin_stride = 100; }, ErrorKind::kAlignment, "cos_sin_cache"},
      {"null v cache", [](auto& p) { p.v_cache = nullptr; }, ErrorKind::kValue, "v_cache"},
      {"k stride 8 bytes", [](auto& p) { p.k_stride_token = 4; }, ErrorKind::kAlignment, "k_cache"},
      {"no blocks", [](auto& p) { p.num_blocks = 0; }, ErrorKind::kShape, "k_cache"},
      {"q out stride", [](auto& p) { p.q_out_stride_head = 100; }, ErrorKind::kAlignment, "q_out"},
      {"fp8 q without scales", [](auto& p) { p.q_out_dtype = DType::kFP8E4M3; }, ErrorKind::kValue, "q_scale_out"},
      // the pair kernel's byte offsets come from 32-bit strides
      {"qkv row of 2^32 bytes", [](auto& p) { p.qkv_stride_token = int64_t{1} << 31; }, ErrorKind::kUnsupported, "qkv"},
      {"table row of 2^32 bytes", [](auto& p) { p.cos_sin_stride = int64_t{1} << 30; }, ErrorKind::kUnsupported,
       "cos_sin_cache"},
      {"q out token stride of 2^32 bytes", [](auto& p) { p.q_out_stride_token = int64_t{1} << 31; },
       ErrorKind::kUnsupported, "q_out"},
      // and its bf16 cache rows from 32-bit offsets inside a block and a 32-bit block stride
      {"k block stride of 2^32 elements", [](auto& p) { p.k_stride_block = int64_t{1} << 32; },
       ErrorKind::kUnsupported, "k_cache"},
      {"v block's rows past 2^31 elements",
       [](auto& p) {
         p.num_kv_heads = 2;
         p.qkv_stride_token = 12 * 128;
         p.v_stride_head = int64_t{1} << 31;
       },
       ErrorKind::kUnsupported, "v_cache"},
  };
  for (const Case& c : cases) {
    PrologueParams p = valid();
    c.mutate(p);
    try {
      validate_attention_prologue(p);
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), c.kind) << c.what << ": " << e.what();
      EXPECT_EQ(e.arg(), c.arg) << c.what << ": " << e.what();
    }
  }
}

TEST(PrologueValidation, ASingleKvHeadsStrideIsNotUsed) {
  // one KV head: its head stride never enters a row's offset (it may be anything a view gives)
  PrologueParams p = valid();
  p.k_stride_head = p.v_stride_head = int64_t{1} << 40;
  EXPECT_NO_THROW(validate_attention_prologue(p));
}

TEST(PrologueValidation, OneTokensStridesAreNotUsed) {
  PrologueParams p = valid();
  p.num_tokens = 1;
  p.qkv_stride_token = int64_t{1} << 31;    // 2^32 bytes: rejected from two tokens on
  p.q_out_stride_token = int64_t{1} << 31;
  EXPECT_NO_THROW(validate_attention_prologue(p));
  p.num_tokens = 2;
  EXPECT_THROW(validate_attention_prologue(p), Error);
}

TEST(PrologueValidation, ZeroTokensIsANoOp) {
  PrologueParams p = valid();
  p.num_tokens = 0;
  p.qkv = nullptr;
  EXPECT_NO_THROW(attention_prologue(p));  // nothing to launch
}
