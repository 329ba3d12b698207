#!/usr/bin/env bash
# Prepared in session 58 (not run): why the hand-off build slowed the GEMM-index gate-ups (docs/moe.md, Measurements
# in session 58: 1.010-1.105x at the 18 index points with its warp leaving at once; an idle 6th warp alone measured
# 0.994-1.014x). Two probes, each on the index kernels only (16- / 32-row per-tensor gate-ups with kIndex):
#   bound: the 2-CTA launch bound alone (ptxas: 88 / 137 registers against main's 82 / 126)
#   queue: the hand-off queue's shared memory and mbarrier init alone (same registers, 32 bytes more static smem)
# Builds main (a) and both probes on the device (the Python extension only, ~45 s each), then a cross-build A/B,
# 3 rounds rotated, per-tensor TP8 / EP8 4-64 tokens (index points: TP8 4-64, EP8 4-8). Run from main's root with
# no carry: `bash docs/wip/s59_call1.sh` (timeout_s 600, ~6 device-min).
set -uo pipefail
cd "$(dirname "$0")/../.."
t0=$(date +%s)
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
OUTD=${OUT:-/tmp/s59_out}; mkdir -p "$OUTD"
build() {  # name, source tree
  HOPPERKIT_GIT_HASH=probe-$1 cmake -S "$2" -B /tmp/b_$1 -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOPPERKIT_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE="$(command -v python3)" > /tmp/cfg_$1.log 2>&1 &&
  cmake --build /tmp/b_$1 --target _C -j "$(nproc)" > /tmp/bld_$1.log 2>&1 &&
  mkdir -p /tmp/v_$1/hopperkit && cp "$2"/python/hopperkit/*.py /tmp/v_$1/hopperkit/ && cp /tmp/b_$1/_C*.so /tmp/v_$1/hopperkit/
}
build a "$PWD" || { tail -30 /tmp/cfg_a.log /tmp/bld_a.log; exit 1; }
echo "built a $(( $(date +%s) - t0 ))s"
for p in bound queue; do
  rm -rf /tmp/src_$p && mkdir -p /tmp/src_$p
  tar cf - --exclude=./build --exclude=./ab_variants --exclude=./.peers --exclude=./.git . | (cd /tmp/src_$p && tar xf -)
  (cd /tmp/src_$p && patch -p1 -s < docs/wip/s59-index-$p-probe.patch) && build $p /tmp/src_$p ||
    { tail -30 /tmp/cfg_$p.log /tmp/bld_$p.log; exit 1; }
  echo "built $p $(( $(date +%s) - t0 ))s"
done
V=(a bound queue)
for i in 1 2 3; do
  for j in 0 1 2; do v=${V[$(( (j + i) % 3 ))]}
    PYTHONPATH=/tmp/v_$v timeout 80 python3 -m bench.moe_bench --impls hopperkit --scalings per_tensor \
      --modes tp8_ep1,tp1_ep8 --bs 4,8,16,32,64 --no-reads --out /tmp/ab_${v}_$i.json > /tmp/ab_${v}_$i.log 2>&1
    echo "$v $i rc=$? $(( $(date +%s) - t0 ))s"
  done
done
OUTD=$OUTD python3 - <<'PY'
import json, os, math, statistics as st
def load(f):
    d = json.load(open(f))
    return {(r['model'], r['mode'], r['bs']): r['us'] for r in d['rows'] if r['impl'] == 'hopperkit' and r.get('us')}
V = ('a', 'bound', 'queue')
d = {v: [load(f'/tmp/ab_{v}_{i}.json') for i in (1, 2, 3)] for v in V}
rows = []
for k in sorted(d['a'][0]):
    if not all(k in x for v in d for x in d[v]): continue
    m = {v: st.median(x[k] for x in d[v]) for v in d}
    idx = k[1] == 'tp8_ep1' or k[2] <= 8
    rows.append({'model': k[0], 'mode': k[1], 'bs': k[2], 'index': idx, **m, 'runs': {v: [x[k] for x in d[v]] for v in d}})
    print(f"{k[0]:12s}{k[1]:8s}{k[2]:4d} {'index' if idx else '     '} a {m['a']:7.2f} bound/a {m['bound']/m['a']:.3f} queue/a {m['queue']/m['a']:.3f}")
for v in ('bound', 'queue'):
    r = [x[v] / x['a'] for x in rows if x['index']]
    print(v, 'index points geomean', round(math.exp(sum(map(math.log, r)) / len(r)), 4), round(min(r), 3), round(max(r), 3), len(r))
json.dump({'rows': rows}, open(os.environ['OUTD'] + '/ab_s59_call1.json', 'w'))
PY
grep -h "^hopperkit:" /tmp/ab_*_1.log | cut -c1-120
echo "total $(( $(date +%s) - t0 ))s"
