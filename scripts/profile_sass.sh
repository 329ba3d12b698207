#!/usr/bin/env bash
# Per-instruction stall profile of one kernel launch (Nsight Compute's source page at SASS level; no -lineinfo
# build needed). Writes $OUT/sass_<name>.csv (and its digest, .digest.json) and prints the instructions with
# the most warp-stall samples and the mbarrier waits.
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
# NCU_ARGS: more ncu options, e.g. "--warp-sampling-interval 0" for a kernel of one or a few CTAs (the default
# interval gave 5 samples for the MoE index build's single ~5 µs CTA, session 66)
# shellcheck disable=SC2086
timeout "${PROFILE_TIMEOUT:-200}" ncu --clock-control none --profile-from-start off --kernel-name "regex:$KRE" \
  --launch-skip "$SKIP" --launch-count 1 --section SourceCounters --section WarpStateStats ${NCU_ARGS:-} \
  --page source --print-source sass --csv "$@" > "$OUT/sass_$NAME.csv" 2> "/tmp/sass_$NAME.err"
echo "ncu exit $? ($(wc -l < "$OUT/sass_$NAME.csv") lines)"; tail -3 "/tmp/sass_$NAME.err"
# top instructions, the mbarrier waits (samples on the branch that loops on each), per-region stalls: see
# bench/sass_digest.py (SASS_DIGEST_ARGS, e.g. "--split 0x7f..2950 --context 3")
$PY -m bench.sass_digest "$OUT/sass_$NAME.csv" --top 40 --json "$OUT/sass_$NAME.digest.json" ${SASS_DIGEST_ARGS:-}
