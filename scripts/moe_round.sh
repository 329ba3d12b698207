#!/usr/bin/env bash
# One MoE device round in one call: scripts/gpu_round.sh (build, the whole GPU suite, the full MoE sweep if
# every test passed), then, on the same build and machine, hopperkit-only sweeps under profiling switches
# (A/B against the full sweep's hopperkit rows) and a stage split (bench/moe_stages.py).
#
# Usage: scripts/moe_round.sh [--ab NAME ENV=VALUE BS_LIST]... [--stages CASES] [--no-sweep]
#   --ab nopairs HOPPERKIT_MOE_NO_PAIRS=1 512,1024,4096   -> $OUT/ab_nopairs.json
#   --stages hy3:tp8_ep1:per_tensor:4096,deepseek-v3:tp8_ep1:per_tensor:16384   -> $OUT/stages.log
#   --no-sweep: the suite only from gpu_round.sh (no full sweep), then the A/B sweeps
# $OUT gets tests.log, bench.log, moe.json, moe.png (from gpu_round.sh), ab_<NAME>.json per --ab, stages.log:
# keep the --ab count at 3 or fewer (the device returns at most 8 files). Needs `carry: [".peers"]` for the
# FlashInfer rows of the full sweep. Prints each A/B sweep's geomean time ratio against the full sweep.
# ROUND_BENCHES=moe,prologue adds gpu_round.sh's other full benchmarks to the sweep (default: moe).
# Time: build ~20 s, suite ~35-45 s, full sweep ~110-140 s, each A/B sweep <= AB_SECONDS (90), the stage split
# <= STAGES_SECONDS (120): keep the total under the device's 600 s per command.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/moe_round_out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
source scripts/provenance.sh  # the commit the results name (HOPPERKIT_GIT_HASH)
AB=()
STAGES=""
SWEEP="--bench-if-green --full-bench"
while [ $# -gt 0 ]; do
  case "$1" in
    --ab) [ $# -ge 4 ] || { echo "--ab needs NAME ENV=VALUE BS_LIST"; exit 2; }; AB+=("$2|$3|$4"); shift 3 ;;
    --stages) STAGES="$2"; shift ;;
    --no-sweep) SWEEP="--no-bench" ;;
    *) echo "unknown argument: $1"; exit 2 ;;
  esac
  shift
done

rm -f "$OUT/tests.log" "$OUT/moe.json"  # a reused OUT must not read as this round's
TEST_TIMEOUT=${TEST_TIMEOUT:-240} OUT="$OUT" bash scripts/gpu_round.sh $SWEEP --benches "${ROUND_BENCHES:-moe}" 2>&1 \
  | grep -v "it/s" | grep -E "passed|failed|FAILED|Error|error|moe_bench|prologue_bench|gpu_round" | tail -20
if ! grep -qE "^[0-9]+ passed" "$OUT/tests.log" 2>/dev/null || grep -qE "[0-9]+ (failed|errors?)" "$OUT/tests.log"; then
  echo "moe_round: tests not green, no A/B sweeps"; exit 1
fi
if [ -f scripts/peers_env.sh ] && [ -d .peers ]; then source scripts/peers_env.sh; fi

for spec in "${AB[@]}"; do
  IFS='|' read -r name env bs <<< "$spec"
  echo "== A/B $name: $env, batch sizes $bs"
  env "$env" $PY -m bench.moe_bench --impls hopperkit --bs "$bs" --max-seconds "${AB_SECONDS:-90}" \
    --out "$OUT/ab_$name.json" 2>&1 | tail -1
  if [ ! -f "$OUT/moe.json" ]; then
    echo "   (no full sweep in this round: nothing to compare with)"
  else
    $PY - "$OUT/moe.json" "$OUT/ab_$name.json" <<'EOF'
import json, math, sys
def rows(p):
    d = json.load(open(p))
    return {(r["model"], r["mode"], r["scaling"], r["bs"]): r["us"] for r in d["rows"]
            if r.get("impl") == "hopperkit" and r.get("us")}
base, ab = rows(sys.argv[1]), rows(sys.argv[2])
keys = sorted(k for k in ab if k in base)
if keys:
    g = math.exp(sum(math.log(ab[k] / base[k]) for k in keys) / len(keys))
    print(f"   {len(keys)} points: switch / default time, geomean {g:.3f}")
    for k in keys:
        print(f"   {k[0]:12s} {k[1]} {k[2]:10s} bs {k[3]:5d}: {base[k]:8.1f} -> {ab[k]:8.1f} us ({ab[k] / base[k]:.3f})")
EOF
  fi
done

if [ -n "$STAGES" ]; then
  echo "== stages"
  timeout "${STAGES_SECONDS:-120}" $PY -m bench.moe_stages --cases "$STAGES" 2>&1 | tee "$OUT/stages.log" | tail -20
fi
