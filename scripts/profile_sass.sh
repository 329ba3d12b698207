#!/usr/bin/env bash
# Per-instruction stall profile of one kernel launch (Nsight Compute's source page at SASS level; no -lineinfo
# build needed). Writes $OUT/sass_<name>.csv and prints the instructions with the most warp-stall samples.
# Usage: scripts/profile_sass.sh NAME KERNEL_REGEX [--skip N] -- COMMAND...
#   e.g. scripts/profile_sass.sh moe_gateup moe_gemm -- python3 -m bench.moe_stages --ncu --cases hy3:tp8_ep1:per_tensor:4096
# (the package must be installed: run after scripts/gpu_round.sh or profile_round.sh in the same call)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/profile_out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
NAME=$1 KRE=$2; shift 2
SKIP=0
if [ "${1:-}" = "--skip" ]; then SKIP=$2; shift 2; fi
[ "${1:-}" = "--" ] && shift
if [ ! -d bench/anchors ] && [ -d ../shared/anchors ]; then mkdir -p bench/anchors && cp ../shared/anchors/*.json bench/anchors/; fi
timeout "${PROFILE_TIMEOUT:-200}" ncu --clock-control none --profile-from-start off --kernel-name "regex:$KRE" \
  --launch-skip "$SKIP" --launch-count 1 --section SourceCounters --section WarpStateStats \
  --page source --print-source sass --csv "$@" > "$OUT/sass_$NAME.csv" 2> "/tmp/sass_$NAME.err"
echo "ncu exit $? ($(wc -l < "$OUT/sass_$NAME.csv") lines)"; tail -3 "/tmp/sass_$NAME.err"
$PY - "$OUT/sass_$NAME.csv" <<'PYEOF'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hdr = next((i for i, r in enumerate(rows) if any("Source" == c.strip() for c in r)), None)
if hdr is None:
    print("no source table found"); print("".join(",".join(r) + "\n" for r in rows[:20])); sys.exit(0)
cols = [c.strip() for c in rows[hdr]]
body = [r for r in rows[hdr + 1:] if len(r) == len(cols)]
def col(name):
    return next((i for i, c in enumerate(cols) if c.startswith(name)), None)
src, samp = col("Source"), col("Warp Stall Sampling (All")
addr, ex = col("# Address") if col("# Address") is not None else col("Address"), col("Instructions Executed")
num = lambda s: float(s.replace(",", "") or 0)
total = sum(num(r[samp]) for r in body) or 1
print(f"{len(body)} instructions, {int(total)} stall samples; columns: {cols}")
for r in sorted(body, key=lambda r: -num(r[samp]))[:40]:
    print(f"{100 * num(r[samp]) / total:5.1f}%  {r[addr] if addr is not None else ''}  {r[src].strip()[:90]}")
PYEOF
