"""Fused FP8 MoE benchmark: hopperkit.fused_moe against PyTorch's CUTLASS grouped FP8 pipeline and FlashInfer's
CUTLASS fused MoE, on the model shapes of moe_shapes.json at TP8/EP1 and TP1/EP8, over its batch sizes.

    python -m bench.moe_bench [--quick] [--out bench/results/h200/moe.json] [--models hy3,qwen3-235b]
        [--modes tp8_ep1,tp1_ep8] [--scalings per_tensor,block] [--bs 4,64] [--impls ...] [--max-seconds 240]
        [--dry-run]

Sweeps: (model, mode, scaling). tp8_ep1: intermediate / 8, every expert local; tp1_ep8: experts / 8 (this rank
holds global ids [0, E/8)), full intermediate, expert_map global -> local or -1. Block-wise scaling (128x128 weight
blocks, dynamic 1x128 activation groups) wherever the sharded intermediate and hidden are multiples of 128;
per-tensor scaling (static activation scales) everywhere.

Per case (sweep, batch): router scores random normal over the global experts, top-k by torch.topk, weights the
softmax of the chosen scores (generated on the CPU from a seed of (model, mode, batch): both scalings and the dry
run see the same routing). Weights: random normal x 0.02 x a magnitude per expert (per-tensor) or per 128x128
block, quantised to e4m3 with amax / 448 scales of the same granularity. Static activation scales: a13 from the
batch's hidden amax, a2 calibrated by the float32 reference on the batch, both with 1.25 x headroom.
Correctness, once per case before timing: every impl against the float32 reference (rel_err_vs_ref), hopperkit
also against torch_grouped's output when that row passed (rel_err_vs_torch), and the output the replayed graph
left on the last rotation set (rel_err_graph); any of them over TOL marks the row "ok": false. Expect ~1.3e-2 for
torch_grouped: its GEMM writes gate-up in bf16, and that rounding moves ~3% of the e4m3 activation codes one step.
Skipped impls get "us": null and a "skip_reason" (decode_bench's convention); failures also "ok": false.
Timing: N rotation sets (distinct copies of the weights and of the hidden rows, shared routing), N from
common.rotation_count of the bytes one call touches, capped so the copies stay under ROTATE_BUDGET; one CUDA graph
of N calls, median / N (common.time_graph). An impl whose calls cannot be captured is timed eagerly with CUDA
events instead ("timing": "events").
Floors, with ceilings measured in the same run: memory = bytes of the local experts the routing touches (w13 + w2
+ scales) + hidden in + out (bf16) / read bandwidth; compute = 2 * routed local rows * 3 * I * H / FP8 dense rate;
floor_us = the larger.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch

from bench import common, decode_bench
from bench.common import REPO_ROOT, Skip, fmt
from bench.peers import torch_grouped_moe as tg
from bench.peers import flashinfer_moe as fi

# FlashInfer's CUTLASS fused MoE on sm_90 is the JIT module fused_moe_90 (248 CUDA sources), with no prebuilt copy
# on PyPI (flashinfer-jit-cache is not there; flashinfer-cubin stops at 0.6.13 and holds no JIT modules) and no
# way to build it on the offline device within a command's limit. scripts/fetch_peers_moe.sh builds an FP8-only
# copy here (~40 min) into .peers/; without it the flashinfer rows are skipped with this reason.
FLASHINFER_SKIP_REASON = ("flashinfer: its sm_90 CUTLASS fused MoE (JIT module fused_moe_90) is not in .peers: "
                          "build it with scripts/fetch_peers_moe.sh (docs/moe.md)")

IMPLS = ("hopperkit", "torch_grouped", "flashinfer")
RUN_ORDER = ("torch_grouped", "hopperkit", "flashinfer")   # torch first: hopperkit is checked against its output
MODES = {"tp8_ep1": (8, 1), "tp1_ep8": (1, 8)}            # mode -> (tensor-parallel, expert-parallel) ways
SCALINGS = ("per_tensor", "block")
QUICK_BS = (4, 64, 256, 4096)
TOL = 3e-2                        # relative Frobenius error above this marks a row "ok": false
BLOCK = tg.BLOCK
WEIGHT_STD = 0.02
ROTATE_BUDGET = 40 * 2**30        # weight + hidden copies of one case stay under this many bytes
READ_MAX_BS = 256                 # same-bytes plain reads (the read columns) for batches up to this (the decode target)
BUDGET_DEFAULT_S = 240.0
SEED = 1234
DEVICE = "cuda"


# ------------------------------------------------------------------------------------------------ shapes
@dataclass(frozen=True)
class Shape:
    model: str
    mode: str
    experts: int                  # global
    top_k: int
    hidden: int
    inter: int                    # per expert, after tensor-parallel sharding
    e_local: int

    block_ok = property(lambda self: self.inter % BLOCK == 0 and self.hidden % BLOCK == 0)


def find_anchors(arg: str | None) -> Path:
    cands = [Path(arg)] if arg else [REPO_ROOT / "bench/anchors/moe_shapes.json",
                                     REPO_ROOT.parent / "shared/anchors/moe_shapes.json"]
    for c in cands:
        if c.is_file():
            return c
    raise SystemExit("moe_shapes.json not found in: " + ", ".join(map(str, cands)) + "; pass --anchors")


def make_shape(model: str, cfg: dict, mode: str) -> Shape:
    tp, ep = MODES[mode]
    return Shape(model, mode, cfg["experts"], cfg["top_k"], cfg["hidden"], cfg["intermediate"] // tp,
                 cfg["experts"] // ep)


def scalings_for(shape: Shape, wanted) -> list[str]:
    return [s for s in wanted if s == "per_tensor" or shape.block_ok]


def plan_sweeps(anchors: dict, args) -> list[tuple[Shape, str, list[int]]]:
    """[(shape, scaling, batch sizes)] in run order."""
    sweeps = []
    for model in args.models:
        for mode in args.modes:
            shape = make_shape(model, anchors["models"][model], mode)
            bss = [b for b in anchors["batch_sizes"][mode] if (not args.quick or b in QUICK_BS)
                   and (args.bs is None or b in args.bs)]
            bss = sorted(set(bss) | set(args.extra_bs or ()))  # off-anchor sizes, e.g. for tile-height sweeps
            sweeps += [(shape, sc, bss) for sc in scalings_for(shape, args.scalings) if bss]
    return sweeps


def _seed(*parts) -> int:
    return SEED + zlib.crc32("/".join(map(str, parts)).encode())


# ----------------------------------------------------------------------------------------------- routing
def local_of_global(shape: Shape) -> torch.Tensor:
    """[E_global] int64: local id of each global expert, -1 for other ranks' (this rank holds [0, E_local))."""
    m = torch.full((shape.experts,), -1, dtype=torch.int64)
    m[:shape.e_local] = torch.arange(shape.e_local)
    return m


def make_routing(shape: Shape, bs: int):
    """CPU (topk_ids [bs, K] int32, topk_weights [bs, K] float32)."""
    gen = torch.Generator().manual_seed(_seed(shape.model, shape.mode, bs))
    scores = torch.randn(bs, shape.experts, generator=gen)
    top, ids = scores.topk(shape.top_k, dim=-1)
    return ids.to(torch.int32), top.softmax(-1)


def routing_stats(ids: torch.Tensor, shape: Shape) -> tuple[int, int]:
    """(routed local rows, distinct local experts hit)."""
    local = local_of_global(shape)[ids.long().flatten()]
    local = local[local >= 0]
    return int(local.numel()), int(local.unique().numel())


# ------------------------------------------------------------------------------------------------ floors
def scale_counts(shape: Shape, scaling: str) -> tuple[int, int]:
    """Float32 scales of one local expert's (w13, w2): one each per-tensor, one per 128x128 block block-wise."""
    i, h = shape.inter, shape.hidden
    return (1, 1) if scaling == "per_tensor" else ((2 * i // BLOCK) * (h // BLOCK), (h // BLOCK) * (i // BLOCK))


def expert_bytes(shape: Shape, scaling: str) -> int:
    """One local expert's weight bytes: w13 [2I, H] + w2 [H, I] fp8 and their float32 scales."""
    return 3 * shape.inter * shape.hidden + 4 * sum(scale_counts(shape, scaling))


def stage_bytes(shape: Shape, scaling: str, bs: int, touched: int) -> tuple[int, int]:
    """(gate-up, down) bytes of the memory floor: the touched experts' w13 + its scales and the hidden rows in
    (bf16); their w2 + its scales and the output rows (bf16). The two weight streams hopperkit launches apart."""
    i, h = shape.inter, shape.hidden
    s13, s2 = scale_counts(shape, scaling)
    return touched * (2 * i * h + 4 * s13) + bs * h * 2, touched * (h * i + 4 * s2) + bs * h * 2


def floors(shape: Shape, scaling: str, bs: int, rows: int, touched: int, ceilings: dict) -> dict:
    nbytes = sum(stage_bytes(shape, scaling, bs, touched))
    flops = 2 * rows * 3 * shape.inter * shape.hidden
    mem_us = nbytes / (ceilings["read_TBps"] * 1e6)
    flop_us = flops / (ceilings["fp8_dense_TFLOPs"] * 1e6)
    return {"bytes": nbytes, "flops": flops, "mem_floor_us": mem_us, "flop_floor_us": flop_us,
            "floor_us": max(mem_us, flop_us), "bound": "memory" if mem_us >= flop_us else "compute"}


# ----------------------------------------------------------------------------------------------- weights
def quantize_weight(w: torch.Tensor, block: bool):
    """[N, K] float32 -> (e4m3 [N, K], scale): per-tensor a 0-d amax / 448, block [N/128, K/128]."""
    if not block:
        scale = w.abs().amax().clamp_min(1e-12) / tg.FP8_MAX
        return tg.quantize(w, scale), scale
    n, k = w.shape
    g = w.view(n // BLOCK, BLOCK, k // BLOCK, BLOCK)
    scale = g.abs().amax(dim=(1, 3)).clamp_min(1e-12) / tg.FP8_MAX
    return tg.quantize(g, scale[:, None, :, None]).view(n, k), scale


def random_weight(n: int, k: int, block: bool, gen: torch.Generator, device) -> torch.Tensor:
    """randn x WEIGHT_STD x a magnitude in [0.5, 1.5) per tensor or per 128x128 block (so scales differ)."""
    w = torch.randn(n, k, generator=gen, device=device) * WEIGHT_STD
    if block:
        mag = 0.5 + torch.rand(n // BLOCK, k // BLOCK, generator=gen, device=device)
        return w * mag.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)
    return w * (0.5 + torch.rand((), generator=gen, device=device))


def make_weights(shape: Shape, scaling: str, device) -> dict:
    """{w13 [E, 2I, H], w2 [E, H, I] e4m3; w13_scale, w2_scale float32 [E] or [E, N/128, K/128]}."""
    block = scaling == "block"
    e, i, h = shape.e_local, shape.inter, shape.hidden
    gen = torch.Generator(device=device).manual_seed(_seed(shape.model, shape.mode, scaling))
    w13 = torch.empty(e, 2 * i, h, dtype=tg.FP8, device=device)
    w2 = torch.empty(e, h, i, dtype=tg.FP8, device=device)
    s13 = torch.empty((e,) + ((2 * i // BLOCK, h // BLOCK) if block else ()), device=device)
    s2 = torch.empty((e,) + ((h // BLOCK, i // BLOCK) if block else ()), device=device)
    for x in range(e):                    # one expert at a time: the float32 temporaries stay small
        w13[x], s13[x] = quantize_weight(random_weight(2 * i, h, block, gen, device), block)
        w2[x], s2[x] = quantize_weight(random_weight(h, i, block, gen, device), block)
    return {"w13": w13, "w2": w2, "w13_scale": s13, "w2_scale": s2}


@dataclass
class Sweep:
    """One (model, mode, scaling): weight copies made on demand and shared by the sweep's batch sizes."""
    shape: Shape
    scaling: str
    copies: list = field(default_factory=list)

    block = property(lambda self: self.scaling == "block")

    def weights(self, n: int) -> list:
        if not self.copies:
            self.copies.append(make_weights(self.shape, self.scaling, DEVICE))
        while len(self.copies) < n:
            self.copies.append({k: v.clone() for k, v in self.copies[0].items()})
        return self.copies[:n]


# ------------------------------------------------------------------------------------------------- cases
@dataclass
class Case:
    shape: Shape
    scaling: str
    bs: int
    ids: torch.Tensor             # [T, K] int32, device
    topk_weights: torch.Tensor    # [T, K] float32
    local_map: torch.Tensor       # [E_global] int64 (the peer's and the reference's view)
    expert_map: torch.Tensor | None   # [E_global] int32 for hopperkit; None when every expert is local
    hidden: list                  # [T, H] bf16 per rotation set (same values)
    weights: list                 # weight dict per rotation set (same values)
    ref: torch.Tensor             # [T, H] float32
    a13: float | None
    a2: float | None
    a13_t: torch.Tensor | None    # [1] float32
    a2_t: torch.Tensor | None

    block = property(lambda self: self.scaling == "block")


def n_rotate(call_bytes: int, copy_bytes: int) -> int:
    return max(1, min(common.rotation_count(call_bytes), ROTATE_BUDGET // max(1, copy_bytes)))


def build_case(sweep: Sweep, bs: int, ids, topk_weights, n: int) -> Case:
    shape = sweep.shape
    ids, topk_weights = ids.to(DEVICE), topk_weights.to(DEVICE)
    gen = torch.Generator(device=DEVICE).manual_seed(_seed(shape.model, shape.mode, bs, "hidden"))
    hidden = torch.randn(bs, shape.hidden, generator=gen, device=DEVICE).to(torch.bfloat16)
    local_map = local_of_global(shape).to(DEVICE)
    weights = sweep.weights(n)
    w = weights[0]
    a13 = None if sweep.block else (tg.STATIC_SCALE_HEADROOM * float(hidden.float().abs().amax()) / tg.FP8_MAX)
    ref, a2 = tg.reference(hidden, ids, topk_weights, w["w13"], w["w2"], w["w13_scale"], w["w2_scale"],
                           local_of_global=local_map, block=sweep.block, a13_scale=a13)
    scale_t = lambda v: None if v is None else torch.tensor([v], dtype=torch.float32, device=DEVICE)  # noqa: E731
    expert_map = None if shape.e_local == shape.experts else local_map.to(torch.int32)
    return Case(shape, sweep.scaling, bs, ids, topk_weights, local_map, expert_map,
                [hidden] + [hidden.clone() for _ in range(n - 1)], weights, ref, a13, a2, scale_t(a13), scale_t(a2))


# ------------------------------------------------------------------------------------------------- impls
def hopperkit():
    hk = decode_bench.hopperkit()
    if not (hasattr(hk, "fused_moe") and hasattr(hk, "moe_workspace")):
        raise Skip("this hopperkit build has no fused_moe / moe_workspace")
    return hk


def build_hopperkit(case: Case):
    hk = hopperkit()
    s = case.shape
    ws = hk.moe_workspace(case.bs, s.top_k, s.hidden, s.inter, s.e_local, case.block, case.ids.device)

    def call(hidden, w, out):
        return hk.fused_moe(hidden, case.ids, case.topk_weights, w["w13"], w["w2"], w["w13_scale"], w["w2_scale"],
                            a13_scale=case.a13_t, a2_scale=case.a2_t, expert_map=case.expert_map, out=out,
                            workspace=ws)

    fns = [partial(call, h, w, torch.empty_like(h)) for h, w in zip(case.hidden, case.weights)]
    return fns, {"workspace_bytes": ws.numel() * ws.element_size()}


def build_torch_grouped(case: Case):
    fns = []
    for h, w in zip(case.hidden, case.weights):
        moe = tg.TorchGroupedMoE(w["w13"], w["w2"], w["w13_scale"], w["w2_scale"], a13_scale=case.a13_t,
                                 a2_scale=case.a2_t, local_of_global=case.local_map, num_tokens=case.bs,
                                 top_k=case.shape.top_k, block=case.block)
        fns.append(partial(moe, h, case.ids, case.topk_weights))
    return fns, {}


def build_flashinfer(case: Case):
    try:
        fn = fi.load()
    except Skip as e:
        raise Skip(f"{FLASHINFER_SKIP_REASON} ({e})") from e
    s = case.shape
    fns = []
    for h, w in zip(case.hidden, case.weights):
        moe = fi.FlashInferMoE(fn, w, ids=case.ids, topk_weights=case.topk_weights, e_global=s.experts,
                               e_local=s.e_local, block=case.block, a13=case.a13_t, a2=case.a2_t)
        fns.append(partial(moe, h, torch.empty_like(h)))
    return fns, {}


BUILDERS = {"hopperkit": build_hopperkit, "torch_grouped": build_torch_grouped, "flashinfer": build_flashinfer}


def time_events(fns, replays: int, warmup: int) -> float:
    """Eager fallback of common.time_graph: median microseconds per call of the N calls, CUDA events."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    for start, end in zip(starts, ends):
        start.record()
        for fn in fns:
            fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3 / len(fns)


def _rel(out, ref) -> float:
    return common.relative_error(out, ref)["rel_err"]


def run_impl(impl: str, case: Case, base: dict, replays: int, warmup: int, torch_out):
    """(row, the impl's output on rotation set 0 or None). Never raises."""
    row = dict(base, impl=impl, us=None)
    out0 = fns = None
    try:
        fns, info = BUILDERS[impl](case)
        row.update(info)
        out0 = fns[0]()
        torch.cuda.synchronize()
        row["rel_err_vs_ref"] = _rel(out0, case.ref)
        checks = [row["rel_err_vs_ref"]]
        if impl == "hopperkit" and torch_out is not None:
            row["rel_err_vs_torch"] = _rel(out0, torch_out)
            checks.append(row["rel_err_vs_torch"])
        outs: list = []
        try:
            row["us"], row["timing"] = common.time_graph(fns, replays, warmup, outputs=outs), "graph"
        except Exception as e:  # noqa: BLE001 - not capturable: time it eagerly instead
            row["graph_error"] = decode_bench._error(e)
            torch.cuda.synchronize()
            row["us"], row["timing"] = time_events(fns, replays, warmup), "events"
            outs = [fns[-1]()]
        row["rel_err_graph"] = _rel(outs[-1], case.ref)
        checks.append(row["rel_err_graph"])
        row["ok"] = all(math.isfinite(c) and c <= TOL for c in checks)
    except Skip as e:
        row["skip_reason"] = str(e)
    except Exception as e:  # noqa: BLE001 - one failing impl must not stop the run
        row["ok"], row["skip_reason"] = False, decode_bench._error(e)
        out0 = None
    del fns
    return row, out0


# ------------------------------------------------------------------------------------------------ report
SHORT = {"hopperkit": "hk", "torch_grouped": "tg", "flashinfer": "fi"}


def _case_key(r) -> tuple:
    return r["model"], r["mode"], r["scaling"], r["bs"]


def report(rows, impls) -> str:
    """Times (us), time / floor ('/fl'), each peer's time / hopperkit's ('x/hk' > 1: hopperkit faster)."""
    peers = [i for i in impls if i != "hopperkit"] if "hopperkit" in impls else []
    headers = ["model", "mode", "scaling", "bs", "rows", "exp", "floor", "bound"]
    headers += [h for i in impls for h in (SHORT[i], f"{SHORT[i]}/fl")] + [f"{SHORT[p]}/hk" for p in peers]
    headers += ["hk err"] if "hopperkit" in impls else []
    reads = any(r.get("same_bytes_read_us") for r in rows)
    headers += ["read1", "read2", "hk/read2"] if reads else []
    table = []
    for key in dict.fromkeys(_case_key(r) for r in rows):
        by = {r["impl"]: r for r in rows if _case_key(r) == key}
        any_row = next(iter(by.values()))
        floor = any_row.get("floor_us")
        us = {i: by.get(i, {}).get("us") for i in impls}
        line = list(key) + [any_row.get("routed_rows", "-"), any_row.get("touched_experts", "-"), fmt(floor, ".1f"),
                            any_row.get("bound", "-")[:3]]
        for i in impls:
            bad = "!" if by.get(i, {}).get("ok") is False and us[i] is not None else ""
            line += [fmt(us[i], ".1f") + bad, fmt(us[i] / floor if us[i] and floor else None, ".2f")]
        hk = us.get("hopperkit")
        line += [fmt(us[p] / hk if us[p] and hk else None, ".2f") for p in peers]
        if "hopperkit" in impls:
            h = by.get("hopperkit", {})
            line.append(fmt(h.get("rel_err_vs_torch", h.get("rel_err_vs_ref")), ".1e"))
        if reads:
            r1, r2 = any_row.get("same_bytes_read_us"), any_row.get("two_launch_read_us")
            line += [fmt(r1, ".1f"), fmt(r2, ".1f"), fmt(hk / r2 if hk and r2 else None, ".2f")]
        table.append(line)
    legend = ", ".join(f"{v} = {k}" for k, v in SHORT.items() if k in impls)
    text = [common.format_table(headers, table),
            f"us per call; floor = max(memory, compute) floor, bound = the binding one; rows = routed local rows, "
            f"exp = local experts hit; /fl = time / floor; x/hk = x's time / hopperkit's; {legend}; hk err = "
            f"hopperkit's rel_err vs torch_grouped (vs the float32 reference where torch_grouped has none); "
            f"'!' = wrong output (over {TOL})"
            + ("; read1 / read2 = a plain read of the floor's bytes in one launch / in two (the gate-up's bytes, "
               "then the down's), same rotation, CUDA graph" if reads else "")]
    reasons = sorted({f"{r['impl']} {r['scaling']}: {r['skip_reason']}" for r in rows if r.get("skip_reason")})
    return "\n".join(text + (["", "skipped / failed:"] + [f"  {x}" for x in reasons] if reasons else []))


def geomean(xs) -> float | None:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def sweep_summary(rows) -> list[dict]:
    """Per (model, mode, scaling): geometric means over its batch sizes of torch_grouped / hopperkit time and of
    hopperkit's time / floor (cases where both times exist)."""
    out = []
    for model, mode, scaling in dict.fromkeys((r["model"], r["mode"], r["scaling"]) for r in rows):
        by_bs: dict = {}
        for r in rows:
            if (r["model"], r["mode"], r["scaling"]) == (model, mode, scaling):
                by_bs.setdefault(r["bs"], {})[r["impl"]] = r
        pairs = [(d["hopperkit"], d["torch_grouped"]) for d in by_bs.values()
                 if d.get("hopperkit", {}).get("us") and d.get("torch_grouped", {}).get("us")]
        hk_rows = [d["hopperkit"] for d in by_bs.values() if d.get("hopperkit", {}).get("us")]
        out.append({"model": model, "mode": mode, "scaling": scaling, "n_bs": len(by_bs), "n_pairs": len(pairs),
                    "speedup_vs_torch_grouped_geomean": geomean(t["us"] / h["us"] for h, t in pairs),
                    "hopperkit_us_over_floor_geomean": geomean(h["us"] / h["floor_us"] for h in hk_rows),
                    "hopperkit_all_ok": all(h.get("ok") is True for h in hk_rows) if hk_rows else None})
    return out


def target_counts(rows) -> dict:
    """Batch <= READ_MAX_BS (issue 4's memory target, 1.25 x the floor): of the cases with a hopperkit time, how
    many meet it, and how many a plain read of the same bytes meets in one launch and in two (where measured)."""
    hk = [r for r in rows if r["impl"] == "hopperkit" and r["bs"] <= READ_MAX_BS and r.get("us") and r.get("floor_us")]
    line = lambda key: [r for r in hk if r.get(key)]  # noqa: E731
    within = lambda rs, key: sum(r[key] <= 1.25 * r["floor_us"] for r in rs)  # noqa: E731
    one, two = line("same_bytes_read_us"), line("two_launch_read_us")
    return {"max_bs": READ_MAX_BS, "cases": len(hk), "hopperkit_within": within(hk, "us"),
            "read_cases": len(one), "one_launch_read_within": within(one, "same_bytes_read_us"),
            "two_launch_read_within": within(two, "two_launch_read_us"),
            "hopperkit_within_where_read": within(one, "us")}


def target_text(t: dict) -> str:
    text = (f"batch <= {t['max_bs']}: hopperkit within 1.25 x the floor at {t['hopperkit_within']} of {t['cases']}")
    if t["read_cases"]:
        text += (f"; where the plain reads ran ({t['read_cases']}): hopperkit {t['hopperkit_within_where_read']}, "
                 f"a read of the same bytes in one launch {t['one_launch_read_within']}, in two launches "
                 f"{t['two_launch_read_within']}")
    return text


def summary_text(summ) -> str:
    table = [[s["model"], s["mode"], s["scaling"], f"{s['n_pairs']}/{s['n_bs']}",
              fmt(s["speedup_vs_torch_grouped_geomean"], ".2f"), fmt(s["hopperkit_us_over_floor_geomean"], ".2f"),
              {True: "yes", False: "NO", None: "-"}[s["hopperkit_all_ok"]]] for s in summ]
    return common.format_table(["model", "mode", "scaling", "bs", "tg/hk geomean", "hk/floor geomean", "hk ok"],
                               table)


def counts(rows) -> str:
    ok = sum(r.get("ok") is True for r in rows)
    wrong = sum(r.get("ok") is False and r["us"] is not None for r in rows)
    err = sum(r.get("ok") is False and r["us"] is None for r in rows)
    skip = sum(r.get("skip_reason") is not None and r.get("ok") is None for r in rows)
    return f"moe_bench: {len(rows)} rows: {ok} ok, {wrong} wrong output, {err} errors, {skip} skipped"


# ------------------------------------------------------------------------------------------------ dry run
def _naive_reference(hidden, ids, tw, w, local_map, block, a13, a2) -> torch.Tensor:
    """One (token, k) at a time, block scales expanded with kron: an independent spelling of tg.reference."""
    def deq(q, s):
        return q.float() * (torch.kron(s, torch.ones(BLOCK, BLOCK)) if block else s)

    def qdq(x, scale):
        return tg.quant_dequant_groups(x[None])[0] if block else tg.quant_dequant(x, scale)

    inter = w["w2"].shape[2]
    out = torch.zeros(hidden.shape, dtype=torch.float32)
    for t in range(ids.shape[0]):
        x = qdq(hidden[t].float(), a13)
        for j in range(ids.shape[1]):
            e = int(local_map[int(ids[t, j])])
            if e < 0:
                continue
            gu = deq(w["w13"][e], w["w13_scale"][e]) @ x
            act = torch.nn.functional.silu(gu[:inter]) * gu[inter:]
            out[t] += float(tw[t, j]) * (deq(w["w2"][e], w["w2_scale"][e]) @ qdq(act, a2))
    return out


def _library_reference():
    """hopperkit.reference.fused_moe_reference when importable here, else None."""
    try:
        from hopperkit.reference import fused_moe_reference
        return fused_moe_reference
    except Exception:  # noqa: BLE001 - the cross-check is optional on a CPU host
        return None


def self_check() -> list[str]:
    """CPU: the torch peer (its grouped GEMM emulated after torch's own argument checks, rows past the groups NaN),
    the naive loop and the library's own float32 reference (when importable; it rounds each down row to bf16)
    against tg.reference, per-tensor and block, all experts local and expert-parallel (with experts that get no
    rows); the weight quantiser's round trip."""
    msgs = []
    lib_ref = _library_reference()
    if lib_ref is None:
        msgs.append("hopperkit.reference not importable here: cross-check against the library's reference skipped")
    torch.manual_seed(0)
    for experts, e_local, tokens, top_k in [(8, 8, 37, 2), (16, 4, 9, 3), (32, 4, 3, 4)]:
        shape = Shape("tiny", "check", experts, top_k, 256, 128, e_local)
        ids, tw = make_routing(shape, tokens)
        local_map = local_of_global(shape)
        hidden = torch.randn(tokens, shape.hidden).to(torch.bfloat16)
        for scaling in SCALINGS:
            block = scaling == "block"
            w = make_weights(shape, scaling, "cpu")
            a13 = None if block else tg.STATIC_SCALE_HEADROOM * float(hidden.float().abs().amax()) / tg.FP8_MAX
            ref, a2 = tg.reference(hidden, ids, tw, w["w13"], w["w2"], w["w13_scale"], w["w2_scale"],
                                   local_of_global=local_map, block=block, a13_scale=a13)
            naive = _naive_reference(hidden, ids, tw, w, local_map, block, a13, a2)
            err = _rel(naive, ref)
            assert err < 1e-4, f"reference vs naive loop ({scaling}, E {experts}/{e_local}): {err:.2e}"
            line = f"E {experts}/{e_local} T {tokens} k {top_k} {scaling}: reference vs naive {err:.1e}"
            if lib_ref is not None:
                scales = {} if block else {"a13_scale": torch.tensor([a13]), "a2_scale": torch.tensor([a2])}
                lib = lib_ref(hidden, ids, tw, w["w13"], w["w2"], w["w13_scale"], w["w2_scale"],
                              expert_map=None if e_local == experts else local_map.to(torch.int32), **scales)
                err = _rel(lib, ref)
                assert err < 1e-2, f"reference vs hopperkit.reference ({scaling}, E {experts}/{e_local}): {err:.2e}"
                line += f", vs hopperkit.reference {err:.1e}"
            if not block:
                errs = []
                for exact in (True, False):
                    peer = tg.TorchGroupedMoE(w["w13"], w["w2"], w["w13_scale"], w["w2_scale"],
                                              a13_scale=torch.tensor([a13]), a2_scale=torch.tensor([a2]),
                                              local_of_global=local_map, num_tokens=tokens, top_k=top_k,
                                              grouped_mm=partial(tg.emulate_scaled_grouped_mm, exact=exact))
                    out = peer(hidden, ids, tw)
                    assert torch.isfinite(out.float()).all(), "torch peer: non-finite output"
                    errs.append(_rel(out, ref))
                assert errs[0] < 1e-4, f"torch peer with a float32 GEMM vs reference: rel_err {errs[0]:.2e}"
                line += (f", torch peer vs reference: {errs[0]:.1e} with a float32-out GEMM, {errs[1]:.1e} with "
                         f"bf16 out (the bf16 gate-up moves ~3% of the e4m3 activation codes by one step)")
            msgs.append(line)
    w = torch.randn(256, 384) * WEIGHT_STD
    for block in (False, True):
        q, s = quantize_weight(w, block)
        err = _rel(tg.dequant_weight(q, s, block), w)
        assert err < 0.05, f"weight quantiser round trip ({'block' if block else 'per-tensor'}): {err:.2e}"
        msgs.append(f"weight quantiser round trip {'block' if block else 'per-tensor'}: rel_err {err:.1e}")
    return msgs


def meta_check(shape: Shape, bs: int) -> str:
    """The torch peer's whole pipeline on meta tensors at a real shape: torch's own checks of the grouped GEMM's
    layouts, strides and scale shapes, without a GPU."""
    d, e, i, h = "meta", shape.e_local, shape.inter, shape.hidden
    peer = tg.TorchGroupedMoE(torch.empty(e, 2 * i, h, dtype=tg.FP8, device=d),
                              torch.empty(e, h, i, dtype=tg.FP8, device=d), torch.empty(e, device=d),
                              torch.empty(e, device=d), a13_scale=torch.empty(1, device=d),
                              a2_scale=torch.empty(1, device=d),
                              local_of_global=torch.empty(shape.experts, dtype=torch.int64, device=d), num_tokens=bs,
                              top_k=shape.top_k)
    out = peer(torch.empty(bs, h, dtype=torch.bfloat16, device=d),
               torch.empty(bs, shape.top_k, dtype=torch.int32, device=d),
               torch.empty(bs, shape.top_k, device=d))
    assert out.shape == (bs, h) and out.dtype == torch.bfloat16
    return f"{shape.model} {shape.mode}: torch peer passes torch's grouped-GEMM checks (meta, bs {bs})"


def dry_run(args, anchors_path: Path, sweeps) -> int:
    limits = anchors_path.with_name("h200_limits.json")
    lim = json.loads(limits.read_text()) if limits.is_file() else {}
    ceilings = {"read_TBps": lim.get("read_TBps", 4.0), "fp8_dense_TFLOPs": lim.get("fp8_dense_TFLOPs", 1300.0)}
    print(f"dry run: no GPU used; floors at the anchors' ceilings {ceilings}; impls: {', '.join(args.impls)}")
    table, rows = [], []
    for shape, scaling, bss in sweeps:
        copy_bytes = shape.e_local * expert_bytes(shape, scaling)
        for bs in bss:
            ids, _ = make_routing(shape, bs)
            routed, touched = routing_stats(ids, shape)
            fl = floors(shape, scaling, bs, routed, touched, ceilings)
            n = n_rotate(fl["bytes"], copy_bytes + bs * shape.hidden * 2)
            table.append([shape.model, shape.mode, scaling, bs, shape.e_local, shape.inter, routed, touched,
                          f"{fl['bytes'] / 1e6:.1f}", f"{fl['mem_floor_us']:.1f}", f"{fl['flop_floor_us']:.1f}", n,
                          f"{n * copy_bytes / 2**30:.2f}"])
            rows += [{"model": shape.model, "mode": shape.mode, "bs": bs, "scaling": scaling, "impl": i, "us": None,
                      "routed_rows": routed, "touched_experts": touched, "n_rotate": n, **fl,
                      "skip_reason": "dry run"} for i in args.impls]
    print(common.format_table(["model", "mode", "scaling", "bs", "E_loc", "I", "rows", "exp", "MB", "mem_fl",
                               "flop_fl", "N rot", "weights GiB"], table))
    shapes = list(dict.fromkeys(s for s, _, _ in sweeps))
    prog = common.Progress(1 + len(shapes), "self-check")
    for msg in self_check():
        prog.write(f"self-check: {msg}")
    prog.update("peer + reference")
    for shape in shapes:
        prog.write(f"self-check: {meta_check(shape, 64)}")
        prog.update(f"{shape.model} {shape.mode}")
    prog.close()
    print(report(rows, args.impls))
    summ = sweep_summary(rows)
    tmp = Path(tempfile.mkdtemp(prefix="moe_dry_")) / "moe.json"
    common.write_json(tmp, {"device": "dry-run (cpu)", "commit": common.git_commit(), "ceilings": ceilings,
                            "rows": rows, "summary": summ})
    print(counts(rows) + f"; dry run: wrote {tmp} (not {args.out})")
    return 0


# ---------------------------------------------------------------------------------------------------- run
def same_bytes_reads(case_rows, shape: Shape, scaling: str, bs: int, touched: int, n: int, replays: int, warmup: int,
                     prog) -> None:
    """What a plain streaming read of the floor's bytes costs in a CUDA graph, with the case's rotation: one
    launch over all of them (same_bytes_read_us) and two launches, the gate-up's bytes then the down's
    (two_launch_read_us: the weight streams hopperkit runs as two GEMM kernels). Recorded on every row of the
    case; a failure is reported and leaves the fields out."""
    gate, down = stage_bytes(shape, scaling, bs, touched)
    out = {}
    for key, nbytes in (("same_bytes_read_us", gate + down), ("two_launch_read_us", [gate, down])):
        try:
            out[key] = round(common.read_kernel_us(nbytes, n, replays, warmup), 3)
        except Exception as e:  # noqa: BLE001
            prog.write(f"{shape.model} {shape.mode} {scaling} bs={bs}: {key} failed: {decode_bench._error(e)}")
        common.free_cuda()
    for r in case_rows:
        r.update(out)


def run_sweeps(args, sweeps, ceilings, prog, rows, flush, replays, warmup, t0) -> None:
    order = [i for i in RUN_ORDER if i in args.impls]
    for shape, scaling, bss in sweeps:
        sweep = Sweep(shape, scaling)
        for bs in bss:
            ids, tw = make_routing(shape, bs)
            routed, touched = routing_stats(ids, shape)
            fl = floors(shape, scaling, bs, routed, touched, ceilings)
            base = {"model": shape.model, "mode": shape.mode, "bs": bs, "scaling": scaling, "e_local": shape.e_local,
                    "intermediate": shape.inter, "routed_rows": routed, "touched_experts": touched, **fl}
            label = f"{shape.model} {shape.mode} {scaling} bs={bs}"
            if time.monotonic() - t0 > args.max_seconds:
                for impl in order:
                    rows.append(dict(base, impl=impl, us=None, skip_reason="time budget"))
                    prog.update(f"{label} {impl} (time budget)")
                continue
            case, why = None, None
            try:
                copy_bytes = shape.e_local * expert_bytes(shape, scaling) + bs * shape.hidden * 2
                base["n_rotate"] = n_rotate(fl["bytes"], copy_bytes)
                case = build_case(sweep, bs, ids, tw, base["n_rotate"])
                base.update(a13_scale=case.a13, a2_scale=case.a2)
            except Exception as e:  # noqa: BLE001
                why = f"inputs could not be built: {decode_bench._error(e)}"
                prog.write(f"{label}: {why}")
            torch_out = None
            for impl in order:
                if case is None:
                    rows.append(dict(base, impl=impl, us=None, ok=False, skip_reason=why))
                else:
                    row, out0 = run_impl(impl, case, base, replays, warmup, torch_out)
                    rows.append(row)
                    if impl == "torch_grouped" and row.get("ok"):   # hopperkit is held to a peer that passed
                        torch_out = out0
                prog.update(f"{label} {impl}")
                common.free_cuda()
            del case, torch_out
            common.free_cuda()
            if args.reads and bs <= READ_MAX_BS and "n_rotate" in base:
                same_bytes_reads(rows[-len(order):], shape, scaling, bs, touched, base["n_rotate"], replays, warmup,
                                 prog)
            flush()
        del sweep
        common.free_cuda()


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.moe_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench/results/h200/moe.json")
    ap.add_argument("--anchors", default=None, help="moe_shapes.json (default: bench/anchors/, ../shared/anchors/)")
    ap.add_argument("--models", default=None, help="comma list (default: every model of the anchors)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--scalings", default=",".join(SCALINGS))
    ap.add_argument("--bs", default=None, help="comma list: only these batch sizes of the anchors")
    ap.add_argument("--extra-bs", default=None,
                    help="comma list: batch sizes run in every sweep besides the anchors' (e.g. 768 for 48 rows per "
                         "expert on Qwen3-235B, between the anchors' 512 and 1024)")
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--quick", action="store_true", help=f"batch sizes {QUICK_BS} only, fewer replays")
    ap.add_argument("--max-seconds", type=float, default=BUDGET_DEFAULT_S,
                    help="no new case starts past this many seconds; the rest are recorded as skipped")
    ap.add_argument("--dry-run", action="store_true", help="CPU only: list the work and self-check the torch peer")
    ap.add_argument("--no-reads", dest="reads", action="store_false",
                    help=f"skip the same-bytes plain reads (one and two launches) at batch <= {READ_MAX_BS}")
    args = ap.parse_args(argv)
    args.anchors_path = find_anchors(args.anchors)
    anchors = json.loads(args.anchors_path.read_text())
    args.models = common.comma_list(args.models or ",".join(anchors["models"]), tuple(anchors["models"]), ap)
    args.modes = common.comma_list(args.modes, tuple(MODES), ap)
    args.scalings = common.comma_list(args.scalings, SCALINGS, ap)
    args.impls = common.comma_list(args.impls, IMPLS, ap)
    args.bs = common.comma_list(args.bs, None, ap, int) if args.bs else None
    args.extra_bs = common.comma_list(args.extra_bs, None, ap, int) if args.extra_bs else None
    return args, anchors


def main(argv=None) -> int:
    t0 = time.monotonic()
    args, anchors = parse_args(argv)
    sweeps = plan_sweeps(anchors, args)
    n_cases = sum(len(b) for _, _, b in sweeps)
    print(f"anchors: {args.anchors_path}; {len(sweeps)} sweeps, {n_cases} cases")
    if args.dry_run:
        return dry_run(args, args.anchors_path, sweeps)
    if not torch.cuda.is_available():
        raise SystemExit("moe_bench needs a CUDA GPU (use --dry-run on a CPU)")
    replays, warmup = (10, 3) if args.quick else (30, 5)
    torch.set_float32_matmul_precision("highest")   # the float32 reference must not run in TF32
    try:
        print("hopperkit:", decode_bench.hopperkit().build_info())
    except Exception as e:  # noqa: BLE001
        print("hopperkit:", e)
    ceilings = common.measure_ceilings(("read", "fp8_mm"))
    print(f"device: {torch.cuda.get_device_name()}  ceilings: {ceilings}")
    rows: list = []
    commit = common.git_commit([lambda: decode_bench.hopperkit().build_info().get("git")])
    result = {"device": torch.cuda.get_device_name(), "commit": commit, "ceilings": ceilings, "rows": rows,
              "config": {"torch": torch.__version__, "replays": replays, "warmup": warmup, "tol": TOL,
                         "weight_std": WEIGHT_STD, "static_scale_headroom": tg.STATIC_SCALE_HEADROOM,
                         "torch_grouped_pad_rows": tg.PAD, "max_seconds": args.max_seconds, "quick": args.quick,
                         "anchors": str(args.anchors_path)}}

    def flush():                             # after every case: a run cut short still leaves its rows
        result["complete"] = False
        result["summary"] = sweep_summary(rows)
        common.write_json(args.out, result)

    prog = common.Progress(n_cases * len(args.impls), "moe")
    run_sweeps(args, sweeps, ceilings, prog, rows, flush, replays, warmup, t0)
    prog.close()
    result["complete"] = True
    result["summary"] = sweep_summary(rows)
    result["targets"] = target_counts(rows)
    result["elapsed_s"] = round(time.monotonic() - t0, 1)
    print(report(rows, args.impls))
    print()
    print(summary_text(result["summary"]))
    print(target_text(result["targets"]))
    out = common.write_json(args.out, result)
    print(counts(rows) + f"; {result['elapsed_s']} s; wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
