"""FP8 KV in the decode plan / time model (session 18; a modelling aid, CPU only, nothing here runs in CI).

The BF16 model (plan_model.py, time_model.py) fitted to FP8: 16 KB tiles (K + V of 64 tokens in e4m3), no
long-pair cap (the planner applies it to BF16 only), the FP8 variants' 2 CTAs per SM. Fitted on the 9 FP8
dynamic-plan totals of `bench/results/h200/decode.json` (session 17 run 4): a scale on the latency constants
(per tile, chunk epilogue, merge), the bandwidth and an offset. The static-plan totals of the same run are
held out: the model predicts them from the fitted parameters, as a check. Then it predicts the alternatives:
fewer tiles per CTA (kMinTilesPerCta 2) and budgets equal in cost (a chunk worth k tiles, plan_model.cost_cut).

Run from this folder: python3 fp8.py
"""
import itertools
import json
import math
import os
from dataclasses import replace

import plan_model as pm
import time_model as tm

FP8_TILE_BYTES = 64 * 128 * 1 * 2
MAX_CTAS = 264  # 132 SMs x 2 (the smaller occupancy of fp8_r16 / fp8q_r16)
LAT = ["t_start", "t_pre", "t_epi", "t_hs", "t_round", "t_m_entry", "t_m_store_final", "t_m_store_arrive",
       "t_round_extra16"]


def measured(impl):
    path = os.path.join(pm._REPO, "bench", "results", "h200", "decode.json")
    d = json.load(open(path))
    return {r["scenario"]: r["us"] for r in d["rows"] if r["impl"] == impl and r["dtype"] == "fp8"}


def dynamic_plan(lens, min_tiles=pm.MIN_TILES, max_chunks=pm.MAX_CHUNKS_FP8):
    """The planner's dynamic plan for FP8 KV: C from the minimum tiles per CTA, the chunk rule, cap MAX_CTAS."""
    pre = pm.prefix_of(lens)
    P, T = len(pre) - 1, pre[-1]
    C = max(1, min(T // min_tiles, MAX_CTAS)) if T > 0 else 0
    while max_chunks > 0:
        if not any(pm.cta_chunks(pre, P, T, C, i) > max_chunks for i in range(C)):
            break
        nxt = min(2 * C, MAX_CTAS, T)
        if nxt <= C:
            break
        C = nxt
    starts = [pm.cta_begin(i, T, C) for i in range(C + 1)]
    return pm.Plan(f"dynamic min{min_tiles}", pre, starts)


def static_plan(lens):
    """The static split-KV plan: splits = ceil(CTAs / pairs) per pair (heuristics.h static_num_splits), each
    split ceil(longest / splits) tiles; empty splits are CTAs with no work."""
    pre = pm.prefix_of(lens)
    P = len(pre) - 1
    max_tiles = max(pre[p + 1] - pre[p] for p in range(P))
    s = max(1, min((MAX_CTAS + P - 1) // P, max_tiles, 64))
    ct = -(-max_tiles // s)
    starts = []
    for p in range(P):
        n = pre[p + 1] - pre[p]
        for j in range(s):
            starts.append(pre[p] + min(j * ct, n))
    starts.append(pre[-1])
    return pm.Plan("static", pre, starts)


def cost_plan(lens, k):
    """Budgets equal in cost (pair cost k + tiles), as many CTAs as the dynamic plan."""
    pre = pm.prefix_of(lens)
    C = dynamic_plan(lens).C
    starts, _ = pm.cost_cut(pre, C, k)
    return pm.Plan(f"cost k={k}", pre, starts)


def simulate(plan, prm):
    tm.TILE_BYTES = FP8_TILE_BYTES  # time_model reads it at each call
    return tm.simulate(plan, prm)


def fit(meas, plans, base=tm.Params()):
    """Grid over a scale of the latency constants other than the per-tile one, the per-tile latency (an FP8
    tile is instruction-bound, not half a BF16 tile's time: a lone CTA of the static plan streams one per
    ~0.7 us) and the bandwidth; the offset in closed form. Offsets outside 0-3 us are rejected (a launch's
    graph overhead)."""
    best = None
    grid = itertools.product([0.6 + 0.1 * i for i in range(6)], [0.45 + 0.05 * i for i in range(8)],
                             [x * 1e5 for x in range(34, 46, 2)])
    for s, t_tile, bw in grid:
        prm = replace(base, **{k: getattr(base, k) * s for k in LAT}, t_tile=t_tile, bw=bw, offset=0.0)
        raw = {n: simulate(plans[n], prm) for n in meas}
        off = sum(meas[n] - raw[n] for n in meas) / len(meas)
        if not 0.0 <= off <= 3.0:
            continue
        sse = sum((meas[n] - raw[n] - off) ** 2 for n in meas)
        if best is None or sse < best[0]:
            best = (sse, replace(prm, offset=off), s)
    sse, prm, s = best
    return prm, s, math.sqrt(sse / len(meas))


def main():
    sc = pm.scenarios()
    dyn, sta = measured("hopperkit"), measured("hopperkit_static")
    plans = {n: dynamic_plan(sc[n]) for n in dyn}
    prm, s, rms = fit(dyn, plans)
    print(f"fit on the 9 FP8 dynamic totals: latency scale {s:.2f}, t_tile {prm.t_tile:.2f} us, "
          f"bw {prm.bw / 1e6:.2f} TB/s, "
          f"offset {prm.offset:.2f} us, rms {rms:.2f} us")
    print(f"{'scenario':16s} {'dyn meas':>8s} {'model':>6s} | {'static meas':>11s} {'model':>6s} | "
          f"{'min2':>6s} {'cost3':>6s} {'cost6':>6s}   (model, us)")
    for n in dyn:
        lens = sc[n]
        row = [simulate(plans[n], prm), simulate(static_plan(lens), prm), simulate(dynamic_plan(lens, 2), prm),
               simulate(cost_plan(lens, 3), prm), simulate(cost_plan(lens, 6), prm)]
        print(f"{n:16s} {dyn[n]:8.2f} {row[0]:6.2f} | {sta.get(n, float('nan')):11.2f} {row[1]:6.2f} | "
              f"{row[2]:6.2f} {row[3]:6.2f} {row[4]:6.2f}")


if __name__ == "__main__":
    main()
