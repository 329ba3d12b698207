// hopperkit fused FP8 MoE, kernel 3: down GEMM into per-row bf16 results.
// Variants (tile rows / scaling / weight rows per tile): 16 and 32 both scalings 128, 16 and 32 per-tensor also 256
// (short K: down_tile_n in heuristics.h), 48 per-tensor 128; 64 and 128 both scalings 128 or 256 (down_bm from
// down_block_m in heuristics.h: 128 only where the gate-up runs 128-row tiles, whose tile list it shares, and
// block-wise only from I = 512). The 16- to 48-row ones also as GEMM-index readers (kIndex: gemm_index in
// heuristics.h).
#include "moe/gemm_launch.cuh"
#include "moe/launch.h"

namespace hopperkit {
namespace moe {

namespace {
// The per-tensor 128 x 256 down's K-tail kernel (MoeGemmConfig::kKTail) at K = I = 192: two stages per tile, the
// second of 64 bytes of K, over row groups of two tiles. Where fused_moe() gave it the row groups (a.tiles_pair:
// down_k_tail_fits in heuristics.h, unless HOPPERKIT_MOE_DOWN_KTAIL=0; the tests run both).
bool down_k_tail(const MoeKernelArgs& a) {
  HK_CHECK(kValue, a.tiles_pair == nullptr || down_k_tail_fits(a.intermediate), "down row groups / intermediate",
           "row groups only at the K-tail kernel's intermediate (192)", std::to_string(a.intermediate));
  return a.tiles_pair != nullptr;
}

// Calls f with this call's variant (one of the list below; the default branch reports the value it got).
template <class F>
void with_variant(const MoeKernelArgs& a, F&& f) {
  // 256-row tiles: both 128-row weight blocks of a tile inside H (block-wise scales are read for both)
  HK_CHECK(kUnsupported, a.down_tile_n == 128 || a.hidden_size % 256 == 0, "down tile_n / hidden",
           "128, or a hidden size that is a multiple of 256",
           std::to_string(a.down_tile_n) + " / " + std::to_string(a.hidden_size));
  if (a.gemm_index) {  // the swapped downs that acquire the tile list the GEMM-index gate-up published
    switch ((a.down_bm * 2 + a.block_scaled) * 1000 + a.down_tile_n) {
      case (16 * 2 + 0) * 1000 + 128: f(MoeGemmVariant<16, 128, false, false, false, true>{}); return;
      case (16 * 2 + 0) * 1000 + 256: f(MoeGemmVariant<16, 256, false, false, false, true>{}); return;
      case (16 * 2 + 1) * 1000 + 128: f(MoeGemmVariant<16, 128, false, true, false, true>{}); return;
      case (32 * 2 + 0) * 1000 + 128: f(MoeGemmVariant<32, 128, false, false, false, true>{}); return;
      case (32 * 2 + 0) * 1000 + 256: f(MoeGemmVariant<32, 256, false, false, false, true>{}); return;
      case (32 * 2 + 1) * 1000 + 128: f(MoeGemmVariant<32, 128, false, true, false, true>{}); return;
      case (48 * 2 + 0) * 1000 + 128: f(MoeGemmVariant<48, 128, false, false, false, true>{}); return;
      default:
        HK_CHECK(kUnsupported, false, "GEMM-index down block_m / block_scaled / tile_n",
                 "16/0/128, 16/0/256, 16/1/128, 32/0/128, 32/0/256, 32/1/128 or 48/0/128",
                 std::to_string(a.down_bm) + "/" + std::to_string(a.block_scaled) + "/" +
                     std::to_string(a.down_tile_n));
    }
  }
  switch ((a.down_bm * 2 + a.block_scaled) * 1000 + a.down_tile_n) {
    case (16 * 2 + 0) * 1000 + 128: f(MoeGemmVariant<16, 128, false, false>{}); break;
    case (16 * 2 + 0) * 1000 + 256: f(MoeGemmVariant<16, 256, false, false>{}); break;
    case (16 * 2 + 1) * 1000 + 128: f(MoeGemmVariant<16, 128, false, true>{}); break;
    case (32 * 2 + 0) * 1000 + 128: f(MoeGemmVariant<32, 128, false, false>{}); break;
    case (32 * 2 + 0) * 1000 + 256: f(MoeGemmVariant<32, 256, false, false>{}); break;
    case (32 * 2 + 1) * 1000 + 128: f(MoeGemmVariant<32, 128, false, true>{}); break;
    case (48 * 2 + 0) * 1000 + 128: f(MoeGemmVariant<48, 128, false, false>{}); break;
    case (64 * 2 + 0) * 1000 + 128: f(MoeGemmVariant<64, 128, false, false>{}); break;
    case (64 * 2 + 0) * 1000 + 256: f(MoeGemmVariant<64, 256, false, false>{}); break;
    case (64 * 2 + 1) * 1000 + 128: f(MoeGemmVariant<64, 128, false, true>{}); break;
    case (64 * 2 + 1) * 1000 + 256: f(MoeGemmVariant<64, 256, false, true>{}); break;
    case (128 * 2 + 0) * 1000 + 128: f(MoeGemmVariant<128, 128, false, false>{}); break;
    case (128 * 2 + 0) * 1000 + 256:
      if (down_k_tail(a)) {
        f(MoeGemmVariant<128, 256, false, false, false, false, true>{});
      } else {
        f(MoeGemmVariant<128, 256, false, false>{});
      }
      break;
    case (128 * 2 + 1) * 1000 + 128: f(MoeGemmVariant<128, 128, false, true>{}); break;
    case (128 * 2 + 1) * 1000 + 256: f(MoeGemmVariant<128, 256, false, true>{}); break;
    default:
      HK_CHECK(kUnsupported, false, "down block_m / block_scaled / tile_n",
               "16/0/128, 16/0/256, 16/1/128, 32/0/128, 32/0/256, 32/1/128, 48/0/128, 64/0/128, 64/0/256, 64/1/128, "
               "64/1/256, 128/0/128, 128/0/256, 128/1/128 or 128/1/256",
               std::to_string(a.down_bm) + "/" + std::to_string(a.block_scaled) + "/" +
                   std::to_string(a.down_tile_n));
  }
}
int64_t max_tasks(const MoeKernelArgs& a) { return moe_max_tasks(a, a.down_tile_n, a.hidden_size, a.down_bm); }
}  // namespace

MoeGemmPlan plan_moe_down(const MoeKernelArgs& a) {
  MoeGemmPlan plan;
  with_variant(a, [&](auto v) { plan = plan_moe_gemm(a, max_tasks(a), v); });
  return plan;
}

void launch_moe_down(const MoeKernelArgs& a, const MoeGemmPlan& plan, cudaStream_t stream) {
  with_variant(a, [&](auto v) { launch_moe_gemm(a, plan, v, stream); });
}

}  // namespace moe
}  // namespace hopperkit
