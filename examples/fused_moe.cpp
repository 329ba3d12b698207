// How a C++ engine calls hopperkit's fused FP8 MoE: one workspace allocated up front, a params struct per call,
// typed errors (hopperkit::Error) instead of aborts. Built with the tests (HOPPERKIT_BUILD_TESTS=ON) as
// hopperkit_example_fused_moe; it needs a Hopper GPU to run and prints what it did.
//
//   ./hopperkit_example_fused_moe      # 4 tokens, 8 experts (top-2), hidden 512, intermediate 256, per-tensor
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "hopperkit/error.h"
#include "hopperkit/moe/moe.h"

namespace {

#define EX_CUDA(call)                                                                   \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                            \
      std::printf("%s failed: %s\n", #call, cudaGetErrorString(e_));                    \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

}  // namespace

int main() {
  using namespace hopperkit;
  const int T = 4, H = 512, I = 256, E = 8, K = 2;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: nothing to run\n");
    return 0;
  }
  // Inputs (zero weights and activations keep the example short; a real engine passes its tensors).
  void *hidden, *w13, *w2, *out, *ws;
  int32_t* ids;
  float *weights, *s13, *s2, *a13, *a2;
  EX_CUDA(cudaMalloc(&hidden, T * H * 2));
  EX_CUDA(cudaMalloc(&w13, static_cast<size_t>(E) * 2 * I * H));
  EX_CUDA(cudaMalloc(&w2, static_cast<size_t>(E) * H * I));
  EX_CUDA(cudaMalloc(&out, T * H * 2));
  EX_CUDA(cudaMalloc(&ids, T * K * sizeof(int32_t)));
  EX_CUDA(cudaMalloc(&weights, T * K * sizeof(float)));
  EX_CUDA(cudaMalloc(&s13, E * sizeof(float)));
  EX_CUDA(cudaMalloc(&s2, E * sizeof(float)));
  EX_CUDA(cudaMalloc(&a13, sizeof(float)));
  EX_CUDA(cudaMalloc(&a2, sizeof(float)));
  EX_CUDA(cudaMemset(hidden, 0, T * H * 2));
  EX_CUDA(cudaMemset(w13, 0, static_cast<size_t>(E) * 2 * I * H));
  EX_CUDA(cudaMemset(w2, 0, static_cast<size_t>(E) * H * I));
  const std::vector<int32_t> h_ids = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<float> h_w(T * K, 0.5f), h_s(E, 1.f), h_a(1, 1.f);
  EX_CUDA(cudaMemcpy(ids, h_ids.data(), T * K * sizeof(int32_t), cudaMemcpyHostToDevice));
  EX_CUDA(cudaMemcpy(weights, h_w.data(), T * K * sizeof(float), cudaMemcpyHostToDevice));
  EX_CUDA(cudaMemcpy(s13, h_s.data(), E * sizeof(float), cudaMemcpyHostToDevice));
  EX_CUDA(cudaMemcpy(s2, h_s.data(), E * sizeof(float), cudaMemcpyHostToDevice));
  EX_CUDA(cudaMemcpy(a13, h_a.data(), sizeof(float), cudaMemcpyHostToDevice));
  EX_CUDA(cudaMemcpy(a2, h_a.data(), sizeof(float), cudaMemcpyHostToDevice));

  try {
    // Once, at start-up: the workspace for the largest batch this engine will run.
    const size_t ws_bytes = moe::moe_workspace_bytes(/*max_tokens=*/256, K, H, I, E, moe::MoeScaling::kPerTensor);
    EX_CUDA(cudaMalloc(&ws, ws_bytes));

    // Every step (and every MoE layer): fill the params, call on the engine's stream.
    moe::MoeParams p;
    p.hidden = hidden;
    p.hidden_dtype = DType::kBF16;
    p.hidden_stride = H;
    p.topk_ids = ids;
    p.topk_weights = weights;
    p.w13 = w13;
    p.w2 = w2;
    p.w13_scale = s13;
    p.w2_scale = s2;
    p.a13_scale = a13;
    p.a2_scale = a2;
    p.scaling = moe::MoeScaling::kPerTensor;
    p.out = out;
    p.out_stride = H;
    p.workspace = ws;
    p.workspace_bytes = ws_bytes;
    p.num_tokens = T;
    p.hidden_size = H;
    p.intermediate = I;
    p.num_local_experts = E;
    p.num_global_experts = E;
    p.top_k = K;
    p.stream = nullptr;
    moe::fused_moe(p);
    EX_CUDA(cudaStreamSynchronize(p.stream));
    std::printf("fused_moe: %d tokens, %d experts, top-%d: done (workspace %zu bytes)\n", T, E, K, ws_bytes);

    p.intermediate = 100;  // bad input: a typed error, nothing launched
    moe::fused_moe(p);
  } catch (const Error& e) {
    std::printf("hopperkit error (%s) on '%s': expected %s, got %s\n", error_kind_name(e.kind()), e.arg().c_str(),
                e.expected().c_str(), e.actual().c_str());
  }
  return 0;
}
