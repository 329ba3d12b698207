#!/usr/bin/env bash
# Session 66 (run as its calls 4-5; call 5 with the sampling interval now passed below): the per-instruction stall reasons of the MoE kernel 1's one-CTA index build
# (docs/moe.md, Next, session 66: 3.3-4.9 µs whatever its work). No code change: main's build, installed by
# gpu_round.sh (no tests selected), then Nsight Compute's source page over one kernel-1 launch at qwen3 TP8 256
# tokens, twice: HOPPERKIT_MOE_PREP_BOUND=2 (the index build alone, one CTA: every sample is the build's), then
# the full kernel 1 (the index CTA and 128 quantisation CTAs; the quantisation code's samples are the larger part).
# In the digests: stall_no_instruction (instruction fetch), stall_imc_miss (the constant bank holding
# MoeKernelArgs), stall_long_scoreboard (the topk loads), stall_barrier. Run from the repo root on the device,
# HOPPERKIT_GIT_HASH=<main's hash> bash docs/wip/s67_call1.sh (no carry; ~2-3 device-min with the start).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/s67}; mkdir -p "$OUT"
t0=$(date +%s)
TEST_TIMEOUT=60 bash scripts/gpu_round.sh --no-bench --tests ab_selects_none > "$OUT/round.log" 2>&1
echo "build rc=$? $(( $(date +%s) - t0 ))s"; grep -E "built|FAILED" "$OUT/round.log" | head -3
for v in index:2 full:0; do n=${v%%:*} pb=${v#*:}
  HOPPERKIT_MOE_PREP_BOUND=$pb OUT="$OUT" SASS_DIGEST_ARGS="--context 2" NCU_ARGS="--warp-sampling-interval 0" \
    bash scripts/profile_sass.sh "prep_$n" \
    moe_prep_kernel -- python3 -m bench.moe_stages --ncu --cases qwen3-235b:tp8_ep1:per_tensor:256 \
    > "$OUT/prof_$n.log" 2>&1
  echo "profile $n rc=$? $(( $(date +%s) - t0 ))s"; head -70 "$OUT/prof_$n.log"
done
