#!/usr/bin/env bash
# Session 69, call 3 (main, warm or cold): memcheck over the pair cases (the K-tail down at I = 192, the pair
# gate-ups) and the MoE sanitizer subset, then the decode (scenarios, vLLM shapes) and prologue benchmarks with the
# peers, so that every result file names main's commit. Carry .peers.
#   HOPPERKIT_GIT_HASH=<main's hash> bash docs/wip/s69_call3.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/s69c3}; mkdir -p "$OUT"
t0=$(date +%s)
SANITIZE_TOOLS=memcheck SANITIZE_TIMEOUT=200 \
SANITIZE_SUB="gate_up_pairs_cases or test_64_row_tiles or (test_routing_kinds and 300-skewed) or test_expert_parallel_half_remote" \
  OUT="$OUT" bash scripts/gpu_round.sh --tests ab_selects_none --sanitize --full-bench --benches decode,prologue 2>&1 \
  | grep -vE "^\s*$" | tail -40
rm -f "$OUT/tests.log"
source scripts/peers_env.sh
export HOPPERKIT_COMMIT=${HOPPERKIT_GIT_HASH:-unknown}
timeout 200 python3 -m bench.decode_bench --shapes vllm --out "$OUT/decode_vllm_shapes.json" 2>&1 | grep -v "it/s" | tail -25
python3 -m bench.plot_decode "$OUT/decode_vllm_shapes.json" > /dev/null 2>&1 || echo "plot failed"
ls "$OUT"; echo "done $(( $(date +%s) - t0 ))s"
