import json, statistics, math
import fit, alts
E = json.load(open("ensemble.json"))
acc = [m for m in E if m["rms"] <= 0.75 and 0.0 <= m["params"]["offset"] <= 2.0]
cols = [("a k3 now", ["a k=3 C=now"]), ("a k4 c/4", ["a k=4 C=cost/4"]), ("a k2 c/4", ["a k=2 C=cost/4"]),
        ("b", ["b final 1 round |x16=0.0", "b final 1 round |x16=0.25", "b final 1 round |x16=0.5"]),
        ("c G16", ["c G=16 (16/round) |x16=0.0", "c G=16 (16/round) |x16=0.25", "c G=16 (16/round) |x16=0.5"]),
        ("c 1lvl", ["c one level, 16/round |x16=0.0", "c one level, 16/round |x16=0.25", "c one level, 16/round |x16=0.5"]),
        ("d6", ["d min6 long"]), ("d8", ["d min8 long"])]
short = dict(zip(alts.NAMES, ["u512", "u4k", "mix", "ext", "64k7", "64k15", "64k31", "128k", "2x32k"]))
print("| scen | meas | model | " + " | ".join(c for c, _ in cols) + " |")
for n in alts.NAMES + ["geomean"]:
    row = []
    if n != "geomean":
        cur = statistics.median(m["pred"]["current"][n] for m in acc)
        head = f"| {short[n]} | {fit.MEAS[n]:.2f} | {cur:.1f} |"
    else:
        head = "| geomean | | |"
    for c, keys in cols:
        vals = []
        for m in acc:
            for k in keys:
                if n == "geomean":
                    vals.append(math.exp(sum(math.log(m["pred"][k][x] / m["pred"]["current"][x]) for x in alts.NAMES) / 9))
                else:
                    vals.append(m["pred"][k][n] - m["pred"]["current"][n])
        med = statistics.median(vals)
        if n == "geomean":
            row.append(f"{med:.3f}")
        elif max(abs(v) for v in vals) < 0.005:
            row.append("0")
        else:
            row.append(f"{med:+.1f} ({min(vals):+.1f}..{max(vals):+.1f})")
    print(head + " | ".join(row) + " |")
