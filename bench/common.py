"""Shared pieces of the hopperkit benchmarks: CUDA-graph timing with L2-defeating rotation, ceiling
measurements (HBM read / copy bandwidth, BF16 / FP8 matrix rate), progress bar, table and JSON output.

Timing rules every benchmark follows (see time_graph):
  * the timed work is captured once in a CUDA graph and replayed; the reported number is a median;
  * a graph holds N back-to-back calls, each on its own buffers, with N * bytes_per_call >= 4 x L2, so no call
    finds its operands in L2 from the previous replay; the time per call is graph_time / N;
  * inputs are random normal data, never zeros.
"""
from __future__ import annotations

import gc
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
L2_BYTES = 60 * 2**20          # H200 L2 as the project states it; rotation must exceed ROTATE_FACTOR x this
ROTATE_FACTOR = 4
ROTATE_MIN, ROTATE_MAX = 2, 64       # 64: even a 4 MB FP8 cache reaches 4 x L2


class Skip(Exception):
    """An implementation that cannot run this case by design (not a failure): the message is the reason."""


# ----------------------------------------------------------------------------------------------- rotation
def rotation_count(bytes_per_call: int, l2_bytes: int = L2_BYTES, factor: int = ROTATE_FACTOR,
                   lo: int = ROTATE_MIN, hi: int = ROTATE_MAX) -> int:
    """Distinct buffer sets needed so that one graph touches >= factor * L2 bytes (clamped to [lo, hi])."""
    need = math.ceil(factor * l2_bytes / max(1, bytes_per_call))
    return max(lo, min(hi, need))


# ------------------------------------------------------------------------------------------------ timing
def time_graph(fns: Sequence[Callable[[], object]], replays: int = 50, warmup: int = 10,
               outputs: list | None = None) -> float:
    """Capture fns (called in order) in one CUDA graph, replay it, return the median microseconds per call.

    Each fn must already have run once eagerly (lazy init, JIT, autotuning happen outside the capture).
    If `outputs` is a list, it receives what each captured call returned: after the last replay those tensors
    hold the graph's final results, so a caller can check what the replayed graph computed."""
    if not fns:
        raise ValueError("time_graph: no calls to time")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):          # warm-up on a side stream, as torch's graph docs require
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        results = [fn() for fn in fns]
    for _ in range(warmup):
        graph.replay()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    for start, end in zip(starts, ends):
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    ms = statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))
    if outputs is not None:
        outputs.extend(results)
    del graph, results
    return ms * 1e3 / len(fns)


def free_cuda() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------- ceilings
READ_ROW = 4096                 # elements per row of the row-wise read at large sizes (8 KB of bf16)
READ_ROW_MIN = 256
READ_ROWS_PER_SM = 64           # rows per SM the row-wise read asks for before it shortens its rows


def read_row_elems(n_elems: int, sms: int) -> int:
    """Row length (bf16 elements) of the row-wise read over n_elems: READ_ROW, halved (down to READ_ROW_MIN)
    while there would be fewer than READ_ROWS_PER_SM rows per SM. torch's row reduction gives a 4096-element row
    one warp and a CTA 16 rows (128 KB), so at 8 KB rows a read of less than ~67 MB would not fill 132 SMs."""
    row = READ_ROW
    while row > READ_ROW_MIN and n_elems // row < READ_ROWS_PER_SM * sms:
        row //= 2
    return row


def measure_read_kinds_TBps(gib: float = 2.0, replays: int = 20,
                            kinds: Sequence[str] = ("rows", "sum")) -> dict:
    """{kind: TB/s} for each read kernel of read_kernel_us over `gib` GiB (measure_ceilings' read bandwidth is the
    fastest of them, so the floor is never set by the slower yardstick)."""
    nbytes = max(2 * READ_ROW, int(gib * 2**30) // (2 * READ_ROW) * (2 * READ_ROW))
    out = {}
    for kind in kinds:
        us = read_kernel_us(nbytes, 1, replays=replays, warmup=3, kind=kind)
        out[kind] = nbytes / (us * 1e-6) / 1e12
        free_cuda()
    return out


def read_kernel_us(nbytes: int | Sequence[int], n_sets: int = 1, replays: int = 20, warmup: int = 3,
                   kind: str = "rows") -> float:
    """Median microseconds per call of a read kernel over nbytes (rounded up to whole rows), rotating over
    n_sets buffers in one CUDA graph as the benchmarks rotate their inputs: a memory-bound kernel reading that
    many bytes, ramp and tail included (the floor, bytes / read bandwidth, leaves those out). nbytes may be a
    sequence: a call is then one read kernel per entry, back to back (e.g. an op that streams two weight sets
    in two launches), each on its own buffer.
      kind "rows": a row-wise bf16 sum, x.view(-1, row).sum(1) with row = read_row_elems(): one kernel, no
                   cross-block reduction, rows short enough to give every SM work, so it stands for a plain
                   streaming read;
      kind "sum":  torch.sum over the whole tensor, the read ceiling's kernel up to session 24: a global
                   reduction that also zeroes its semaphores per call (a memset node in the graph) and ends in a
                   final-block reduction, so it overstates a pure read by some microseconds."""
    if kind not in ("rows", "sum"):
        raise ValueError(f"read_kernel_us: kind must be 'rows' or 'sum', got {kind!r}")
    parts = [int(b) for b in nbytes] if isinstance(nbytes, (list, tuple)) else [int(nbytes)]
    if not parts or min(parts) <= 0:
        raise ValueError(f"read_kernel_us: nbytes must be positive byte counts, got {nbytes!r}")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    shapes = []                                    # per part: (elements, row)
    for b in parts:
        row = read_row_elems(max(1, b // 2), sms)
        shapes.append((max(1, -(-b // (2 * row))) * row, row))
    sets = [[torch.randn(n, dtype=torch.bfloat16, device="cuda") for n, _ in shapes] for _ in range(max(1, n_sets))]

    def call(bufs):
        if kind == "rows":
            return [b.view(-1, row).sum(1) for b, (_, row) in zip(bufs, shapes)]
        return [b.sum() for b in bufs]

    fns = [lambda bufs=bufs: call(bufs) for bufs in sets]
    for fn in fns:
        fn()
    return time_graph(fns, replays=replays, warmup=warmup)


def measure_copy_TBps(gib: float = 2.0, replays: int = 20) -> float:
    """Copy bandwidth through an elementwise kernel over `gib` GiB (dst = src * 1), counting bytes read + written.

    Why not dst.copy_(src): inside a CUDA graph a contiguous same-dtype copy_ is captured as a memcpy node, and on
    the H200 that path measured 2.7 TB/s against 4.14 TB/s for a kernel (bench/anchors/h200_limits.json). Every
    kernel we compare against this ceiling is an SM kernel, so the ceiling is measured with one too."""
    n = int(gib * 2**30) // 2
    us = copy_kernel_us(n, 1, replays=replays, warmup=3)
    return 2 * n * 2 / (us * 1e-6) / 1e12


def copy_kernel_us(n: int, n_sets: int = 1, replays: int = 20, warmup: int = 3) -> float:
    """Median microseconds of the copy ceiling's kernel (dst = src * 1, n bf16 elements each way) per call, over
    n_sets rotated (src, dst) pairs in one CUDA graph."""
    pairs = [(torch.randn(n, dtype=torch.bfloat16, device="cuda"), torch.empty(n, dtype=torch.bfloat16, device="cuda"))
             for _ in range(max(1, n_sets))]
    fns = [lambda s=s, d=d: torch.mul(s, 1, out=d) for s, d in pairs]
    for fn in fns:
        fn()
    return time_graph(fns, replays=replays, warmup=warmup)


def measure_copy_memcpy_TBps(gib: float = 2.0, replays: int = 20) -> float:
    """The former copy ceiling, for comparison: dst.copy_(src) in a CUDA graph (a memcpy node), bytes read + written."""
    n = int(gib * 2**30) // 2
    src = torch.randn(n, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    us = time_graph([lambda: dst.copy_(src)], replays=replays, warmup=3)
    return 2 * n * 2 / (us * 1e-6) / 1e12


def measure_matmul_TFLOPs(dtype: str = "bf16", size: int = 8192, replays: int = 20) -> float:
    """Dense matrix rate on random size^3 products: bf16 torch.mm, or fp8 e4m3 torch._scaled_mm with scales."""
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    if dtype == "bf16":
        fn = lambda: torch.mm(a, b)  # noqa: E731
    elif dtype == "fp8":
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.to(torch.float8_e4m3fn).t()          # column-major second operand, as _scaled_mm requires
        sa = torch.tensor(1.0, device="cuda")
        sb = torch.tensor(1.0, device="cuda")
        fn = lambda: torch._scaled_mm(a8, b8, sa, sb, out_dtype=torch.bfloat16)  # noqa: E731
    else:
        raise ValueError(f"unsupported matmul dtype: {dtype}")
    fn()
    us = time_graph([fn], replays=replays, warmup=3)
    return 2 * size**3 / (us * 1e-6) / 1e12


def measure_ceilings(kinds: Iterable[str] = ("read", "copy")) -> dict:
    """Any of: read, copy, copy_memcpy, bf16_mm, fp8_mm. Keys: read_TBps (the faster read kernel; also
    read_rows_TBps and read_sum_TBps), copy_TBps, copy_memcpy_TBps, bf16_dense_TFLOPs, fp8_dense_TFLOPs."""
    table = {"copy": ("copy_TBps", measure_copy_TBps),
             "copy_memcpy": ("copy_memcpy_TBps", measure_copy_memcpy_TBps),
             "bf16_mm": ("bf16_dense_TFLOPs", lambda: measure_matmul_TFLOPs("bf16")),
             "fp8_mm": ("fp8_dense_TFLOPs", lambda: measure_matmul_TFLOPs("fp8"))}
    out = {}
    for kind in kinds:
        if kind == "read":  # both read kernels recorded; the floor uses the faster
            per = measure_read_kinds_TBps()
            out["read_TBps"] = round(max(per.values()), 4)
            out.update({f"read_{k}_TBps": round(v, 4) for k, v in per.items()})
            continue
        key, fn = table[kind]
        out[key] = round(fn(), 4)
        free_cuda()                       # the measurement's buffers died with its frame
    return out


# ------------------------------------------------------------------------------------------- provenance
def git_commit(fallbacks: Sequence[Callable[[], str | None]] = ()) -> str | None:
    """$HOPPERKIT_COMMIT when set, else $HOPPERKIT_GIT_HASH (what scripts/gpu_round.sh names a build after), else
    the first fallback that answers (the benchmarks pass the installed build's own record of its commit), else
    git rev-parse HEAD of the repo. The repo's git comes last: a device copy of the tree may carry a stale .git
    (session 20 run 5: direct benchmark calls named the device checkout's old HEAD, not the build's commit)."""
    for var in ("HOPPERKIT_COMMIT", "HOPPERKIT_GIT_HASH"):
        if os.environ.get(var):
            return os.environ[var]
    for fb in fallbacks:
        try:
            value = fb()
            if value and value != "unknown":
                return str(value)
        except Exception:  # noqa: BLE001 - provenance is best effort
            pass
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                             timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return None


# ------------------------------------------------------------------------------------------------- CLI
def comma_list(text: str, allowed, ap, conv=str) -> list:
    """A comma-separated option as a list of conv(item); ap.error() for an item outside `allowed` (None: any)."""
    out = [conv(x) for x in text.split(",") if x]
    for x in out:
        if allowed is not None and x not in allowed:
            ap.error(f"unsupported value {x!r}; expected one of {', '.join(map(str, allowed))}")
    return out


# ---------------------------------------------------------------------------------------------- output
def _sanitize(obj):
    """JSON has no NaN/inf: write them as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_sanitize(v) for v in obj]
    return obj


def write_json(path: str | Path, obj) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_sanitize(obj), indent=1, allow_nan=False) + "\n")
    os.replace(tmp, path)
    return path


def fmt(x, spec: str = ".1f") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return format(x, spec) if isinstance(x, (int, float)) else str(x)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


class Progress:
    """tqdm when importable, else a printed counter. write() prints without breaking the bar."""

    def __init__(self, total: int, desc: str = ""):
        self.total, self.n, self.desc = total, 0, desc
        try:
            from tqdm import tqdm
            self._bar = tqdm(total=total, desc=desc, file=sys.stderr, dynamic_ncols=True)
        except ImportError:
            self._bar = None

    def update(self, label: str = "") -> None:
        self.n += 1
        if self._bar is not None:
            self._bar.set_postfix_str(label, refresh=False)
            self._bar.update(1)
        else:
            print(f"[{self.n}/{self.total}] {self.desc} {label}", file=sys.stderr, flush=True)

    def write(self, msg: str) -> None:
        if self._bar is not None:
            self._bar.write(msg, file=sys.stderr)
        else:
            print(msg, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> dict:
    """max_abs_err and rel_err = ||out - ref|| / ||ref|| in float32 (NaN anywhere in out -> NaN)."""
    diff = out.float() - ref.float()
    rel = (diff.norm() / ref.float().norm().clamp_min(1e-30)).item()
    return {"max_abs_err": diff.abs().max().item(), "rel_err": rel}
