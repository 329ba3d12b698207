#!/usr/bin/env bash
# Prepared in session 67 (GPU-untested), for the next device session: (1a) the per-tensor 128 x 256 down's K-tail
# kernel at I = 192 (docs/wip/s68-down-k-tail.patch: the item's second stage holds 64 bytes of K, its wgmma steps
# over the zero-filled half skipped: 24 QGMMA per item instead of 32, no spill; every other kernel's SASS unchanged, compared
# here) against main, cross-build, with its tests (the two bitwise pair-case tests: HOPPERKIT_MOE_DOWN_KTAIL=0 / 1
# must give equal bytes); (1b) in the same A/B, the per-tensor 128-row down's y stores by its producer warpgroup's
# three idle warps (docs/wip/s68-down-store-warps.patch: the consumers stage a block, hand it over on an mbarrier and
# start their next item; 128 x 256: two values spilled, none in the K loop; the other 20 down kernels' SASS
# unchanged); (2) the
# down's per-instruction stall profile at hy3 TP8 4096 on main's build (the
# second moe_gemm_kernel launch of one call). Run from the repo root on the device:
#   HOPPERKIT_GIT_HASH=<main's hash> bash docs/wip/s68_down_call.sh   (~9 device-min with the start: three builds, 3 rounds)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/s68}; mkdir -p "$OUT"
t0=$(date +%s)
mkdir -p /tmp/xab
TMPDIR=/tmp/xab OUT="$OUT" AB_SECONDS=120 AB_TEST_SECONDS=200 bash scripts/cross_ab.sh --rounds 3 \
  --tests "wide_gate_up or pairs or k_tail_bitwise or many_tokens or max_tokens or deepseek_tp8_per_tensor_long_k" \
  --patch k="$PWD/docs/wip/s68-down-k-tail.patch" --patch s="$PWD/docs/wip/s68-down-store-warps.patch" \
  -- moe_bench --no-reads \
  --models hy3,qwen3-235b --modes tp8_ep1 --scalings per_tensor --bs 1024,2048,4096,8192 \
  > "$OUT/cross_ab.log" 2>&1
echo "cross_ab rc=$? $(( $(date +%s) - t0 ))s"; tail -22 "$OUT/cross_ab.log"
T=$(ls -d /tmp/xab/tmp.*/ | head -1)
OUT="$OUT" PROFILE_TIMEOUT=150 bash scripts/profile_sass.sh down_hy3_4096 moe_gemm_kernel --skip 1 -- \
  env PYTHONPATH="$T/v_a" python3 -m bench.moe_stages --ncu --cases hy3:tp8_ep1:per_tensor:4096 \
  > "$OUT/prof_down.log" 2>&1
echo "profile rc=$? $(( $(date +%s) - t0 ))s"; head -60 "$OUT/prof_down.log"
