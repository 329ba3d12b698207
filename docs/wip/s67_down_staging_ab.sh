#!/usr/bin/env bash
# Session 67 call 7 (run from ab_variants/ then; this copy: docs/wip, the patch beside it): the 128 x 256 down tile staging its output in 4 rounds of 64 columns, which makes room for
# a 4th ring stage (docs/wip/s67-down-staging-rounds.patch), against main, at prefill TP8 points.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/s67}; mkdir -p "$OUT"
t0=$(date +%s)
OUT="$OUT" AB_SECONDS=90 AB_TEST_SECONDS=120 bash scripts/cross_ab.sh --rounds 2 \
  --tests "wide_gate_up or pairs_bitwise or many_tokens or max_tokens" \
  --patch q="$PWD/docs/wip/s67-down-staging-rounds.patch" -- moe_bench --no-reads \
  --models hy3,qwen3-235b,deepseek-v3 --modes tp8_ep1 --scalings per_tensor --bs 2048,4096 \
  > "$OUT/cross_ab.log" 2>&1
echo "cross_ab rc=$? $(( $(date +%s) - t0 ))s"; tail -16 "$OUT/cross_ab.log"
