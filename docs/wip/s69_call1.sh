#!/usr/bin/env bash
# Session 69, call 1: three bounds against main (cross-build, 3 rounds, hopperkit only; the patched builds are NOT
# correct, so no test runs on them): (w) the per-tensor K-tail down skips the weights of a tile whose predecessor in
# the tile list is the same expert's (what a W-stationary down would save: docs/moe.md Next, session 68);
# (y) the same down stores no y; (g) the per-tensor 128-row gate-up gets its A rows as one TMA box of contiguous
# token rows per stage instead of the cp.async gather. Then the first half of the GPU suite on main.
#   HOPPERKIT_GIT_HASH=<main's hash> bash docs/wip/s69_call1.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/s69}; mkdir -p "$OUT" /tmp/xab
t0=$(date +%s)
TMPDIR=/tmp/xab OUT="$OUT" AB_SECONDS=100 bash scripts/cross_ab.sh --rounds 3 --tests "ab_selects_none" \
  --patch w="$PWD/docs/wip/s69-down-wskip-bound.patch" --patch y="$PWD/docs/wip/s69-down-yskip-bound.patch" \
  --patch g="$PWD/docs/wip/s69-gateup-tma-a-bound.patch" \
  -- moe_bench --no-reads --models hy3,qwen3-235b --modes tp8_ep1 --scalings per_tensor --bs 1024,4096,16384 \
  > "$OUT/cross_ab.log" 2>&1
echo "cross_ab rc=$? $(( $(date +%s) - t0 ))s"; tail -16 "$OUT/cross_ab.log"
left=$(( 560 - ($(date +%s) - t0) ))
echo "suite shard 1/2 with ${left}s left"
TEST_TIMEOUT=$(( left > 90 ? left - 60 : 30 )) OUT="$OUT/suite" bash scripts/gpu_round.sh --no-bench --shard 1/2 2>&1 | tail -30
echo "done $(( $(date +%s) - t0 ))s"
