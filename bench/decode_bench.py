"""Decode-attention benchmark: hopperkit (dynamic and static plans) against FlashInfer and PyTorch's FA2 on the
mixed-length paged decode scenarios of decode_scenarios.json.

    python -m bench.decode_bench --out bench/results/h200/decode.json [--scenarios PATH] [--dtypes bf16,fp8]
        [--impls hopperkit,hopperkit_static,flashinfer,torch_fa2] [--shapes scenarios|vllm] [--quick] [--dry-run]

--shapes vllm runs vLLM's attention-benchmark decode and spec-decode shapes (attention_shapes.json beside the
scenarios; 64 query / 8 KV heads, q_len 1-8 causal among the new tokens) into decode_vllm_shapes.json.

Per (scenario, dtype): N rotation sets of a paged KV cache (random normal data, pages in random order, every
unused page and every slot past a request's length NaN), N chosen so one graph reads >= 4 x L2; every impl
is checked against a float32 reference on set 0, then timed as one CUDA graph of N calls (time / N, median).
floor_us = KV bytes / the read bandwidth measured in the same run. hopperkit_plan rows time plan.update alone.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from bench import common
from bench.common import REPO_ROOT, Skip, fmt
from bench.plot_common import best_read_us
from bench.peers import flashinfer_decode, torch_fa2

IMPLS = ("hopperkit", "hopperkit_static", "flashinfer", "torch_fa2")
DTYPES = ("bf16", "fp8")
KV_DTYPE = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}
ELEM_BYTES = {"bf16": 2, "fp8": 1}
TOL = {"bf16": 0.05, "fp8": 0.1}          # rel_err above this marks a row "ok": false
QUICK = ("uniform_512", "skewed_extreme", "one_128k_31x4k")
PLAN_CASE = ("batch256_4k", [[256, 4096]])  # planner target: <= 5 us at batch 256
PLAN_CALLS = 20                            # plan.update calls per timed graph
FP8_SCALE_DIV = 440.0                      # amax / this: a little headroom under e4m3's 448
DEVICE = "cuda"
DEFAULTS = {"num_q_heads": 8, "num_kv_heads": 1, "head_dim": 128, "block_size": 64, "q_len": 1}


# --------------------------------------------------------------------------------------------- scenarios
def find_scenarios(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    cands = [REPO_ROOT / "bench/anchors/decode_scenarios.json"]
    if os.environ.get("HOPPERKIT_ANCHORS"):
        cands.append(Path(os.environ["HOPPERKIT_ANCHORS"]) / "decode_scenarios.json")
    cands += [REPO_ROOT.parent / "shared/anchors/decode_scenarios.json",
              REPO_ROOT / "shared/anchors/decode_scenarios.json"]
    for c in cands:
        if c.is_file():
            return c
    raise SystemExit("decode_scenarios.json not found in: " + ", ".join(map(str, cands)) + "; pass --scenarios")


def load_scenarios(path: Path, quick: bool) -> dict[str, dict]:
    """name -> config (the defaults, overridden per scenario) with 'lens' expanded to one length a request."""
    data = json.loads(path.read_text())
    defaults = DEFAULTS | data.get("defaults", {})
    out = {}
    for name, s in data["scenarios"].items():
        if quick and name not in QUICK:
            continue
        cfg = defaults | {k: s[k] for k in defaults if k in s}
        cfg["lens"] = [int(n) for count, n in s["lens"] for _ in range(int(count))]
        cfg["spec"] = s.get("spec", "")
        out[name] = cfg
    return out


def parse_vllm_shape(spec: str) -> tuple[int, int, int] | None:
    """vLLM attention-benchmark grammar, one segment: [count]q<query_len>[s<kv_len>] (k = x 1024) ->
    (count, query_len, kv_len); None for a mixed batch (segments joined by '_')."""
    m = re.fullmatch(r"(\d*)q(\d+k?)(?:s(\d+k?))?", spec)
    if m is None:
        return None
    num = lambda x: int(x[:-1]) * 1024 if x.endswith("k") else int(x)  # noqa: E731
    q = num(m.group(2))
    return int(m.group(1) or 1), q, num(m.group(3)) if m.group(3) else q


def load_vllm_shapes(path: Path) -> dict[str, dict]:
    """attention_shapes.json's decode and spec-decode shapes (query length 1-8, uniform per batch) as scenarios
    with its head layout (64 query heads, 8 KV heads: a GQA model on one GPU). Prefill, extend and mixed batches
    are not decode attention's: left out."""
    data = json.loads(path.read_text())
    heads = data["heads"]
    out = {}
    for spec in data.get("decode", []) + data.get("spec_decode", []):
        parsed = parse_vllm_shape(spec)
        if parsed is None or not 1 <= parsed[1] <= 8 or parsed[1] > parsed[2]:
            continue
        count, q_len, kv = parsed
        cfg = DEFAULTS | {k: heads[k] for k in DEFAULTS if k in heads}
        cfg["lens"], cfg["spec"], cfg["q_len"] = [kv] * count, spec, q_len
        out[spec] = cfg
    return out


def kv_bytes(lens, num_kv_heads: int, head_dim: int, dtype: str) -> int:
    return sum(lens) * num_kv_heads * head_dim * 2 * ELEM_BYTES[dtype]


# -------------------------------------------------------------------------------------------- KV caches
@dataclass
class KVSet:
    """One rotation set: a paged cache with its own page order."""
    k: torch.Tensor                 # [num_blocks, page, Hkv, D] bf16 | float8_e4m3fn
    v: torch.Tensor                 # [num_blocks, page, Hkv, D]
    block_table: torch.Tensor       # [B, max_blocks] int32; entries past a request's pages point at NaN pages
    token_idx: torch.Tensor         # [sum(lens)] int64: slot (page * page_size + offset) of each token, request order
    k_scale: float = 1.0            # dequantised value = stored value * scale
    v_scale: float = 1.0
    k_scale_t: torch.Tensor | None = None   # [1] fp32 on the device (fp8 only)
    v_scale_t: torch.Tensor | None = None


@dataclass
class Case:
    scenario: str
    dtype: str
    lens: list
    hq: int
    hkv: int
    d: int
    page: int
    q_len: int
    q: torch.Tensor                 # [B x q_len, Hq, D] bf16: request r's tokens are rows r q_len .. (r+1) q_len - 1
    seq_lens: torch.Tensor          # [B] int32
    cu_k: torch.Tensor              # [B + 1] int32
    sets: list
    scale: float

    batch = property(lambda self: len(self.lens))
    max_len = property(lambda self: max(self.lens))
    max_blocks = property(lambda self: self.sets[0].block_table.shape[1])
    kv_bytes = property(lambda self: kv_bytes(self.lens, self.hkv, self.d, self.dtype))


def make_kv_set(lens, hkv, d, page, dtype, device, gen) -> KVSet:
    npages = [(n + page - 1) // page for n in lens]
    total_pages = sum(npages)
    num_blocks = total_pages + max(8, total_pages // 16)          # slack pages stay NaN
    perm = torch.randperm(num_blocks, generator=gen)
    spare = perm[total_pages:]
    bt = spare[torch.randint(len(spare), (len(lens), max(1, max(npages))), generator=gen)]
    tokens, off = [], 0
    for r, (n, p) in enumerate(zip(lens, npages)):
        bt[r, :p] = perm[off:off + p]
        off += p
        t = torch.arange(n)
        tokens.append(bt[r, t // page] * page + t % page)
    token_idx = torch.cat(tokens).to(device)
    kv = {}
    for name in ("k", "v"):
        src = torch.randn(sum(lens), hkv, d, device=device)
        if dtype == "fp8":
            scale = (src.abs().amax() / FP8_SCALE_DIV).float()
            vals, scale_f = (src / scale).to(torch.float8_e4m3fn), scale.item()
        else:
            vals, scale_f = src.to(torch.bfloat16), 1.0
        cache = torch.full((num_blocks * page, hkv, d), float("nan"), dtype=KV_DTYPE[dtype], device=device)
        cache[token_idx] = vals
        kv[name] = (cache.view(num_blocks, page, hkv, d), scale_f)
        del src, vals
    s = KVSet(kv["k"][0], kv["v"][0], bt.to(torch.int32).to(device), token_idx, kv["k"][1], kv["v"][1])
    if dtype == "fp8":
        s.k_scale_t = torch.tensor([s.k_scale], dtype=torch.float32, device=device)
        s.v_scale_t = torch.tensor([s.v_scale], dtype=torch.float32, device=device)
    return s


def build_case(name, cfg, dtype, n_sets, device, seed=1234) -> Case:
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    lens, hq, hkv, d, page = cfg["lens"], cfg["num_q_heads"], cfg["num_kv_heads"], cfg["head_dim"], cfg["block_size"]
    cu = torch.zeros(len(lens) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(lens), 0)
    return Case(name, dtype, lens, hq, hkv, d, page, cfg["q_len"],
                q=torch.randn(len(lens) * cfg["q_len"], hq, d, device=device, dtype=torch.bfloat16),
                seq_lens=torch.tensor(lens, dtype=torch.int32, device=device), cu_k=cu.to(device),
                sets=[make_kv_set(lens, hkv, d, page, dtype, device, gen) for _ in range(n_sets)],
                scale=1.0 / math.sqrt(d))


def reference(case: Case, s: KVSet) -> torch.Tensor:
    """[B x q_len, Hq, D] fp32: softmax(q K^T scale) V per request, K/V gathered through the block table,
    dequantised; a request's q_len new tokens are the last q_len of its n, causal among themselves (token i sees
    positions < n - q_len + 1 + i)."""
    g, ql = case.hq // case.hkv, case.q_len
    q = case.q.float().view(case.batch, ql, case.hkv, g, case.d)
    out = torch.empty(case.batch, ql, case.hkv, g, case.d, device=q.device)
    for r, n in enumerate(case.lens):
        pages = s.block_table[r, :(n + case.page - 1) // case.page].long()
        k = s.k[pages].flatten(0, 1)[:n].float() * s.k_scale          # [n, Hkv, D]
        v = s.v[pages].flatten(0, 1)[:n].float() * s.v_scale
        sc = torch.einsum("ihgd,nhd->ihgn", q[r], k) * case.scale
        seen = torch.arange(n, device=q.device)[None, :] <= (n - ql + torch.arange(ql, device=q.device))[:, None]
        p = sc.masked_fill(~seen[:, None, None, :], float("-inf")).softmax(-1)
        out[r] = torch.einsum("ihgn,nhd->ihgd", p, v)
    return out.view(case.batch * ql, case.hq, case.d)


# ------------------------------------------------------------------------------------------------ impls
_HK: dict = {}


def hopperkit():
    if "mod" not in _HK:
        try:
            import hopperkit as mod
            _HK["mod"] = mod
        except Exception as e:  # noqa: BLE001 - any import failure is a skip reason
            _HK["mod"], _HK["why"] = None, f"import hopperkit failed: {type(e).__name__}: {e}"
    if _HK["mod"] is None:
        raise Skip(_HK["why"])
    return _HK["mod"]


def check_plan(plan):
    """DecodePlan.check() (if the binding has it): an exception or a non-zero error bit set is a failure."""
    if not hasattr(plan, "check"):
        return None
    try:
        res = plan.check()
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    return res if isinstance(res, int) and not isinstance(res, bool) and res != 0 else None


def build_hopperkit(case: Case, mode: str):
    hk = hopperkit()
    plan = hk.DecodePlan(case.batch, case.hq, case.hkv, kv_dtype=KV_DTYPE[case.dtype], max_q_len=case.q_len,
                         mode=mode, device=DEVICE)
    plan.update(case.seq_lens, block_size=case.page, max_blocks_per_seq=case.max_blocks, max_seq_len=case.max_len)
    q, q_scale = hk.quantize_query_fp8(case.q) if case.dtype == "fp8" else (case.q, None)
    out = torch.empty(case.q.shape, dtype=torch.bfloat16, device=case.q.device)

    def call(s: KVSet):
        hk.decode_attention(q, s.k, s.v, s.block_table, case.seq_lens, plan, softmax_scale=case.scale,
                            q_scale=q_scale, k_scale=s.k_scale_t, v_scale=s.v_scale_t, out=out)
        return out

    return [partial(call, s) for s in case.sets], {"_post_check": partial(check_plan, plan)}


BUILDERS = {"hopperkit": partial(build_hopperkit, mode="dynamic"),
            "hopperkit_static": partial(build_hopperkit, mode="static"),
            "flashinfer": flashinfer_decode.build, "torch_fa2": torch_fa2.build}


def _error(e: Exception) -> str:
    return f"error: {type(e).__name__}: {e}"[:500]


def run_impl(impl, case: Case, refs, floor_us, replays, warmup) -> dict:
    """refs: references of the first and the last rotation set. The first is checked eagerly before timing, the
    last on what the replayed graph left in its output (catches state that goes stale across replays)."""
    row = {"scenario": case.scenario, "dtype": case.dtype, "impl": impl, "us": None, "floor_us": floor_us,
           "n_rotate": len(case.sets)}
    fns = None
    try:
        fns, info = BUILDERS[impl](case)
        post = info.pop("_post_check", None)
        row.update(info)
        out0 = fns[0]()
        torch.cuda.synchronize()
        row.update(common.relative_error(out0, refs[0]))
        outs: list = []
        row["us"] = common.time_graph(fns, replays, warmup, outputs=outs)
        row["rel_err_graph"] = common.relative_error(outs[-1], refs[1])["rel_err"]
        worst = max(row["rel_err"], row["rel_err_graph"])
        row["ok"] = bool(math.isfinite(worst) and worst <= TOL[case.dtype])
        plan_err = post() if post else None
        if plan_err:
            row["ok"], row["plan_error"] = False, plan_err
    except Skip as e:
        row["skip_reason"] = str(e)
    except Exception as e:  # noqa: BLE001 - one failing impl must not stop the run
        row["ok"], row["skip_reason"] = False, _error(e)
    del fns
    return row


def plan_row(scenario, cfg, lens, dtype, replays, warmup) -> dict:
    row = {"scenario": scenario, "dtype": dtype, "impl": "hopperkit_plan", "us": None, "floor_us": None,
           "n_rotate": 1, "calls_per_graph": PLAN_CALLS, "batch": len(lens)}
    try:
        hk = hopperkit()
        plan = hk.DecodePlan(len(lens), cfg["num_q_heads"], cfg["num_kv_heads"], kv_dtype=KV_DTYPE[dtype],
                             max_q_len=cfg["q_len"], mode="dynamic", device=DEVICE)
        seq = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
        page = cfg["block_size"]
        upd = partial(plan.update, seq, block_size=page, max_blocks_per_seq=(max(lens) + page - 1) // page,
                      max_seq_len=max(lens))
        upd()
        torch.cuda.synchronize()
        row["us"], row["ok"] = common.time_graph([upd] * PLAN_CALLS, replays, warmup), True
    except Skip as e:
        row["skip_reason"] = str(e)
    except Exception as e:  # noqa: BLE001
        row["ok"], row["skip_reason"] = False, _error(e)
    return row


# ----------------------------------------------------------------------------------------------- report
SHORT = {"hopperkit": "hk", "hopperkit_static": "hk_static", "flashinfer": "fi", "torch_fa2": "fa2"}


def report(rows, impls) -> str:
    """Times (us), time / floor ('/fl'), and each peer's time / hopperkit's ('peer/hk' > 1: hopperkit faster)."""
    keys = list(dict.fromkeys((r["scenario"], r["dtype"]) for r in rows if r["impl"] in impls))
    peers = [i for i in impls if i != "hopperkit"] if "hopperkit" in impls else []
    headers = ["scenario", "dtype", "floor", "read", "sum"] + [h for i in impls for h in (SHORT[i], f"{SHORT[i]}/fl")]
    headers += ["hk/read"] if "hopperkit" in impls else []
    headers += [f"{SHORT[p]}/hk" for p in peers]
    table = []
    for scn, dt in keys:
        by = {r["impl"]: r for r in rows if (r["scenario"], r["dtype"]) == (scn, dt)}
        floor = next((r["floor_us"] for r in by.values() if r["floor_us"]), None)
        rows_us = next((r["same_bytes_read_us"] for r in by.values() if r.get("same_bytes_read_us")), None)
        tsum = next((r["same_bytes_sum_us"] for r in by.values() if r.get("same_bytes_sum_us")), None)
        read = best_read_us(rows_us, tsum)
        us = {i: by.get(i, {}).get("us") for i in impls}
        line = [scn, dt, fmt(floor, ".2f"), fmt(read, ".2f"), fmt(tsum, ".2f")]
        for i in impls:
            bad = "!" if by.get(i, {}).get("ok") is False and us[i] is not None else ""
            line += [fmt(us[i], ".2f") + bad, fmt(us[i] / floor if us[i] and floor else None, ".2f")]
        hk = us.get("hopperkit")
        if "hopperkit" in impls:
            line += [fmt(hk / read if hk and read else None, ".2f")]
        line += [fmt(us[p] / hk if us[p] and hk else None, ".2f") for p in peers]
        table.append(line)
    legend = ", ".join(f"{v} = {k}" for k, v in SHORT.items() if k in impls)
    text = [common.format_table(headers, table),
            f"us per call; /fl = time / HBM floor (target <= 1.25); read = the faster of a plain read (row-wise"
            f" torch sum) and torch.sum (a global reduction; column sum, session 24's read) of the same KV bytes and"
            f" rotation; hk/read = hopperkit / read;"
            f" x/hk = x's time / hopperkit's; {legend};"
            " '!' = wrong output (rel_err over tolerance or plan error)"]
    plans = [r for r in rows if r["impl"] == "hopperkit_plan"]
    if plans:
        text += ["", common.format_table(["plan scenario", "dtype", "batch", "plan.update us"],
                                         [[r["scenario"], r["dtype"], r["batch"], fmt(r["us"], ".2f")] for r in plans])]
    reasons = sorted({f"{r['impl']} {r['dtype']}: {r['skip_reason']}" for r in rows if r.get("skip_reason")})
    return "\n".join(text + (["", "skipped / failed:"] + [f"  {x}" for x in reasons] if reasons else []))


def summary(rows) -> str:
    ok = sum(r.get("ok") is True for r in rows)
    wrong = sum(r.get("ok") is False and r["us"] is not None for r in rows)
    err = sum(r.get("ok") is False and r["us"] is None for r in rows)
    skip = sum(r.get("skip_reason") is not None and r.get("ok") is None for r in rows)
    return f"decode_bench: {len(rows)} rows: {ok} ok, {wrong} wrong output, {err} errors, {skip} skipped"


# ---------------------------------------------------------------------------------------------- dry run
def self_check(case: Case) -> str:
    """CPU checks of the inputs every impl will get: poison, page layout, reference, peers' views of the cache."""
    numel_valid = sum(case.lens) * case.hkv * case.d
    for s in case.sets:
        for c in (s.k, s.v):
            nan = int(torch.isnan(c.float()).sum())
            assert nan == c.numel() - numel_valid, f"NaN poison: {nan} NaN, expected {c.numel() - numel_valid}"
        used = torch.cat([s.block_table[r, :(n + case.page - 1) // case.page] for r, n in enumerate(case.lens)])
        assert used.unique().numel() == used.numel(), "a page is used twice"
        indptr, indices, last = flashinfer_decode.paged_metadata(s.block_table, case.lens, case.page)
        for r, n in enumerate(case.lens):           # flashinfer's page list must name exactly the valid slots
            pages = indices[indptr[r]:indptr[r + 1]].long()
            slots = (pages[:, None] * case.page + torch.arange(case.page)).flatten()[:n]
            assert int(last[r]) == (n - 1) % case.page + 1
            assert torch.equal(slots, s.token_idx[int(case.cu_k[r]):int(case.cu_k[r + 1])]), "page list mismatch"
    ref = reference(case, case.sets[0])
    assert torch.isfinite(ref).all(), "reference read a poisoned slot"
    k, v = torch_fa2.pack_kv(case.sets[0])           # independent path: packed tokens + SDPA
    assert k.is_contiguous() and k.shape == (sum(case.lens), case.hkv, case.d) and torch.isfinite(k.float()).all()
    g, s0, ql = case.hq // case.hkv, case.sets[0], case.q_len
    err = 0.0
    for r in range(case.batch):
        a, b = int(case.cu_k[r]), int(case.cu_k[r + 1])
        kr = (k[a:b].float() * s0.k_scale).repeat_interleave(g, 1).transpose(0, 1)[None]   # [1, Hq, n, D]
        vr = (v[a:b].float() * s0.v_scale).repeat_interleave(g, 1).transpose(0, 1)[None]
        qr = case.q[r * ql:(r + 1) * ql].float().transpose(0, 1)[None]                      # [1, Hq, q_len, D]
        n = b - a  # the new tokens are the last q_len: token i sees positions < n - q_len + 1 + i
        mask = torch.arange(n)[None, :] <= (n - ql + torch.arange(ql))[:, None]
        o = torch.nn.functional.scaled_dot_product_attention(qr, kr, vr, attn_mask=mask, scale=case.scale)[0]
        err = max(err, common.relative_error(o.transpose(0, 1), ref[r * ql:(r + 1) * ql])["rel_err"])
    assert err < 1e-4, f"reference disagrees with SDPA on the packed tokens: rel_err {err:.2e}"
    return f"ok (reference vs SDPA rel_err {err:.1e})"


def dry_run(args, path: Path, scns: dict) -> int:
    limits = path.with_name("h200_limits.json")
    bw = json.loads(limits.read_text()).get("read_TBps", 4.0) if limits.is_file() else 4.0
    print(f"dry run: no GPU used; floors at an assumed read bandwidth of {bw} TB/s; impls: {', '.join(args.impls)}")
    table, rows = [], []
    for name, cfg in scns.items():
        for dt in args.dtypes:
            nbytes = kv_bytes(cfg["lens"], cfg["num_kv_heads"], cfg["head_dim"], dt)
            n = common.rotation_count(nbytes)
            floor_us = nbytes / (bw * 1e6)
            table.append([name, cfg["spec"], dt, len(cfg["lens"]), sum(cfg["lens"]), f"{nbytes / 1e6:.2f}", n,
                          f"{n * nbytes / 1e6:.0f}", f"{floor_us:.2f}"])
            rows += [{"scenario": name, "dtype": dt, "impl": i, "us": None, "floor_us": floor_us, "n_rotate": n,
                      "skip_reason": "dry run"} for i in args.impls]
    print(common.format_table(["scenario", "spec", "dtype", "batch", "tokens", "KV MB", "N rotate",
                               "graph MB", "floor_us"], table))
    small = sorted(scns, key=lambda k: sum(scns[k]["lens"]))[:2]
    prog = common.Progress(len(small) * len(args.dtypes), "self-check")
    for name in small:
        for dt in args.dtypes:
            msg = self_check(build_case(name, scns[name], dt, 2, "cpu"))
            prog.write(f"self-check {name} {dt}: {msg}")
            prog.update(f"{name} {dt}")
    prog.close()
    print(report(rows, args.impls))
    tmp = Path(tempfile.mkdtemp(prefix="decode_dry_")) / "decode.json"
    common.write_json(tmp, {"device": "dry-run (cpu)", "commit": common.git_commit(), "ceilings":
                            {"read_TBps": bw, "copy_TBps": None}, "rows": rows})
    print(summary(rows) + f"; dry run: wrote {tmp} (not {args.out})")
    return 0


# ------------------------------------------------------------------------------------------------- main
def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.decode_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench/results/h200/decode.json")
    ap.add_argument("--scenarios", default=None, help="default: bench/anchors/, then $HOPPERKIT_ANCHORS/, ../shared/anchors/, shared/anchors/")
    ap.add_argument("--dtypes", default="bf16,fp8")
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--shapes", choices=("scenarios", "vllm"), default="scenarios",
                    help="scenarios: decode_scenarios.json (8 / 1 heads); vllm: the decode and spec-decode shapes of "
                         "vLLM's attention benchmark in attention_shapes.json (64 / 8 heads, q_len 1-8), written to "
                         "decode_vllm_shapes.json")
    ap.add_argument("--quick", action="store_true", help="3 scenarios, fewer replays: a smoke run")
    ap.add_argument("--dry-run", action="store_true", help="CPU only: list the work and self-check the inputs")
    args = ap.parse_args(argv)
    if args.shapes == "vllm" and args.out == ap.get_default("out"):
        args.out = "bench/results/h200/decode_vllm_shapes.json"
    args.dtypes = [x for x in args.dtypes.split(",") if x]
    args.impls = [x for x in args.impls.split(",") if x]
    for x, allowed in [(d, DTYPES) for d in args.dtypes] + [(i, IMPLS) for i in args.impls]:
        if x not in allowed:
            ap.error(f"unsupported value {x!r}; expected one of {', '.join(allowed)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    path = find_scenarios(args.scenarios)
    published = None
    if args.shapes == "vllm":
        path = path.with_name("attention_shapes.json")
        scns = load_vllm_shapes(path)
        published = json.loads(path.read_text()).get("published_h20_ms")
    else:
        scns = load_scenarios(path, args.quick)
    print(f"scenarios: {path} ({len(scns)}: {', '.join(scns)})")
    if args.dry_run:
        return dry_run(args, path, scns)
    if not torch.cuda.is_available():
        raise SystemExit("decode_bench needs a CUDA GPU (use --dry-run on a CPU)")
    replays, warmup = (10, 3) if args.quick else (50, 10)
    torch.set_float32_matmul_precision("highest")   # the float32 reference must not run in TF32
    try:
        print("hopperkit:", hopperkit().build_info())
    except Exception as e:  # noqa: BLE001
        print("hopperkit:", e)
    ceilings = common.measure_ceilings(("read", "copy"))
    print(f"device: {torch.cuda.get_device_name()}  ceilings: {ceilings}")
    want_plan = any(i.startswith("hopperkit") for i in args.impls)
    per_case = len(args.impls) + want_plan
    extra_plans = want_plan and args.shapes == "scenarios"
    prog = common.Progress(len(scns) * len(args.dtypes) * per_case + extra_plans * len(args.dtypes), "decode")
    rows = []
    for name, cfg in scns.items():
        for dt in args.dtypes:
            nbytes = kv_bytes(cfg["lens"], cfg["num_kv_heads"], cfg["head_dim"], dt)
            floor_us = nbytes / (ceilings["read_TBps"] * 1e6)
            case = refs = None
            try:
                case = build_case(name, cfg, dt, common.rotation_count(nbytes), DEVICE)
                refs = (reference(case, case.sets[0]), reference(case, case.sets[-1]))
            except Exception as e:  # noqa: BLE001
                prog.write(f"{name} {dt}: building the inputs failed: {_error(e)}")
            reads = {"rows": None, "sum": None}
            if case is not None:
                for kind in reads:  # the scenario's KV bytes read by a plain kernel: the floor plus launch, ramp, tail
                    try:
                        reads[kind] = common.read_kernel_us(nbytes, len(case.sets), replays, warmup, kind=kind)
                    except Exception as e:  # noqa: BLE001
                        prog.write(f"{name} {dt}: same-bytes read ({kind}) failed: {_error(e)}")
                    common.free_cuda()
            read_us, sum_us = reads["rows"], reads["sum"]
            for impl in args.impls:
                if case is None:
                    rows.append({"scenario": name, "dtype": dt, "impl": impl, "us": None, "floor_us": floor_us,
                                 "ok": False, "skip_reason": "inputs could not be built"})
                else:
                    rows.append(run_impl(impl, case, refs, floor_us, replays, warmup))
                rows[-1]["same_bytes_read_us"] = read_us
                rows[-1]["same_bytes_sum_us"] = sum_us
                prog.update(f"{name} {dt} {impl}")
                common.free_cuda()
            del case, refs
            common.free_cuda()
            if want_plan:
                rows.append(plan_row(name, cfg, cfg["lens"], dt, replays, warmup))
                prog.update(f"{name} {dt} plan")
    if want_plan and args.shapes == "scenarios":
        cfg0 = next(iter(scns.values()), DEFAULTS)
        lens = [int(n) for c, n in PLAN_CASE[1] for _ in range(c)]
        for dt in args.dtypes:
            rows.append(plan_row(PLAN_CASE[0], cfg0, lens, dt, replays, warmup))
            prog.update(f"{PLAN_CASE[0]} {dt} plan")
    prog.close()
    commit = common.git_commit([lambda: hopperkit().build_info().get("git")])
    result = {"device": torch.cuda.get_device_name(), "commit": commit, "ceilings": ceilings, "rows": rows}
    if published:  # the anchors' published numbers for the same shapes (another GPU: for reference only)
        result["published_h20_ms"] = published
    print(report(rows, args.impls))
    out = common.write_json(args.out, result)
    print(summary(rows) + f"; wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
