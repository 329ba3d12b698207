"""Peer: FlashInfer's CUTLASS fused MoE (flashinfer.fused_moe.cutlass_fused_moe) on sm_90.

It needs the JIT module fused_moe_90, which no PyPI wheel carries prebuilt: `scripts/fetch_peers.sh moe`
builds an FP8-only copy here (see docs/moe.md) and puts it where FlashInfer's AOT lookup finds it
(.peers/python/flashinfer/data/aot/fused_moe_90/fused_moe_90.so). Without it the peer is a recorded skip.

How hopperkit's arguments map onto FlashInfer's (flashinfer-python 0.7.4, read from its source):
  * fc1 weights are [E, 2I, H] with the *up* rows first, then gate (TensorRT-LLM's gated layout), so the gate
    and up halves of w13 (and of its block scales) are swapped once, outside the timed call;
  * per-tensor FP8: the input must already be FP8 (x / a13, saturating, done inside the timed call, as
    hopperkit quantises inside its op); quant_scales = [fc1 dequant = a13 * w13_scale (E),
    fc2 activation quant = 1 / a2, fc2 dequant = a2 * w2_scale (E), fc1 input dequant = a13];
  * block-wise: use_deepseek_fp8_block_scale=True with a bf16 input (quantised inside in 1x128 groups) and
    quant_scales = [w13 block scales, w2 block scales];
  * expert parallelism: ep_size = E_global / E_local, ep_rank = 0 (this rank holds global ids [0, E_local)),
    token_selected_experts are the global ids.
Any mismatch shows up as a wrong-output row (the benchmark checks every output against the float32 reference).
"""
from __future__ import annotations

import torch

from bench.common import Skip

FP8 = torch.float8_e4m3fn


def _swap_halves(t: torch.Tensor) -> torch.Tensor:
    """[E, 2n, ...] -> up half first, gate half second (a copy)."""
    n = t.shape[1] // 2
    return torch.cat([t[:, n:], t[:, :n]], dim=1).contiguous()


def load():
    try:
        from flashinfer.fused_moe import cutlass_fused_moe  # noqa: PLC0415 - optional peer
    except Exception as e:  # noqa: BLE001
        raise Skip(f"flashinfer.fused_moe not importable: {type(e).__name__}: {e}") from e
    return cutlass_fused_moe


class FlashInferMoE:
    """One callable per rotation set: __call__(hidden bf16 [T, H]) -> out bf16 [T, H]."""

    def __init__(self, fn, w: dict, *, ids, topk_weights, e_global: int, e_local: int, block: bool,
                 a13: torch.Tensor | None, a2: torch.Tensor | None):
        self.fn, self.block = fn, block
        self.ids, self.tw = ids.to(torch.int32).contiguous(), topk_weights.to(torch.float32).contiguous()
        self.w13, self.w2 = _swap_halves(w["w13"]), w["w2"].contiguous()
        self.ep_size = e_global // e_local
        if block:
            self.scales = [_swap_halves(w["w13_scale"]).float(), w["w2_scale"].float().contiguous()]
        else:
            a13f, a2f = a13.reshape(()).float(), a2.reshape(()).float()
            self.a13 = a13f
            self.scales = [(a13f * w["w13_scale"].float()).contiguous(), (1.0 / a2f).reshape(()),
                           (a2f * w["w2_scale"].float()).contiguous(), a13f.reshape(())]

    def __call__(self, hidden: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        x = hidden if self.block else (hidden.float() / self.a13).clamp(-448.0, 448.0).to(FP8)
        res = self.fn(x, self.ids, self.tw, self.w13, self.w2, torch.bfloat16, self.scales,
                      ep_size=self.ep_size, ep_rank=0, output=out,
                      use_deepseek_fp8_block_scale=self.block)
        return res[0] if isinstance(res, (list, tuple)) else res
