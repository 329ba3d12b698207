#!/usr/bin/env bash
# Same-build A/B of profiling switches in rotated rounds (the package already installed, e.g. by
# scripts/gpu_round.sh in the same call): every configuration's hopperkit-only benchmark run once per round, the
# order rotated from round to round, then bench/ab_rounds.py's medians and ratios against the first configuration.
# Usage: scripts/env_ab_rounds.sh BENCH "BENCH_ARGS" ROUNDS NAME=ENV=VALUE[" ENV=VALUE"...] [NAME=...]...
#   e.g. scripts/env_ab_rounds.sh prologue_bench "--no-step --tokens 4096,32768" 3 \
#          pair=HOPPERKIT_AB_BASELINE=1 span=HOPPERKIT_PROLOGUE_KERNEL=span
# Writes $OUT/ab_<BENCH>_rounds.json; each run is limited to AB_SECONDS (default 150).
set -uo pipefail
cd "$(dirname "$0")/.."
USAGE="usage: scripts/env_ab_rounds.sh BENCH BENCH_ARGS ROUNDS NAME=ENV=VALUE NAME=ENV=VALUE..."
[ $# -ge 5 ] || { echo "$USAGE (two configurations at least)"; exit 2; }
BENCH=$1 BARGS=$2 ROUNDS=$3; shift 3
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "$USAGE: ROUNDS must be a positive count, not '$ROUNDS'"; exit 2; }
[ -f "bench/$BENCH.py" ] || { echo "$USAGE: no benchmark bench/$BENCH.py"; exit 2; }
SEEN=" "
for spec in "$@"; do
  [[ "$spec" =~ ^[A-Za-z0-9_]+=[A-Za-z_][A-Za-z0-9_]*= ]] || { echo "$USAGE: '$spec' is not NAME=ENV=VALUE"; exit 2; }
  case "$SEEN" in *" ${spec%%=*} "*) echo "$USAGE: configuration '${spec%%=*}' named twice"; exit 2 ;; esac
  SEEN="$SEEN${spec%%=*} "
done
OUT=${OUT:-$PWD/ab_round_out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
TMP=$(mktemp -d)
CONFIGS=("$@")
N=${#CONFIGS[@]}
for r in $(seq 1 "$ROUNDS"); do
  for k in $(seq 0 $((N - 1))); do
    spec=${CONFIGS[$(((k + r - 1) % N))]}
    name=${spec%%=*} env=${spec#*=}
    # shellcheck disable=SC2086  # (a configuration may set several variables, separated by spaces)
    env $env timeout "${AB_SECONDS:-150}" $PY -m "bench.$BENCH" --impls hopperkit $BARGS --out "$TMP/${name}_$r.json" \
      > "$TMP/log_${name}_$r" 2>&1
    echo "round $r $name ($env): $(tail -1 "$TMP/log_${name}_$r")"
  done
done
NAMES=()
for spec in "${CONFIGS[@]}"; do NAMES+=("${spec%%=*}"); done
$PY -m bench.ab_rounds "$TMP" "$OUT/ab_${BENCH}_rounds.json" "$ROUNDS" "${NAMES[@]}"
rm -rf "$TMP"
