"""Per-point time ratios of A/B benchmark runs against the first (baseline) run, for scripts/ab_round.sh (runs of
one build under runtime switches) and scripts/variant_ab.sh (runs of different builds).

    python -m bench.ab_report TMP OUT.json BENCH RUN [RUN...]

RUN is NAME or NAME|LABEL (e.g. the switch's ENV=VALUE); TMP holds NAME.json (the benchmark's output) and,
when present, tests_NAME.log or tests_NAME.txt (whose last line is the run's test summary). Prints, per run, the
geomean of run / baseline time over the points with correct output on both sides and each point's ratio; where
rows carry `same_bytes_copy_us` (prologue_bench), also the ratio of those, a device-speed control that should
stay near 1.000 within one call. Writes OUT.json: every run's rows, label, test summary and commit.
"""
from __future__ import annotations

import json
import math
import os
import sys

ID = ("scenario", "case", "model", "mode", "scaling", "bs", "tokens", "dtype", "cache_layout", "spec", "impl")


def row_key(row: dict) -> tuple:
    """A benchmark row's point: its ID fields (None where the benchmark has no such field)."""
    return tuple(row.get(k) for k in ID)


def load(tmp: str, name: str):
    path = os.path.join(tmp, name + ".json")
    if not os.path.exists(path):
        return None, {}
    data = json.load(open(path))
    return data, {row_key(r): r for r in data.get("rows", []) if r.get("us")}


def geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def last_test_line(tmp: str, name: str) -> str | None:
    for ext in ("log", "txt"):
        path = os.path.join(tmp, f"tests_{name}.{ext}")
        if os.path.exists(path):
            lines = open(path).read().strip().splitlines()
            return lines[-1] if lines else None
    return None


def compare(base: dict, rows: dict) -> tuple[list, int, float, float | None, str]:
    """(common keys, how many are correct on both sides, time geomean over those, copy-control geomean or None,
    control range text)"""
    keys = sorted((k for k in rows if k in base), key=str)
    good = [k for k in keys if rows[k].get("ok", True) and base[k].get("ok", True)]
    g = geomean(rows[k]["us"] / base[k]["us"] for k in good)
    ctl = [rows[k]["same_bytes_copy_us"] / base[k]["same_bytes_copy_us"] for k in keys
           if rows[k].get("same_bytes_copy_us") and base[k].get("same_bytes_copy_us")]
    return keys, len(good), g, (geomean(ctl) if ctl else None), (f"{min(ctl):.3f}-{max(ctl):.3f}" if ctl else "")


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        print(__doc__)
        return 2
    tmp, out, bench, runs = argv[0], argv[1], argv[2], argv[3:]
    specs = [(r.split("|", 1) + [""])[:2] for r in runs]
    result = {"bench": bench, "baseline": specs[0][0], "runs": {}}
    _, base = load(tmp, specs[0][0])
    if not base:
        print("no baseline rows (its build, tests or benchmark failed): no ratios")
    for i, (name, label) in enumerate(specs):
        data, rows = load(tmp, name)
        result["runs"][name] = {"label": label, "tests": last_test_line(tmp, name),
                                "commit": (data or {}).get("commit"), "rows": list(rows.values())}
        if i == 0 or not rows or not base:
            continue
        keys, n_good, g, ctl, ctl_range = compare(base, rows)
        if not keys:
            continue
        extra = f"; same-bytes copy control {ctl:.3f} ({ctl_range})" if ctl is not None else ""
        print(f"== {name}{f' ({label})' if label else ''}: {len(keys)} points, run / baseline time, geomean "
              f"{g:.3f} over the {n_good} with correct output on both sides{extra}")
        for k in keys:
            text = " ".join(str(v) for v, f in zip(k, ID) if v is not None and f != "impl")
            wrong = "" if rows[k].get("ok", True) else "  WRONG OUTPUT"
            print(f"   {text:40s} {k[-1]:16s} {base[k]['us']:9.2f} -> {rows[k]['us']:9.2f} us "
                  f"({rows[k]['us'] / base[k]['us']:.3f}){wrong}")
    json.dump(result, open(out, "w"), indent=1)
    print("wrote", out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
