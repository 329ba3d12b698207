#!/usr/bin/env bash
# Session 68, call 3: the staged downs' y rows by bulk copies (b: docs/wip/s68-down-bulk-store.patch) and, on top,
# the per-tensor non-pair kernels' next tile and epilogue scales by lanes (bt: s68-down-bulk-store-lane-tile.patch)
# against main (the K-tail kernel landed), cross-build, 2 rounds, hopperkit only. Run from the repo root:
#   HOPPERKIT_GIT_HASH=<main's hash> bash docs/wip/s68_call3.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/s68}; mkdir -p "$OUT" /tmp/xab
t0=$(date +%s)
TMPDIR=/tmp/xab OUT="$OUT" AB_SECONDS=120 AB_TEST_SECONDS=200 bash scripts/cross_ab.sh --rounds 2 \
  --tests "64_row_tiles or 256_row_tiles or k_tail_bitwise or deepseek_ep8_block or many_tokens or hy3_tp8" \
  --patch b="$PWD/docs/wip/s68-down-bulk-store.patch" --patch bt="$PWD/docs/wip/s68-down-bulk-store-lane-tile.patch" \
  -- moe_bench --no-reads --models hy3,qwen3-235b --modes tp8_ep1,tp1_ep8 --scalings per_tensor,block \
  --bs 256,1024,4096 > "$OUT/cross_ab.log" 2>&1
echo "cross_ab rc=$? $(( $(date +%s) - t0 ))s"; tail -24 "$OUT/cross_ab.log"
