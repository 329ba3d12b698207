#!/usr/bin/env bash
# Session 60, call 1: docs/decode_merge_plan.md step 1 (the ceiling and the hardware), on main.
#  (a) FP8 decode scenarios, hopperkit only, merges on (default) against HOPPERKIT_DECODE_DEBUG=2 (merges
#      skipped: results wrong, time only), 3 rounds rotated: what the merges cost today;
#  (b)+(c) bench/micro/cluster_merge.cu: residency of clusters of 1-16 CTAs shaped like fp8q_r16, and the hand-off
#      latency of one merge group through global memory against st.async / bulk copies into the merger's smem.
# Run from main's root with no carry: `bash docs/wip/s60_call1.sh` (timeout_s 600, ~5 device-min).
set -uo pipefail
cd "$(dirname "$0")/../.."
t0=$(date +%s)
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
OUTD=${OUT:-/tmp/s60_out}; mkdir -p "$OUTD"
nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Iinclude -Isrc bench/micro/cluster_merge.cu \
  src/common/tensor_map.cpp src/common/error.cpp -o /tmp/cluster_merge > /tmp/micro_build.log 2>&1 ||
  { tail -20 /tmp/micro_build.log; }
timeout 60 /tmp/cluster_merge 2>&1 | tee "$OUTD/cluster_merge.txt"
echo "micro done $(( $(date +%s) - t0 ))s"
HOPPERKIT_GIT_HASH=${HOPPERKIT_GIT_HASH:-s60-main} cmake -S . -B /tmp/b_a -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DHOPPERKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE="$(command -v python3)" > /tmp/cfg_a.log 2>&1 &&
  cmake --build /tmp/b_a --target _C -j "$(nproc)" > /tmp/bld_a.log 2>&1 &&
  mkdir -p /tmp/v_a/hopperkit && cp python/hopperkit/*.py /tmp/v_a/hopperkit/ && cp /tmp/b_a/_C*.so /tmp/v_a/hopperkit/ ||
  { tail -30 /tmp/cfg_a.log /tmp/bld_a.log; exit 1; }
echo "built $(( $(date +%s) - t0 ))s"
for i in 1 2 3; do
  for dbg in $([ $i = 2 ] && echo "2 0" || echo "0 2"); do
    HOPPERKIT_DECODE_DEBUG=$dbg PYTHONPATH=/tmp/v_a timeout 120 python3 -m bench.decode_bench --impls hopperkit \
      --dtypes fp8 --out /tmp/d_${dbg}_$i.json > /tmp/d_${dbg}_$i.log 2>&1
    echo "debug=$dbg round $i rc=$? $(( $(date +%s) - t0 ))s"
  done
done
OUTD=$OUTD python3 - <<'PY'
import json, os, statistics as st
def load(f):
    d = json.load(open(f))
    return {r['scenario']: (r['us'], r.get('same_bytes_read_us')) for r in d['rows'] if r['impl'] == 'hopperkit' and r.get('us')}
d = {g: [load(f'/tmp/d_{g}_{i}.json') for i in (1, 2, 3)] for g in ('0', '2')}
rows = []
for s in d['0'][0]:
    if not all(s in x for g in d for x in d[g]): continue
    m0 = st.median(x[s][0] for x in d['0']); m2 = st.median(x[s][0] for x in d['2'])
    rd = st.median(x[s][1] for x in d['0'] if x[s][1])
    rows.append({'scenario': s, 'dtype': 'fp8', 'default_us': m0, 'no_merge_us': m2, 'read_us': rd,
                 'runs': {g: [x[s][0] for x in d[g]] for g in d}})
    print(f"{s:18s} default {m0:7.2f}  merges skipped {m2:7.2f}  saved {m0 - m2:5.2f} us  read {rd:6.2f}")
json.dump({'rows': rows}, open(os.environ['OUTD'] + '/ab_s60_call1.json', 'w'), indent=1)
PY
echo "total $(( $(date +%s) - t0 ))s"
