#!/usr/bin/env bash
# One profiling round on a Hopper GPU, in one call: build + install, then Nsight Compute on the cases whose
# time the notes cannot yet explain. Each case's full ncu text goes to $OUT/ncu_<case>.txt (at most 6 files),
# and a digest (duration, throughputs, occupancy, the top stall reasons) is printed.
#   MoE decode  hy3 tp8 bs 4:      all four kernels (prep, gate-up, down, reduce)
#   MoE prefill hy3 tp8 bs 4096:   the two GEMMs (wgmma 64-row tiles)
#   prologue    hy3_full 4096:     bf16 and fp8
#   decode      64 x 4096 and 16 x (1 x 128K + ...): the attention kernel
# Usage: scripts/profile_round.sh [--skip-build]   (no peers needed; about 3 minutes on an H200)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/profile_out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
if [ "${1:-}" != "--skip-build" ]; then
  export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
  $PY -m pip install --no-build-isolation --no-deps -q . > /tmp/hk_build.log 2>&1 || { tail -30 /tmp/hk_build.log; exit 1; }
fi
if [ ! -d bench/anchors ] && [ -d ../shared/anchors ]; then mkdir -p bench/anchors && cp ../shared/anchors/*.json bench/anchors/; fi
SECTIONS=(--print-details all --section SpeedOfLight --section LaunchStats --section Occupancy --section SchedulerStats
          --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis
          --section SourceCounters)
NCU=(ncu --clock-control none --profile-from-start off "${SECTIONS[@]}")
digest() {
  echo "==== $1"
  grep -E '^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|SM Active Cycles|Elapsed Cycles|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Issued Warp Per Scheduler|No Eligible|stalled|Stall' "$2" \
    | sed 's/  \+/ /g' | cut -c1-220 | head -60
}
run() {  # name, kernel regex, command...
  local name=$1 kre=$2; shift 2
  timeout "${PROFILE_TIMEOUT:-150}" "${NCU[@]}" --kernel-name "regex:$kre" "$@" > "$OUT/ncu_$name.txt" 2>&1
  digest "$name" "$OUT/ncu_$name.txt"
}
run moe_decode 'moe_' $PY -m bench.moe_stages --ncu --cases hy3:tp8_ep1:per_tensor:4
run moe_prefill 'moe_gemm' $PY -m bench.moe_stages --ncu --cases hy3:tp8_ep1:per_tensor:4096
run prologue 'attention_prologue' $PY -m bench.profile_prologue --case hy3_full --tokens 4096
run decode_uniform 'decode_attention' $PY -m bench.profile_decode --lens 64x4096
run decode_long 'decode_attention' $PY -m bench.profile_decode --lens 1x131072+31x4096
