#!/usr/bin/env bash
# Decode per-CTA traces of this tree and of this tree + a patch, in one device call: builds both extensions with
# HOPPERKIT_DECODE_TRACE=ON (scripts/build_ext.sh, in parallel), then scripts/decode_trace.py on the same scenarios
# under each (the per-event CTA times, the last CTA's timeline). Session 61 used it (calls 1 and 4) to see where a
# merge's time goes, main's two-level chain against a one-level sliced merge.
# Usage (from the repo root, on the device, no carry): scripts/trace_ab.sh PATCH [SCENARIOS] [DTYPES]
#   PATCH: a `git diff` file that applies to this tree with `patch -p1`; SCENARIOS default one_64k_7x4k,skewed_extreme;
#   DTYPES default fp8. Output in $OUT (default /tmp/trace_ab_out): trace_a.{json,txt} (this tree),
#   trace_p.{json,txt} (patched). ~1-2 device-min. HOPPERKIT_GIT_HASH names the builds.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: scripts/trace_ab.sh PATCH [SCENARIOS] [DTYPES]"; exit 2; }
PATCH=$(realpath -m "$1")
SCEN=${2:-one_64k_7x4k,skewed_extreme}
DTYPES=${3:-fp8}
OUTD=$(realpath -m "${OUT:-/tmp/trace_ab_out}")
cd "$(dirname "$0")/.."
[ -f "$PATCH" ] || { echo "no patch file $PATCH"; exit 2; }
t0=$(date +%s)
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
mkdir -p "$OUTD"
TMP=$(mktemp -d /tmp/trace_ab.XXXXXX)
bash scripts/patched_copy.sh "$TMP/src_p" "$PATCH" || exit 1
JOBS=$(( $(nproc) / 2 )); [ "$JOBS" -ge 1 ] || JOBS=1
source scripts/provenance.sh  # (the warning when HOPPERKIT_GIT_HASH is not set)
H=${HOPPERKIT_GIT_HASH:-unknown}
HOPPERKIT_GIT_HASH=$H-trace bash scripts/build_ext.sh "$PWD" "$TMP/b_a" "$TMP/v_a" $JOBS -DHOPPERKIT_DECODE_TRACE=ON &
HOPPERKIT_GIT_HASH=$H+patch-trace bash scripts/build_ext.sh "$TMP/src_p" "$TMP/b_p" "$TMP/v_p" $JOBS \
  -DHOPPERKIT_DECODE_TRACE=ON &
wait
for v in a p; do
  ls "$TMP"/v_$v/hopperkit/_C*.so > /dev/null 2>&1 || { tail -30 "$TMP/b_$v.log"; exit 1; }
done
echo "built $(( $(date +%s) - t0 ))s"
rc=0
for v in a p; do
  PYTHONPATH="$TMP/v_$v" timeout 150 python3 scripts/decode_trace.py --scenarios "$SCEN" --dtypes "$DTYPES" \
    --tag $v --json "$OUTD/trace_$v.json" > "$OUTD/trace_$v.txt" 2>&1 || rc=1
  grep -E "^==|last CTA" "$OUTD/trace_$v.txt"
  echo "trace $v $(( $(date +%s) - t0 ))s"
done
exit $rc
