// hopperkit fused FP8 MoE: parameter validation.
#include <string>

#include "hopperkit/error.h"
#include "hopperkit/moe/moe.h"

namespace hopperkit {
namespace moe {

namespace {
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
}  // namespace

void validate_moe(const MoeParams& p) {
  HK_CHECK(kValue, p.num_tokens >= 0 && p.num_tokens <= kMaxTokens, "num_tokens", "0.." + std::to_string(kMaxTokens),
           p.num_tokens);
  HK_CHECK(kValue, p.top_k >= 1 && p.top_k <= kMaxTopK, "topk_ids", "top_k 1.." + std::to_string(kMaxTopK), p.top_k);
  HK_CHECK(kValue, p.num_global_experts >= 1 && p.num_global_experts <= kMaxExperts, "expert_map",
           "1.." + std::to_string(kMaxExperts) + " global experts", p.num_global_experts);
  HK_CHECK(kValue, p.num_local_experts >= 1 && p.num_local_experts <= p.num_global_experts, "w13",
           "1..num_global_experts (" + std::to_string(p.num_global_experts) + ") local experts",
           p.num_local_experts);
  HK_CHECK(kValue, p.expert_map != nullptr || p.num_local_experts == p.num_global_experts, "expert_map",
           "a global -> local map when only " + std::to_string(p.num_local_experts) + " of " +
               std::to_string(p.num_global_experts) + " experts are local",
           "null");
  const int mult = p.scaling == MoeScaling::kBlock128 ? kScaleBlock : 64;
  const char* why = p.scaling == MoeScaling::kBlock128
                        ? " (block-wise scaling: a shard that cuts a 128-block cannot come from a checkpoint)"
                        : " (per-tensor scaling)";
  HK_CHECK(kUnsupported, p.hidden_size > 0 && p.hidden_size % mult == 0, "hidden",
           "a positive multiple of " + std::to_string(mult) + why, p.hidden_size);
  HK_CHECK(kUnsupported, p.intermediate > 0 && p.intermediate % mult == 0, "intermediate",
           "a positive multiple of " + std::to_string(mult) + why, p.intermediate);
  HK_CHECK(kDtype, p.hidden_dtype == DType::kBF16 || p.hidden_dtype == DType::kFP8E4M3, "hidden",
           "bfloat16 or float8_e4m3fn", dtype_name(p.hidden_dtype));
  HK_CHECK(kValue, p.w13 != nullptr && p.w2 != nullptr && p.w13_scale != nullptr && p.w2_scale != nullptr,
           "w13 / w2 / w13_scale / w2_scale", "device pointers", "a null pointer");
  HK_CHECK(kAlignment, aligned16(p.w13) && aligned16(p.w2), "w13 / w2", "16-byte aligned pointers",
           "a misaligned pointer");
  if (p.scaling == MoeScaling::kPerTensor) {
    HK_CHECK(kValue, p.a13_scale != nullptr && p.a2_scale != nullptr, "a13_scale / a2_scale",
             "static activation scales (per-tensor scaling)", "null");
    if (p.hidden_dtype == DType::kFP8E4M3) {
      HK_CHECK(kValue, p.hidden_scale != nullptr, "hidden_scale", "the fp8 input's [1] scale", "null");
    }
  } else {
    HK_CHECK(kValue, p.a13_scale == nullptr && p.a2_scale == nullptr, "a13_scale / a2_scale",
             "none (block-wise scaling quantises activations dynamically)", "a static scale");
    if (p.hidden_dtype == DType::kFP8E4M3) {
      HK_CHECK(kValue, p.hidden_scale != nullptr, "hidden_scale", "the fp8 input's [num_tokens, hidden / 128] scales",
               "null");
    }
  }
  if (p.num_tokens == 0) return;
  HK_CHECK(kValue, p.hidden != nullptr && p.topk_ids != nullptr && p.topk_weights != nullptr && p.out != nullptr,
           "hidden / topk_ids / topk_weights / out", "device pointers", "a null pointer");
  const int es = dtype_size(p.hidden_dtype);
  HK_CHECK(kAlignment, aligned16(p.hidden) && (p.hidden_stride * es) % 16 == 0, "hidden",
           "a 16-byte aligned pointer and row stride", "row stride " + std::to_string(p.hidden_stride));
  HK_CHECK(kStride, p.hidden_stride >= p.hidden_size || p.num_tokens == 1, "hidden",
           "a row stride >= hidden (" + std::to_string(p.hidden_size) + ")", p.hidden_stride);
  HK_CHECK(kAlignment, aligned16(p.out) && (p.out_stride * 2) % 16 == 0, "out", "a 16-byte aligned pointer and row stride",
           "row stride " + std::to_string(p.out_stride));
  HK_CHECK(kStride, p.out_stride >= p.hidden_size || p.num_tokens == 1, "out",
           "a row stride >= hidden (" + std::to_string(p.hidden_size) + ")", p.out_stride);
  HK_CHECK(kAlignment, aligned16(p.shared_output) && (p.shared_stride * 2) % 16 == 0, "shared_output",
           "a 16-byte aligned pointer and row stride", "row stride " + std::to_string(p.shared_stride));
  HK_CHECK(kStride, p.shared_output == nullptr || p.shared_stride >= p.hidden_size || p.num_tokens == 1,
           "shared_output", "a row stride >= hidden (" + std::to_string(p.hidden_size) + ")", p.shared_stride);
}

}  // namespace moe
}  // namespace hopperkit
