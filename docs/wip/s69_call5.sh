#!/usr/bin/env bash
# Session 69, call 5 (the session's last device seconds): the row-group K-tail down with its items column block
# fastest (docs/wip/s69-down-row-groups-col.patch; call 4's group-fastest order measured 1.049x at hy3 TP8 8192)
# against main, cross-build, 2 rounds, the bitwise K-tail and pair-case tests on the patched build.
#   HOPPERKIT_GIT_HASH=<main's hash> bash docs/wip/s69_call5.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/s69c5}; mkdir -p "$OUT" /tmp/xab
t0=$(date +%s)
TMPDIR=/tmp/xab OUT="$OUT" AB_SECONDS=60 AB_TEST_SECONDS=90 bash scripts/cross_ab.sh --rounds 2 \
  --tests "k_tail_bitwise or gate_up_pairs_cases" --patch c="$PWD/docs/wip/s69-down-row-groups-col.patch" \
  -- moe_bench --no-reads --models hy3,qwen3-235b --modes tp8_ep1 --scalings per_tensor --bs 2048,4096,8192,16384 \
  > "$OUT/cross_ab.log" 2>&1
echo "cross_ab rc=$? $(( $(date +%s) - t0 ))s"; grep -E "^tests" "$OUT/cross_ab.log"; tail -11 "$OUT/cross_ab.log"
