#!/usr/bin/env bash
# Prepared in session 57 (not run): the split hand-off warp, branch wip/s58-handoff-warp (6281d71). Run from a
# checkout of that branch (its tests) with carry ["ab_variants/s58v.tar.xz", "ab_variants/s58_call1.sh"], ~8-9 min (timeout_s 600).
# Variants in ab_variants/s58v.tar.xz (Python 3.12 extensions built in session 57):
#   s57_e    main's GPU code (610ff61's kernels; wip/s57-publisher-last 4e4484e)
#   s57_tr2  trace build of main with the epilogue events (wip/s57-trace-epilogue 6732ba9)
#   s58_h    b40b5f4: the hand-off warp (default on)
#   s58_htr  trace build of b40b5f4
# (1) the MoE GPU tests on s58_h (the new bitwise test reruns split cases with HOPPERKIT_MOE_HANDOFF=0 and =1);
# (2) traces at the default rule, main and hand-off: the gate-up epilogue's steps (with the warp, 'stored' is the
# hand-off time, 'arrived' / act_done the warp's); (3) if the tests passed: cross-build A/B e vs h, 3 rounds
# rotated, per-tensor, TP8 / EP8, 4-1024 tokens (the 48-row tiles changed too: their act store is the shared helper).
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
python3 -c "import tarfile; tarfile.open('ab_variants/s58v.tar.xz').extractall('ab_variants')"
PYTHONPATH=$PWD/ab_variants/s58_h timeout 330 python3 -m pytest tests/python/test_moe_gpu.py -q -x -p no:cacheprovider \
  > $OUT/tests_h.log 2>&1
trc=$?
echo "tests rc=$trc $(( $(date +%s) - t0 ))s"; tail -3 $OUT/tests_h.log
CASES=qwen3-235b:tp1_ep8:per_tensor:16,qwen3-235b:tp1_ep8:per_tensor:32,deepseek-v3:tp1_ep8:per_tensor:16,qwen3-235b:tp8_ep1:per_tensor:4
for v in tr2:s57_tr2 htr:s58_htr; do n=${v%%:*}; d=${v#*:}
  PYTHONPATH=$PWD/ab_variants/$d timeout 120 python3 scripts/moe_trace.py --cases $CASES --json $OUT/trace_$n.json \
    > $OUT/trace_$n.log 2>&1
  echo "trace $n rc=$? $(( $(date +%s) - t0 ))s"
  awk '/^==/{print; g=0} /-- graph/{g=1; next} /-- eager/{g=0} g && /gate_up:|epilogue steps|item [0-9] \(/' \
    $OUT/trace_$n.log | cut -c1-200 | head -40
done
[ $trc -eq 0 ] || { echo "tests failed: no A/B"; exit 1; }
V=(e h)
for i in 1 2 3; do
  for j in 0 1; do v=${V[$(( (j + i) % 2 ))]}
    d=$([ $v = e ] && echo s57_e || echo s58_h)
    PYTHONPATH=$PWD/ab_variants/$d timeout 80 python3 -m bench.moe_bench --impls hopperkit --scalings per_tensor \
      --modes tp8_ep1,tp1_ep8 --bs 4,8,16,32,64,128,256,512,1024 --no-reads --out /tmp/ab_${v}_$i.json > /tmp/ab_${v}_$i.log 2>&1
    echo "$v $i rc=$? $(( $(date +%s) - t0 ))s"
  done
done
python3 - <<'PY'
import json, os, math, statistics as st
def load(f):
    d = json.load(open(f))
    return {(r['model'], r['mode'], r['bs']): (r['us'], r.get('ok')) for r in d['rows'] if r['impl'] == 'hopperkit' and r.get('us')}
d = {v: [load(f'/tmp/ab_{v}_{i}.json') for i in (1, 2, 3)] for v in ('e', 'h')}
rows = []
for k in sorted(d['e'][0]):
    if not all(k in x for v in d for x in d[v]): continue
    m = {v: st.median(x[k][0] for x in d[v]) for v in d}
    rows.append({'model': k[0], 'mode': k[1], 'bs': k[2], **m, 'runs': {v: [x[k][0] for x in d[v]] for v in d},
                 'ok_h': [x[k][1] for x in d['h']]})
    print(f"{k[0]:12s}{k[1]:8s}{k[2]:4d} e {m['e']:7.2f} h/e {m['h']/m['e']:.3f} ok {rows[-1]['ok_h']}")
r = [x['h'] / x['e'] for x in rows]
print('geomean h/e', math.exp(sum(map(math.log, r)) / len(r)), min(r), max(r), len(r))
json.dump({'rows': rows}, open(os.environ['OUT'] + '/ab_s58_call1.json', 'w'))
PY
echo "total $(( $(date +%s) - t0 ))s"
