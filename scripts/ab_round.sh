#!/usr/bin/env bash
# Same-build A/B of profiling switches on one benchmark, in one device call: hopperkit-only runs of
# bench.<BENCH> with no switch (the baseline) and under each ENV=VALUE, each preceded by the selected GPU tests
# under the same switch (a variant must be correct before its time counts). Prints every point's time ratio
# (switch / baseline) and writes one file, $OUT/ab_<BENCH>.json, with all runs.
#
# Usage: scripts/ab_round.sh --bench prologue_bench [--bench-args "--no-step --tokens 64,4096"] \
#          [--tests "test_prologue_gpu"] [--no-build] --ab NAME ENV=VALUE [--ab NAME ENV=VALUE]...
#   --no-build: the package is already installed (e.g. after scripts/moe_round.sh in the same call)
# Each benchmark run is limited to AB_SECONDS (default 120), each test run to AB_TEST_SECONDS (default 180). A
# switch whose tests fail gets no benchmark run; rows flagged wrong stay out of the geomean.
# prologue_bench: pass --no-step (its decode-step section runs other implementations too).
# Caution: the ratios compare two paths of ONE build. A switch's own code can slow the whole build (session 10:
# the prologue fold switch measured 0.97x against its off path while the build was 1.05x slower than the kernel
# before it): compare the default's times with the previous build's committed results too.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/ab_round_out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
BENCH=""; BARGS=""; TESTS=""; BUILD=1; AB=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bench|--bench-args|--tests) [ $# -ge 2 ] || { echo "$1 needs a value"; exit 2; } ;;&
    --bench) BENCH="$2"; shift ;;
    --bench-args) BARGS="$2"; shift ;;
    --tests) TESTS="$2"; shift ;;
    --no-build) BUILD=0 ;;
    --ab) [ $# -ge 3 ] || { echo "--ab needs NAME ENV=VALUE"; exit 2; }
          [ "$2" != default ] || { echo "--ab: 'default' is the baseline's name"; exit 2; }
          AB+=("$2|$3"); shift 2 ;;
    *) echo "unknown argument: $1"; exit 2 ;;
  esac
  shift
done
[ -n "$BENCH" ] && [ ${#AB[@]} -gt 0 ] || { echo "usage: --bench NAME --ab NAME ENV=VALUE ..."; exit 2; }
if [ "$BUILD" = 1 ]; then
  # build + install (gpu_round.sh's own outputs go to a scratch folder: the device returns at most 8 files; its
  # tests are the selected ones, or none)
  OUT=$(mktemp -d) bash scripts/gpu_round.sh --no-bench --tests "${TESTS:-ab_round_selects_no_test}" \
    > /tmp/hk_ab_build.log 2>&1
  rc=$?
  grep -E "built|GPU tests|FAIL" /tmp/hk_ab_build.log | head -20
  [ $rc -eq 0 ] || { tail -20 /tmp/hk_ab_build.log; echo "ab_round: build failed (exit $rc)"; exit 1; }
fi
if [ -f scripts/peers_env.sh ] && [ -d .peers ]; then source scripts/peers_env.sh; fi
TMP=$(mktemp -d)
RUNS=("default|HOPPERKIT_AB_BASELINE=1" "${AB[@]}")
for spec in "${RUNS[@]}"; do
  IFS='|' read -r name env <<< "$spec"
  if [ -n "$TESTS" ]; then
    echo "== $name ($env): tests"
    env "$env" timeout "${AB_TEST_SECONDS:-180}" $PY -m pytest tests/python -q -p no:cacheprovider -k "$TESTS" \
      > "$TMP/tests_$name.log" 2>&1
    trc=$?
    tail -1 "$TMP/tests_$name.log"
    grep -E "^(FAILED|ERROR)" "$TMP/tests_$name.log" | head -5
    if [ $trc -ne 0 ]; then echo "   tests failed (exit $trc): no benchmark under $name"; continue; fi
  fi
  echo "== $name ($env): $BENCH $BARGS"
  # shellcheck disable=SC2086
  env "$env" timeout "${AB_SECONDS:-120}" $PY -m "bench.$BENCH" --impls hopperkit $BARGS --out "$TMP/$name.json" \
    > "$TMP/bench_$name.log" 2>&1
  tail -1 "$TMP/bench_$name.log"
done
$PY - "$TMP" "$OUT/ab_$BENCH.json" "${RUNS[@]}" <<'EOF'
import json, math, os, sys
tmp, out, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
ID = ("scenario", "case", "model", "mode", "scaling", "bs", "tokens", "dtype", "cache_layout", "spec", "impl")
def load(name):
    p = os.path.join(tmp, name + ".json")
    if not os.path.exists(p):
        return None, {}
    d = json.load(open(p))
    rows = {tuple(r.get(k) for k in ID): r for r in d.get("rows", []) if r.get("us")}
    return d, rows
result = {"bench": os.path.basename(out)[3:-5], "runs": {}}
base_d, base = load("default")
if not base:
    print("no baseline rows (its tests or benchmark failed): no ratios")
for spec in runs:
    name, env = spec.split("|", 1)
    d, rows = load(name)
    tests = os.path.join(tmp, f"tests_{name}.log")
    last = open(tests).read().strip().splitlines()[-1:] if os.path.exists(tests) else []
    result["runs"][name] = {"env": env, "tests": last[0] if last else None, "commit": (d or {}).get("commit"),
                            "rows": list(rows.values())}
    if name == "default" or not rows:
        continue
    keys = sorted((k for k in rows if k in base), key=str)
    if not keys:
        continue
    ratios = [rows[k]["us"] / base[k]["us"] for k in keys]
    good = [r for k, r in zip(keys, ratios) if rows[k].get("ok", True) and base[k].get("ok", True)]
    g = math.exp(sum(map(math.log, good)) / len(good)) if good else float("nan")
    print(f"== {name} ({env}): {len(keys)} points, switch / default time, geomean {g:.3f} over the "
          f"{len(good)} with correct output on both sides")
    for k, r in zip(keys, ratios):
        label = " ".join(str(v) for v, f in zip(k, ID) if v is not None and f != "impl")
        ok = "" if rows[k].get("ok", True) else "  WRONG OUTPUT"
        print(f"   {label:40s} {k[-1]:16s} {base[k]['us']:9.2f} -> {rows[k]['us']:9.2f} us ({r:.3f}){ok}")
json.dump(result, open(out, "w"), indent=1)
print("wrote", out)
EOF
rm -rf "$TMP"
