"""Attention-prologue benchmark: hopperkit's fused QK-RMSNorm + RoPE + paged KV write + q quantisation against
the unfused PyTorch sequence and FlashInfer's RoPE + paged append; then the whole decode attention step
(prologue + attention) against PyTorch's prologue + FlashInfer's decode.

    python -m bench.prologue_bench --out bench/results/h200/prologue.json [--quick] [--dry-run]
        [--impls hopperkit,torch_unfused,flashinfer] [--dtypes bf16,fp8] [--cases hy3_tp8,hy3_full]
        [--tokens 1,8,...] [--cache-layout separate|joint] [--no-step] [--step-dtypes bf16,fp8]

Section 1, per (case, tokens, dtype): N rotation sets (QKV rows of random normal data, random positions, a
random scatter of slots over a cache a few blocks larger than needed, padding tokens (slot -1) at the tail of
the larger cases, caches filled with NaN), N chosen so one graph touches >= 4 x L2. Every impl is checked on
set 0 eagerly and on the last set after the graph replays against the float32 reference of
bench/peers/torch_prologue.py (q on the real tokens, the K/V rows written, every other cache slot still NaN),
then timed as one CUDA graph of N calls (median / N).
floor_us = (bytes read + bytes written) / the copy bandwidth measured in the same run.

Section 2, "step_<scenario>" rows: each q_len-1 scenario of decode_scenarios.json (8 q heads, 1 KV head, D 128,
page 64): one decode step = prologue of the batch's new tokens (written at each request's last position) +
paged decode attention over the lengths including them. hopperkit (attention_prologue + decode_attention, plan
updated once outside the graph) against torch_flashinfer (torch_prologue.forward + FlashInfer's decode wrapper).
floor_us = KV bytes / read bandwidth + prologue bytes / copy bandwidth.
"""
from __future__ import annotations

import argparse
import json
import math
import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch

from bench import common, decode_bench
from bench.common import REPO_ROOT, Skip, fmt
from bench.peers import flashinfer_decode, flashinfer_prologue, torch_prologue

CASES = {"hy3_tp8": (8, 1, 128), "hy3_full": (64, 8, 128)}     # name -> (q heads, kv heads, head dim)
TOKENS = (1, 8, 64, 512, 4096, 32768)
QUICK_TOKENS = (8, 4096)
DTYPES = ("bf16", "fp8")
IMPLS = ("hopperkit", "torch_unfused", "flashinfer")
STEP_IMPLS = ("hopperkit", "torch_flashinfer")
KV_DTYPE = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}
ELEM_BYTES = {"bf16": 2, "fp8": 1}
TOL = {"bf16": 2e-2, "fp8": 8e-2}         # rel_err above this marks a row "ok": false
STEP_TOL = decode_bench.TOL
BLOCK = 64
ROTARY = 128
EPS = 1e-6
ROPE_THETA = 1e6
MAX_POSITION = 131072                     # covers the step section's longest request (128K)
POS_BYTES = 8                             # positions int64
SLOT_BYTES = 8                            # slot_mapping int64
FP8_HEADROOM = 1.25                       # fp8 k/v scale = 1.25 x amax / 448 of rotation set 0
SET_BUDGET = 8 * 2**30                    # rotation sets of one case stay under this many bytes
COPY_TARGET = 0.85                        # target: 85% of the copy bandwidth for tokens >= 4096
DEVICE = "cuda"


def n_padding(tokens: int) -> int:
    """Padding tokens (slot -1) at the tail of the batch, as a CUDA-graph-padded serving batch has them."""
    return 2 if tokens >= 512 else 0


def prologue_bytes(tokens: int, hq: int, hkv: int, d: int, dtype: str, n_valid: int | None = None,
                   rotary: int | None = None) -> dict:
    """HBM bytes of one prologue call. Read: QKV rows, positions, slots, the cos/sin rows of the positions (upper
    bound: all distinct), norm weights. Written: q (bf16; or fp8 + an fp32 scale per token and head), K and V rows
    of the real tokens into the cache."""
    n_valid = tokens if n_valid is None else n_valid
    rotary = ROTARY if rotary is None else rotary
    read = tokens * ((hq + 2 * hkv) * d * 2 + POS_BYTES + SLOT_BYTES + rotary * 4) + 2 * d * 2
    q_bytes = tokens * hq * d * 2 if dtype == "bf16" else tokens * hq * (d + 4)
    write = q_bytes + 2 * n_valid * hkv * d * ELEM_BYTES[dtype]
    return {"read": read, "write": write, "total": read + write}


def make_cos_sin(max_position: int, rotary: int, device, theta: float = ROPE_THETA) -> torch.Tensor:
    """[max_position, rotary] float32: cos of the rotary frequencies in the first half, sin in the second."""
    inv_freq = 1.0 / theta ** (torch.arange(0, rotary, 2, dtype=torch.float64) / rotary)
    ang = torch.outer(torch.arange(max_position, dtype=torch.float64), inv_freq)
    return torch.cat([ang.cos(), ang.sin()], dim=-1).float().to(device)


def norm_weight(d: int, gen: torch.Generator, device) -> torch.Tensor:
    return (1.0 + 0.2 * torch.randn(d, generator=gen)).to(torch.bfloat16).to(device)


def fill_sentinel(cache: torch.Tensor) -> None:
    """NaN everywhere (fp8 e4m3fn: byte 0x7F)."""
    if cache.dtype == torch.float8_e4m3fn:
        cache.view(torch.uint8).fill_(0x7F)
    else:
        cache.fill_(float("nan"))


def alloc_caches(num_blocks, block, hkv, d, dtype, layout, device):
    """separate: two contiguous [blocks, block, Hkv, D] tensors; joint: k and v views of one [blocks, 2, block,
    Hkv, D] buffer (FlashInfer's own layout; strided views for every impl)."""
    if layout == "joint":
        buf = torch.empty(num_blocks, 2, block, hkv, d, dtype=KV_DTYPE[dtype], device=device)
        return buf[:, 0], buf[:, 1]
    return tuple(torch.empty(num_blocks, block, hkv, d, dtype=KV_DTYPE[dtype], device=device) for _ in range(2))


# ------------------------------------------------------------------------------------------ section 1 data
@dataclass
class PSet:
    qkv: torch.Tensor               # [T, (Hq + 2 Hkv) * D] bf16
    positions: torch.Tensor         # [T] int64
    slot: torch.Tensor              # [T] int64; the tail n_padding tokens are -1
    k_cache: torch.Tensor           # [num_blocks, BLOCK, Hkv, D]
    v_cache: torch.Tensor
    seed: int


@dataclass
class PCase:
    name: str
    tokens: int
    dtype: str
    hq: int
    hkv: int
    d: int
    block: int
    n_valid: int
    num_blocks: int
    layout: str
    cos_sin: torch.Tensor
    q_w: torch.Tensor
    k_w: torch.Tensor
    sets: list = field(default_factory=list)
    k_scale: float = 1.0            # fp8 cache: stored = value / scale
    v_scale: float = 1.0
    k_scale_t: torch.Tensor | None = None
    v_scale_t: torch.Tensor | None = None

    kv_dtype = property(lambda self: KV_DTYPE[self.dtype])
    width = property(lambda self: (self.hq + 2 * self.hkv) * self.d)


def fill_qkv(s: PSet) -> None:
    """(Re)generates the set's QKV rows: the same data every time (the FlashInfer peer rotates them in place)."""
    gen = torch.Generator(device=s.qkv.device).manual_seed(s.seed)
    torch.randn(s.qkv.shape, generator=gen, out=s.qkv)


def reset(case: PCase) -> None:
    for s in case.sets:
        fill_qkv(s)
        fill_sentinel(s.k_cache)
        fill_sentinel(s.v_cache)


def set_bytes(tokens, hq, hkv, d, dtype) -> int:
    """Device bytes one rotation set holds (inputs, caches with their slack, q outputs)."""
    nb = num_blocks_for(tokens - n_padding(tokens))
    return (tokens * ((hq + 2 * hkv) * d * 2 + 16) + 2 * nb * BLOCK * hkv * d * ELEM_BYTES[dtype]
            + prologue_bytes(tokens, hq, hkv, d, dtype)["write"])


def num_blocks_for(n_valid: int) -> int:
    need = max(1, -(-n_valid // BLOCK))
    return need + max(2, need // 8)


def n_sets_for(tokens, hq, hkv, d, dtype) -> int:
    n = common.rotation_count(prologue_bytes(tokens, hq, hkv, d, dtype)["total"])
    return max(1, min(n, SET_BUDGET // max(1, set_bytes(tokens, hq, hkv, d, dtype))))


def make_case(name, tokens, dtype, n_sets, device, cos_sin, dims=None, layout="separate", seed=1234) -> PCase:
    hq, hkv, d = dims or CASES[name]
    gen = torch.Generator().manual_seed(seed + 7919 * tokens + (dtype == "fp8"))
    n_valid = tokens - n_padding(tokens)
    nb = num_blocks_for(n_valid)
    case = PCase(name, tokens, dtype, hq, hkv, d, BLOCK, n_valid, nb, layout, cos_sin,
                 norm_weight(d, gen, device), norm_weight(d, gen, device))
    for i in range(n_sets):
        slot = torch.full((tokens,), -1, dtype=torch.int64)
        slot[:n_valid] = torch.randperm(nb * BLOCK, generator=gen)[:n_valid]
        pos = torch.randint(0, cos_sin.shape[0], (tokens,), generator=gen, dtype=torch.int64)
        k, v = alloc_caches(nb, BLOCK, hkv, d, dtype, layout, device)
        qkv = torch.empty(tokens, case.width, dtype=torch.bfloat16, device=device)
        case.sets.append(PSet(qkv, pos.to(device), slot.to(device), k, v, seed=seed * 1000 + 17 * tokens + i))
    reset(case)
    if dtype == "fp8":             # scales from set 0's reference amax, with headroom: saturation stays rare
        ref = reference(case, 0, norm=True, quant=False)
        case.k_scale = float(ref["k"].abs().amax()) * FP8_HEADROOM / 448.0
        case.v_scale = float(ref["v"].abs().amax()) * FP8_HEADROOM / 448.0
        case.k_scale_t = torch.tensor([case.k_scale], dtype=torch.float32, device=device)
        case.v_scale_t = torch.tensor([case.v_scale], dtype=torch.float32, device=device)
    return case


def reference(case: PCase, i: int, norm: bool = True, quant: bool = True) -> dict:
    """torch_prologue.reference of set i (must run while the set's QKV rows are pristine). norm=False: the
    FlashInfer peer's reference (RoPE only). quant=False: the fp8 cache's saturation is not modelled."""
    s = case.sets[i]
    return torch_prologue.reference(
        s.qkv, s.positions, case.cos_sin, s.slot, num_q_heads=case.hq, num_kv_heads=case.hkv, head_dim=case.d,
        q_norm_weight=case.q_w if norm else None, k_norm_weight=case.k_w if norm else None, eps=EPS,
        norm_before_rope=True, is_neox=True, kv_dtype=case.kv_dtype if quant else torch.bfloat16,
        k_scale=case.k_scale, v_scale=case.v_scale)


def q_as_float(result) -> torch.Tensor:
    """An impl's q output, dequantised: bf16 q, or (fp8 q, [T, H] scale)."""
    if isinstance(result, (tuple, list)):
        q, scale = result
        return q.float() * scale.float()[..., None]
    return result.float()


def untouched_ok(case: PCase, s: PSet) -> bool:
    """Every cache slot not named by the real tokens is still NaN, and every named one holds a number."""
    written = case.n_valid * case.hkv * case.d
    return all(int(torch.isnan(c.float()).sum()) == c.numel() - written for c in (s.k_cache, s.v_cache))


def check(case: PCase, i: int, result, ref: dict) -> dict:
    """rel_err of q (real tokens) and of the K/V rows read back from the cache against ref, and the NaN guard."""
    s, n = case.sets[i], case.n_valid
    q = q_as_float(result)
    slots = s.slot[:n]
    k = torch_prologue.read_slots(s.k_cache, slots, case.k_scale)
    v = torch_prologue.read_slots(s.v_cache, slots, case.v_scale)
    errs = {"q": common.relative_error(q[:n], ref["q"][:n]), "k": common.relative_error(k, ref["k"][:n]),
            "v": common.relative_error(v, ref["v"][:n])}
    out = {f"rel_err_{x}": e["rel_err"] for x, e in errs.items()}
    out["max_abs_err_q"] = errs["q"]["max_abs_err"]
    out["rel_err"] = max(e["rel_err"] for e in errs.values()) if all(
        math.isfinite(e["rel_err"]) for e in errs.values()) else float("nan")
    out["untouched_ok"] = untouched_ok(case, s)
    return out


# ----------------------------------------------------------------------------------------- section 1 impls
def hopperkit():
    hk = decode_bench.hopperkit()
    if not hasattr(hk, "attention_prologue"):
        raise Skip("this hopperkit build has no attention_prologue")
    return hk


def _check_errors(errs: torch.Tensor):
    bad = errs.tolist()
    return f"error_count positions={bad[0]} slots={bad[1]}" if any(bad) else None


def build_hopperkit(case: PCase):
    hk = hopperkit()
    fp8 = case.dtype == "fp8"
    dev = case.sets[0].qkv.device
    errs = torch.zeros(2, dtype=torch.int32, device=dev)
    fns = []
    for s in case.sets:
        q_out = torch.empty(case.tokens, case.hq, case.d, dtype=case.kv_dtype, device=dev)
        q_scale = torch.empty(case.tokens, case.hq, dtype=torch.float32, device=dev) if fp8 else None
        fns.append(partial(
            hk.attention_prologue, s.qkv, s.positions, case.cos_sin, s.k_cache, s.v_cache, s.slot,
            num_q_heads=case.hq, num_kv_heads=case.hkv, head_dim=case.d, q_norm_weight=case.q_w,
            k_norm_weight=case.k_w, eps=EPS, norm_before_rope=True, is_neox=True, k_scale=case.k_scale_t,
            v_scale=case.v_scale_t, q_out_dtype=case.kv_dtype, q_out=q_out, q_scale_out=q_scale, error_count=errs))
    return fns, {"_post_check": partial(_check_errors, errs)}


def build_torch(case: PCase):
    fp8 = case.dtype == "fp8"
    dev = case.sets[0].qkv.device
    fns = []
    for s in case.sets:
        q_out = torch.empty(case.tokens, case.hq, case.d, dtype=case.kv_dtype, device=dev)
        q_scale = torch.empty(case.tokens, case.hq, dtype=torch.float32, device=dev) if fp8 else None
        fns.append(partial(
            torch_prologue.forward, s.qkv, s.positions, case.cos_sin, s.k_cache, s.v_cache, s.slot,
            num_q_heads=case.hq, num_kv_heads=case.hkv, head_dim=case.d, q_norm_weight=case.q_w,
            k_norm_weight=case.k_w, eps=EPS, norm_before_rope=True, is_neox=True, k_scale=case.k_scale_t,
            v_scale=case.v_scale_t, q_out_dtype=case.kv_dtype, q_out=q_out, q_scale_out=q_scale,
            num_valid=case.n_valid))
    return fns, {}


def build_flashinfer(case: PCase):
    fns, info = flashinfer_prologue.build(case)
    info["_mutates_input"] = True           # RoPE in place on the QKV rows
    info["_reference"] = "no_norm"
    return fns, info


BUILDERS = {"hopperkit": build_hopperkit, "torch_unfused": build_torch, "flashinfer": build_flashinfer}


def _error(e: Exception) -> str:
    return decode_bench._error(e)


def run_impl(impl, case: PCase, refs: dict, base: dict, replays, warmup) -> dict:
    """refs[(set index, norm)]: references of the first and the last set. Set 0 is checked eagerly; the last set
    on what the replayed graph left (not for an impl that rotates its inputs in place: its replays compound)."""
    row = dict(base, impl=impl, us=None)
    fns = None
    try:
        fns, info = BUILDERS[impl](case)
        post = info.pop("_post_check", None)
        mutates = info.pop("_mutates_input", False)
        norm = info.pop("_reference", "norm") == "norm"
        row.update(info)
        reset(case)                          # pristine QKV rows, NaN caches (builders may have run a call)
        res0 = fns[0]()
        torch.cuda.synchronize()
        row.update(check(case, 0, res0, refs[(0, norm)]))
        outs: list = []
        row["us"] = common.time_graph(fns, replays, warmup, outputs=outs)
        last = len(fns) - 1
        if mutates:
            row["untouched_ok_graph"] = untouched_ok(case, case.sets[last])
            row["rel_err_graph"] = None
            graph_ok = row["untouched_ok_graph"]
        else:
            g = check(case, last, outs[-1], refs[(last, norm)])
            row["rel_err_graph"], row["untouched_ok_graph"] = g["rel_err"], g["untouched_ok"]
            graph_ok = g["untouched_ok"] and math.isfinite(g["rel_err"]) and g["rel_err"] <= TOL[case.dtype]
        eager_ok = row["untouched_ok"] and math.isfinite(row["rel_err"]) and row["rel_err"] <= TOL[case.dtype]
        row["ok"] = bool(eager_ok and graph_ok)
        err = post() if post else None
        if err:
            row["ok"], row["kernel_errors"] = False, err
        row["achieved_TBps"] = base["bytes"] / (row["us"] * 1e6)
    except Skip as e:
        row["skip_reason"] = str(e)
    except Exception as e:  # noqa: BLE001 - one failing impl must not stop the run
        row["ok"], row["skip_reason"] = False, _error(e)
    del fns
    return row


def same_bytes_copy_us(total_bytes: int, n_sets: int, replays, warmup) -> float:
    """An elementwise copy kernel (dst = src * 1, the copy ceiling's kernel) moving the case's bytes (half read,
    half written), over n_sets rotated buffer pairs as the impls rotate theirs: what a memory-bound kernel of this
    size reaches, launch and ramp included. It shows how much of a gap to the floor is the size, not the kernel."""
    return common.copy_kernel_us(max(1, total_bytes // 4), n_sets, replays, warmup)  # bf16 elements each way


def run_section1(args, ceilings, prog, rows, replays, warmup, cos_sin, flush=lambda: None):
    for name in args.cases:
        hq, hkv, d = CASES[name]
        for tokens in args.tokens:
            for dt in args.dtypes:
                nb = prologue_bytes(tokens, hq, hkv, d, dt, tokens - n_padding(tokens))
                floor_us = nb["total"] / (ceilings["copy_TBps"] * 1e6)
                n_sets = n_sets_for(tokens, hq, hkv, d, dt)
                base = {"case": name, "tokens": tokens, "dtype": dt, "floor_us": floor_us, "bytes": nb["total"],
                        "n_rotate": n_sets, "n_valid": tokens - n_padding(tokens), "cache_layout": args.cache_layout}
                try:
                    base["same_bytes_copy_us"] = same_bytes_copy_us(nb["total"], n_sets, replays, warmup)
                except Exception as e:  # noqa: BLE001 - a reference measurement, not an impl
                    prog.write(f"{name} T={tokens} {dt}: the same-bytes copy failed: {_error(e)}")
                common.free_cuda()
                case, refs = None, {}
                try:
                    case = make_case(name, tokens, dt, n_sets, DEVICE, cos_sin, layout=args.cache_layout)
                    norms = [True] + ([False] if "flashinfer" in args.impls else [])
                    for i in sorted({0, n_sets - 1}):
                        for norm in norms:
                            refs[(i, norm)] = reference(case, i, norm=norm)
                    if dt == "fp8":
                        base.update(k_scale=case.k_scale, v_scale=case.v_scale)
                except Exception as e:  # noqa: BLE001
                    prog.write(f"{name} T={tokens} {dt}: building the inputs failed: {_error(e)}")
                    case = None
                for impl in args.impls:
                    if case is None:
                        rows.append(dict(base, impl=impl, us=None, ok=False,
                                         skip_reason="inputs could not be built"))
                    else:
                        rows.append(run_impl(impl, case, refs, base, replays, warmup))
                    prog.update(f"{name} T={tokens} {dt} {impl}")
                    common.free_cuda()
                del case, refs
                common.free_cuda()
                flush()


# ---------------------------------------------------------------------------------- section 2: decode step
@dataclass
class StepSet:
    qkv: torch.Tensor               # [B, (Hq + 2 Hkv) * D] bf16: each request's new token
    positions: torch.Tensor         # [B] int64 = seq_len - 1
    slot: torch.Tensor              # [B] int64: the slot of each request's last token


@dataclass
class StepCase:
    dcase: object                   # decode_bench.Case (KV sets, block tables, seq_lens, q buffer)
    extra: list                     # StepSet per KV set
    cos_sin: torch.Tensor
    q_w: torch.Tensor
    k_w: torch.Tensor


def step_eligible(cfg: dict) -> str | None:
    want = {"num_q_heads": 8, "num_kv_heads": 1, "head_dim": 128, "block_size": 64, "q_len": 1}
    bad = [f"{k}={cfg.get(k)}" for k, v in want.items() if cfg.get(k) != v]
    return None if not bad else "step rows need 8/1 heads, D 128, page 64, q_len 1; got " + ", ".join(bad)


def step_bytes(cfg: dict, dtype: str) -> tuple[int, int]:
    """(KV bytes read by the attention, prologue bytes)."""
    kv = decode_bench.kv_bytes(cfg["lens"], cfg["num_kv_heads"], cfg["head_dim"], dtype)
    pro = prologue_bytes(len(cfg["lens"]), cfg["num_q_heads"], cfg["num_kv_heads"], cfg["head_dim"], dtype)
    return kv, pro["total"]


def build_step_case(name, cfg, dtype, n_sets, device, cos_sin, seed=4321) -> StepCase:
    dcase = decode_bench.build_case(name, cfg, dtype, n_sets, device)
    hq, hkv, d = dcase.hq, dcase.hkv, dcase.d
    gen = torch.Generator().manual_seed(seed)
    last = (dcase.cu_k[1:] - 1).long()
    extra = []
    for s in dcase.sets:
        qkv = torch.randn(dcase.batch, (hq + 2 * hkv) * d, generator=gen).to(torch.bfloat16).to(device)
        extra.append(StepSet(qkv, (dcase.seq_lens.long() - 1), s.token_idx[last].long()))
    return StepCase(dcase, extra, cos_sin, norm_weight(d, gen, device), norm_weight(d, gen, device))


def step_prologue_reference(sc: StepCase, i: int) -> dict:
    c, s, x = sc.dcase, sc.dcase.sets[i], sc.extra[i]
    return torch_prologue.reference(
        x.qkv, x.positions, sc.cos_sin, x.slot, num_q_heads=c.hq, num_kv_heads=c.hkv, head_dim=c.d,
        q_norm_weight=sc.q_w, k_norm_weight=sc.k_w, eps=EPS, norm_before_rope=True, is_neox=True,
        kv_dtype=s.k.dtype, k_scale=s.k_scale, v_scale=s.v_scale)


def step_reference(sc: StepCase, i: int) -> torch.Tensor:
    """[B, Hq, D] float32: attention of the reference q over each request's cache with its last token replaced by
    the reference prologue's k/v (the cache's own rows are read dequantised, the last one never)."""
    c, s = sc.dcase, sc.dcase.sets[i]
    pro = step_prologue_reference(sc, i)
    g = c.hq // c.hkv
    q = pro["q"].view(c.batch, c.hkv, g, c.d)
    out = torch.empty(c.batch, c.hkv, g, c.d, device=q.device)
    for r, n in enumerate(c.lens):
        pages = s.block_table[r, :(n + c.page - 1) // c.page].long()
        k = s.k[pages].flatten(0, 1)[:n].float() * s.k_scale
        v = s.v[pages].flatten(0, 1)[:n].float() * s.v_scale
        k[n - 1], v[n - 1] = pro["k"][r], pro["v"][r]
        p = (torch.einsum("hgd,nhd->hgn", q[r], k) * c.scale).softmax(-1)
        out[r] = torch.einsum("hgn,nhd->hgd", p, v)
    return out.view(c.batch, c.hq, c.d)


def build_step_hopperkit(sc: StepCase):
    hk = hopperkit()
    c = sc.dcase
    fp8 = c.dtype == "fp8"
    dev = c.q.device
    plan = hk.DecodePlan(c.batch, c.hq, c.hkv, kv_dtype=KV_DTYPE[c.dtype], max_q_len=1, mode="dynamic",
                         device=DEVICE)
    plan.update(c.seq_lens, block_size=c.page, max_blocks_per_seq=c.max_blocks, max_seq_len=c.max_len)
    errs = torch.zeros(2, dtype=torch.int32, device=dev)

    def step(s, x, q_out, q_scale, out):
        hk.attention_prologue(x.qkv, x.positions, sc.cos_sin, s.k, s.v, x.slot, num_q_heads=c.hq,
                              num_kv_heads=c.hkv, head_dim=c.d, q_norm_weight=sc.q_w, k_norm_weight=sc.k_w,
                              eps=EPS, norm_before_rope=True, is_neox=True, k_scale=s.k_scale_t,
                              v_scale=s.v_scale_t, q_out_dtype=q_out.dtype, q_out=q_out, q_scale_out=q_scale,
                              error_count=errs)
        hk.decode_attention(q_out, s.k, s.v, s.block_table, c.seq_lens, plan, softmax_scale=c.scale,
                            q_scale=q_scale, k_scale=s.k_scale_t, v_scale=s.v_scale_t, out=out)
        return out

    fns = []
    for s, x in zip(c.sets, sc.extra):
        q_out = torch.empty(c.batch, c.hq, c.d, dtype=KV_DTYPE[c.dtype], device=dev)
        q_scale = torch.empty(c.batch, c.hq, dtype=torch.float32, device=dev) if fp8 else None
        out = torch.empty(c.batch, c.hq, c.d, dtype=torch.bfloat16, device=dev)
        fns.append(partial(step, s, x, q_out, q_scale, out))

    def post():
        why = [w for w in (decode_bench.check_plan(plan), _check_errors(errs)) if w]
        return "; ".join(map(str, why)) or None

    return fns, {"q_dtype": c.dtype, "_post_check": post}


def build_step_torch_flashinfer(sc: StepCase):
    c = sc.dcase
    fi_fns, info = flashinfer_decode.build(c)          # its calls read c.q, which the prologue writes

    def step(s, x, fi):
        torch_prologue.forward(x.qkv, x.positions, sc.cos_sin, s.k, s.v, x.slot, num_q_heads=c.hq,
                               num_kv_heads=c.hkv, head_dim=c.d, q_norm_weight=sc.q_w, k_norm_weight=sc.k_w,
                               eps=EPS, norm_before_rope=True, is_neox=True, k_scale=s.k_scale_t,
                               v_scale=s.v_scale_t, q_out_dtype=torch.bfloat16, q_out=c.q)
        return fi()

    info = {f"fi_{k}": v for k, v in info.items()}
    info.update(q_dtype="bf16", note="torch unfused prologue (bf16 q) + flashinfer BatchDecodeWithPagedKVCacheWrapper")
    return [partial(step, s, x, fi) for s, x, fi in zip(c.sets, sc.extra, fi_fns)], info


STEP_BUILDERS = {"hopperkit": build_step_hopperkit, "torch_flashinfer": build_step_torch_flashinfer}


def run_step_impl(impl, sc: StepCase, refs, base, replays, warmup) -> dict:
    row = dict(base, impl=impl, us=None)
    fns = None
    tol = STEP_TOL[sc.dcase.dtype]
    try:
        fns, info = STEP_BUILDERS[impl](sc)
        post = info.pop("_post_check", None)
        row.update(info)
        out0 = fns[0]()
        torch.cuda.synchronize()
        row.update(common.relative_error(out0, refs[0]))
        outs: list = []
        row["us"] = common.time_graph(fns, replays, warmup, outputs=outs)
        row["rel_err_graph"] = common.relative_error(outs[-1], refs[1])["rel_err"]
        worst = max(row["rel_err"], row["rel_err_graph"])
        row["ok"] = bool(math.isfinite(worst) and worst <= tol)
        err = post() if post else None
        if err:
            row["ok"], row["kernel_errors"] = False, err
    except Skip as e:
        row["skip_reason"] = str(e)
    except Exception as e:  # noqa: BLE001
        row["ok"], row["skip_reason"] = False, _error(e)
    del fns
    return row


def run_section2(args, scns, ceilings, prog, rows, replays, warmup, cos_sin, flush=lambda: None):
    for name, cfg in scns.items():
        for dt in args.step_dtypes:
            kvb, prob = step_bytes(cfg, dt)
            floor_us = kvb / (ceilings["read_TBps"] * 1e6) + prob / (ceilings["copy_TBps"] * 1e6)
            n = common.rotation_count(kvb + prob)
            base = {"case": f"step_{name}", "tokens": len(cfg["lens"]), "dtype": dt, "floor_us": floor_us,
                    "bytes": kvb + prob, "kv_bytes": kvb, "prologue_bytes": prob, "n_rotate": n,
                    "spec": cfg.get("spec", ""), "kv_tokens": sum(cfg["lens"])}
            why = step_eligible(cfg)
            sc, refs = None, None
            if why is None:
                try:
                    sc = build_step_case(name, cfg, dt, n, DEVICE, cos_sin)
                    refs = (step_reference(sc, 0), step_reference(sc, n - 1))
                except Exception as e:  # noqa: BLE001
                    why = f"inputs could not be built: {_error(e)}"
                    sc = refs = None
            for impl in args.step_impls:
                if sc is None:
                    rows.append(dict(base, impl=impl, us=None, ok=None if why.startswith("step rows") else False,
                                     skip_reason=why))
                else:
                    rows.append(run_step_impl(impl, sc, refs, base, replays, warmup))
                prog.update(f"step {name} {dt} {impl}")
                common.free_cuda()
            del sc, refs
            common.free_cuda()
            flush()


# ----------------------------------------------------------------------------------------------- report
SHORT = {"hopperkit": "hk", "torch_unfused": "torch", "flashinfer": "fi", "torch_flashinfer": "torch+fi"}


def report(rows, impls, title) -> str:
    """Times (us), time / floor ('/fl'), and each peer's time / hopperkit's ('peer/hk' > 1: hopperkit faster)."""
    keys = list(dict.fromkeys((r["case"], r["tokens"], r["dtype"]) for r in rows if r["impl"] in impls))
    if not keys:
        return f"{title}: no rows"
    peers = [i for i in impls if i != "hopperkit"] if "hopperkit" in impls else []
    headers = ["case", "tokens", "dtype", "MB", "floor", "copy"]
    headers += [h for i in impls for h in (SHORT[i], f"{SHORT[i]}/fl")]
    headers += [f"{SHORT[p]}/hk" for p in peers]
    table = []
    for key in keys:
        by = {r["impl"]: r for r in rows if (r["case"], r["tokens"], r["dtype"]) == key}
        any_row = next(iter(by.values()))
        floor = any_row.get("floor_us")
        us = {i: by.get(i, {}).get("us") for i in impls}
        line = [key[0], key[1], key[2], fmt(any_row.get("bytes", 0) / 1e6, ".2f"), fmt(floor, ".2f"),
                fmt(any_row.get("same_bytes_copy_us"), ".2f")]
        for i in impls:
            bad = "!" if by.get(i, {}).get("ok") is False and us[i] is not None else ""
            line += [fmt(us[i], ".2f") + bad, fmt(us[i] / floor if us[i] and floor else None, ".2f")]
        hk = us.get("hopperkit")
        line += [fmt(us[p] / hk if us[p] and hk else None, ".2f") for p in peers]
        table.append(line)
    legend = ", ".join(f"{SHORT[i]} = {i}" for i in impls)
    text = [title, common.format_table(headers, table),
            "us per call; MB = bytes moved per call; copy = an elementwise copy kernel moving the same bytes"
            f" (the copy ceiling's kernel at this size); /fl = time / floor; x/hk = x's time / hopperkit's; {legend};"
            " '!' = wrong output (rel_err over tolerance, a cache slot touched that should not be, kernel errors)"]
    reasons = sorted({f"{r['impl']} {r['dtype']}: {r['skip_reason']}" for r in rows
                      if r.get("skip_reason") and r["impl"] in impls})
    return "\n".join(text + (["skipped / failed:"] + [f"  {x}" for x in reasons] if reasons else []))


def summary(rows) -> str:
    ok = sum(r.get("ok") is True for r in rows)
    wrong = sum(r.get("ok") is False and r["us"] is not None for r in rows)
    err = sum(r.get("ok") is False and r["us"] is None for r in rows)
    skip = sum(r.get("skip_reason") is not None and r.get("ok") is None for r in rows)
    return f"prologue_bench: {len(rows)} rows: {ok} ok, {wrong} wrong output, {err} errors, {skip} skipped"


# ---------------------------------------------------------------------------------------------- dry run
def _rel(a, b) -> float:
    return common.relative_error(a.float(), b.float())["rel_err"]


def self_check_reference() -> list[str]:
    """torch_prologue.reference against a per-token Python loop, on tiny inputs (NeoX and GPT-J, full and partial
    rotary, norm before / after RoPE, with and without weights); and the torch peer's RoPE convention."""
    msgs = []
    gen = torch.Generator().manual_seed(5)
    worst = 0.0
    for d, rot, neox, before, weights in [(64, 64, True, True, True), (64, 32, True, True, True),
                                          (64, 64, False, True, True), (32, 32, True, False, True),
                                          (32, 16, False, False, True), (64, 64, True, True, False)]:
        hq, hkv, t = 4, 2, 5
        qkv = torch.randn(t, (hq + 2 * hkv) * d, generator=gen).to(torch.bfloat16)
        cs = make_cos_sin(97, rot, "cpu", theta=1e4)
        pos = torch.randint(0, 97, (t,), generator=gen)
        qw = (1 + 0.3 * torch.randn(d, generator=gen)).to(torch.bfloat16) if weights else None
        kw = (1 + 0.3 * torch.randn(d, generator=gen)).to(torch.bfloat16) if weights else None
        kw_args = dict(num_q_heads=hq, num_kv_heads=hkv, head_dim=d, q_norm_weight=qw, k_norm_weight=kw, eps=EPS,
                       norm_before_rope=before, is_neox=neox)
        ref = torch_prologue.reference(qkv, pos, cs, **kw_args)
        naive = torch_prologue.naive_reference(qkv, pos, cs, **kw_args)
        err = max(_rel(ref[x], naive[x]) for x in "qkv")
        assert err < 1e-5, f"reference vs naive loop (D {d}, rotary {rot}, neox {neox}): rel_err {err:.2e}"
        worst = max(worst, err)
    msgs.append(f"reference vs per-token loop: 6 configs ok (worst rel_err {worst:.1e})")
    # NeoX by its textbook formula, independent of both: out = x * [cos, cos] + cat(-x2, x1) * [sin, sin]
    d, t = 64, 3
    x = torch.randn(t, 3 * d, generator=gen)
    cs = make_cos_sin(50, d, "cpu", theta=1e4)
    pos = torch.tensor([0, 7, 49])
    c, s = cs[pos, : d // 2], cs[pos, d // 2:]
    xq = x[:, :d]
    want = xq * torch.cat([c, c], -1) + torch.cat([-xq[:, d // 2:], xq[:, : d // 2]], -1) * torch.cat([s, s], -1)
    got = torch_prologue.reference(x, pos, cs, num_q_heads=1, num_kv_heads=1, head_dim=d)["q"][:, 0]
    assert _rel(got, want) < 1e-6 and torch.allclose(got[0], xq[0]), "NeoX rotate-half convention"
    msgs.append("NeoX rotate-half formula and position 0 = identity: ok")
    try:                                    # the library's own float32 reference, when importable on this host
        from hopperkit.reference import attention_prologue_reference as lib_ref
        qkv = torch.randn(4, 10 * 64, generator=gen).to(torch.bfloat16)
        cs = make_cos_sin(40, 64, "cpu", theta=1e4)
        pos = torch.randint(0, 40, (4,), generator=gen)
        w = (1 + 0.3 * torch.randn(64, generator=gen)).to(torch.bfloat16)
        kw_args = dict(num_q_heads=8, num_kv_heads=1, head_dim=64, q_norm_weight=w, k_norm_weight=w, eps=EPS)
        a = torch_prologue.reference(qkv, pos, cs, **kw_args)
        b = lib_ref(qkv, pos, cs, **kw_args)
        err = max(_rel(a["q"], b[0]), _rel(a["k"], b[1]), _rel(a["v"], b[2]))
        assert err < 1e-5, f"disagrees with hopperkit.reference.attention_prologue_reference: {err:.2e}"
        msgs.append(f"agrees with hopperkit.reference.attention_prologue_reference (rel_err {err:.1e})")
    except AssertionError:
        raise
    except Exception as e:  # noqa: BLE001
        msgs.append(f"hopperkit.reference not importable here ({type(e).__name__}): cross-check skipped")
    return msgs


def self_check_cases() -> list[str]:
    """The torch peer (the timed baseline) against the reference on CPU, through the same check() every impl
    gets: bf16 and fp8, separate and joint (strided) cache layouts, tail padding; FlashInfer's slot addressing."""
    msgs = []
    cos_sin = make_cos_sin(4096, 64, "cpu")         # the tiny case's head dim is 64
    for dt in DTYPES:
        for layout in ("separate", "joint"):
            case = make_case("tiny", 600, dt, 2, "cpu", cos_sin, dims=(4, 2, 64), layout=layout)
            assert case.n_valid == 598 and (case.sets[0].slot[598:] == -1).all()
            for s in case.sets:
                sl = s.slot[:case.n_valid]
                assert sl.unique().numel() == sl.numel() and int(sl.min()) >= 0
                assert int(sl.max()) < case.num_blocks * BLOCK
                meta = flashinfer_prologue.append_metadata(sl, BLOCK)
                assert torch.equal(flashinfer_prologue.emulate_append_slots(meta, BLOCK), sl), "FI addressing"
            fns, _ = build_torch(case)
            errs = []
            for i in range(2):
                ref = reference(case, i)
                c = check(case, i, fns[i](), ref)
                assert c["untouched_ok"], f"{dt}/{layout}: a cache slot outside slot_mapping changed"
                assert c["rel_err"] <= TOL[dt], f"{dt}/{layout}: torch peer rel_err {c['rel_err']:.3g}"
                errs.append(c["rel_err"])
            # a stray write into a slot outside slot_mapping must be caught by the guard
            s = case.sets[0]
            free = sorted(set(range(case.num_blocks * BLOCK)) - set(s.slot[:case.n_valid].tolist()))[0]
            cache = s.k_cache.view(torch.uint8) if dt == "fp8" else s.k_cache
            cache[free // BLOCK, free % BLOCK].fill_(0)
            assert not untouched_ok(case, s), "the NaN guard missed a stray write"
            extra = f", scales k {case.k_scale:.4f} v {case.v_scale:.4f}" if dt == "fp8" else ""
            msgs.append(f"torch peer {dt} {layout} cache: rel_err {max(errs):.2e} (tol {TOL[dt]}), "
                        f"untouched slots NaN, FI addressing ok{extra}")
    return msgs


def self_check_step(scns, cos_sin) -> list[str]:
    """step_reference against decode_bench.reference of the cache the torch prologue wrote (CPU, small scenarios)."""
    msgs = []
    small = sorted((n for n in scns if step_eligible(scns[n]) is None), key=lambda k: sum(scns[k]["lens"]))[:2]
    for name in small:
        for dt in DTYPES:
            sc = build_step_case(name, scns[name], dt, 1, "cpu", cos_sin)
            ref = step_reference(sc, 0)
            c, s, x = sc.dcase, sc.dcase.sets[0], sc.extra[0]
            torch_prologue.forward(x.qkv, x.positions, sc.cos_sin, s.k, s.v, x.slot, num_q_heads=c.hq,
                                   num_kv_heads=c.hkv, head_dim=c.d, q_norm_weight=sc.q_w, k_norm_weight=sc.k_w,
                                   eps=EPS, k_scale=s.k_scale_t, v_scale=s.v_scale_t, q_out=c.q)
            err = _rel(decode_bench.reference(c, s), ref)
            assert err < 2e-2, f"step {name} {dt}: decode_bench.reference vs step_reference {err:.2e}"
            msgs.append(f"step_{name} {dt}: torch prologue + decode_bench.reference vs step_reference "
                        f"rel_err {err:.1e}")
    return msgs


def dry_run(args, scn_path: Path, scns: dict) -> int:
    limits = scn_path.with_name("h200_limits.json")
    if not limits.is_file():
        limits = REPO_ROOT / "bench/anchors/h200_limits.json"
    lim = json.loads(limits.read_text()) if limits.is_file() else {}
    copy_bw, read_bw = lim.get("copy_TBps", 4.0), lim.get("read_TBps", 4.0)
    ceilings = {"copy_TBps": copy_bw, "read_TBps": read_bw}
    print(f"dry run: no GPU used; floors at the anchors' copy {copy_bw} / read {read_bw} TB/s ({limits}); "
          f"impls: {', '.join(args.impls)}; cache layout {args.cache_layout}")
    table, rows = [], []
    for name in args.cases:
        hq, hkv, d = CASES[name]
        for tokens in args.tokens:
            for dt in args.dtypes:
                nb = prologue_bytes(tokens, hq, hkv, d, dt, tokens - n_padding(tokens))
                n = n_sets_for(tokens, hq, hkv, d, dt)
                floor_us = nb["total"] / (copy_bw * 1e6)
                table.append([name, tokens, dt, n_padding(tokens), f"{nb['read'] / 1e6:.3f}",
                              f"{nb['write'] / 1e6:.3f}", f"{floor_us:.2f}", f"{floor_us / COPY_TARGET:.2f}", n,
                              f"{n * nb['total'] / 1e6:.0f}", f"{n * set_bytes(tokens, hq, hkv, d, dt) / 1e6:.0f}"])
                rows += [{"case": name, "tokens": tokens, "dtype": dt, "impl": i, "us": None, "floor_us": floor_us,
                          "bytes": nb["total"], "n_rotate": n, "skip_reason": "dry run"} for i in args.impls]
    print(common.format_table(["case", "tokens", "dtype", "pad", "read MB", "write MB", "floor_us",
                               "target_us", "N rotate", "graph MB", "sets MB"], table))
    print(f"target_us = floor / {COPY_TARGET} (tokens >= 4096)")
    if args.step:
        table = []
        for name, cfg in scns.items():
            for dt in args.step_dtypes:
                kvb, prob = step_bytes(cfg, dt)
                floor_us = kvb / (read_bw * 1e6) + prob / (copy_bw * 1e6)
                n = common.rotation_count(kvb + prob)
                why = step_eligible(cfg)
                table.append([f"step_{name}", cfg["spec"], dt, len(cfg["lens"]), f"{kvb / 1e6:.2f}",
                              f"{prob / 1e3:.1f}", f"{floor_us:.2f}", n, "ok" if why is None else why])
                rows += [{"case": f"step_{name}", "tokens": len(cfg["lens"]), "dtype": dt, "impl": i, "us": None,
                          "floor_us": floor_us, "bytes": kvb + prob, "n_rotate": n, "skip_reason": "dry run"}
                         for i in args.step_impls]
        print(common.format_table(["step case", "spec", "dtype", "batch", "KV MB", "prologue KB", "floor_us",
                                   "N rotate", "eligible"], table))
    checks = [("reference", lambda: self_check_reference())]
    cos_sin = make_cos_sin(MAX_POSITION, ROTARY, "cpu")
    checks.append(("cases", self_check_cases))
    if args.step:
        checks.append(("step", lambda: self_check_step(scns, cos_sin)))
    prog = common.Progress(len(checks), "self-check")
    for label, fn in checks:
        for msg in fn():
            prog.write(f"self-check {label}: {msg}")
        prog.update(label)
    prog.close()
    print(report([r for r in rows if not r["case"].startswith("step_")], args.impls, "prologue (dry run)"))
    if args.step:
        print(report([r for r in rows if r["case"].startswith("step_")], args.step_impls, "decode step (dry run)"))
    tmp = Path(tempfile.mkdtemp(prefix="prologue_dry_")) / "prologue.json"
    common.write_json(tmp, {"device": "dry-run (cpu)", "commit": common.git_commit(), "ceilings": ceilings,
                            "rows": rows})
    print(summary(rows) + f"; dry run: wrote {tmp} (not {args.out})")
    return 0


# ------------------------------------------------------------------------------------------------- main
def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.prologue_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench/results/h200/prologue.json")
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--tokens", default=None, help=f"default {','.join(map(str, TOKENS))}")
    ap.add_argument("--cache-layout", default="separate", choices=("separate", "joint"))
    ap.add_argument("--rotary", type=int, default=ROTARY,
                    help=f"rotary_dim of the cos/sin table (default {ROTARY}: full rotary at head dim 128)")
    ap.add_argument("--no-step", dest="step", action="store_false", help="skip the decode-step section")
    ap.add_argument("--step-impls", default=",".join(STEP_IMPLS))
    ap.add_argument("--step-dtypes", default=",".join(DTYPES))
    ap.add_argument("--scenarios", default=None, help="decode_scenarios.json (default: as decode_bench finds it)")
    ap.add_argument("--quick", action="store_true", help="tokens 8 and 4096, 3 step scenarios, fewer replays")
    ap.add_argument("--dry-run", action="store_true", help="CPU only: list the work and self-check the references")
    args = ap.parse_args(argv)
    args.impls = common.comma_list(args.impls, IMPLS, ap)
    args.dtypes = common.comma_list(args.dtypes, DTYPES, ap)
    args.cases = common.comma_list(args.cases, tuple(CASES), ap)
    args.step_impls = common.comma_list(args.step_impls, STEP_IMPLS, ap)
    args.step_dtypes = common.comma_list(args.step_dtypes, DTYPES, ap)
    default_tokens = ",".join(map(str, QUICK_TOKENS if args.quick else TOKENS))
    args.tokens = common.comma_list(args.tokens or default_tokens, None, ap, int)
    return args


def main(argv=None) -> int:
    global ROTARY
    args = parse_args(argv)
    ROTARY = args.rotary
    scn_path = decode_bench.find_scenarios(args.scenarios)
    scns = decode_bench.load_scenarios(scn_path, args.quick) if args.step else {}
    if args.step:
        print(f"step scenarios: {scn_path} ({len(scns)}: {', '.join(scns)})")
    if args.dry_run:
        return dry_run(args, scn_path, scns)
    if not torch.cuda.is_available():
        raise SystemExit("prologue_bench needs a CUDA GPU (use --dry-run on a CPU)")
    replays, warmup = (10, 3) if args.quick else (50, 10)
    torch.set_float32_matmul_precision("highest")   # the float32 references must not run in TF32
    try:
        print("hopperkit:", decode_bench.hopperkit().build_info())
    except Exception as e:  # noqa: BLE001
        print("hopperkit:", e)
    ceilings = common.measure_ceilings(("read", "copy", "copy_memcpy"))
    print(f"device: {torch.cuda.get_device_name()}  ceilings: {ceilings}")
    cos_sin = make_cos_sin(MAX_POSITION, ROTARY, DEVICE)
    n1 = len(args.cases) * len(args.tokens) * len(args.dtypes) * len(args.impls)
    n2 = len(scns) * len(args.step_dtypes) * len(args.step_impls) if args.step else 0
    prog = common.Progress(n1 + n2, "prologue")
    rows: list = []
    commit = common.git_commit([lambda: decode_bench.hopperkit().build_info().get("git")])
    result = {"device": torch.cuda.get_device_name(), "commit": commit, "ceilings": ceilings, "rows": rows,
              "config": {"rotary_dim": ROTARY, "block_size": BLOCK, "eps": EPS, "rope_theta": ROPE_THETA,
                         "max_position": MAX_POSITION, "norm_before_rope": True, "is_neox": True,
                         "cache_layout": args.cache_layout, "replays": replays, "tol": TOL, "step_tol": STEP_TOL}}

    def flush():                             # after every case: a run cut short still leaves its rows
        result["complete"] = False
        common.write_json(args.out, result)

    run_section1(args, ceilings, prog, rows, replays, warmup, cos_sin, flush)
    if args.step:
        try:
            run_section2(args, scns, ceilings, prog, rows, replays, warmup, cos_sin, flush)
        except Exception as e:  # noqa: BLE001 - the step section must not cost the prologue rows
            prog.write(f"decode-step section failed: {_error(e)}")
            rows.append({"case": "step_section", "tokens": 0, "dtype": "-", "impl": "-", "us": None,
                         "floor_us": None, "ok": False, "skip_reason": _error(e)})
    prog.close()
    result["complete"] = True
    print(report([r for r in rows if not str(r["case"]).startswith("step_")], args.impls, "attention prologue"))
    if args.step:
        print(report([r for r in rows if str(r["case"]).startswith("step_")], args.step_impls,
                     "decode step (prologue + attention)"))
    out = common.write_json(args.out, result)
    print(summary(rows) + f"; wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
