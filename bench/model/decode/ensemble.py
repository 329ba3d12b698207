"""Ensemble of time-model parameter sets, each calibrated (bw, offset) on the 9 measured BF16 totals; evaluates
every alternative plan with every member; reports median and range of predicted time and delta vs current."""
import itertools, json, math, statistics, sys
from dataclasses import replace, asdict
import plan_model as pm, time_model as tm, fit, alts
from calib import scaled

BW = [x * 1e5 for x in (39, 40, 41, 42, 43, 44)]
MEMBERS = []
for s, tr, te in itertools.product([0.8, 0.9, 1.0], [0.8, 1.05, 1.3], [1.1, 1.3, 1.5]):
    MEMBERS.append(("nj", replace(tm.Params(), t_round=tr, t_epi=te), s))
for s, tr in itertools.product([0.8, 0.9, 1.0], [0.8, 1.05, 1.3]):
    MEMBERS.append(("j", replace(tm.Params(), t_round=tr, t_epi=1.3, j_start=1.0, j_bw=0.05, seeds=4), s))

V = alts.variants()
V["a k=3 cost/4 + b"] = lambda l: pm.cost_plan(l, 3, "cost4", loads_per_round=16)
V["a k=4 cost/4 + b"] = lambda l: pm.cost_plan(l, 4, "cost4", loads_per_round=16)
PLANS = {vn: {n: f(alts.SC[n]) for n in alts.NAMES} for vn, f in V.items()}

out = []
for tag, base, s in MEMBERS:
    b = scaled(base, s)
    best = None
    for bw in BW:
        prm = replace(b, bw=bw, offset=0.0)
        raw = {n: tm.simulate(PLANS["current"][n], prm) for n in alts.NAMES}
        off = sum(fit.MEAS[n] - raw[n] for n in alts.NAMES) / 9
        sse = sum((fit.MEAS[n] - raw[n] - off) ** 2 for n in alts.NAMES)
        if best is None or sse < best[0]:
            best = (sse, replace(prm, offset=off), raw)
    sse, prm, raw = best
    rms = math.sqrt(sse / 9)
    res = {"tag": tag, "s": s, "params": asdict(prm), "rms": rms,
           "resid": {n: raw[n] + prm.offset - fit.MEAS[n] for n in alts.NAMES}, "pred": {}}
    for x16 in ([0.0, 0.25, 0.5]):
        p2 = replace(prm, t_round_extra16=x16 * s)
        for vn, plans in PLANS.items():
            if vn == "current" and x16 != 0.0:
                continue
            uses16 = any(pl.loads_per_round > 8 for pl in plans.values())
            if not uses16 and x16 != 0.0:
                continue
            key = vn if not uses16 else f"{vn} |x16={x16}"
            res["pred"][key] = {n: tm.simulate(plans[n], p2) for n in alts.NAMES}
    out.append(res)
    print(tag, s, base.t_round, base.t_epi, f"bw={prm.bw/1e6:.1f} off={prm.offset:.2f} rms={rms:.2f}", flush=True)
json.dump(out, open("ensemble.json", "w"), separators=(",", ":"))
