"""Peer and reference: the attention prologue as plain, unfused PyTorch.

    forward(...)    the timed baseline: split qkv, per-head F.rms_norm, RoPE (gathered cos/sin, rotate-half),
                    k/v cast (fp8: / scale, clamp to +-448) and scatter into the paged caches, q (bf16, or fp8
                    with a per-token-per-head amax / 448 scale). Graph-capturable: no host synchronisation, so
                    padding tokens must sit at the tail and the caller passes num_valid (vLLM does the same: it
                    writes key[:num_actual_tokens]).
    reference(...)  the same maths in float32, written for clarity; the correctness yardstick of the benchmark.
                    Padding (slot -1) may be anywhere.

Layouts: qkv [T, (Hq + 2 Hkv) * D] (last dim contiguous, any row stride), heads q..., k..., v...;
cos_sin_cache [max_position, rotary_dim], cos in [0, r/2), sin in [r/2, r); caches [num_blocks, block_size,
Hkv, D] with any strides (a flattened [slots, Hkv, D] view is used when the strides allow one, else block and
offset indices are computed).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


# ------------------------------------------------------------------------------------------------ helpers
def split_heads(qkv: torch.Tensor, hq: int, hkv: int, d: int):
    """Views [T, Hq, D], [T, Hkv, D], [T, Hkv, D] of the QKV rows (no copy)."""
    t = qkv.shape[0]
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    return q.view(t, hq, d), k.view(t, hkv, d), v.view(t, hkv, d)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool = True) -> torch.Tensor:
    """x [T, H, D] (any float dtype), cos/sin [T, r/2] float32 -> float32 [T, H, D]; dims past r pass through.
    NeoX pairs (i, i + r/2); GPT-J pairs (2i, 2i + 1)."""
    r = 2 * cos.shape[-1]
    c, s = cos[:, None, :], sin[:, None, :]
    rot, rest = x[..., :r], x[..., r:]
    if is_neox:
        a, b = rot[..., : r // 2], rot[..., r // 2:]
        out = torch.cat([a * c - b * s, b * c + a * s], dim=-1)
    else:
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack([a * c - b * s, b * c + a * s], dim=-1).flatten(-2)
    return torch.cat([out, rest.float()], dim=-1) if rest.shape[-1] else out


def gather_cos_sin(cos_sin_cache: torch.Tensor, positions: torch.Tensor):
    cs = cos_sin_cache.index_select(0, positions).float()          # [T, r]
    half = cs.shape[-1] // 2
    return cs[:, :half], cs[:, half:]


def _flat_slots(cache: torch.Tensor):
    """[num_blocks * block_size, Hkv, D] view of a cache when its block and token strides allow one, else None."""
    nb, bs, h, d = cache.shape
    if nb == 1 or cache.stride(0) == bs * cache.stride(1):
        return cache.as_strided((nb * bs, h, d), (cache.stride(1), cache.stride(2), cache.stride(3)))
    return None


def write_cache(cache: torch.Tensor, vals: torch.Tensor, slots: torch.Tensor) -> None:
    """cache[slot] = vals (vals already in the cache dtype; slots >= 0). fp8 goes through uint8 views, a bit-exact
    scatter that does not depend on index_put_ supporting float8."""
    if cache.dtype == FP8:
        cache, vals = cache.view(torch.uint8), vals.view(torch.uint8)
    flat = _flat_slots(cache)
    if flat is not None:
        flat[slots] = vals
    else:
        bs = cache.shape[1]
        cache[slots // bs, slots % bs] = vals


def to_cache_dtype(x: torch.Tensor, dtype: torch.dtype, scale) -> torch.Tensor:
    """bf16: a cast; fp8: x / scale, saturated to +-448, cast (scale: a float or a one-element tensor)."""
    if dtype == FP8:
        return (x.float() / scale).clamp_(-FP8_MAX, FP8_MAX).to(FP8)
    return x.to(dtype)


def quantize_q_fp8(q: torch.Tensor, out: torch.Tensor | None = None, scale_out: torch.Tensor | None = None):
    """q [T, H, D] float32 -> (fp8 [T, H, D], scale [T, H] float32 = amax / 448); the last op of each writes into
    out / scale_out when given (no extra copy)."""
    amax = q.abs().amax(dim=-1).clamp_min_(1e-12)
    scale = torch.div(amax, FP8_MAX, out=scale_out) if scale_out is not None else amax / FP8_MAX
    y = (q / scale[..., None]).clamp_(-FP8_MAX, FP8_MAX)
    if out is not None:
        out.copy_(y)                        # the cast to fp8 happens in this copy
        return out, scale
    return y.to(FP8), scale


# ------------------------------------------------------------------------------------------------ the peer
def forward(qkv, positions, cos_sin_cache, k_cache, v_cache, slot_mapping, *, num_q_heads, num_kv_heads, head_dim,
            q_norm_weight=None, k_norm_weight=None, eps=1e-6, norm_before_rope=True, is_neox=True, k_scale=None,
            v_scale=None, q_out_dtype=torch.bfloat16, q_out=None, q_scale_out=None, num_valid=None):
    """Unfused prologue; returns q (bf16) or (q fp8, q_scale). Tokens [num_valid, T) are padding (not written to
    the caches; None = all tokens are real). q_out / q_scale_out: optional destinations (the last op writes
    them). The norms run in bf16 through F.rms_norm (fp32 accumulation inside), RoPE in fp32."""
    t = qkv.shape[0]
    q, k, v = split_heads(qkv, num_q_heads, num_kv_heads, head_dim)
    cos, sin = gather_cos_sin(cos_sin_cache, positions)

    def norm(x, w):
        if w is None:
            return x
        return F.rms_norm(x, (head_dim,), w if w.dtype == x.dtype else w.to(x.dtype), eps)

    def prep(x, w):                         # after RoPE, the norm runs on the fp32 rotated values
        return rope(norm(x, w), cos, sin, is_neox) if norm_before_rope else norm(rope(x, cos, sin, is_neox), w)

    qf, kf = prep(q, q_norm_weight), prep(k, k_norm_weight)

    n = t if num_valid is None else int(num_valid)
    slots = slot_mapping[:n] if n < t else slot_mapping
    if n > 0:
        write_cache(k_cache, to_cache_dtype(kf[:n], k_cache.dtype, 1.0 if k_scale is None else k_scale), slots)
        write_cache(v_cache, to_cache_dtype(v[:n], v_cache.dtype, 1.0 if v_scale is None else v_scale), slots)

    if q_out_dtype == FP8 or (q_out is not None and q_out.dtype == FP8):
        return quantize_q_fp8(qf, q_out, q_scale_out)
    if q_out is not None:
        q_out.copy_(qf)                     # the cast to bf16 happens in this copy
        return q_out
    return qf.to(q_out_dtype)


# -------------------------------------------------------------------------------------------- the reference
def reference(qkv, positions, cos_sin_cache, slot_mapping=None, *, num_q_heads, num_kv_heads, head_dim,
              q_norm_weight=None, k_norm_weight=None, eps=1e-6, norm_before_rope=True, is_neox=True,
              kv_dtype=torch.bfloat16, k_scale=None, v_scale=None) -> dict:
    """Float32 reference. Returns
        q      [T, Hq, D]  float32, before any quantisation;
        k, v   [T, Hkv, D] float32, the values the cache should hold once dequantised (fp8 cache: saturated,
               clamp(x / scale, +-448) * scale, but not rounded to fp8);
        valid  [T] bool (slot >= 0), slots [T] int64 (when slot_mapping is given)."""
    x = qkv.float()
    q, k, v = split_heads(x, num_q_heads, num_kv_heads, head_dim)
    cos, sin = gather_cos_sin(cos_sin_cache.float(), positions.long())

    def norm(y, w):
        if w is None:
            return y
        return y * torch.rsqrt(y.pow(2).mean(dim=-1, keepdim=True) + eps) * w.float()

    def prep(y, w):
        return rope(norm(y, w), cos, sin, is_neox) if norm_before_rope else norm(rope(y, cos, sin, is_neox), w)

    q, k, v = prep(q, q_norm_weight), prep(k, k_norm_weight), v.clone()
    if kv_dtype == FP8:
        ks = 1.0 if k_scale is None else float(k_scale)
        vs = 1.0 if v_scale is None else float(v_scale)
        k = (k / ks).clamp(-FP8_MAX, FP8_MAX) * ks
        v = (v / vs).clamp(-FP8_MAX, FP8_MAX) * vs
    out = {"q": q, "k": k, "v": v}
    if slot_mapping is not None:
        out["slots"] = slot_mapping.long()
        out["valid"] = slot_mapping >= 0
    return out


def read_slots(cache: torch.Tensor, slots: torch.Tensor, scale=None) -> torch.Tensor:
    """Dequantised float32 [n, Hkv, D] of the cache rows at slots (any cache strides)."""
    bs = cache.shape[1]
    vals = cache[slots // bs, slots % bs].float()
    return vals * float(scale) if cache.dtype == FP8 and scale is not None else vals


def naive_reference(qkv, positions, cos_sin_cache, *, num_q_heads, num_kv_heads, head_dim, q_norm_weight=None,
                    k_norm_weight=None, eps=1e-6, norm_before_rope=True, is_neox=True):
    """A per-token, per-head, per-pair Python loop (float64): the yardstick of the dry run's self-check."""
    t, d, r = qkv.shape[0], head_dim, cos_sin_cache.shape[1]
    x = qkv.double().cpu()
    cs = cos_sin_cache.double().cpu()
    pos = positions.cpu().tolist()
    out_q = torch.empty(t, num_q_heads, d, dtype=torch.float64)
    out_k = torch.empty(t, num_kv_heads, d, dtype=torch.float64)
    out_v = torch.empty(t, num_kv_heads, d, dtype=torch.float64)

    def norm(vec, w):
        if w is None:
            return vec
        ms = sum(float(e) ** 2 for e in vec) / d
        inv = 1.0 / (ms + eps) ** 0.5
        return torch.tensor([float(vec[i]) * inv * float(w[i]) for i in range(d)], dtype=torch.float64)

    def rot(vec, p):
        y = vec.clone()
        for i in range(r // 2):
            a, b = (i, i + r // 2) if is_neox else (2 * i, 2 * i + 1)
            c, s = float(cs[p, i]), float(cs[p, r // 2 + i])
            y[a] = vec[a] * c - vec[b] * s
            y[b] = vec[b] * c + vec[a] * s
        return y

    for tok in range(t):
        for h in range(num_q_heads + 2 * num_kv_heads):
            vec = x[tok, h * d:(h + 1) * d]
            if h < num_q_heads:
                w, dst, j = q_norm_weight, out_q, h
            elif h < num_q_heads + num_kv_heads:
                w, dst, j = k_norm_weight, out_k, h - num_q_heads
            else:
                out_v[tok, h - num_q_heads - num_kv_heads] = vec
                continue
            dst[tok, j] = rot(norm(vec, w), pos[tok]) if norm_before_rope else norm(rot(vec, pos[tok]), w)
    return {"q": out_q, "k": out_k, "v": out_v}
