#!/usr/bin/env bash
# One full GPU round on a Hopper (sm_90) machine, in one call:
#   build + install, the whole GPU test suite ("N passed, N failed"), optional compute-sanitizer pass,
#   and a quick benchmark. Results and logs go to $OUT (default ./gpu_round_out).
# Usage: scripts/gpu_round.sh [--no-bench] [--full-bench] [--benches decode,prologue,moe] [--sanitize] [--tests EXPR]
#                             [--bench-if-green]  (skip the benchmarks unless every selected test passed)
#                             [--shard I/N]  (every N-th test from the I-th, HK_TEST_SHARD in tests/python/conftest.py:
#                             the whole suite took 486 s of pytest in session 68, 547 s with the build, near a device
#                             call's 600 s; --shard 1/2 and --shard 2/2 in two calls run it all)
# $OUT gets: tests.log, bench.log, sanitize.log (--sanitize), {decode,prologue,moe}.{json,png} for the
# benchmarks run (build.log only when the build fails). The device returns at most 8 files: with --sanitize,
# run at most two benchmarks. A copy of the tree without .git names its commit through
# HOPPERKIT_GIT_HASH=<hash> (build_info and the benchmark JSON record it).
# TEST_TIMEOUT (seconds for the whole suite, default 540: ~300 s in session 52, 424 s in session 62) bounds the tests
# (a device call allows 600 s; the build takes ~45 s).
# SANITIZE_TOOLS (default "memcheck racecheck"), SANITIZE_TIMEOUT (seconds per tool, default 150) and SANITIZE_SUB (a
# pytest -k expression instead of the default subset) tune --sanitize.
# racecheck with CUDA 13.0's sanitizer reports hazards on the decode kernel's cp.async.mbarrier.arrive.noinc
# handoff (docs/decode_attention.md: most likely the tool; it needs > 200 s to reach the MoE tests).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_round_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
BENCH=quick; SANITIZE=0; TESTS=""; BENCHES="decode,prologue,moe"; BENCH_IF_GREEN=0
while [ $# -gt 0 ]; do
  case "$1" in
    --no-bench) BENCH=none ;;
    --full-bench) BENCH=full ;;
    --sanitize) SANITIZE=1 ;;
    --bench-if-green) BENCH_IF_GREEN=1 ;;
    --tests) TESTS="$2"; shift ;;
    --benches) BENCHES="$2"; shift ;;
    --shard) [[ "${2:-}" =~ ^[1-9][0-9]*/[1-9][0-9]*$ ]] || { echo "--shard I/N (1 <= I <= N), got '${2:-}'"; exit 2; }
             export HK_TEST_SHARD="$2"; shift ;;
  esac
  shift
done
PY=${PYTHON:-python3}
t0=$(date +%s)
stamp() { echo "[gpu_round +$(( $(date +%s) - t0 ))s] $*"; }

stamp "device: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null)"
# carried peer packages (FlashInfer) for the benchmark, if present
if [ -f scripts/peers_env.sh ] && [ -d .peers ]; then source scripts/peers_env.sh; fi
# anchors travel inside the repo copy for the benchmark
if [ ! -d bench/anchors ] && [ -d ../shared/anchors ]; then mkdir -p bench/anchors && cp ../shared/anchors/*.json bench/anchors/; fi

# ---- 1. build and install (kernels for sm_90a)
# provenance: a copy of the tree without .git can be told its commit with HOPPERKIT_GIT_HASH=<hash>
if [ -z "${HOPPERKIT_GIT_HASH:-}" ] && git rev-parse HEAD >/dev/null 2>&1; then
  # a device copy of the tree may carry a stale .git (session 15): pass the local hash instead
  echo "warning: HOPPERKIT_GIT_HASH is not set: naming the build after this tree's .git ($(git rev-parse --short HEAD)), which a device copy may carry stale" >&2
  export HOPPERKIT_GIT_HASH=$(git rev-parse --short=12 HEAD)
fi
export HOPPERKIT_COMMIT=${HOPPERKIT_COMMIT:-${HOPPERKIT_GIT_HASH:-unknown}}
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
# a warm device keeps build/ between calls, but each call's copy of the tree carries this machine's file times:
# a variant built in an earlier call can look newer than the restored sources, and ninja would link its stale
# objects (session 17: a baseline linked a variant's symbols). Start from a clean build directory unless the
# caller knows it is current (variant_ab.sh after its first build in the same call).
[ "${HK_KEEP_BUILD:-0}" = 1 ] || rm -rf build
stamp "building"
if ! $PY -m pip install --no-build-isolation --no-deps -q . > /tmp/hk_build.log 2>&1; then
  cp /tmp/hk_build.log "$OUT/build.log"; tail -40 /tmp/hk_build.log; stamp "BUILD FAILED"; exit 1
fi
stamp "built: $($PY -c 'import hopperkit; print(hopperkit.build_info())' 2>&1)"
# smoke: a typed error must come back from the core (if this crashes, print a native backtrace)
SMOKE='import hopperkit
try:
    hopperkit.DecodePlan(8, 64, 2)
except hopperkit.UnsupportedError as e:
    print("smoke ok:", e)'
if ! $PY -X faulthandler -c "$SMOKE"; then
  command -v cuda-gdb >/dev/null && cuda-gdb -batch -ex run -ex bt --args $PY -c "$SMOKE" 2>&1 | tail -40
fi

# ---- 2. the GPU test suite
stamp "tests"
K=()
[ -n "$TESTS" ] && K=(-k "$TESTS")
# a kernel that hangs must not eat the round: per-test and whole-suite time limits
TO=(); $PY -c "import pytest_timeout" 2>/dev/null && TO=(--timeout "${TEST_TIMEOUT_EACH:-120}" --timeout-method=thread)
rm -f /tmp/hk_junit.xml  # (a warm machine keeps an earlier call's report: never summarise that one)
[ -n "${HK_TEST_SHARD:-}" ] && echo "test shard $HK_TEST_SHARD (of the collected tests, every ${HK_TEST_SHARD#*/} from number ${HK_TEST_SHARD%/*})"
timeout "${TEST_TIMEOUT:-540}" $PY -m pytest tests/python -q -rfE -p no:cacheprovider --junitxml=/tmp/hk_junit.xml \
  --durations=15 "${TO[@]}" "${K[@]}" > "$OUT/tests.log" 2>&1 || echo "pytest exit status $?"
grep -E "^(FAILED|ERROR)|HK_TEST_SEED" "$OUT/tests.log" | head -40
SUMMARY=$($PY - /tmp/hk_junit.xml <<'PYEOF'
import sys, xml.etree.ElementTree as ET
try:
    r = ET.parse(sys.argv[1]).getroot()
except Exception as e:
    sys.exit(f"GPU tests: no junit report ({e}); see tests.log")
s = r if r.tag == "testsuite" else r.find("testsuite")
t, f, e, sk = (int(s.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
print(f"GPU tests: {t - f - e - sk} passed, {f + e} failed ({sk} skipped)")
PYEOF
)
echo "$SUMMARY"
tail -3 "$OUT/tests.log"
# --bench-if-green: no benchmark after a failed (or missing) test run
if [ "$BENCH_IF_GREEN" = 1 ] && ! [[ "$SUMMARY" =~ \ 0\ failed ]]; then stamp "tests not green: benchmarks skipped"; BENCH=none; fi

# ---- 3. compute-sanitizer over a representative subset
unset HK_TEST_SHARD  # (the sanitizer runs its own subset whole)
if [ "$SANITIZE" = 1 ]; then
  SUB="len65 or bs16_edges or ragged_qlen or zero_len or cuda_graph or (test_dtypes_layouts and NHD) or untrusted"
  # MoE: both tile heights, split-K, both scalings, EP, 64-wide tails (TMA boxes past the tensor)
  SUB="$SUB or (test_routing_kinds and 64-skewed) or test_expert_parallel_half_remote or smallest_multiples"
  SUB="$SUB or test_shared_output_and_invalid_ids or (test_routing_kinds and 300-skewed) or test_64_row_tiles"  # 64-row wgmma tiles
  SUB=${SANITIZE_SUB:-$SUB}  # SANITIZE_SUB: another pytest -k expression for the sanitizer runs
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    stamp "compute-sanitizer $tool"
    timeout "${SANITIZE_TIMEOUT:-150}" compute-sanitizer --tool $tool --error-exitcode 17 --print-limit 20 \
      $PY -m pytest tests/python -q -x -p no:cacheprovider -k "($SUB) and not static" \
      > /tmp/hk_sanitize_$tool.log 2>&1
    rc=$?
    { echo "==== compute-sanitizer $tool: exit $rc"; cat /tmp/hk_sanitize_$tool.log; } >> "$OUT/sanitize.log"
    echo "compute-sanitizer $tool: exit $rc ($(grep -cE 'ERROR SUMMARY: [1-9]' /tmp/hk_sanitize_$tool.log) error summaries)"
    grep -E "ERROR SUMMARY|passed|failed" /tmp/hk_sanitize_$tool.log | tail -3
  done
fi

# ---- 4. benchmarks
if [ "$BENCH" != none ]; then
  QUICK=(); [ "$BENCH" = quick ] && QUICK=(--quick)
  want() { [[ ",$BENCHES," == *",$1,"* ]]; }
  if want decode; then
    stamp "decode benchmark ($BENCH)"
    timeout "${BENCH_TIMEOUT:-300}" $PY -m bench.decode_bench "${QUICK[@]}" --out "$OUT/decode.json" 2>&1 \
      | tee -a "$OUT/bench.log" | grep -v "it/s" | tail -60
    $PY -m bench.plot_decode "$OUT/decode.json" > /dev/null 2>&1 || true
  fi
  if want prologue; then
    stamp "prologue benchmark ($BENCH)"
    timeout "${PROLOGUE_BENCH_TIMEOUT:-240}" $PY -m bench.prologue_bench "${QUICK[@]}" --out "$OUT/prologue.json" 2>&1 \
      | tee -a "$OUT/bench.log" | grep -v "it/s" | tail -60
    $PY -m bench.plot_prologue "$OUT/prologue.json" > /dev/null 2>&1 || true
  fi
  if want moe; then
    stamp "moe benchmark ($BENCH)"
    timeout "${MOE_BENCH_TIMEOUT:-300}" $PY -m bench.moe_bench "${QUICK[@]}" --out "$OUT/moe.json" 2>&1 \
      | tee -a "$OUT/bench.log" | grep -v "it/s" | tail -80
    $PY -m bench.plot_moe "$OUT/moe.json" > /dev/null 2>&1 || true
  fi
fi
stamp "done"
