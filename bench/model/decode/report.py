import json, statistics, sys
import fit, alts
E = json.load(open("ensemble.json"))
acc = [m for m in E if m["rms"] <= 0.75 and 0.0 <= m["params"]["offset"] <= 2.0]
print(f"members {len(E)}, accepted {len(acc)} (rms<=0.75, 0<=offset<=2)")
# fit quality
best = min(acc, key=lambda m: m["rms"])
print("best member", best["tag"], best["s"], {k: round(v, 3) for k, v in best["params"].items() if k in
      ("t_round", "t_epi", "bw", "offset", "t_tile", "t_start")}, "rms", round(best["rms"], 2))
print("residual (model - measured), median over accepted [min, max]:")
for n in alts.NAMES:
    r = [m["resid"][n] for m in acc]
    print(f"   {n:16s} {fit.MEAS[n]:6.2f}  {statistics.median(r):+5.2f} [{min(r):+5.2f}, {max(r):+5.2f}]   best {best['resid'][n]:+5.2f}")
print("rms range", round(min(m['rms'] for m in acc), 2), round(max(m['rms'] for m in acc), 2))
keys = [k for k in acc[0]["pred"] if k != "current"]
print()
short = {"uniform_512": "u512", "uniform_4096": "u4k", "skewed_mix": "mix", "skewed_extreme": "ext",
         "one_64k_7x4k": "64k7", "one_64k_15x4k": "64k15", "one_64k_31x4k": "64k31", "one_128k_31x4k": "128k",
         "two_32k_30x4k": "2x32k"}
print(f"{'variant':32s}" + "".join(f"{short[n]:>17s}" for n in alts.NAMES) + "   geomean")
cur = {n: statistics.median([m["pred"]["current"][n] for m in acc]) for n in alts.NAMES}
print(f"{'current (model median)':32s}" + "".join(f"{cur[n]:17.2f}" for n in alts.NAMES))
for k in keys:
    cells = []
    gms = []
    for m in acc:
        import math
        gms.append(math.exp(sum(math.log(m["pred"][k][n] / m["pred"]["current"][n]) for n in alts.NAMES) / 9))
    for n in alts.NAMES:
        d = [m["pred"][k][n] - m["pred"]["current"][n] for m in acc]
        cells.append(f"{statistics.median(d):+5.2f}[{min(d):+5.2f},{max(d):+5.2f}]")
    print(f"{k:32s}" + "".join(f"{c:>17s}" for c in cells) + f"   {statistics.median(gms):.3f}[{min(gms):.3f},{max(gms):.3f}]")
