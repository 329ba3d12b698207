// CPU tests of input validation: every bad input is rejected with a typed error naming the argument, before
// anything is launched (these tests run without a GPU: validation makes no CUDA call).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "decode/plan_limits.h"
#include "hopperkit/decode/attention.h"
#include "hopperkit/dtype.h"
#include "hopperkit/error.h"

using namespace hopperkit;
using namespace hopperkit::decode;

namespace {

// Fake, well-aligned device addresses: validation only inspects them.
template <typename T>
T* fake(uintptr_t a) {
  return reinterpret_cast<T*>(a);
}

DecodeAttentionParams valid_params() {
  DecodeAttentionParams p;
  p.num_q_heads = 8;
  p.num_kv_heads = 1;
  p.batch = 4;
  p.max_q_len = 1;
  p.num_tokens = 4;
  p.q = fake<void>(0x10000);
  p.q_dtype = DType::kBF16;
  p.q_stride_token = 8 * 128;
  p.q_stride_head = 128;
  p.k_cache = fake<void>(0x20000);
  p.v_cache = fake<void>(0x30000);
  p.kv_dtype = DType::kBF16;
  p.num_blocks = 100;
  p.block_size = 64;
  p.k_stride_block = 64 * 128;
  p.k_stride_token = 128;
  p.k_stride_head = 128;
  p.v_stride_block = 64 * 128;
  p.v_stride_token = 128;
  p.v_stride_head = 128;
  p.block_table = fake<int32_t>(0x40000);
  p.block_table_stride = 16;
  p.max_blocks_per_seq = 16;
  p.seq_lens = fake<int32_t>(0x50000);
  p.softmax_scale = 0.088f;
  p.out = fake<void>(0x60000);
  p.out_stride_token = 8 * 128;
  p.out_stride_head = 128;
  p.plan_config = make_decode_plan_config_for(16, 8, 1, DType::kBF16, 1, PlanMode::kDynamic, 132);
  p.plan_launch.batch = 4;
  p.plan_launch.block_size = 64;
  p.plan_launch.grid_ctas = 132;
  p.plan_workspace = fake<void>(0x70000);
  return p;
}

struct Case {
  const char* what;
  std::function<void(DecodeAttentionParams&)> mutate;
  ErrorKind kind;
  const char* arg;
};

}  // namespace

TEST(Validation, ValidParamsPass) { EXPECT_NO_THROW(validate_decode_attention(valid_params())); }

TEST(Validation, EveryBadInputIsRejectedWithItsArgument) {
  const Case cases[] = {
      {"head dim 96", [](auto& p) { p.head_dim = 96; }, ErrorKind::kUnsupported, "head_dim"},
      {"no kv heads", [](auto& p) { p.num_kv_heads = 0; }, ErrorKind::kValue, "num_kv_heads"},
      {"heads not a multiple", [](auto& p) { p.num_q_heads = 12; p.num_kv_heads = 8; }, ErrorKind::kShape, "q"},
      {"group 32", [](auto& p) { p.num_q_heads = 32; }, ErrorKind::kUnsupported, "num_q_heads / num_kv_heads"},
      {"q_len 9", [](auto& p) { p.max_q_len = 9; }, ErrorKind::kValue, "max_q_len"},
      {"q_len 0", [](auto& p) { p.max_q_len = 0; }, ErrorKind::kValue, "max_q_len"},
      {"tokens != batch * q_len", [](auto& p) { p.num_tokens = 5; }, ErrorKind::kShape, "q"},
      {"nan scale", [](auto& p) { p.softmax_scale = std::nanf(""); }, ErrorKind::kValue, "softmax_scale"},
      {"negative scale", [](auto& p) { p.softmax_scale = -1.f; }, ErrorKind::kValue, "softmax_scale"},
      {"f32 cache", [](auto& p) { p.kv_dtype = DType::kF32; }, ErrorKind::kDtype, "k_cache"},
      {"int query", [](auto& p) { p.q_dtype = DType::kInt32; }, ErrorKind::kDtype, "q"},
      {"fp8 q with bf16 kv", [](auto& p) { p.q_dtype = DType::kFP8E4M3; }, ErrorKind::kUnsupported, "q"},
      {"fp8 q without scale",
       [](auto& p) {
         p.q_dtype = DType::kFP8E4M3;
         p.kv_dtype = DType::kFP8E4M3;
         p.plan_config.kv_dtype = DType::kFP8E4M3;
       },
       ErrorKind::kValue, "q_scale"},
      {"misaligned q", [](auto& p) { p.q = fake<void>(0x10002); }, ErrorKind::kAlignment, "q"},
      {"q stride 4 bytes", [](auto& p) { p.q_stride_head = 2; }, ErrorKind::kAlignment, "q"},
      {"block size 8", [](auto& p) { p.block_size = 8; }, ErrorKind::kValue, "k_cache"},
      {"block size 256", [](auto& p) { p.block_size = 256; }, ErrorKind::kValue, "k_cache"},
      {"null k cache", [](auto& p) { p.k_cache = nullptr; }, ErrorKind::kValue, "k_cache"},
      {"misaligned v cache", [](auto& p) { p.v_cache = fake<void>(0x30008); }, ErrorKind::kAlignment, "v_cache"},
      {"k token stride 8 bytes", [](auto& p) { p.k_stride_token = 4; }, ErrorKind::kAlignment, "k_cache"},
      {"v zero block stride", [](auto& p) { p.v_stride_block = 0; }, ErrorKind::kStride, "v_cache"},
      {"no blocks", [](auto& p) { p.num_blocks = 0; }, ErrorKind::kShape, "k_cache"},
      {"empty block table", [](auto& p) { p.max_blocks_per_seq = 0; }, ErrorKind::kValue, "block_table"},
      {"null seq_lens", [](auto& p) { p.seq_lens = nullptr; }, ErrorKind::kValue, "block_table / seq_lens"},
      {"block table stride", [](auto& p) { p.block_table_stride = 3; }, ErrorKind::kStride, "block_table"},
      {"null out", [](auto& p) { p.out = nullptr; }, ErrorKind::kValue, "out"},
      {"misaligned out stride", [](auto& p) { p.out_stride_head = 132; }, ErrorKind::kAlignment, "out"},
      {"lse stride", [](auto& p) { p.lse = fake<float>(0x80000); p.lse_stride_token = 4; }, ErrorKind::kStride, "lse"},
      {"no plan", [](auto& p) { p.plan_workspace = nullptr; }, ErrorKind::kValue, "plan"},
      {"plan for fp8", [](auto& p) { p.plan_config.kv_dtype = DType::kFP8E4M3; }, ErrorKind::kValue, "plan"},
      {"plan for other heads", [](auto& p) { p.plan_config.num_kv_heads = 2; }, ErrorKind::kValue, "plan"},
      {"plan q_len too small", [](auto& p) { p.max_q_len = 2; p.num_tokens = 8; }, ErrorKind::kValue, "plan"},
      {"plan for other batch", [](auto& p) { p.plan_launch.batch = 3; }, ErrorKind::kValue, "plan"},
      {"plan for other block size", [](auto& p) { p.plan_launch.block_size = 16; }, ErrorKind::kValue, "plan"},
  };
  for (const Case& c : cases) {
    DecodeAttentionParams p = valid_params();
    c.mutate(p);
    try {
      validate_decode_attention(p);
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), c.kind) << c.what << ": " << e.what();
      EXPECT_EQ(e.arg(), c.arg) << c.what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("expected"), std::string::npos) << c.what;
      EXPECT_NE(std::string(e.what()).find("got"), std::string::npos) << c.what;
    }
  }
}

TEST(Validation, PlanConfig) {
  EXPECT_THROW(make_decode_plan_config_for(0, 8, 1, DType::kBF16, 1, PlanMode::kDynamic, 132), Error);
  EXPECT_THROW(make_decode_plan_config_for(8, 8, 3, DType::kBF16, 1, PlanMode::kDynamic, 132), Error);
  EXPECT_THROW(make_decode_plan_config_for(8, 8, 1, DType::kF16, 1, PlanMode::kDynamic, 132), Error);
  EXPECT_THROW(make_decode_plan_config_for(100000, 8, 1, DType::kBF16, 1, PlanMode::kDynamic, 132), Error);
  try {
    make_decode_plan_config_for(8, 64, 2, DType::kBF16, 1, PlanMode::kDynamic, 132);
    ADD_FAILURE() << "group 32 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("32"), std::string::npos) << e.what();
  }
}

TEST(Validation, PlannerRejectsBeforeLaunch) {
  DecodePlanParams pp;
  pp.config = make_decode_plan_config_for(8, 8, 1, DType::kBF16, 1, PlanMode::kDynamic, 132);
  pp.workspace = fake<void>(0x100000);
  pp.workspace_bytes = decode_plan_layout(pp.config).total_bytes;
  pp.seq_lens = fake<int32_t>(0x50000);
  pp.batch = 9;
  pp.block_size = 64;
  pp.max_blocks_per_seq = 4;
  EXPECT_THROW(decode_plan(pp), Error);  // batch > max_batch
  pp.batch = 8;
  pp.block_size = 48;
  EXPECT_THROW(decode_plan(pp), Error);
  pp.block_size = 64;
  pp.config.max_chunks_per_cta = kMaxChunksLimit + 1;  // a limit that would overflow the planner's pair test
  EXPECT_THROW(decode_plan(pp), Error);
  pp.config.max_chunks_per_cta = kMaxChunksPerCta;
  // decode_plan(pp) must raise `kind` naming `arg` (before anything is launched)
  auto expect_rejected = [&](const char* what, ErrorKind kind, const char* arg) {
    try {
      decode_plan(pp);
      ADD_FAILURE() << what << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      EXPECT_EQ(e.arg(), arg) << e.what();
    }
  };
  pp.max_seq_len = -1;  // a negative bound, dynamic mode too: rejected by name before anything is launched
  expect_rejected("a negative max_seq_len", ErrorKind::kValue, "max_seq_len");
  pp.max_seq_len = 0;
  pp.workspace_bytes -= 4;
  EXPECT_THROW(decode_plan(pp), Error);
  pp.workspace_bytes += 4;
  // the planner's int32 tile sums: 8 pairs at a capacity of 2^28 tiles each (2^31 in all) are rejected by name,
  // one tile less per pair is not this check's business (the launch would follow: not called here)
  EXPECT_FALSE(plan_tiles_fit(8, int64_t{1} << 28, 64));
  EXPECT_TRUE(plan_tiles_fit(8, (int64_t{1} << 28) - 1, 64));
  EXPECT_TRUE(plan_tiles_fit(4096 * 8, (int64_t{1} << 20) / 16, 16));  // batch 4096 x 8 heads at 1M tokens
  pp.max_blocks_per_seq = 1 << 28;
  expect_rejected("a block table whose full rows overflow the planner's tile sums", ErrorKind::kUnsupported,
                  "max_blocks_per_seq");
}

TEST(Validation, TensorChecks) {
  TensorDesc t;
  t.data = fake<void>(0x1000);
  t.dtype = DType::kBF16;
  t.device_type = 1;  // CPU
  t.shape = {4, 8, 128};
  t.strides = {1024, 128, 1};
  try {
    check::cuda_device(t, "q", 0);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDevice);
    EXPECT_EQ(e.actual(), "cpu");
  }
  t.device_type = 2;
  EXPECT_NO_THROW(check::cuda_device(t, "q", 0));
  EXPECT_THROW(check::cuda_device(t, "q", 1), Error);
  EXPECT_THROW(check::rank(t, "q", 4, "[a, b, c, d]"), Error);
  EXPECT_THROW(check::extent(t, "q", 2, 96, "[num_tokens, num_q_heads, head_dim]"), Error);
  EXPECT_THROW(check::dtype(t, "q", DType::kFP8E4M3), Error);
  t.strides = {1024, 1, 8};
  EXPECT_THROW(check::last_dim_contiguous(t, "q"), Error);
  EXPECT_THROW(check::contiguous(t, "q"), Error);
  t.strides = {1024, 128, 1};
  EXPECT_NO_THROW(check::contiguous(t, "q"));
  t.data = fake<void>(0x1004);
  EXPECT_THROW(check::aligned(t, "q", 16), Error);
}
