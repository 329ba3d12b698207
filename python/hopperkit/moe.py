"""Fused FP8 Mixture-of-Experts: routing index, gate-up GEMM reading token rows through the index,
SiLU(gate) * up with FP8 quantisation, down GEMM, top-k weighted reduce -- four PDL-chained kernels, no host
synchronisation (CUDA-graph capturable), bitwise-reproducible results.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _core
from ._core import _C
from .errors import DeviceError, DtypeError

_HIDDEN_DTYPES = {torch.bfloat16: _C.DTYPE_BF16, torch.float8_e4m3fn: _C.DTYPE_FP8E4M3}


def _u8(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return t.view(torch.uint8) if t is not None and t.dtype == torch.float8_e4m3fn else t


def moe_workspace_bytes(max_tokens: int, top_k: int, hidden: int, intermediate: int, num_local_experts: int,
                        block_scaled: bool) -> int:
    """Workspace bytes for fused_moe calls with up to ``max_tokens`` tokens."""
    return _core.call("moe_workspace_bytes", int(max_tokens), int(top_k), int(hidden), int(intermediate),
                      int(num_local_experts), bool(block_scaled))


def moe_workspace(max_tokens: int, top_k: int, hidden: int, intermediate: int, num_local_experts: int,
                  block_scaled: bool, device) -> torch.Tensor:
    """Allocate the workspace once (uint8); pass it to every fused_moe call of up to ``max_tokens`` tokens."""
    n = moe_workspace_bytes(max_tokens, top_k, hidden, intermediate, num_local_experts, block_scaled)
    return torch.empty(max(n, 1), dtype=torch.uint8, device=device)


@torch.library.custom_op("hopperkit::fused_moe", mutates_args=("out", "workspace"), device_types="cuda")
def _fused_moe_op(hidden: torch.Tensor, hidden_scale: Optional[torch.Tensor], topk_ids: torch.Tensor,
                  topk_weights: torch.Tensor, expert_map: Optional[torch.Tensor], w13: torch.Tensor,
                  w2: torch.Tensor, w13_scale: torch.Tensor, w2_scale: torch.Tensor,
                  a13_scale: Optional[torch.Tensor], a2_scale: Optional[torch.Tensor],
                  shared_output: Optional[torch.Tensor], out: torch.Tensor, workspace: torch.Tensor) -> None:
    code = _HIDDEN_DTYPES.get(hidden.dtype)
    if code is None:
        raise DtypeError("hidden", "bfloat16 or float8_e4m3fn", str(hidden.dtype).replace("torch.", ""))
    with torch.cuda.device(hidden.device):
        _core.call("fused_moe", _u8(hidden), code, hidden_scale, topk_ids, topk_weights, expert_map, _u8(w13),
                   _u8(w2), w13_scale, w2_scale, a13_scale, a2_scale, shared_output, out, workspace,
                   torch.cuda.current_stream(hidden.device).cuda_stream)


@_fused_moe_op.register_fake
def _(hidden, hidden_scale, topk_ids, topk_weights, expert_map, w13, w2, w13_scale, w2_scale, a13_scale, a2_scale,
      shared_output, out, workspace) -> None:
    return None


def fused_moe(hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, w13: torch.Tensor,
              w2: torch.Tensor, w13_scale: torch.Tensor, w2_scale: torch.Tensor, *,
              a13_scale: Optional[torch.Tensor] = None, a2_scale: Optional[torch.Tensor] = None,
              hidden_scale: Optional[torch.Tensor] = None, expert_map: Optional[torch.Tensor] = None,
              shared_output: Optional[torch.Tensor] = None, out: Optional[torch.Tensor] = None,
              workspace: Optional[torch.Tensor] = None) -> torch.Tensor:
    """out[t] = sum_k topk_weights[t, k] * W2_e(quant(SiLU(W13_e^gate x_t) * W13_e^up x_t)) (+ shared_output[t])
    over the local experts e = expert_map[topk_ids[t, k]] (all experts local without a map; -1 or ids outside
    the map contribute nothing). When every expert is local, pass no map rather than an identity one (a map costs
    a load per routing entry and keeps the in-GEMM index to smaller batches).

    hidden [T, H] bf16 (quantised to FP8 inside) or float8_e4m3fn with ``hidden_scale``; topk_ids [T, top_k]
    int32; topk_weights [T, top_k] float32; w13 [E, 2I, H] and w2 [E, H, I] float8_e4m3fn (gate rows, then up).
    Scaling follows w13_scale's shape:
      * per-tensor: w13_scale, w2_scale [E]; static activation scales a13_scale, a2_scale [1] (x / scale);
        H and I multiples of 64;
      * block-wise: w13_scale [E, 2I/128, H/128], w2_scale [E, H/128, I/128] (128x128 weight blocks);
        activations quantised per token in 1x128 groups with scale = amax / 448; H and I multiples of 128.
    ``workspace`` from moe_workspace() (allocated here when not given -- pass one to avoid the allocation).
    Returns out [T, H] bf16.
    """
    dev = hidden.device
    if dev.type != "cuda":
        raise DeviceError("hidden", "a CUDA tensor", str(dev))
    T, H = hidden.shape[0], hidden.shape[-1]
    if out is None:
        out = torch.empty(T, H, dtype=torch.bfloat16, device=dev)
    if workspace is None:
        workspace = moe_workspace(T, topk_ids.shape[-1], H, w2.shape[-1], w13.shape[0], w13_scale.dim() == 3, dev)
    torch.ops.hopperkit.fused_moe(hidden, hidden_scale, topk_ids, topk_weights, expert_map, w13, w2, w13_scale,
                                  w2_scale, a13_scale, a2_scale, shared_output, out, workspace)
    return out


def _workspace_views(workspace: torch.Tensor, tokens: int, top_k: int, hidden: int, intermediate: int,
                     num_local_experts: int) -> dict:
    """Typed views of a workspace after a call of ``tokens`` tokens: the routing index and the intermediate
    activations (for tests and debugging; the contents are only meaningful after the call completed)."""
    off = _core.call("moe_workspace_layout", int(tokens), int(top_k), int(hidden), int(intermediate),
                     int(num_local_experts))
    rows = tokens * top_k

    def view(name, dtype, shape):
        n = 1
        for s in shape:
            n *= s
        nbytes = n * torch.empty((), dtype=dtype).element_size()
        return workspace[off[name]:off[name] + nbytes].view(dtype).view(*shape)

    counters = view("counters", torch.int32, (16,))
    return {
        "num_tiles": counters[0], "dropped": counters[1], "num_wide_tiles": counters[2],
        # 1 when the (swapped) down GEMM waited per tile on tile_ready rather than for the gate-up grid
        "down_polled": counters[3],
        # the per-tensor swapped down's item claims: one per item run (each CTA's first item is its own, and the
        # last claim of every CTA that ran one finds none), so it ends at the down's items; 0 for other downs
        "down_claims": counters[4],
        # 1 when the 128-row gate-up ran in clusters of two (gate_up_pairs in heuristics.h), else 0
        "gate_up_pairs": counters[5],
        # the CTAs a swapped gate-up on even rounds kept (gate_up_even_rounds in heuristics.h), else 0
        "gate_up_even_ctas": counters[6],
        # with the routing index built in the GEMMs (gemm_index in heuristics.h): the tile count + 1, which the
        # gate-up's last CTA published to the down; 0 when kernel 1 built the index
        "gemm_index_published": counters[7],
        # the K-tail down's row groups (the per-tensor 128 x 256 down at I = 192): their count, or what the
        # workspace held before the call where the down took none
        "row_groups": counters[8],
        "expert_offset": view("expert_offset", torch.int32, (num_local_experts + 1,)),
        "tiles": view("tiles", torch.int32, ((off["tiles_wide"] - off["tiles"]) // 16, 4)),
        # 128-row tiles: written only when the gate-up runs 128-row tiles (gate_up_block_m in heuristics.h)
        "tiles_wide": view("tiles_wide", torch.int32, ((off["sorted_rows"] - off["tiles_wide"]) // 16, 4)),
        "sorted_rows": view("sorted_rows", torch.int32, (rows,)),
        "xq": view("xq", torch.float8_e4m3fn, (tokens, hidden)),
        "xq_scale": view("xq_scale", torch.float32, (tokens, hidden // 128)),
        "act": view("act", torch.float8_e4m3fn, (rows, intermediate)),
        "act_scale": view("act_scale", torch.float32, (rows, intermediate // 128)),
        "y": view("y", torch.bfloat16, (rows, hidden)),
        # per-chunk expert counts + dropped, written only when the index was built in chunks (more than one)
        "index_hist": (view("index_hist", torch.int32, (off["index_chunks"], num_local_experts + 1))
                       if off["index_chunks"] > 1 else None),
        # act columns the gate-up wrote per tile of "tiles" (swapped 16- to 48-row tiles, unless
        # HOPPERKIT_MOE_TILE_READY=0): intermediate for each of the first num_tiles after a call
        "tile_ready": view("tile_ready", torch.int32, ((off["tiles_pair"] - off["tile_ready"]) // 4,)),
        # row groups {expert, row_begin, rows <= 256, 0}: an expert's 128-row tiles two at a time, written only where
        # the K-tail down runs (its items)
        "tiles_pair": view("tiles_pair", torch.int32, ((off["total_bytes"] - off["tiles_pair"]) // 16, 4)),
    }
