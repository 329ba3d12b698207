#!/usr/bin/env bash
# Cross-build A/B in rotated rounds, in one device call: the tree as it is (the baseline, "a") against copies of
# it with a patch applied, each built on its own (the Python extension only, all builds at once), its selected
# tests run, then the benchmark (hopperkit only) once per build and round, the builds' order rotated from round
# to round; bench/ab_rounds.py prints each point's medians and the builds' ratios to the baseline.
# This is the pattern of the session 59-60 device calls (docs/wip/s59_call*.sh, s60_call*.sh, git history at
# 69a2303) as one script.
#
# Usage: scripts/cross_ab.sh [--rounds N] [--tests EXPR] --patch NAME=FILE [--patch NAME=FILE]... \
#          -- BENCH [benchmark arguments...]
#   e.g. scripts/cross_ab.sh --tests "slice or merge_piece" --patch s=docs/wip/s60-slice-merge.patch \
#          -- decode_bench --dtypes bf16,fp8
#   FILE: a `git diff` of the tree (applied with patch -p1 to a copy; nothing in the tree changes).
#   --tests: a pytest -k expression run on every patched build (from its own copy, so its tests are its own); a
#   build whose tests fail gets no benchmark runs (one where the expression selects no test still gets them). --tests-baseline runs them on the baseline too.
#   --rounds: default the smallest multiple of the builds that is >= 3 (each build first in as many rounds).
# Time: ~30-45 s for the builds, the tests, then rounds x builds x one benchmark run (AB_SECONDS each, default 120).
# $OUT (default /tmp/cross_ab_out) gets cross_ab_<BENCH>.json (bench/ab_rounds.py's summary), tests_<NAME>.log and
# the logs of failed builds and runs. Exit 0 only if every benchmark run finished.
set -uo pipefail
ROOT=$(realpath "$(dirname "$0")/..")
usage() { echo "usage: scripts/cross_ab.sh [--rounds N] [--tests EXPR] [--tests-baseline] --patch NAME=FILE ... -- BENCH [args...]"; exit 2; }
ROUNDS="" TESTS="" TESTS_BASE=0
NAMES=(a) PATCHES=()
while [ $# -gt 0 ]; do  # (paths are the caller's: resolved before the cd below)
  case "$1" in
    --rounds|--tests|--patch) [ $# -ge 2 ] || { echo "$1 needs a value"; usage; } ;;&
    --rounds) ROUNDS="$2"; [[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "--rounds: a positive count"; usage; }; shift ;;
    --tests) TESTS="$2"; shift ;;
    --tests-baseline) TESTS_BASE=1 ;;
    --patch) n=${2%%=*}; f=${2#*=}
             [[ "$n" =~ ^[A-Za-z0-9_]+$ && "$n" != a && "$n" != "$2" ]] || { echo "--patch NAME=FILE (NAME: [A-Za-z0-9_], not a)"; usage; }
             [[ " ${NAMES[*]} " != *" $n "* ]] || { echo "--patch: the name $n twice"; usage; }
             [ -f "$f" ] || { echo "no patch file $f"; usage; }
             NAMES+=("$n"); PATCHES+=("$(realpath "$f")"); shift ;;
    --) shift; break ;;
    *) echo "unknown argument: $1"; usage ;;
  esac
  shift
done
[ $# -ge 1 ] && [ ${#PATCHES[@]} -ge 1 ] || usage
OUT=$(realpath -m "${OUT:-/tmp/cross_ab_out}")
cd "$ROOT"
mkdir -p "$OUT"
PY=${PYTHON:-python3}
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
source scripts/provenance.sh  # HOPPERKIT_GIT_HASH for build_info, HOPPERKIT_COMMIT for the benchmarks' JSON
BENCH=$1; shift
TMP=$(mktemp -d)
t0=$(date +%s)

build() {  # name, source tree, build_info suffix: the extension into $TMP/v_<name>/hopperkit
  HOPPERKIT_GIT_HASH="${HOPPERKIT_GIT_HASH:-unknown}${3:-}" PYTHON=$PY \
    bash scripts/build_ext.sh "$2" "$TMP/b_$1" "$TMP/v_$1" "$JOBS" > /dev/null
}
SRC=(".")
for i in "${!PATCHES[@]}"; do
  n=${NAMES[$((i + 1))]}; d="$TMP/src_$n"
  bash scripts/patched_copy.sh "$d" "${PATCHES[$i]}" || { echo "patch $n does not apply"; exit 1; }
  SRC+=("$d")
done
JOBS=$(( $(nproc) / ${#NAMES[@]} )); [ "$JOBS" -ge 1 ] || JOBS=1  # the builds run at once
for i in "${!NAMES[@]}"; do
  n=${NAMES[$i]}; build "$n" "$(realpath "${SRC[$i]}")" "$([ "$n" = a ] || echo "+$n")" &
done
wait
OK=()
for i in "${!NAMES[@]}"; do
  n=${NAMES[$i]}
  if ! ls "$TMP/v_$n/hopperkit/"_C*.so > /dev/null 2>&1; then
    tail -20 "$TMP/b_$n.log"; cp "$TMP/b_$n.log" "$OUT/failed_build_$n.log"; echo "build $n failed"
    [ "$n" = a ] && exit 1; continue
  fi
  if [ -n "$TESTS" ] && { [ "$n" != a ] || [ "$TESTS_BASE" = 1 ]; }; then
    (cd "${SRC[$i]}" && PYTHONPATH="$TMP/v_$n" timeout "${AB_TEST_SECONDS:-300}" $PY -m pytest tests/python -q \
      -p no:cacheprovider -k "$TESTS" > "$TMP/tests_$n.log" 2>&1)
    trc=$?
    cp "$TMP/tests_$n.log" "$OUT/"
    echo "tests $n (exit $trc): $(tail -1 "$TMP/tests_$n.log")"
    # (exit 5: the expression selected none of this build's tests; its benchmark still runs)
    if [ $trc -ne 0 ] && [ $trc -ne 5 ]; then
      grep -E "^(FAILED|ERROR)" "$TMP/tests_$n.log" | head -5; echo "   no benchmark under $n"; continue
    fi
  fi
  OK+=("$n")
done
[ "${OK[0]:-}" = a ] || { echo "the baseline failed its tests: no benchmark"; exit 1; }
[ ${#OK[@]} -ge 2 ] || { echo "no patched build passed: no benchmark"; exit 1; }
echo "built and tested $(( $(date +%s) - t0 ))s: ${OK[*]}"
if [ -f scripts/peers_env.sh ] && [ -d .peers ]; then source scripts/peers_env.sh; fi
K=${#OK[@]}
# rounds: a multiple of the builds by default, so that each build runs first equally often
[ -n "$ROUNDS" ] || ROUNDS=$(( K * ((3 + K - 1) / K) ))
FAILED=0
for r in $(seq 1 "$ROUNDS"); do
  for j in $(seq 0 $((K - 1))); do
    n=${OK[$(( (j + r) % K ))]}
    c=${HOPPERKIT_COMMIT:-unknown}; [ "$n" = a ] || c="$c+$n"
    HOPPERKIT_COMMIT=$c PYTHONPATH="$TMP/v_$n" timeout "${AB_SECONDS:-120}" $PY -m "bench.$BENCH" --impls hopperkit "$@" \
      --out "$TMP/${n}_$r.json" > "$TMP/bench_${n}_$r.log" 2>&1
    rc=$?
    echo "$n round $r exit $rc $(( $(date +%s) - t0 ))s"
    if [ $rc -ne 0 ]; then FAILED=$((FAILED + 1)); tail -5 "$TMP/bench_${n}_$r.log"; cp "$TMP/bench_${n}_$r.log" "$OUT/failed_bench_${n}_$r.log"; fi
  done
done
$PY -m bench.ab_rounds "$TMP" "$OUT/cross_ab_$BENCH.json" "$ROUNDS" "${OK[@]}" || { echo "ab_rounds failed"; exit 1; }
echo "cross_ab: $(( $(date +%s) - t0 ))s, $FAILED of $((ROUNDS * K)) benchmark runs failed"
[ "$FAILED" -eq 0 ] || exit 1
