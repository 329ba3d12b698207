#!/usr/bin/env bash
# Prepared in session 69 (compiled here, GPU-untested), for session 70's second call (the first:
#   HOPPERKIT_GIT_HASH=<main> scripts/gpu_round.sh --full-bench --benches moe --shard 1/2   with .peers carried,
# which re-measures moe.json on main and runs half the suite). This one: the other half of the suite, then the row
# groups at K = 256 (docs/wip/s70-down-row-groups-i256.patch: kKTail becomes an int, 2 = two whole stages, DeepSeek-V3
# TP8 per-tensor; every existing kernel's SASS unchanged, compared here; the new instance has no spill) against main,
# cross-build, 3 rounds, with the tests that run it (the pair cases' bitwise test: i256_bn128 runs the 128 x 256 down
# at I = 256) and a hy3 point as a control.
#   HOPPERKIT_GIT_HASH=<main's hash> bash docs/wip/s70_call2.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/s70c2}; mkdir -p "$OUT" /tmp/xab
t0=$(date +%s)
TEST_TIMEOUT=260 OUT="$OUT/suite" bash scripts/gpu_round.sh --no-bench --shard 2/2 2>&1 | grep -E "GPU tests|passed|failed|FAILED" | tail -5
TMPDIR=/tmp/xab OUT="$OUT" AB_SECONDS=100 AB_TEST_SECONDS=150 bash scripts/cross_ab.sh --rounds 3 \
  --tests "k_tail_bitwise or gate_up_pairs_cases or deepseek_tp8 or 256_row_tiles or many_tokens" \
  --patch r="$PWD/docs/wip/s70-down-row-groups-i256.patch" \
  -- moe_bench --no-reads --models deepseek-v3,hy3 --modes tp8_ep1 --scalings per_tensor --bs 4096,8192,16384 \
  > "$OUT/cross_ab.log" 2>&1
echo "cross_ab rc=$? $(( $(date +%s) - t0 ))s"; grep -E "^tests" "$OUT/cross_ab.log"; tail -10 "$OUT/cross_ab.log"
