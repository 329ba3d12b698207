"""Medians and ratios of a cross-build A/B measured in rotated rounds (scripts/cross_ab.sh): every build's
benchmark ran once per round, the builds' order rotated from round to round, so that a slow or fast stretch of
the device does not fall on one build.

    python -m bench.ab_rounds TMP OUT.json ROUNDS BASE [NAME...]

TMP holds NAME_<round>.json (the benchmark's output, rounds 1..ROUNDS) and, when present, tests_NAME.log (its
last line is the build's test summary). Per point (rows keyed as bench/ab_report.py keys them, hopperkit rows
with a time), each build's median over the rounds that measured it; per build, its median / BASE's median at
every point measured with correct output in every round of both, their geomean, min and max. A point some round
lacks keeps the medians of the rounds that have it (its `rounds` count says how many) but leaves the geomean.
Prints the table; writes OUT.json with the builds' commits, points (medians, every round's time, ratios) and
summaries.
"""
from __future__ import annotations

import json
import os
import statistics
import sys

from bench.ab_report import ID, geomean, last_test_line, row_key


def load_rounds(tmp: str, name: str, rounds: int) -> tuple[list[dict], list]:
    """([{key: row}] per round that has a file (hopperkit rows with a time), the commits those files name)."""
    out, commits = [], []
    for i in range(1, rounds + 1):
        path = os.path.join(tmp, f"{name}_{i}.json")
        if not os.path.exists(path):
            continue
        data = json.load(open(path))
        commits.append(data.get("commit"))
        out.append({row_key(r): r for r in data.get("rows", [])
                    if r.get("us") and r.get("impl", "hopperkit") == "hopperkit"})
    return out, commits


def summarise(per_build: dict[str, list[dict]], base: str) -> dict:
    """{"points": [...], "summary": {name: {...}}} from each build's rounds. A build's ratio at a point counts in
    its geomean when the point was measured with correct output in every round of that build and of the baseline
    (the other builds do not matter)."""
    keys = sorted({k for runs in per_build.values() for r in runs for k in r}, key=str)
    points, ratios = [], {n: [] for n in per_build if n != base}
    for k in keys:
        p = {f: v for f, v in zip(ID, k) if v is not None}
        good = {}
        for n, runs in per_build.items():
            ts = [r[k]["us"] for r in runs if k in r]
            oks = [bool(r[k].get("ok", True)) for r in runs if k in r]
            p[n] = {"median_us": statistics.median(ts) if ts else None, "runs_us": ts, "rounds": len(ts),
                    "ok": all(oks) if oks else None}
            good[n] = len(ts) == len(runs) and bool(oks) and all(oks)
        b = p[base]["median_us"]
        for n in ratios:
            m = p[n]["median_us"]
            if b and m:
                p[n]["ratio"] = m / b
                if good[base] and good[n]:
                    ratios[n].append(m / b)
        p["ok"] = all(good.values())
        points.append(p)
    summary = {n: ({"geomean": geomean(r), "min": min(r), "max": max(r), "points": len(r)} if r else
                   {"geomean": None, "points": 0}) for n, r in ratios.items()}
    return {"points": points, "summary": summary}


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        print(__doc__)
        return 2
    tmp, out, rounds, names = argv[0], argv[1], int(argv[2]), argv[3:]
    base = names[0]
    loaded = {n: load_rounds(tmp, n, rounds) for n in names}
    res = summarise({n: v[0] for n, v in loaded.items()}, base)
    res.update({"baseline": base, "rounds": rounds, "commits": {n: sorted(set(map(str, v[1]))) for n, v in loaded.items()},
                "tests": {n: last_test_line(tmp, n) for n in names}})
    for p in res["points"]:
        text = " ".join(str(p[f]) for f in ID if f in p and f != "impl")
        cells = [f"{base} {p[base]['median_us']:9.2f}" if p[base]["median_us"] else f"{base}      n/a"]
        for n in names[1:]:
            r = p[n].get("ratio")
            cells.append(f"{n}/{base} {r:.3f}" if r else f"{n}/{base}   n/a")
        print(f"{text:44s} " + "  ".join(cells) + ("" if p["ok"] else "  WRONG OR MISSING somewhere"))
    for n, s in res["summary"].items():
        if s["points"]:
            print(f"== {n} / {base}: geomean {s['geomean']:.4f} (min {s['min']:.3f}, max {s['max']:.3f}) over "
                  f"{s['points']} points correct in every round")
        else:
            print(f"== {n} / {base}: no point correct in every round of both builds")
    json.dump(res, open(out, "w"), indent=1)
    print("wrote", out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
