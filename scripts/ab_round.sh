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
source scripts/provenance.sh  # the commit the results name (HOPPERKIT_GIT_HASH)
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
$PY -m bench.ab_report "$TMP" "$OUT/ab_$BENCH.json" "$BENCH" "${RUNS[@]}"
rm -rf "$TMP"
