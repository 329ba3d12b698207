"""Held-out check: the model's predicted deltas for A/Bs measured in sessions 13-14 (not used in calibration)."""
import json, statistics
import plan_model as pm, time_model as tm, alts
E = json.load(open("ensemble.json"))
acc = [m for m in E if m["rms"] <= 0.75 and 0.0 <= m["params"]["offset"] <= 2.0]
ext, u512 = alts.SC["skewed_extreme"], alts.SC["uniform_512"]
cases = [
    ("ext: chunk rule off (67 CTAs) vs limit 3", ext, dict(max_chunks=0), dict(), "+2.14 (16.32 vs 14.18, s14 run 2)"),
    ("ext: limit 2 (264 CTAs) vs limit 3", ext, dict(max_chunks=2), dict(), "+2.1 (limit 3 = 0.870x of limit 2)"),
    ("ext: min tiles 8, no rule vs min 4, no rule", ext, dict(min_tiles=8, max_chunks=0), dict(max_chunks=0), "x1.62-1.68 (s13, pre-merge fix)"),
    ("u512: min tiles 8 vs 4", u512, dict(min_tiles=8), dict(), "+0.22 (12.94 vs 12.72, trace build) / x0.89-0.94 pre-merge-fix"),
]
for label, lens, kw_a, kw_b, meas in cases:
    pa, pb = pm.current_plan(lens, **kw_a), pm.current_plan(lens, **kw_b)
    d, r = [], []
    for m in acc:
        prm = tm.Params(**m["params"])
        ta, tb = tm.simulate(pa, prm), tm.simulate(pb, prm)
        d.append(ta - tb); r.append(ta / tb)
    print(f"{label:45s} C {pa.C} vs {pb.C}: model {statistics.median(d):+.2f} [{min(d):+.2f},{max(d):+.2f}] us, "
          f"x{statistics.median(r):.2f}   measured {meas}")
