"""Builders and checks shared by the decode-attention GPU tests.

Inputs are fresh random normals (q and k not scaled down); the paged cache's pages are a random permutation,
unused pages and the tail of each last page hold NaN, and unused block-table entries hold huge page ids, so a
kernel that reads anything outside the sequences produces NaN or faults.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import torch

import hopperkit
from hopperkit.reference import decode_attention_reference

FP8_MAX = 448.0
HEAD_DIM = 128


@dataclass
class Case:
    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    query_start_loc: Optional[torch.Tensor]
    max_q_len: int
    q_scale: Optional[torch.Tensor] = None
    k_scale: Optional[torch.Tensor] = None
    v_scale: Optional[torch.Tensor] = None
    softmax_scale: float = 1.0 / math.sqrt(HEAD_DIM)
    extra: dict = field(default_factory=dict)

    @property
    def kv_dtype(self):
        return self.k_cache.dtype

    def kwargs(self):
        return dict(softmax_scale=self.softmax_scale, q_scale=self.q_scale, k_scale=self.k_scale,
                    v_scale=self.v_scale, query_start_loc=self.query_start_loc, max_q_len=self.max_q_len)


def _quant_fp8(x: torch.Tensor):
    scale = x.abs().amax().clamp_min(1e-6) / FP8_MAX
    return (x / scale).to(torch.float8_e4m3fn), scale.reshape(1).float()


def make_case(lens, *, num_q_heads=8, num_kv_heads=1, q_lens=1, block_size=64, kv_dtype=torch.bfloat16,
              q_dtype=None, layout="NHD", extra_tokens=0, seed=0, device="cuda") -> Case:
    """lens: KV length per request; q_lens: int (uniform, no query_start_loc) or a list (query_start_loc)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    B = len(lens)
    Hq, Hkv, D, bs = num_q_heads, num_kv_heads, HEAD_DIM, block_size
    uniform = isinstance(q_lens, int)
    qls = [q_lens] * B if uniform else list(q_lens)
    max_q_len = max(qls) if qls else 1
    pages_per = [(max(L, 0) + bs - 1) // bs for L in lens]
    max_blocks = max(1, max(pages_per) if pages_per else 1)
    used = sum(pages_per)
    num_blocks = used + 3  # a few unused pages
    perm = torch.randperm(num_blocks, generator=g)
    block_table = torch.full((B, max_blocks + 1), 2**30, dtype=torch.int32)  # +1 column: never used
    at = 0
    for b, n in enumerate(pages_per):
        block_table[b, :n] = perm[at:at + n].to(torch.int32)
        at += n
    # KV in float, NaN everywhere a kernel must not read
    shape_nhd = (num_blocks, bs, Hkv, D)
    k = torch.full(shape_nhd, float("nan"))
    v = torch.full(shape_nhd, float("nan"))
    for b, L in enumerate(lens):
        for i in range(pages_per[b]):
            page = int(block_table[b, i])
            n = min(bs, L - i * bs)
            k[page, :n] = torch.randn(n, Hkv, D, generator=g)
            v[page, :n] = torch.randn(n, Hkv, D, generator=g)
    k_scale = v_scale = None
    if kv_dtype == torch.float8_e4m3fn:
        fin_k = torch.nan_to_num(k, nan=0.0)
        fin_v = torch.nan_to_num(v, nan=0.0)
        k_q, k_scale = _quant_fp8(fin_k)
        v_q, v_scale = _quant_fp8(fin_v)
        nan_byte = torch.tensor(0x7F, dtype=torch.uint8)
        k_q = torch.where(torch.isnan(k), nan_byte, k_q.view(torch.uint8)).view(torch.float8_e4m3fn)
        v_q = torch.where(torch.isnan(v), nan_byte, v_q.view(torch.uint8)).view(torch.float8_e4m3fn)
        k, v = k_q, v_q
        k_scale, v_scale = k_scale.to(device), v_scale.to(device)
    else:
        k, v = k.to(kv_dtype), v.to(kv_dtype)
    k_cache, v_cache = _layout(k, v, layout, device)
    # queries
    T = sum(qls) + extra_tokens
    qf = torch.randn(T, Hq, D, generator=g)
    q_scale = None
    q_dtype = q_dtype or (torch.bfloat16 if kv_dtype == torch.bfloat16 else torch.float8_e4m3fn)
    if q_dtype == torch.float8_e4m3fn:
        q, q_scale = hopperkit.quantize_query_fp8(qf.to(device))
    else:
        q = qf.to(q_dtype).to(device)
    qsl = None
    if not uniform or extra_tokens:
        starts = [0]
        for x in qls:
            starts.append(starts[-1] + x)
        qsl = torch.tensor(starts, dtype=torch.int32, device=device)
    return Case(q=q, k_cache=k_cache, v_cache=v_cache, block_table=block_table.to(device),
                seq_lens=torch.tensor(lens, dtype=torch.int32, device=device), query_start_loc=qsl,
                max_q_len=max_q_len, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale)


def _layout(k, v, layout, device):
    if layout == "NHD":
        return k.to(device), v.to(device)
    if layout == "HND":  # storage [num_blocks, heads, block, dim]
        ks = k.permute(0, 2, 1, 3).contiguous().to(device)
        vs = v.permute(0, 2, 1, 3).contiguous().to(device)
        return ks.permute(0, 2, 1, 3), vs.permute(0, 2, 1, 3)
    if layout == "packed":  # vLLM FlashInfer-style pages: [num_blocks, 2, block, heads, dim]
        kv = torch.stack([k, v], dim=1).to(device)
        return kv[:, 0], kv[:, 1]
    raise ValueError(layout)


def make_plan(case: Case, *, mode="dynamic", max_batch=None, bound=None) -> hopperkit.DecodePlan:
    """bound: the update's max_seq_len; default the longest request in static mode (required there) and none in
    dynamic mode, so that dynamic tests run the default kernels (a bound of at most 4544 tokens, SLICE_FREE_MAX in test_decode_gpu.py, picks the 16-row
    kernels without the sliced merge: test_slice_free_kernels_match)."""
    B = case.seq_lens.shape[0]
    plan = hopperkit.DecodePlan(max_batch or max(B, 1), case.q.shape[1], case.k_cache.shape[2],
                                kv_dtype=case.kv_dtype, max_q_len=case.max_q_len, mode=mode,
                                device=case.q.device)
    if bound is None:
        bound = int(case.seq_lens.max().item()) if B and mode == "static" else 0
    plan.update(case.seq_lens, block_size=case.k_cache.shape[1], max_blocks_per_seq=case.block_table.shape[1],
                max_seq_len=bound)
    return plan


def run(case: Case, plan, *, out=None, return_lse=True):
    if out is None:
        out = torch.full(case.q.shape, float("nan"), dtype=torch.bfloat16, device=case.q.device)
    lse = torch.full(case.q.shape[:2], float("nan"), dtype=torch.float32, device=case.q.device)
    hopperkit.decode_attention(case.q, case.k_cache, case.v_cache, case.block_table, case.seq_lens, plan,
                               out=out, lse=lse, **case.kwargs())
    return out, lse


def reference(case: Case, precision="fp64"):
    return decode_attention_reference(case.q, case.k_cache, case.v_cache, case.block_table, case.seq_lens,
                                      softmax_scale=case.softmax_scale, q_scale=case.q_scale,
                                      k_scale=case.k_scale, v_scale=case.v_scale,
                                      query_start_loc=case.query_start_loc, precision=precision)


def check(case: Case, out: torch.Tensor, lse: Optional[torch.Tensor], what=""):
    """Our error vs float64 must be within 2x the error of a plain bf16 PyTorch implementation (+ a small atol);
    rows of no request stay poisoned; no NaN anywhere else; LSE close to the float64 LSE."""
    ref, ref_lse, covered = reference(case, "fp64")
    ref_bf, _, _ = reference(case, "bf16")
    o = out.double()[covered]
    r = ref[covered]
    assert torch.isfinite(o).all(), f"{what}: non-finite outputs at {torch.nonzero(~torch.isfinite(o))[:5].tolist()}"
    err = (o - r).abs().max().item() if o.numel() else 0.0
    err_bf = (ref_bf.double()[covered] - r).abs().max().item() if o.numel() else 0.0
    tol = 2 * err_bf + 2e-3
    assert err <= tol, f"{what}: max abs error {err:.3e} > {tol:.3e} (bf16 reference error {err_bf:.3e})"
    if o.numel():
        rel = ((o - r).norm() / r.norm().clamp_min(1e-12)).item()
        assert rel < 1e-2, f"{what}: relative error {rel:.3e}"
    if (~covered).any():
        assert torch.isnan(out[~covered].float()).all(), f"{what}: rows outside every request were written"
    if lse is not None:
        l = lse[covered].double()
        rl = ref_lse[covered].double()
        fin = torch.isfinite(rl)
        assert torch.equal(torch.isfinite(l), fin), f"{what}: LSE finiteness differs from the reference"
        if fin.any():
            lerr = (l[fin] - rl[fin]).abs().max().item()
            assert lerr < 2e-2, f"{what}: LSE error {lerr:.3e}"
    return err, err_bf
