"""Per-CTA timeline of the decode attention kernel (profiling builds only).

Needs hopperkit built with the CMake option HOPPERKIT_DECODE_TRACE=ON
(`pip install . -C cmake.define.HOPPERKIT_DECODE_TRACE=ON`): every attention CTA then records the SM cycle counter
at the events of src/decode/trace.h. For each scenario of the decode benchmark this script times hopperkit in a
CUDA graph (as bench/decode_bench.py does), then reads the trace of the graph's last launch and of one eager
launch, and prints when the CTAs reach each event (µs from the launch's first CTA entry; min / median / max over
the CTAs that had work) and the timeline of the CTA that finished last.

Usage: python scripts/decode_trace.py [--scenarios uniform_512,skewed_extreme] [--dtypes bf16,fp8] [--json F]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import common, decode_bench  # noqa: E402

SLOTS = 56
CHUNK_EVENTS = [("meta", 36), ("tma", 32), ("q", 16), ("kv", 20), ("tiles", 24), ("epibar", 40), ("epi", 28)]
EVENTS = ["entry", "depwait", "first_meta", "first_tma", "last_tma", "first_q", "first_kv", "last_tile",
          "epilogue", "merge_start", "exit"]
MERGE_EVENTS = ["merge_in0", "merge_loaded0", "merge_out0", "next0", "merge_in1", "merge_loaded1", "merge_out1"]
REPORTED = EVENTS + ["handshake"] + MERGE_EVENTS  # in report order
SLOT = {"entry": 1, "depwait": 2, "first_meta": 3, "first_tma": 4, "last_tma": 5, "first_q": 6, "first_kv": 7,
        "last_tile": 8, "epilogue": 9, "merge_start": 10, "exit": 11, "handshake": 15,
        # inside merge_slots: the CTA's first merge (0) and its last later one (1); after a group merge, the
        # arrival on the pair's group counter (next0)
        "merge_in0": 48, "merge_loaded0": 50, "merge_out0": 52, "next0": 54,
        "merge_in1": 49, "merge_loaded1": 51, "merge_out1": 53}


def read_trace(lib, max_ctas=2048):
    buf = (ctypes.c_ulonglong * (SLOTS * max_ctas))()
    n = lib.hopperkit_decode_trace_read(buf, max_ctas)
    if n < 0:
        raise RuntimeError("hopperkit_decode_trace_read failed (no traced launch yet?)")
    return [[int(buf[i * SLOTS + j]) for j in range(SLOTS)] for i in range(n)]


def analyse(rows):
    """Event times in µs from the first CTA's entry, per CTA with work; the SM clock from the two global timer
    stamps (entry, exit) of every CTA that ran to its exit."""
    done = [r for r in rows if r[11] > r[1] and r[12] > r[0]]
    ghz = sum(r[11] - r[1] for r in done) / max(1, sum(r[12] - r[0] for r in done))
    t0 = min(r[0] for r in rows)
    out = []
    for i, r in enumerate(rows):
        if r[3] == 0:   # no chunk
            continue
        ev = {}
        for name, s in SLOT.items():
            if r[s] != 0:
                ev[name] = (r[0] - t0) / 1e3 + (r[s] - r[1]) / ghz / 1e3
        ev["cta"], ev["sm"] = i, r[14]
        ev["warp_tiles_chunk1"] = [(r[0] - t0) / 1e3 + (r[44 + w] - r[1]) / ghz / 1e3 for w in range(4) if r[44 + w]]
        ev["per_chunk"] = [{name: (r[0] - t0) / 1e3 + (r[s + c] - r[1]) / ghz / 1e3 for name, s in CHUNK_EVENTS
                            if r[s + c] != 0} for c in range(4)]
        ev["chunks"], ev["merges"], ev["handshakes"] = r[13] & 0xFFFF, (r[13] >> 16) & 0xFFFF, r[13] >> 32
        out.append(ev)
    idle_exit = [(r[12] - t0) / 1e3 for r in rows if r[3] == 0 and r[12] > 0]
    return ghz, out, idle_exit


def report(title, rows):
    ghz, ctas, idle_exit = analyse(rows)
    print(f"-- {title}: {len(rows)} CTAs launched, {len(ctas)} with work; SM clock {ghz:.2f} GHz (from the trace)")
    if not ctas:
        return {}
    print(f"   {'event':12s} {'min':>7s} {'median':>7s} {'max':>7s}   (µs from the first CTA entry)")
    summary = {}
    for name in REPORTED:
        vals = [c[name] for c in ctas if name in c]
        if not vals:
            continue
        summary[name] = (min(vals), statistics.median(vals), max(vals))
        print(f"   {name:12s} {min(vals):7.2f} {statistics.median(vals):7.2f} {max(vals):7.2f}   ({len(vals)} CTAs)")
    if idle_exit:
        print(f"   idle CTAs exit: {min(idle_exit):.2f} .. {max(idle_exit):.2f}")
    last = max(ctas, key=lambda c: c.get("exit", 0))
    line = ", ".join(f"{k} {last[k]:.2f}" for k in REPORTED if k in last)
    print(f"   last CTA {last['cta']} (sm {last['sm']}, {last['chunks']} chunks, {last['merges']} merges): {line}")
    busiest = max(ctas, key=lambda c: (c["chunks"], c.get("exit", 0)))
    for who, c in (("last", last), ("most chunks", busiest)):
        if c["chunks"] > 1:
            print(f"   {who} CTA {c['cta']}, first chunks: " + " | ".join(
                " ".join(f"{k} {v:.2f}" for k, v in pc.items()) for pc in c["per_chunk"] if pc))
            print(f"   {who} CTA {c['cta']}, chunk 1's last tile by warp: "
                  + " ".join(f"{v:.2f}" for v in c["warp_tiles_chunk1"]))
    tot = {k: sum(c[k] for c in ctas) for k in ("chunks", "merges", "handshakes")}
    print(f"   totals: {tot}")
    return {"ghz": ghz, "summary": summary, "last": last, "totals": tot}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenarios", default="uniform_512,skewed_extreme,skewed_mix,uniform_4096,one_128k_31x4k")
    ap.add_argument("--dtypes", default="bf16,fp8")
    ap.add_argument("--json", default=None)
    ap.add_argument("--tag", default="")
    args = ap.parse_args(argv)
    import hopperkit
    lib = ctypes.CDLL(hopperkit._C.__file__)
    if not hasattr(lib, "hopperkit_decode_trace_read"):
        raise SystemExit("this hopperkit build has no decode trace (build with HOPPERKIT_DECODE_TRACE=ON)")
    lib.hopperkit_decode_trace_read.restype = ctypes.c_int
    scns = decode_bench.load_scenarios(decode_bench.find_scenarios(None), False)
    results = []
    for name in args.scenarios.split(","):
        for dt in args.dtypes.split(","):
            cfg = scns[name]
            nbytes = decode_bench.kv_bytes(cfg["lens"], cfg["num_kv_heads"], cfg["head_dim"], dt)
            case = decode_bench.build_case(name, cfg, dt, common.rotation_count(nbytes), "cuda")
            fns, _ = decode_bench.build_hopperkit(case, "dynamic")
            fns[0]()
            torch.cuda.synchronize()
            us = common.time_graph(fns, 30, 5)
            print(f"== {name} {dt} {args.tag}: {us:.2f} us per call in the graph")
            res = {"scenario": name, "dtype": dt, "tag": args.tag, "graph_us": us}
            raw = read_trace(lib)
            res["graph_last"] = report("graph's last launch", raw)
            res["graph_raw"] = raw
            torch.cuda.synchronize()
            fns[len(fns) // 2]()
            raw = read_trace(lib)
            res["eager"] = report("eager launch", raw)
            res["eager_raw"] = raw
            results.append(res)
            del fns, case
            common.free_cuda()
    if args.json:
        Path(args.json).write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
