#!/usr/bin/env bash
# Session 69, call 4: the K-tail down over row groups of two 128-row tiles (docs/wip/s69-down-row-groups.patch: one
# weight stage per group, the tiles' MMAs one after the other from it; output staged in 4 rounds) against main,
# cross-build, 3 rounds, with the MoE prefill tests on the patched build, then memcheck over the pair cases on it.
#   HOPPERKIT_GIT_HASH=<main's hash> bash docs/wip/s69_call4.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/s69c4}; mkdir -p "$OUT" /tmp/xab
t0=$(date +%s)
TMPDIR=/tmp/xab OUT="$OUT" AB_SECONDS=100 AB_TEST_SECONDS=240 bash scripts/cross_ab.sh --rounds 3 \
  --tests "k_tail_bitwise or gate_up_pairs or 64_row_tiles or 256_row_tiles or many_tokens or hy3_tp8 or wide_gate_up or stages_match or max_tokens or expert_parallel or routing_kinds" \
  --patch g="$PWD/docs/wip/s69-down-row-groups.patch" \
  -- moe_bench --no-reads --models hy3,qwen3-235b --modes tp8_ep1 --scalings per_tensor --bs 1024,2048,4096,8192,16384 \
  > "$OUT/cross_ab.log" 2>&1
echo "cross_ab rc=$? $(( $(date +%s) - t0 ))s"; grep -E "^tests|passed|failed" "$OUT/cross_ab.log" | head -5; tail -14 "$OUT/cross_ab.log"
T=$(ls -d /tmp/xab/tmp.*/ | head -1)
(cd "$T/src_g" && PYTHONPATH="$T/v_g" timeout 150 compute-sanitizer --tool memcheck --error-exitcode 17 --print-limit 20 \
  python3 -m pytest tests/python/test_moe_gpu.py -q -p no:cacheprovider -k "gate_up_pairs_cases or hy3_tp8" > "$OUT/memcheck_g.log" 2>&1)
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck_g.log" | tail -3
echo "done $(( $(date +%s) - t0 ))s"
