#!/usr/bin/env bash
# A/B across builds in one device call: the tree as it is (the baseline) against variants that replace some of
# its files, each built and installed on its own, its selected tests run, then the benchmark (hopperkit only).
# Unlike scripts/ab_round.sh (two paths of ONE build behind a runtime switch), nothing is added to the kernels
# to make the comparison, so a variant's own code cannot hide in the baseline (session 10: a switch build's
# "default" ran 5% slower than the kernel before it while its A/B looked 3% faster).
#
# Usage: scripts/variant_ab.sh --bench prologue_bench [--bench-args "--no-step --tokens 512,4096,32768"] \
#          [--tests EXPR] [--variant-tests EXPR] --variant NAME [--variant NAME]...
#   --variant-tests: the variants' tests when they differ from the baseline's (e.g. the full suite on the
#   baseline, only the changed op's tests on each variant)
#   variant NAME's files are under ab_variants/NAME/ at their repository paths (scripts/make_variant.sh writes
#   them from a branch); ab_variants/ is git-ignored: pass it in the device call's `carry`.
# $OUT gets variant_ab_<bench>.json (every run's rows and test summary), and failed_<run>*.log for a run
# whose build or tests failed. Prints per-point time ratios against
# the baseline; for prologue_bench also the ratio of the same-bytes copy kernel's times (the device-speed
# control: it should stay near 1.000 within a call). The tree is restored at the end.
# Time: ~20 s per build, plus the selected tests and the benchmark per run.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/variant_ab_out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
source scripts/provenance.sh  # the commit the results name (HOPPERKIT_GIT_HASH)
BENCH="" BARGS="" TESTS="" VTESTS=""
VARIANTS=()
BUILT=0  # 1 once this call has built: later builds may be incremental (gpu_round.sh HK_KEEP_BUILD)
while [ $# -gt 0 ]; do
  case "$1" in
    --bench|--bench-args|--tests|--variant-tests|--variant) [ $# -ge 2 ] || { echo "$1 needs a value"; exit 2; } ;;&
    --bench) BENCH="$2"; shift ;;
    --bench-args) BARGS="$2"; shift ;;
    --tests) TESTS="$2"; shift ;;
    --variant-tests) VTESTS="$2"; shift ;;
    --variant) [ -d "ab_variants/$2" ] || { echo "no folder ab_variants/$2"; exit 2; }; VARIANTS+=("$2"); shift ;;
    *) echo "unknown argument: $1"; exit 2 ;;
  esac
  shift
done
[ -n "$BENCH" ] && [ ${#VARIANTS[@]} -gt 0 ] || { echo "usage: --bench NAME --variant NAME ..."; exit 2; }
if [ -f scripts/peers_env.sh ] && [ -d .peers ]; then source scripts/peers_env.sh; fi
TMP=$(mktemp -d)
BACKUP="$TMP/baseline_files"

restore() {  # put the baseline's copies of every file a variant replaced back
  if [ -d "$BACKUP" ]; then (cd "$BACKUP" && find . -type f -print0) | while IFS= read -r -d '' f; do
    cp "$BACKUP/$f" "$f"; done; fi
  if [ -f "$TMP/added" ]; then while IFS= read -r f; do rm -f "$f"; done < "$TMP/added"; fi
  rm -rf "$BACKUP" "$TMP/added"
}
trap restore EXIT

measure() {  # $1: run name; builds and installs the tree as it is now, runs the tests, then the benchmark
  local name=$1
  if [ -n "${VARIANT_AB_DRY:-}" ]; then  # CPU check of the file swaps: what the build would see
    echo "== $name (dry): $(cat src/prologue/*.cuh src/moe/*.cuh 2>/dev/null | md5sum | cut -c1-8)"; return
  fi
  echo "== $name: build"
  mkdir -p "$TMP/out_$name"
  HK_KEEP_BUILD=$BUILT OUT="$TMP/out_$name" bash scripts/gpu_round.sh --no-bench --tests "${TESTS:-variant_ab_selects_no_test}" \
    > "$TMP/build_$name.log" 2>&1
  local rc=$?
  BUILT=1
  if [ $rc != 0 ]; then
    tail -20 "$TMP/build_$name.log"; cp "$TMP/build_$name.log" "$OUT/failed_$name.log"
    echo "   build failed: no benchmark under $name (log: failed_$name.log)"; return
  fi
  grep -E "built:|GPU tests" "$TMP/build_$name.log" | head -3
  if [ -n "$TESTS" ] && ! grep -qE "GPU tests: [0-9]+ passed, 0 failed" "$TMP/build_$name.log"; then
    grep -E "^(FAILED|ERROR)" "$TMP/build_$name.log" | head -5
    # the whole test log (assertion messages, the run's HK_TEST_SEED) comes back with the results
    cp "$TMP/build_$name.log" "$OUT/failed_$name.log"
    [ -f "$TMP/out_$name/tests.log" ] && cp "$TMP/out_$name/tests.log" "$OUT/failed_${name}_tests.log"
    echo "   tests failed: no benchmark under $name (logs: failed_$name*.log)"; return
  fi
  grep -E "GPU tests" "$TMP/build_$name.log" | tail -1 > "$TMP/tests_$name.txt"
  echo "== $name: $BENCH $BARGS"
  local commit=${HOPPERKIT_COMMIT:-unknown}
  [ "$name" = baseline ] || commit="$commit+$name"  # a variant: the baseline's tree with the variant's files
  # shellcheck disable=SC2086
  HOPPERKIT_COMMIT=$commit timeout "${AB_SECONDS:-120}" $PY -m "bench.$BENCH" --impls hopperkit $BARGS --out "$TMP/$name.json" \
    > "$TMP/bench_$name.log" 2>&1
  tail -1 "$TMP/bench_$name.log"
}

measure baseline
for v in "${VARIANTS[@]}"; do
  mkdir -p "$BACKUP"; : > "$TMP/added"
  (cd "ab_variants/$v" && find . -type f -print0) | while IFS= read -r -d '' f; do
    f=${f#./}
    if [ -f "$f" ]; then mkdir -p "$BACKUP/$(dirname "$f")"; cp "$f" "$BACKUP/$f"; else echo "$f" >> "$TMP/added"; fi
    mkdir -p "$(dirname "$f")"; cp "ab_variants/$v/$f" "$f"
  done
  [ -n "$VTESTS" ] && TESTS=$VTESTS
  echo "== $v replaces: $(cd "ab_variants/$v" && find . -type f | sed 's|^\./||' | tr '\n' ' ')"
  measure "$v"
  restore
done

$PY -m bench.ab_report "$TMP" "$OUT/variant_ab_$BENCH.json" "$BENCH" baseline "${VARIANTS[@]}"
