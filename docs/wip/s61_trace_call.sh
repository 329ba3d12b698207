#!/usr/bin/env bash
# Prepared in session 60 (not run): where a waiting merger's time goes (NOTES session 60, Next 1). Builds main and
# docs/wip/s61-slice-trace.patch (the sliced merge of call 2 plus trace events in merge_slice: merge_in / loaded /
# out, and the wait's return in the `next0` slot) with HOPPERKIT_DECODE_TRACE=ON (the extension only), then
# scripts/decode_trace.py on one_64k_7x4k and skewed_extreme (FP8) under each: the per-event CTA times and the last
# CTA's timeline, main's two-level chain against the sliced merge's poll and round.
# Run from main's root with no carry: `bash docs/wip/s61_trace_call.sh` (timeout_s 400, ~3 device-min).
set -uo pipefail
cd "$(dirname "$0")/../.."
t0=$(date +%s)
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
OUTD=${OUT:-/tmp/s61_out}; mkdir -p "$OUTD"
build() {  # name, source tree: the traced extension into /tmp/vt_<name>/hopperkit
  HOPPERKIT_GIT_HASH=s61-tr-$1 bash scripts/build_ext.sh "$2" /tmp/bt_$1 /tmp/vt_$1 8 -DHOPPERKIT_DECODE_TRACE=ON
}
rm -rf /tmp/srct_s && mkdir -p /tmp/srct_s
tar cf - --exclude=./build --exclude=./ab_variants --exclude=./.peers --exclude=./.git . | (cd /tmp/srct_s && tar xf -)
(cd /tmp/srct_s && patch -p1 -s < docs/wip/s61-slice-trace.patch) || { echo "patch failed"; exit 1; }
build a "$PWD" & build s /tmp/srct_s & wait
for v in a s; do
  ls /tmp/vt_$v/hopperkit/_C*.so > /dev/null 2>&1 || { tail -30 /tmp/bt_$v.log; exit 1; }
done
echo "built $(( $(date +%s) - t0 ))s"
for v in a s; do
  PYTHONPATH=/tmp/vt_$v timeout 120 python3 scripts/decode_trace.py --scenarios one_64k_7x4k,skewed_extreme \
    --dtypes fp8 --tag $v --json "$OUTD/trace_$v.json" 2>&1 | tee "$OUTD/trace_$v.txt" | tail -60
  echo "trace $v $(( $(date +%s) - t0 ))s"
done
