"""Digest of a per-instruction stall profile (Nsight Compute's source page at SASS level, as CSV).

scripts/profile_sass.sh writes the CSV; this prints what the sessions' analyses kept needing:
  * the instructions with the most warp-stall samples (with --context N, the N instructions before each);
  * every mbarrier wait (SYNCS.PHASECHK...TRYWAIT) with its execution count and the samples of the first
    instruction that uses its predicate (the branch that loops on it, where a suspended wait's samples land;
    ptxas may schedule other instructions in between): which barrier the warps wait on, and how often it is
    reached (e.g. once per item and consumer warp, or once per stage);
  * per address range (--split ADDR, e.g. where the producer's code starts): share of the samples, warp
    instructions executed and the main stall reasons.
Usage: python -m bench.sass_digest FILE.csv [--top 30] [--context 0] [--split 0x7f..2950|+0x6150 ...] [--json OUT]
"""
from __future__ import annotations

import argparse
import csv
import json
import re
import sys


def _num(s: str) -> float:
    s = (s or "").replace(",", "").strip()
    try:
        return float(s)
    except ValueError:
        return 0.0


def load(path: str) -> tuple[list[str], list[list[str]]]:
    """The header and the instruction rows of the CSV's source table (ValueError if it has none)."""
    with open(path, errors="replace", newline="") as f:
        rows = list(csv.reader(f))
    hdr = next((i for i, r in enumerate(rows) if any(c.strip() == "Source" for c in r)), None)
    if hdr is None:
        raise ValueError(f"{path}: no source table (a header row with a 'Source' column)")
    cols = [c.strip() for c in rows[hdr]]
    body = [r for r in rows[hdr + 1:] if len(r) == len(cols)]
    return cols, body


def digest(cols: list[str], body: list[list[str]], splits: list[int] | None = None, top: int = 30) -> dict:
    def col(name: str) -> int:
        i = next((k for k, c in enumerate(cols) if c.startswith(name)), None)
        if i is None:
            raise ValueError(f"column {name!r} not in the CSV: {cols}")
        return i

    a_i = col("# Address") if any(c.startswith("# Address") for c in cols) else col("Address")  # ncu versions
    s_i, n_i, x_i = col("Source"), col("Warp Stall Sampling (All"), col("Instructions Executed")
    reasons = [(k, c) for k, c in enumerate(cols) if c.startswith("stall_") and "Not Issued" not in c]
    total = sum(_num(r[n_i]) for r in body) or 1.0

    def inst(k: int) -> dict:
        r = body[k]
        return {"index": k, "address": r[a_i].strip(), "pct": round(100 * _num(r[n_i]) / total, 2),
                "executed": int(_num(r[x_i])), "sass": r[s_i].strip()}

    out: dict = {"instructions": len(body), "samples": int(total)}
    order = sorted(range(len(body)), key=lambda k: -_num(body[k][n_i]))
    out["top"] = [inst(k) for k in order[:top]]
    waits = []
    for k, r in enumerate(body):
        m = re.search(r"TRYWAIT\s+(!?U?P\d+)", r[s_i])
        if not m:
            continue
        pred = m.group(1).lstrip("!")
        use = re.compile(r"(@!?%s\b)|(\b%s\b)" % (pred, pred))
        w = inst(k)
        w["use_pct"], w["use_sass"] = 0.0, ""
        for j in range(k + 1, min(k + 40, len(body))):  # the first later instruction that reads the predicate
            if use.search(body[j][s_i]):
                w["use_pct"], w["use_sass"] = inst(j)["pct"], body[j][s_i].strip()
                break
        waits.append(w)
    out["barrier_waits"] = sorted(waits, key=lambda w: -(w["pct"] + w["use_pct"]))

    def addr(r: list[str]) -> int:
        try:
            return int(r[a_i].strip(), 16)
        except ValueError:
            return -1

    bounds = sorted(splits or [])
    edges = [-1] + bounds + [1 << 64]
    regions = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        sel = [r for r in body if lo <= addr(r) < hi]
        if not sel:
            continue
        st = {c.replace("stall_", ""): sum(_num(r[k]) for r in sel) for k, c in reasons}
        st_total = sum(st.values()) or 1.0
        regions.append({
            "from": hex(lo) if lo >= 0 else "start", "to": hex(hi) if hi < (1 << 64) else "end",
            "pct": round(100 * sum(_num(r[n_i]) for r in sel) / total, 1),
            "warp_instructions": int(sum(_num(r[x_i]) for r in sel)),
            "stall_reasons_pct": {k: round(100 * v / st_total, 1)
                                  for k, v in sorted(st.items(), key=lambda kv: -kv[1])[:6] if v > 0},
        })
    out["regions"] = regions
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--context", type=int, default=0, help="instructions shown before each top one")
    ap.add_argument("--split", action="append", default=[],
                    help="where a region starts: an address as printed (hex), or +OFFSET (hex) from the kernel's "
                         "first instruction (stable for one build, where addresses are not)")
    ap.add_argument("--json", default=None, help="write the digest here too")
    args = ap.parse_args(argv)
    try:
        cols, body = load(args.csv)
        a_col = next(k for k, c in enumerate(cols) if c in ("# Address", "Address"))
        first = int(body[0][a_col].strip(), 16) if body else 0
        splits = [first + int(s[1:], 16) if s.startswith("+") else int(s, 16) for s in args.split]
        d = digest(cols, body, splits, args.top)
    except (OSError, ValueError) as e:
        print(f"sass_digest: {e}", file=sys.stderr)
        return 1
    print(f"{d['instructions']} instructions, {d['samples']} stall samples")
    for t in d["top"]:
        for k in range(max(0, t["index"] - args.context), t["index"]):
            print(f"        {body[k][cols.index('Source')].strip()[:96]}")
        print(f"{t['pct']:5.1f}%  x{t['executed']:<8} {t['address'][-6:]}  {t['sass'][:96]}")
    print("barrier waits (samples on the wait | on the first use of its predicate, executions):")
    for w in d["barrier_waits"]:
        print(f"  {w['pct']:5.1f}% | {w['use_pct']:5.1f}%  x{w['executed']:<8} {w['address'][-6:]}  {w['sass'][:60]}")
    if len(d["regions"]) > 1:
        for g in d["regions"]:
            print(f"region {g['from']}..{g['to']}: {g['pct']}% of samples, {g['warp_instructions']} warp "
                  f"instructions, stalls {g['stall_reasons_pct']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(d, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
