#!/usr/bin/env bash
# Session 59 call 2: session 58's review mends, measured. m1: the per-tensor swapped gate-up's act codes through
# swap_gate_up_act_store in every kernel (the GEMM-index and 48-row kernels took the generic branch: they change
# SASS, +136-184 instructions in the 16- / 32-row index kernels; the warp kernels and all block-wise kernels are
# SASS-identical). m123: m1 + the hand-off record without the first slot (the warp forms task * S) + the consumers'
# test on the kernel's `handoff` flag (the 16- / 32-row warp kernels change SASS). Builds main (a), m1 and m123,
# hashes the swapped cases' outputs (docs/wip/s59_digest.py; each checked against the references) under a and m123
# with the GEMM index at its default and off (bitwise comparison), runs the hand-off tests under m123, then the
# 3-round A/B at per-tensor TP8 / EP8 4-64 tokens. Run from main's root, no carry (timeout_s 600).
set -uo pipefail
cd "$(dirname "$0")/../.."
t0=$(date +%s)
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
OUTD=${OUT:-/tmp/s59_out}; mkdir -p "$OUTD"
build() {  # name, source tree
  HOPPERKIT_GIT_HASH=s59-$1 cmake -S "$2" -B /tmp/b_$1 -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOPPERKIT_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE="$(command -v python3)" > /tmp/cfg_$1.log 2>&1 &&
  cmake --build /tmp/b_$1 --target _C -j "$(nproc)" > /tmp/bld_$1.log 2>&1 &&
  mkdir -p /tmp/v_$1/hopperkit && cp "$2"/python/hopperkit/*.py /tmp/v_$1/hopperkit/ && cp /tmp/b_$1/_C*.so /tmp/v_$1/hopperkit/
}
build a "$PWD" || { tail -30 /tmp/cfg_a.log /tmp/bld_a.log; exit 1; }
for p in m1 m123; do
  rm -rf /tmp/src_$p && mkdir -p /tmp/src_$p
  tar cf - --exclude=./build --exclude=./ab_variants --exclude=./.peers --exclude=./.git . | (cd /tmp/src_$p && tar xf -)
  (cd /tmp/src_$p && patch -p1 -s < docs/wip/s59-act-store-$p.patch) && build $p /tmp/src_$p ||
    { tail -30 /tmp/cfg_$p.log /tmp/bld_$p.log; exit 1; }
done
echo "built $(( $(date +%s) - t0 ))s"
for v in a m123; do
  for gi in def 0; do
    if [ $gi = 0 ]; then export HOPPERKIT_MOE_GEMM_INDEX=0; else unset HOPPERKIT_MOE_GEMM_INDEX; fi
    HK_TEST_SEED=59 PYTHONPATH=/tmp/v_$v timeout 150 python3 docs/wip/s59_digest.py "$OUTD/digest_${v}_$gi.json" 2>&1 | tail -3
    echo "digest $v gi=$gi rc=$? $(( $(date +%s) - t0 ))s"
  done
done
unset HOPPERKIT_MOE_GEMM_INDEX
python3 - "$OUTD" <<'PY'
import json, sys
o = sys.argv[1]
for gi in ("def", "0"):
    a = json.load(open(f"{o}/digest_a_{gi}.json")); b = json.load(open(f"{o}/digest_m123_{gi}.json"))
    diff = [k for k in a if a[k] != b.get(k)]
    print(f"digest gi={gi}: {len(a)} cases, {len(a) - len(diff)} bitwise equal, differ: {diff}")
PY
PYTHONPATH=/tmp/v_m123 timeout 120 python3 -m pytest tests/python/test_moe_gpu.py -q -p no:cacheprovider -k "split_handoff" 2>&1 | tail -2
echo "handoff tests $(( $(date +%s) - t0 ))s"
V=(a m1 m123)
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
V = ('a', 'm1', 'm123')
d = {v: [load(f'/tmp/ab_{v}_{i}.json') for i in (1, 2, 3)] for v in V}
rows = []
for k in sorted(d['a'][0]):
    if not all(k in x for v in d for x in d[v]): continue
    m = {v: st.median(x[k] for x in d[v]) for v in d}
    idx = k[1] == 'tp8_ep1' or k[2] <= 8
    rows.append({'model': k[0], 'mode': k[1], 'bs': k[2], 'index': idx, **m, 'runs': {v: [x[k] for x in d[v]] for v in d}})
    print(f"{k[0]:12s}{k[1]:8s}{k[2]:4d} {'index' if idx else '     '} a {m['a']:7.2f} m1/a {m['m1']/m['a']:.3f} m123/a {m['m123']/m['a']:.3f}")
for v in ('m1', 'm123'):
    for sel, f in (('index', lambda x: x['index']), ('other', lambda x: not x['index']), ('all', lambda x: True)):
        r = [x[v] / x['a'] for x in rows if f(x)]
        print(v, sel, 'geomean', round(math.exp(sum(map(math.log, r)) / len(r)), 4), round(min(r), 3), round(max(r), 3), len(r))
json.dump({'rows': rows}, open(os.environ['OUTD'] + '/ab_s59_call2.json', 'w'))
PY
echo "total $(( $(date +%s) - t0 ))s"
