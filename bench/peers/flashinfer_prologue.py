"""Peer: FlashInfer's RoPE + paged KV append, the parts of the prologue it has kernels for.

Timed per call: flashinfer.rope.apply_rope_with_cos_sin_cache_inplace on the q and k column blocks of the QKV
rows (in place, as serving engines call it), then (FP8 cache: k, v / scale, saturated, cast - included in the
timed region) flashinfer.page.append_paged_kv_cache of the real tokens. No q/k RMSNorm and no q quantisation:
FlashInfer has no fused form of them, so rows are marked with NOTE and checked against a no-norm reference.

Slots: append_paged_kv_cache addresses a token as (request b, position p in the request) -> page
kv_indices[kv_indptr[b] + p // page], offset p % page. To hit the benchmark's arbitrary slot_mapping, every real
token is its own request with one page: b = i, kv_indices[i] = slot // page, p = slot % page,
kv_last_page_len[i] = p + 1. These index tensors are built once, outside the timed region.

Configurations are tried in order (the first that runs is timed; the ones that failed are recorded):
strided q/k/v views of the QKV rows with the positions as given; the same with int32 positions; contiguous copies
of q, k, v inside the timed region (counted in its time) with int32 positions.
"""
from __future__ import annotations

import torch

from bench.common import Skip
from bench.peers.torch_prologue import FP8, to_cache_dtype

NOTE = "rope+append only (no q/k norm, no q quant)"
CONFIGS = (("strided", "as_given"), ("strided", "int32"), ("contiguous", "int32"))


def append_metadata(slots: torch.Tensor, page: int) -> dict:
    """One request per token, one page per request: int32 index tensors for append_paged_kv_cache."""
    n = slots.shape[0]
    dev = slots.device
    slots = slots.long()
    pos = (slots % page).to(torch.int32)
    return {"batch_indices": torch.arange(n, dtype=torch.int32, device=dev), "positions": pos,
            "kv_indices": (slots // page).to(torch.int32),
            "kv_indptr": torch.arange(n + 1, dtype=torch.int32, device=dev), "kv_last_page_len": pos + 1}


def emulate_append_slots(meta: dict, page: int) -> torch.Tensor:
    """The slot each appended token lands in under FlashInfer's documented addressing (dry-run self-check)."""
    b = meta["batch_indices"].long()
    p = meta["positions"].long()
    pages = meta["kv_indices"].long()[meta["kv_indptr"].long()[b] + p // page]
    return pages * page + p % page


def _import():
    try:
        import flashinfer  # noqa: F401
        from flashinfer.page import append_paged_kv_cache
        from flashinfer.rope import apply_rope_with_cos_sin_cache_inplace
    except Exception as e:  # noqa: BLE001 - any import failure is a skip reason
        raise Skip(f"import flashinfer failed: {type(e).__name__}: {e}") from None
    return flashinfer, apply_rope_with_cos_sin_cache_inplace, append_paged_kv_cache


def _make_call(case, s, layout, pos_mode, rope_fn, append_fn):
    hq, hkv, d, n = case.hq, case.hkv, case.d, case.n_valid
    t = s.qkv.shape[0]
    q2, k2, v2 = s.qkv.split([hq * d, hkv * d, hkv * d], dim=-1)          # [T, H * D] strided views
    positions = s.positions if pos_mode == "as_given" else s.positions.to(torch.int32)
    meta = append_metadata(s.slot[:n], case.block)
    fp8 = s.k_cache.dtype == FP8

    def call():
        q, k, v = (q2, k2, v2) if layout == "strided" else (q2.contiguous(), k2.contiguous(), v2.contiguous())
        rope_fn(positions, q, k, d, case.cos_sin, is_neox=True)
        ak, av = k[:n].view(n, hkv, d), v[:n].view(n, hkv, d)
        if fp8:
            ak = to_cache_dtype(ak, FP8, case.k_scale)
            av = to_cache_dtype(av, FP8, case.v_scale)
        append_fn(ak, av, meta["batch_indices"], meta["positions"], (s.k_cache, s.v_cache), meta["kv_indices"],
                  meta["kv_indptr"], meta["kv_last_page_len"], kv_layout="NHD")
        return q.view(t, hq, d)

    return call


def build(case):
    """One callable per rotation set; each returns q [T, Hq, D] bf16 (RoPE'd, not normed, not quantised).
    The calls mutate the sets' QKV rows (RoPE in place): the caller restores them before checking."""
    flashinfer, rope_fn, append_fn = _import()
    if case.tokens != case.sets[0].qkv.shape[0]:
        raise RuntimeError("case.tokens does not match the QKV rows")
    if case.n_valid == 0:
        raise Skip("no real tokens")
    errors = []
    for layout, pos_mode in CONFIGS:
        try:
            fns = [_make_call(case, s, layout, pos_mode, rope_fn, append_fn) for s in case.sets]
            fns[0]()
            torch.cuda.synchronize()
            info = {"note": NOTE, "version": getattr(flashinfer, "__version__", None), "fi_layout": layout,
                    "fi_positions": pos_mode}
            if errors:
                info["fallback_from"] = errors
            return fns, info
        except Skip:
            raise
        except Exception as e:  # noqa: BLE001 - try the next configuration
            errors.append(f"{layout}/{pos_mode}: {type(e).__name__}: {str(e)[:200]}")
    raise RuntimeError("; ".join(errors))

