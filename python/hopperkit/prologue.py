"""Fused attention prologue: per-head QK-RMSNorm + RoPE + paged KV-cache write + FP8 query quantisation.

One kernel reads the QKV projection output once and writes the query (bf16, or fp8 with a per-token-per-head
scale, exactly what the FP8 decode path consumes) and the new K/V rows into the paged cache.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _core
from ._core import _C
from .errors import DeviceError, DtypeError, InvalidValueError

_DTYPES = {torch.bfloat16: _C.DTYPE_BF16, torch.float8_e4m3fn: _C.DTYPE_FP8E4M3}


def _code(dtype: torch.dtype, arg: str) -> int:
    code = _DTYPES.get(dtype)
    if code is None:
        raise DtypeError(arg, "bfloat16 or float8_e4m3fn", str(dtype).replace("torch.", ""))
    return code


def _u8(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return t.view(torch.uint8) if t is not None and t.dtype == torch.float8_e4m3fn else t


@torch.library.custom_op("hopperkit::attention_prologue",
                         mutates_args=("k_cache", "v_cache", "q_out", "q_scale_out", "error_count"),
                         device_types="cuda")
def _attention_prologue_op(qkv: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor,
                           k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor,
                           q_norm_weight: Optional[torch.Tensor], k_norm_weight: Optional[torch.Tensor],
                           k_scale: Optional[torch.Tensor], v_scale: Optional[torch.Tensor], q_out: torch.Tensor,
                           q_scale_out: Optional[torch.Tensor], error_count: torch.Tensor, num_q_heads: int,
                           num_kv_heads: int, head_dim: int, eps: float, norm_before_rope: bool,
                           is_neox: bool) -> None:
    with torch.cuda.device(qkv.device):
        _core.call("attention_prologue", qkv, positions, cos_sin_cache, _u8(k_cache), _u8(v_cache),
                   _code(k_cache.dtype, "k_cache"), slot_mapping, q_norm_weight, k_norm_weight, k_scale, v_scale,
                   _u8(q_out), _code(q_out.dtype, "q_out"), q_scale_out, error_count, num_q_heads, num_kv_heads,
                   head_dim, eps, norm_before_rope, is_neox, torch.cuda.current_stream(qkv.device).cuda_stream)


@_attention_prologue_op.register_fake
def _(qkv, positions, cos_sin_cache, k_cache, v_cache, slot_mapping, q_norm_weight, k_norm_weight, k_scale, v_scale,
      q_out, q_scale_out, error_count, num_q_heads, num_kv_heads, head_dim, eps, norm_before_rope, is_neox) -> None:
    return None


def attention_prologue(qkv: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor,
                       k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor, *,
                       num_q_heads: int, num_kv_heads: int, head_dim: int,
                       q_norm_weight: Optional[torch.Tensor] = None, k_norm_weight: Optional[torch.Tensor] = None,
                       eps: float = 1e-6, norm_before_rope: bool = True, is_neox: bool = True,
                       k_scale: Optional[torch.Tensor] = None, v_scale: Optional[torch.Tensor] = None,
                       q_out_dtype: torch.dtype = torch.bfloat16, q_out: Optional[torch.Tensor] = None,
                       q_scale_out: Optional[torch.Tensor] = None, error_count: Optional[torch.Tensor] = None,
                       check_errors: bool = False):
    """Per token: RMSNorm(q), RMSNorm(k) per head (if weights are given; before or after RoPE), RoPE on q and k
    (NeoX rotate-half or GPT-J interleaved; rotary_dim = cos_sin_cache.shape[1], partial rotary allowed), k and v
    written into the paged caches at slot_mapping (-1 = padding: skipped; fp8 caches store value / scale), and q
    written as bf16 or as fp8 with q_scale = amax / 448 per token and head.

    Untrusted indices never read or write out of bounds: tokens whose position is outside the cos/sin table are
    skipped entirely, slots outside the cache skip the K/V write; both are counted in ``error_count``
    ([2] int32: positions, slots; accumulated, allocated zeroed when not given). ``check_errors=True``
    synchronises and raises InvalidValueError if any were counted; under CUDA-graph capture or torch.compile it
    raises InvalidValueError before launching (read ``error_count`` after the replay instead).

    Returns q_out (bf16), or (q_out fp8, q_scale_out) for ``q_out_dtype=torch.float8_e4m3fn``.
    """
    dev = qkv.device
    if dev.type != "cuda":
        raise DeviceError("qkv", "a CUDA tensor", str(dev))
    for name, t in (("positions", positions), ("cos_sin_cache", cos_sin_cache), ("k_cache", k_cache),
                    ("v_cache", v_cache), ("slot_mapping", slot_mapping), ("q_norm_weight", q_norm_weight),
                    ("k_norm_weight", k_norm_weight), ("k_scale", k_scale), ("v_scale", v_scale),
                    ("q_out", q_out), ("q_scale_out", q_scale_out), ("error_count", error_count)):
        if t is not None and t.device != dev:
            raise DeviceError(name, f"a tensor on {dev}", str(t.device))
    _code(q_out_dtype, "q_out_dtype")
    T = qkv.shape[0]
    if check_errors and (torch.cuda.is_current_stream_capturing() or torch.compiler.is_compiling()):
        raise InvalidValueError("check_errors", "False under CUDA-graph capture or torch.compile (it reads "
                                "error_count on the host; read it after the replay instead)", "True")
    if q_out is None:
        q_out = torch.empty(T, num_q_heads, head_dim, dtype=q_out_dtype, device=dev)
    fp8 = q_out.dtype == torch.float8_e4m3fn
    if fp8 and q_scale_out is None:
        q_scale_out = torch.empty(T, num_q_heads, dtype=torch.float32, device=dev)
    if error_count is None:
        error_count = torch.zeros(2, dtype=torch.int32, device=dev)
    torch.ops.hopperkit.attention_prologue(qkv, positions, cos_sin_cache, k_cache, v_cache, slot_mapping,
                                           q_norm_weight, k_norm_weight, k_scale, v_scale, q_out,
                                           q_scale_out if fp8 else None, error_count, num_q_heads, num_kv_heads,
                                           head_dim, float(eps), bool(norm_before_rope), bool(is_neox))
    if check_errors:
        bad_pos, bad_slot = error_count.tolist()
        if bad_pos:
            raise InvalidValueError("positions", f"positions in [0, {cos_sin_cache.shape[0]})",
                                    f"{bad_pos} tokens outside (skipped)")
        if bad_slot:
            raise InvalidValueError("slot_mapping", "slots in [0, num_blocks * block_size) or -1",
                                    f"{bad_slot} tokens outside (their K/V were not written)")
    return (q_out, q_scale_out) if fp8 else q_out
