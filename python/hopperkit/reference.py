"""Plain PyTorch references for hopperkit's operators (for tests and benchmark guards; slow, not for serving).

decode_attention_reference computes, per request, softmax(q k^T * scale) v over the request's cached tokens
(gathered from the paged cache through the block table), with the request's new query tokens causal among
themselves, in the precision given:
  * ``precision="fp64"`` (or "fp32"): the exact function of the (dequantised) inputs;
  * ``precision="bf16"``: what a plain bf16 PyTorch implementation computes (bf16 matmuls with fp32
    accumulation, fp32 softmax, bf16 probabilities) -- the yardstick for tolerances.
"""
from __future__ import annotations

import math
from typing import Optional

import torch


def _dequant(x: torch.Tensor, scale, dtype: torch.dtype) -> torch.Tensor:
    y = x.to(torch.float32)
    if scale is not None:
        y = y * scale
    return y.to(dtype)


def decode_attention_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                               block_table: torch.Tensor, seq_lens: torch.Tensor, *,
                               softmax_scale: Optional[float] = None, q_scale: Optional[torch.Tensor] = None,
                               k_scale: Optional[torch.Tensor] = None, v_scale: Optional[torch.Tensor] = None,
                               query_start_loc: Optional[torch.Tensor] = None, precision: str = "fp64"):
    """Returns (out [T, Hq, D], lse [T, Hq] natural log, covered [T] bool: rows that belong to a request)."""
    T, Hq, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    G = Hq // Hkv
    dev = q.device
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(D)
    work = {"fp64": torch.float64, "fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    acc = torch.float64 if precision == "fp64" else torch.float32
    qs_scale = q_scale[..., None] if q_scale is not None else None
    qd = _dequant(q, qs_scale, work)
    ks = k_scale.item() if k_scale is not None else None
    vs = v_scale.item() if v_scale is not None else None
    lens = seq_lens.tolist()
    B = len(lens)
    if query_start_loc is not None:
        starts = query_start_loc.tolist()
    else:
        ql_u = T // B if B else 0
        starts = [b * ql_u for b in range(B + 1)]
    out = torch.zeros(T, Hq, D, dtype=acc, device=dev)
    lse = torch.full((T, Hq), float("-inf"), dtype=torch.float32, device=dev)
    covered = torch.zeros(T, dtype=torch.bool, device=dev)
    bt = block_table.long()
    for b in range(B):
        qs, qe = starts[b], starts[b + 1]
        ql = qe - qs
        if ql <= 0:
            continue
        covered[qs:qe] = True
        L = lens[b]
        if L <= 0:
            continue
        pages = bt[b, : (L + bs - 1) // bs]
        k = _dequant(k_cache[pages].reshape(-1, Hkv, D)[:L], ks, work)  # [L, Hkv, D]
        v = _dequant(v_cache[pages].reshape(-1, Hkv, D)[:L], vs, work)
        qb = qd[qs:qe].reshape(ql, Hkv, G, D)                           # [ql, Hkv, G, D]
        # scores [Hkv, G, ql, L]
        s = torch.einsum("tkgd,jkd->kgtj", qb, k)
        s = s.to(acc) * softmax_scale
        pos = torch.arange(L, device=dev)
        qpos = L - ql + torch.arange(ql, device=dev)
        mask = pos[None, :] > qpos[:, None]                              # [ql, L]
        s = s.masked_fill(mask[None, None], float("-inf"))
        m = s.amax(dim=-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(s - m)
        den = p.sum(dim=-1, keepdim=True)
        row_lse = (m + torch.log(den)).squeeze(-1)                       # [Hkv, G, ql]
        p = torch.where(den > 0, p / den.clamp_min(1e-300 if acc == torch.float64 else 1e-30), torch.zeros_like(p))
        if precision == "bf16":
            o = torch.einsum("kgtj,jkd->tkgd", p.to(torch.bfloat16), v).to(acc)
        else:
            o = torch.einsum("kgtj,jkd->tkgd", p, v.to(acc))
        out[qs:qe] = o.reshape(ql, Hq, D)
        lse[qs:qe] = row_lse.permute(2, 0, 1).reshape(ql, Hq).float()
    return out, lse, covered


def attention_prologue_reference(qkv: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor, *,
                                 num_q_heads: int, num_kv_heads: int, head_dim: int,
                                 q_norm_weight: Optional[torch.Tensor] = None,
                                 k_norm_weight: Optional[torch.Tensor] = None, eps: float = 1e-6,
                                 norm_before_rope: bool = True, is_neox: bool = True):
    """The unfused prologue in float32: returns (q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, D]) before any cache
    write or quantisation. Positions must be in range (the fused op skips the others)."""
    T = qkv.shape[0]
    D = head_dim
    x = qkv.float().reshape(T, num_q_heads + 2 * num_kv_heads, D)
    q, k, v = x.split([num_q_heads, num_kv_heads, num_kv_heads], dim=1)
    rot = cos_sin_cache.shape[1]
    cs = cos_sin_cache.float()[positions.long()]          # [T, rot]
    cos, sin = cs[:, : rot // 2], cs[:, rot // 2:]

    def norm(t, w):
        if w is None:
            return t
        return t * torch.rsqrt(t.pow(2).mean(dim=-1, keepdim=True) + eps) * w.float()

    def rope(t):
        r, rest = t[..., :rot], t[..., rot:]
        c, s = cos[:, None, :], sin[:, None, :]
        if is_neox:
            a, b = r[..., : rot // 2], r[..., rot // 2:]
            r = torch.cat([a * c - b * s, b * c + a * s], dim=-1)
        else:
            a, b = r[..., 0::2], r[..., 1::2]
            r = torch.stack([a * c - b * s, b * c + a * s], dim=-1).flatten(-2)
        return torch.cat([r, rest], dim=-1)

    def apply(t, w):
        return rope(norm(t, w)) if norm_before_rope else norm(rope(t), w)

    return apply(q, q_norm_weight), apply(k, k_norm_weight), v.clone()


_FP8_MAX = 448.0
_MIN_AMAX = 1e-10


def fp8_quantize_reference(x: torch.Tensor, scale=None, group: int = 128):
    """FP8 e4m3 codes of x (float32) as hopperkit's kernels form them (saturating).

    ``scale`` given (per-tensor, static): codes = x / scale. ``scale=None``: dynamic groups of ``group``
    columns along the last dim, scale = max(amax, 1e-10) / 448. Returns (codes float8_e4m3fn, scales float32:
    the given one, or [..., cols / group])."""
    x = x.to(torch.float32)
    if scale is None:
        g = x.unflatten(-1, (x.shape[-1] // group, group))
        amax = g.abs().amax(-1).clamp_min(_MIN_AMAX)
        # amax / 448 as an IEEE division, as the kernels compute it: torch turns a division by a Python
        # number into a multiplication by its reciprocal, which differs in the last bit, and with bf16
        # inputs many x / scale land exactly on an FP8 rounding midpoint, where that bit decides the code.
        s = amax / torch.full_like(amax, _FP8_MAX)
        q = (g / s.unsqueeze(-1)).clamp(-_FP8_MAX, _FP8_MAX).to(torch.float8_e4m3fn).flatten(-2)
        return q, s
    q = (x / scale).clamp(-_FP8_MAX, _FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale


def _dequant_blocks(w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """[N, K] fp8 with [N / 128, K / 128] block scales -> float32."""
    return w.to(torch.float32) * s.repeat_interleave(128, 0).repeat_interleave(128, 1)


def _moe_input_reference(hidden, hidden_scale, a13_scale, block: bool) -> torch.Tensor:
    """The MoE input as the kernels read it (FP8 codes times their scales), float32 [T, H]."""
    if hidden.dtype == torch.float8_e4m3fn:
        xq, xs = hidden, hidden_scale
    else:
        xq, xs = fp8_quantize_reference(hidden.float(), None if block else a13_scale.float())
    x = xq.to(torch.float32)
    return x * xs.repeat_interleave(128, -1) if block else x * xs.float()


def _moe_expert_weights(w13, w2, w13_scale, w2_scale, e: int, block: bool):
    if block:
        return _dequant_blocks(w13[e], w13_scale[e]), _dequant_blocks(w2[e], w2_scale[e])
    return w13[e].to(torch.float32) * w13_scale[e], w2[e].to(torch.float32) * w2_scale[e]


def fused_moe_reference(hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                        w13: torch.Tensor, w2: torch.Tensor, w13_scale: torch.Tensor, w2_scale: torch.Tensor, *,
                        a13_scale: Optional[torch.Tensor] = None, a2_scale: Optional[torch.Tensor] = None,
                        hidden_scale: Optional[torch.Tensor] = None, expert_map: Optional[torch.Tensor] = None,
                        shared_output: Optional[torch.Tensor] = None) -> torch.Tensor:
    """float32 reference of hopperkit.fused_moe: dequantises the same FP8 weights and applies the same activation
    quantisation (input, and SiLU(gate) * up before the down projection) at the same points, with the
    per-row down-projection results rounded to bf16 as the kernel stores them; everything else in float32.
    Returns float32 [T, H]."""
    block = w13_scale.dim() == 3
    T, H = hidden.shape
    E, I2, _ = w13.shape
    I = I2 // 2
    x = _moe_input_reference(hidden, hidden_scale, a13_scale, block)
    ids = topk_ids.long()
    n_global = expert_map.shape[0] if expert_map is not None else E
    valid = (ids >= 0) & (ids < n_global)
    local = torch.where(valid, ids, torch.zeros_like(ids))
    if expert_map is not None:
        local = expert_map.long()[local]
    local = torch.where(valid & (local >= 0) & (local < E), local, torch.full_like(local, -1))
    out = torch.zeros(T, H, dtype=torch.float32, device=hidden.device)
    for e in torch.unique(local[local >= 0]).tolist():
        tok, kk = torch.nonzero(local == e, as_tuple=True)
        w13e, w2e = _moe_expert_weights(w13, w2, w13_scale, w2_scale, e, block)
        gu = x[tok] @ w13e.T
        h = torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]
        hq, hs = fp8_quantize_reference(h, None if block else a2_scale.float())
        hd = hq.to(torch.float32) * (hs.repeat_interleave(128, -1) if block else hs)
        y = (hd @ w2e.T).to(torch.bfloat16).to(torch.float32)
        out.index_add_(0, tok, y * topk_weights[tok, kk].unsqueeze(1).float())
    if shared_output is not None:
        out += shared_output.float()
    return out


# Accumulation error of the kernels' FP8 tensor-core sums, relative to the sum of the terms' magnitudes. Hopper's
# FP8 MMA keeps about 14 bits while it accumulates (DeepSeek-V3 report: a maximum relative error near 2% of the
# result at K = 4096, i.e. ~5e-4 = 2^-11 of the terms' magnitudes for random data). Where SiLU(gate) * up is
# small because gate or up cancelled, that error is a large part of the value: the tests met codes 0.3-0.4 code
# units from the float32 reference's near zero (session 14 run 2, 4096-16384 tokens).
FP8_MMA_ACCUMULATION_EPS = 2.0 ** -11


def one_step_allowance(ref: torch.Tensor) -> torch.Tensor:
    """How far (code units) an FP8 activation code may lie from the reference's `ref` by rounding alone: one e4m3
    step, 1/8 of the value, and near zero, where the codes are dense, 0.25 code units."""
    return 0.125 * ref.abs() + 0.25


def check_activation_codes(act: torch.Tensor, ref: torch.Tensor, what: str = "",
                           slack: Optional[torch.Tensor] = None) -> int:
    """Checks FP8 activation codes a kernel formed (`act`, as float32) against the reference's (`ref`): each
    at most one FP8 step away (1/8 of the value; near zero, where e4m3 codes are dense, 0.25 code units), plus
    `slack` (code units, broadcast with `ref`) where the inputs' own error bound allows more (see
    `activation_code_slack`). Raises AssertionError otherwise; returns how many codes differ at all (see
    `allowed_code_differences`)."""
    tol = one_step_allowance(ref)
    if slack is not None:
        tol = tol + slack
    over = (act - ref).abs() > tol
    if over.any():
        raise AssertionError(f"{what}{int(over.sum())} activation codes beyond one FP8 step of the reference, "
                             f"e.g. {act[over][:4].tolist()} vs {ref[over][:4].tolist()}")
    return int((act != ref).sum())


def activation_code_slack(gu: torch.Tensor, gu_mag: torch.Tensor, code_scale: torch.Tensor) -> torch.Tensor:
    """How far (code units) the kernel's SiLU(gate) * up may stray from the float32 reference's through the FP8
    tensor cores' accumulation error alone: gate and up each off by at most FP8_MMA_ACCUMULATION_EPS times the
    sum of their terms' magnitudes (`gu_mag` = |x| @ |w13|^T, [rows, 2I]), carried through SiLU (slope below
    1.1) and the product, divided by the codes' scale (`code_scale`, broadcast with [rows, I])."""
    I = gu.shape[1] // 2
    g, u = gu[:, :I], gu[:, I:]
    dg = FP8_MMA_ACCUMULATION_EPS * gu_mag[:, :I]
    du = FP8_MMA_ACCUMULATION_EPS * gu_mag[:, I:]
    dh = 1.1 * u.abs() * dg + (torch.nn.functional.silu(g).abs() + 1.1 * dg) * du
    return dh / code_scale


def allowed_code_differences(total: int, fraction: float = 2e-2) -> float:
    """How many of `total` activation codes may round the other way: a rounding flip is a rare independent
    event per code, so the expected count at `fraction` plus three standard deviations (a one-token case with
    256 codes is not failed by chance)."""
    return fraction * total + 3.0 * (fraction * total) ** 0.5


def kernel_activation_codes(workspace: torch.Tensor, hidden: torch.Tensor, topk_ids: torch.Tensor,
                            w13: torch.Tensor, w2: torch.Tensor, w13_scale: torch.Tensor, w2_scale: torch.Tensor, *,
                            a13_scale: Optional[torch.Tensor] = None, a2_scale: Optional[torch.Tensor] = None,
                            hidden_scale: Optional[torch.Tensor] = None):
    """Per local expert with rows, the SiLU(gate) * up codes a hopperkit.fused_moe call left in `workspace` next
    to the float32 reference's: a dict with "expert", "rows" (its slice of the routing index), "tok" / "kk" (token
    and top-k slot per row), "act" and "ref" (codes as float32 [rows, I]), "ref_scale" (the reference's code
    scales), "slack" (activation_code_slack, code units), "w2" (the expert's dequantised down weights), "block",
    and "views" (the workspace views)."""
    from .moe import _workspace_views  # needs the compiled core (layout offsets); no GPU
    block = w13_scale.dim() == 3
    T, H = hidden.shape
    K = topk_ids.shape[1]
    E, I2, _ = w13.shape
    I = I2 // 2
    v = _workspace_views(workspace, T, K, H, I, E)
    off = v["expert_offset"].long().tolist()
    x = _moe_input_reference(hidden, hidden_scale, a13_scale, block)
    rows = v["sorted_rows"].long()
    for e in range(E):
        if off[e + 1] <= off[e]:
            continue
        sl = slice(off[e], off[e + 1])
        rid = rows[sl]
        tok, kk = rid // K, rid % K
        w13e, w2e = _moe_expert_weights(w13, w2, w13_scale, w2_scale, e, block)
        gu = x[tok] @ w13e.T
        h = torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]
        hq, hs = fp8_quantize_reference(h, None if block else a2_scale.float())
        slack = activation_code_slack(gu, x[tok].abs() @ w13e.abs().T,
                                      hs.repeat_interleave(128, -1) if block else a2_scale.float())
        yield {"expert": e, "rows": sl, "tok": tok, "kk": kk, "act": v["act"][sl].to(torch.float32),
               "ref": hq.to(torch.float32), "ref_scale": hs, "slack": slack, "w2": w2e, "block": block, "views": v}


def moe_reference_from_kernel_codes(workspace: torch.Tensor, hidden: torch.Tensor, topk_ids: torch.Tensor,
                                    topk_weights: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                                    w13_scale: torch.Tensor, w2_scale: torch.Tensor, *,
                                    a13_scale: Optional[torch.Tensor] = None, a2_scale: Optional[torch.Tensor] = None,
                                    hidden_scale: Optional[torch.Tensor] = None,
                                    shared_output: Optional[torch.Tensor] = None,
                                    max_code_diff_fraction: float = 2e-2) -> torch.Tensor:
    """The fused MoE's output recomputed from the activation codes a hopperkit.fused_moe call left in
    `workspace` (its routing index and SiLU(gate) * up codes), after checking those codes against the float32
    reference: float32 [T, H].

    Why: an FP8 code of SiLU(gate) * up whose value lies near a rounding boundary may round the other way in
    the kernel (its gate-up sums, on FP8 tensor cores, keep fewer bits than float32), and with few tokens one
    such code moves an output row by more than 1e-2 relative. So the codes are checked on their own (each at
    most one FP8 step from the reference's, at most `max_code_diff_fraction` of the distinct rows' codes different
    plus three standard deviations of that count; block-wise:
    the group scales within 2e-3), and the rest of the computation (down projection, bf16 rounding per row,
    top-k weighted sum, shared output) is compared from the kernel's own codes. Raises AssertionError naming
    the check that failed."""
    T, H = hidden.shape
    out = torch.zeros(T, H, dtype=torch.float32, device=hidden.device)
    differ = total = 0
    for c in kernel_activation_codes(workspace, hidden, topk_ids, w13, w2, w13_scale, w2_scale,
                                     a13_scale=a13_scale, a2_scale=a2_scale, hidden_scale=hidden_scale):
        e, tok, act, r = c["expert"], c["tok"], c["act"], c["ref"]
        check_activation_codes(act, r, f"expert {e}: ", c["slack"])  # every row, copies included
        # count the differing codes of each distinct (token, expert) row once: routing may repeat a pair (all
        # top-k on one expert), and the copies carry the same codes, which would multiply one rounding flip
        seen, keep = set(), []
        for t in tok.tolist():
            keep.append(t not in seen)
            seen.add(t)
        keep = torch.tensor(keep, dtype=torch.bool, device=act.device)
        differ += int((act[keep] != r[keep]).sum())
        total += int(keep.sum()) * act.shape[1]
        if c["block"]:
            ks, hs = c["views"]["act_scale"][c["rows"]], c["ref_scale"]
            rel = ((ks - hs).abs() / hs).max().item()
            if rel >= 2e-3:
                raise AssertionError(f"expert {e}: activation group scales {rel:.3e} relative from the reference")
            ad = act * ks.repeat_interleave(128, -1)
        else:
            ad = act * a2_scale.float()
        y = (ad @ c["w2"].T).to(torch.bfloat16).to(torch.float32)
        out.index_add_(0, tok, y * topk_weights[tok, c["kk"]].unsqueeze(1).float())
    allowed = allowed_code_differences(total, max_code_diff_fraction)
    if total and differ > allowed:
        raise AssertionError(f"{differ} of {total} activation codes differ from the reference (allowed {allowed:.0f})")
    if shared_output is not None:
        out += shared_output.float()
    return out
