#!/usr/bin/env bash
# Session 60, call 3 (as call 2, on the second form: mergers poll an 'all arrived' word apart from the
# arrival counter): the one-level sliced merge of long pairs (docs/wip/s60-slice-merge2.patch, branch
# wip/s60-slice-merge) against main. Builds main (a) and the patch (s) (the extension only), runs the decode GPU
# tests on s, then a cross-build A/B of the decode scenarios (hopperkit only, BF16 + FP8), 3 rounds rotated.
# Run from main's root with no carry: `bash docs/wip/s60_call2.sh` (timeout_s 600, ~8 device-min).
set -uo pipefail
cd "$(dirname "$0")/../.."
t0=$(date +%s)
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
OUTD=${OUT:-/tmp/s60_out}; mkdir -p "$OUTD"
build() {  # name, source tree
  HOPPERKIT_GIT_HASH=s60-$1 cmake -S "$2" -B /tmp/b_$1 -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOPPERKIT_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE="$(command -v python3)" > /tmp/cfg_$1.log 2>&1 &&
  cmake --build /tmp/b_$1 --target _C -j "$(nproc)" > /tmp/bld_$1.log 2>&1 &&
  mkdir -p /tmp/v_$1/hopperkit && cp "$2"/python/hopperkit/*.py /tmp/v_$1/hopperkit/ && cp /tmp/b_$1/_C*.so /tmp/v_$1/hopperkit/
}
rm -rf /tmp/src_s2 && mkdir -p /tmp/src_s2
tar cf - --exclude=./build --exclude=./ab_variants --exclude=./.peers --exclude=./.git . | (cd /tmp/src_s2 && tar xf -)
(cd /tmp/src_s2 && patch -p1 -s < docs/wip/s60-slice-merge2.patch) || { echo "patch failed"; exit 1; }
[ -f /tmp/v_a/hopperkit/__init__.py ] || build a "$PWD" & build s2 /tmp/src_s2 & wait
[ -f /tmp/v_a/hopperkit/__init__.py ] && ls /tmp/v_s2/hopperkit/_C*.so >/dev/null 2>&1 ||
  { tail -30 /tmp/cfg_a.log /tmp/bld_a.log /tmp/cfg_s2.log /tmp/bld_s2.log; exit 1; }
echo "built $(( $(date +%s) - t0 ))s"
(cd /tmp/src_s2 && PYTHONPATH=/tmp/v_s2 timeout 240 python3 -m pytest tests/python/test_decode_gpu.py -q -p no:cacheprovider -x \
  -k "slice or merge_piece or one_long or longest or by_sm or graph" \
  > /tmp/tests_s2.log 2>&1); echo "tests rc=$? $(( $(date +%s) - t0 ))s"
tail -3 /tmp/tests_s2.log; grep -E "^(FAILED|ERROR)|Error|assert" /tmp/tests_s2.log | head -10; cp /tmp/tests_s2.log "$OUTD/"
V=(a s2)
for i in 1 2 3; do
  for j in 0 1; do v=${V[$(( (j + i) % 2 ))]}
    PYTHONPATH=/tmp/v_$v timeout 100 python3 -m bench.decode_bench --impls hopperkit --dtypes bf16,fp8 \
      --out /tmp/d_${v}_$i.json > /tmp/d_${v}_$i.log 2>&1
    echo "$v round $i rc=$? $(( $(date +%s) - t0 ))s"
  done
done
OUTD=$OUTD python3 - <<'PY'
import json, os, math, statistics as st
def load(f):
    d = json.load(open(f))
    return {(r['scenario'], r['dtype']): (r['us'], r.get('ok'), r.get('same_bytes_read_us')) for r in d['rows']
            if r['impl'] == 'hopperkit' and r.get('us')}
d = {v: [load(f'/tmp/d_{v}_{i}.json') for i in (1, 2, 3)] for v in ('a', 's2')}
rows = []
for k in d['a'][0]:
    if not all(k in x for v in d for x in d[v]): continue
    m = {v: st.median(x[k][0] for x in d[v]) for v in d}
    ok = all(x[k][1] for v in d for x in d[v])
    rows.append({'scenario': k[0], 'dtype': k[1], 'a_us': m['a'], 's2_us': m['s2'], 'ratio': m['s2'] / m['a'], 'ok': ok,
                 'read_us': d['a'][0][k][2], 'runs': {v: [x[k][0] for x in d[v]] for v in d}})
    print(f"{k[0]:16s}{k[1]:5s} main {m['a']:7.2f}  slices {m['s2']:7.2f}  s/a {m['s2'] / m['a']:.3f}  ok {ok}")
r = [x['ratio'] for x in rows]
print('geomean', round(math.exp(sum(map(math.log, r)) / len(r)), 4), 'min', round(min(r), 3), 'max', round(max(r), 3))
json.dump({'rows': rows}, open(os.environ['OUTD'] + '/ab_s60_call3.json', 'w'), indent=1)
PY
echo "total $(( $(date +%s) - t0 ))s"
