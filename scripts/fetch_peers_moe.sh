#!/usr/bin/env bash
# fetch_peers_moe.sh: add FlashInfer's sm_90 CUTLASS fused MoE (JIT module fused_moe_90) to .peers/, pruned to
# the FP8 paths the MoE benchmark uses (per-tensor FP8 and DeepSeek 128x128 block scales), so that it builds here
# in ~40 minutes on 2 cores (the whole module, 248 sources, takes an estimated 3.5-4.5 h) and fits the carry.
#
# Needs scripts/fetch_peers.sh's download stage first (the unpacked wheel and its build venv under PEERS_WORK).
# Produces .peers/python/flashinfer/data/aot/fused_moe_90/fused_moe_90.so (found by FlashInfer's AOT lookup;
# peers_env.sh sets TRTLLM_DG_ENABLED=0 so block scales use the prebuilt kernel, not DeepGEMM's runtime JIT).
# Only FP8 weights work with this copy: other dtypes reach launchers that were pruned away.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${PEERS_WORK:-$HOME/.cache/hopperkit-peers}"
FULL="$WORK/full"
VENV="$WORK/venv"
JITWS="${PEERS_MOE_JIT_WS:-$WORK/jit-moe}"   # FlashInfer workspace of the build (objects are reused)
DEST="$REPO/.peers/python/flashinfer/data/aot/fused_moe_90"
export MAX_JOBS="${MAX_JOBS:-$(nproc)}"
[ -x "$VENV/bin/python" ] && [ -d "$FULL/flashinfer" ] || { echo "run scripts/fetch_peers.sh download first" >&2; exit 1; }
[ -d "$REPO/.peers/python/flashinfer" ] || { echo "run scripts/fetch_peers.sh first (.peers/ missing)" >&2; exit 1; }

export FLASHINFER_WORKSPACE_BASE="$JITWS" FLASHINFER_CUDA_ARCH_LIST=9.0a CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
# 1. FlashInfer writes the module's generated sources and its ninja file
BUILD_DIR=$(PYTHONPATH="$FULL" "$VENV/bin/python" - <<'PY'
from flashinfer.jit.fused_moe import gen_cutlass_fused_moe_sm90_module
spec = gen_cutlass_fused_moe_sm90_module()
spec.write_ninja()
print(spec.ninja_path.parent)
PY
)
echo "[fetch_peers_moe] build dir $BUILD_DIR"
# 2. keep the FP8 sources: the FP8 grouped-GEMM instantiations and the fp8 / bf16-input launchers
"$VENV/bin/python" - "$BUILD_DIR" <<'PY'
import re, sys
from pathlib import Path
d = Path(sys.argv[1])
lines = d.joinpath("build.ninja").read_text().replace("$\n", "").split("\n")
fp8_generated = {f"gemm_grouped_sm90_M128_group{i}" for i in range(21, 35)} | \
                {f"gemm_grouped_sm90_M256_group{i}" for i in range(6, 10)}
launchers_kept = {"fp8_fp8", "bf16_fp8"}
def wanted(obj: str) -> bool:
    name = obj.rsplit("/", 1)[-1]
    m = re.search(r"(gemm_grouped_sm90_M\d+_group\d+)\.generated", name)
    if "generated" in name:
        return bool(m) and m.group(1) in fp8_generated
    m = re.match(r"moe_gemm_moe_gemm_kernels_(\w+?)\.cuda\.o", name)
    return not m or m.group(1) in launchers_kept
out = []
for line in lines:
    if line.startswith("build ") and ": link " in line:
        head, objs = line.split(": link ")
        line = head + ": link " + " ".join(o for o in objs.split() if wanted(o))
    elif line.startswith("build ") and not wanted(line.split()[1].rstrip(":")):
        continue
    out.append(line)
d.joinpath("pruned.ninja").write_text("\n".join(out))
PY
# 3. build
ninja -C "$BUILD_DIR" -f pruned.ninja -j "$MAX_JOBS"
SO="$BUILD_DIR/fused_moe_90.so"
# 4. a pruned launcher referenced through data (a vtable or function pointer) would fail at load: refuse
UNDEF=$(nm -D --undefined-only "$SO" | awk '{print $2}' | sort -u)
BAD=$(readelf -rW "$SO" | awk '$3 ~ /R_X86_64_(GLOB_DAT|64)/ {print $5}' | sort -u | comm -12 - <(echo "$UNDEF") |
      grep -v -E '^(_ITM_|__gmon_start__|__cxa_finalize|_Jv_|__cxa_|_ZTV|_ZTI|_ZTS)' | grep -E 'tensorrt_llm|cutlass|moe' || true)
[ -z "$BAD" ] || { echo "[fetch_peers_moe] undefined symbols reached through data relocations:"; echo "$BAD"; exit 1; }
# 5. strip and place it where FlashInfer's AOT lookup looks
mkdir -p "$DEST"
strip --strip-unneeded -o "$DEST/fused_moe_90.so" "$SO"
ls -l "$DEST/fused_moe_90.so"
# 6. the MoE call path imports modules lazily (the autotuner's tactics_blocklist and _graph_timing, ...) that the
#    decode/prologue trace pruned away: add FlashInfer's top-level modules, autotuner/ and trace/ (pure Python)
PKG="$REPO/.peers/python/flashinfer"
( cd "$FULL/flashinfer" && find . -maxdepth 1 -name '*.py' && find autotuner trace -name '*.py' ) | while read -r f; do
  [ -f "$PKG/$f" ] || { mkdir -p "$(dirname "$PKG/$f")"; cp "$FULL/flashinfer/$f" "$PKG/$f"; }
done
# 7. record it in the bundle's manifest
MAN="$REPO/.peers/MANIFEST.txt"
sed -i '/^fused_moe_90 /d' "$MAN" 2>/dev/null || true
echo "fused_moe_90 (FP8-only, scripts/fetch_peers_moe.sh) sha256 $(sha256sum "$DEST/fused_moe_90.so" | cut -c1-64)" >> "$MAN"
du -sh "$REPO/.peers"
