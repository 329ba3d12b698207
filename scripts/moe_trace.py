"""Per-CTA timeline of the fused MoE's two grouped GEMMs (profiling builds only).

Needs hopperkit built with the CMake option HOPPERKIT_MOE_TRACE=ON
(`pip install --no-build-isolation --no-deps . -C cmake.define.HOPPERKIT_MOE_TRACE=ON`): every CTA of the gate-up
and down GEMMs then records %globaltimer at the events of src/moe/trace.h. For each case (the MoE benchmark's
shapes and routing, as bench/moe_stages.py builds them) this script times the op in a CUDA graph, then reads the
trace of the graph's last call and of one eager call, and prints, per GEMM, when its CTAs reach each event (µs
from the gate-up's first CTA entry; min / median / max over the CTAs that ran items), the items per CTA, each
item round's start, K-loop end and store, and how many CTAs of each GEMM are busy over time.
(The trace build perturbs the 128-row prefill kernels, which spill under it; the decode tiles do not.)

Usage: python scripts/moe_trace.py [--cases qwen3-235b:tp8_ep1:per_tensor:256,hy3:tp8_ep1:per_tensor:256]
                                   [--json F]
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
from bench import common  # noqa: E402
from bench.moe_stages import op_calls  # noqa: E402

SLOTS, MAX_CTAS, ITEMS = 56, 1024, 6  # src/moe/trace.h
ENTRY, WAITED, CONSUMERS_DONE, SM, NITEMS, PRODUCER_DONE = 0, 1, 2, 3, 4, 5
ITEM_ISSUED, ITEM_START, ITEM_KDONE, ITEM_STORED = 8, 14, 20, 26
ITEM_ARRIVED, ITEM_MERGED, ITEM_ACT_DONE = 32, 38, 44  # the epilogue's steps (split pieces, the hand-off)
GEMMS = ("gate_up", "down")
# kernel 1's row (src/moe/trace.h, kMoeTracePrepRow; read with which = 2): the one-CTA index build and the
# quantisation CTAs (the last of them to start / to issue its stores, and the first quantisation CTA's entry); the
# index CTA also stamps the end of its count and of its offsets / tile list (src/moe/trace.h, MoePrepTraceEvent)
PREP_EVENTS = (("index_entry", 0), ("index_counted", 5), ("index_scanned", 6), ("index_done", 1),
               ("quant_first_entry", 4), ("quant_last_entry", 2), ("quant_last_done", 3))


def read_trace(lib, which):
    buf = (ctypes.c_ulonglong * (SLOTS * MAX_CTAS))()
    n = lib.hopperkit_moe_trace_read(buf, which, MAX_CTAS)
    if n < 0:
        raise RuntimeError("hopperkit_moe_trace_read failed (no traced call yet?)")
    return [[int(buf[i * SLOTS + j]) for j in range(SLOTS)] for i in range(n)]


def stats(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return (round(min(xs), 2), round(statistics.median(xs), 2), round(max(xs), 2), len(xs))


def span(rows, a, b, alt_from=None):
    """stats of (row[b] - row[a]) µs over the rows with both events (row[alt_from] where row[a] is missing)"""
    out = []
    for r in rows:
        start = r[a] or (r[alt_from] if alt_from is not None else 0)
        if start and r[b]:
            out.append((r[b] - start) / 1000.0)
    return stats(out)


def analyse(traces):
    """traces: {gemm: rows}. Times in µs from the first gate-up CTA's entry."""
    rows_all = [r for rows in traces.values() for r in rows if r[ENTRY]]
    if not rows_all:
        return {}
    first = [r[ENTRY] for r in traces.get("gate_up", []) if r[ENTRY]] or [r[ENTRY] for r in rows_all]
    t0 = min(first)
    us = lambda v: (v - t0) / 1000.0 if v else None  # noqa: E731
    out = {}
    for g, rows in traces.items():
        busy = [r for r in rows if r[NITEMS] > 0]
        rep = {"ctas": len(rows), "ctas_with_items": len(busy),
               "items_per_cta": dict(sorted(
                   (k, sum(1 for r in busy if r[NITEMS] == k)) for k in {r[NITEMS] for r in busy})),
               "sms": len({r[SM] for r in busy})}
        for name, s in (("entry", ENTRY), ("waited", WAITED), ("producer_done", PRODUCER_DONE),
                        ("consumers_done", CONSUMERS_DONE)):
            rep[name] = stats([us(r[s]) for r in busy])
        rounds = []
        for u in range(ITEMS):
            rr = [r for r in busy if r[NITEMS] > u]
            if not rr:
                break
            rounds.append({
                "item": u, "ctas": len(rr),
                "issued": stats([us(r[ITEM_ISSUED + u]) for r in rr]),
                "start": stats([us(r[ITEM_START + u]) for r in rr]),
                "k_done": stats([us(r[ITEM_KDONE + u]) for r in rr]),
                "stored": stats([us(r[ITEM_STORED + u]) for r in rr]),
                "k_loop_us": stats([(r[ITEM_KDONE + u] - r[ITEM_START + u]) / 1000.0 for r in rr
                                    if r[ITEM_KDONE + u] and r[ITEM_START + u]]),
                "epilogue_us": stats([(r[ITEM_STORED + u] - r[ITEM_KDONE + u]) / 1000.0 for r in rr
                                      if r[ITEM_STORED + u] and r[ITEM_KDONE + u]]),
                # the epilogue's steps: a split piece's park and arrival, the last piece's merge, the act stores,
                # the tile_ready release (each over the CTAs that recorded both ends)
                "park_us": span(rr, ITEM_KDONE + u, ITEM_ARRIVED + u),
                "merge_us": span(rr, ITEM_ARRIVED + u, ITEM_MERGED + u),
                "act_us": span(rr, ITEM_MERGED + u, ITEM_ACT_DONE + u, alt_from=ITEM_KDONE + u),
                "release_us": span(rr, ITEM_ACT_DONE + u, ITEM_STORED + u),
                "merged_pieces": sum(1 for r in rr if r[ITEM_MERGED + u]),
                "parked_pieces": sum(1 for r in rr if r[ITEM_ARRIVED + u] and not r[ITEM_MERGED + u]),
            })
        rep["rounds"] = rounds
        # CTAs of this GEMM busy (from waited to consumers done) in 2 µs bins
        spans = [(us(r[WAITED]), us(r[CONSUMERS_DONE])) for r in busy if r[WAITED] and r[CONSUMERS_DONE]]
        if spans:
            end = max(b for _, b in spans)
            rep["busy_per_2us"] = [sum(1 for a, b in spans if a < (k + 1) * 2 and b > k * 2)
                                   for k in range(int(end // 2) + 1)]
        out[g] = rep
    return out


# a kernel 1 event this long before the gate-up's first entry is an earlier call's (src/moe/trace.h); a stamp left by
# the call just before (~100 µs earlier in a graph) would pass, which cannot happen with one configuration per case
STALE_US = 1000.0


def analyse_prep(prep_row, traces):
    """kernel 1's events in µs from the first gate-up CTA's entry (negative: before it); None where not recorded
    by this call (never written, or left by an earlier call: a bound prep kernel or an FP8 input records none)"""
    first = [r[ENTRY] for r in traces.get("gate_up", []) if r[ENTRY]]
    if not first or not prep_row:
        return {}
    t0 = min(first)
    us = {name: (prep_row[s] - t0) / 1000.0 if prep_row[s] else None for name, s in PREP_EVENTS}
    return {name: (round(v, 2) if v is not None and v > -STALE_US else None) for name, v in us.items()}


def report(title, res):
    print(f"  -- {title}")
    if res.get("prep"):
        print(f"   prep (µs from the gate-up's first entry): {res['prep']}")
    for g, rep in res.items():
        if g == "prep":
            continue
        print(f"   {g}: {rep['ctas_with_items']} of {rep['ctas']} CTAs ran items on {rep['sms']} SMs; items per "
              f"CTA {rep['items_per_cta']}")
        for k in ("entry", "waited", "producer_done", "consumers_done"):
            print(f"     {k:15s} min / median / max µs (n): {rep[k]}")
        for rd in rep["rounds"]:
            print(f"     item {rd['item']} ({rd['ctas']} CTAs): issued {rd['issued']} start {rd['start']} "
                  f"k_done {rd['k_done']} stored {rd['stored']}; K loop {rd['k_loop_us']} epilogue "
                  f"{rd['epilogue_us']}")
            print(f"       epilogue steps (µs): park + arrival {rd['park_us']} merge {rd['merge_us']} act "
                  f"{rd['act_us']} release {rd['release_us']}; pieces merged {rd['merged_pieces']}, parked "
                  f"{rd['parked_pieces']}")
        if "busy_per_2us" in rep:
            print(f"     busy CTAs per 2 µs: {rep['busy_per_2us']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="qwen3-235b:tp8_ep1:per_tensor:256,hy3:tp8_ep1:per_tensor:256")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    import hopperkit
    lib = ctypes.CDLL(hopperkit._C.__file__)
    if not hasattr(lib, "hopperkit_moe_trace_read"):
        raise SystemExit("this hopperkit build has no MoE trace (build with HOPPERKIT_MOE_TRACE=ON)")
    lib.hopperkit_moe_trace_read.restype = ctypes.c_int
    results = []
    for case in args.cases.split(","):
        model, mode, scaling, bs = case.split(":")
        fns = op_calls(model, mode, scaling, int(bs))
        for f in fns:
            f()
        torch.cuda.synchronize()
        t = common.time_graph(fns, replays=30)
        print(f"== {case}: {t:.2f} us per call in the graph")
        res = {"case": case, "graph_us": t}
        for tag, title in (("graph_last", "graph's last call"), ("eager", "eager call")):
            if tag == "eager":
                fns[0]()
            raw = {g: read_trace(lib, i) for i, g in enumerate(GEMMS)}
            prep = read_trace(lib, 2)
            res[tag] = analyse(raw)
            res[tag]["prep"] = analyse_prep(prep[0] if prep else None, raw)
            report(title, res[tag])
            res[tag + "_raw"] = raw
            res[tag + "_prep_raw"] = prep
        results.append(res)
        del fns
        common.free_cuda()
    if args.json:
        Path(args.json).write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
