#!/usr/bin/env bash
# fetch_peers.sh: build .peers/, an offline FlashInfer bundle for the lent H200 (sm_90a).
#
# Run here (x86-64, nvcc 13, Python with torch 2.11, PyPI reachable; no GPU needed).
# It produces, in <repo>/.peers/ (git-ignored):
#   python/flashinfer/          FlashInfer (pure Python, pruned to what the traced calls import)
#   python/flashinfer/data/aot/ prebuilt sm_90a JIT modules, found by FlashInfer's AOT lookup
#   python/tvm_ffi/             apache-tvm-ffi for CPython 3.12 (the device's Python)
#   MANIFEST.txt                versions, prebuilt modules (sha256), what the trace exercised
# On the device: `source scripts/peers_env.sh` (sets PYTHONPATH and FlashInfer's variables).
#
# Nothing is compiled on the device: modules not prebuilt here fail with
# MissingJITCacheError there (FLASHINFER_DISABLE_JIT=1 in peers_env.sh).
#
# Usage: scripts/fetch_peers.sh [all|download|build|trace|assemble|verify]   (default: all)
# Environment (all optional):
#   PEERS_WORK            scratch folder for wheels, builds, venv (default ~/.cache/hopperkit-peers)
#   PEERS_BUILD_PYTHON    Python with torch 2.11 used to build/trace (default: python3)
#   PEERS_VERIFY_PYTHON   a CPython 3.12 with torch 2.11 (like the device) to check the bundle
#                         itself; without it the check runs under the build Python with its
#                         own tvm_ffi (so the carried cp312 tvm_ffi is then only unpacked, not loaded)
#   PEERS_KV_DTYPES       KV dtypes to prebuild (default "bfloat16 float8_e4m3fn"); q/o are bfloat16
#   PEERS_HEAD_DIMS       head dims to prebuild (default "128"; the trace/verify walk-through uses 128)
#   MAX_JOBS              parallel nvcc jobs (default: nproc)
set -euo pipefail

FI_VERSION=0.7.4
TVM_FFI_VERSION=0.1.15.post2
CUDA_ARCH=9.0a
MAX_BUNDLE_MB=35

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="$REPO/.peers"
WORK="${PEERS_WORK:-$HOME/.cache/hopperkit-peers}"
BUILD_PY="${PEERS_BUILD_PYTHON:-python3}"
VERIFY_PY="${PEERS_VERIFY_PYTHON:-}"
export PEERS_KV_DTYPES="${PEERS_KV_DTYPES:-bfloat16 float8_e4m3fn}"
export PEERS_HEAD_DIMS="${PEERS_HEAD_DIMS:-128}"
export MAX_JOBS="${MAX_JOBS:-$(nproc)}"
STAGE="${1:-all}"

FULL="$WORK/full"          # the whole unpacked flashinfer wheel (build and trace run from it)
VENV="$WORK/venv"          # build venv: system torch + tvm_ffi and FlashInfer's small deps
JITWS="$WORK/jit"          # FLASHINFER_WORKSPACE_BASE for the build
AOT="$WORK/aot"            # <name>/<name>.so collected from the build
PYDIR="$WORK/py"           # helper scripts written by this script

log() { printf '[fetch_peers] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

pip_dl() { # pip_dl DEST SPEC [extra pip args]: one wheel, no deps
  local dest="$1" spec="$2"; shift 2
  "$BUILD_PY" -m pip download --no-deps --only-binary=:all: -d "$dest" "$spec" "$@" >&2
}

ensure_exclude() {
  local ex="$REPO/.git/info/exclude"
  if [ -d "$REPO/.git" ]; then
    mkdir -p "$(dirname "$ex")"
    grep -qxF '/.peers/' "$ex" 2>/dev/null || echo '/.peers/' >> "$ex"
  fi
}

stage_download() {
  mkdir -p "$WORK/wheels" "$WORK/wheels312"
  [ -f "$WORK/wheels/flashinfer_python-$FI_VERSION-py3-none-any.whl" ] ||
    pip_dl "$WORK/wheels" "flashinfer-python==$FI_VERSION"
  ls "$WORK/wheels312"/apache_tvm_ffi-"$TVM_FFI_VERSION"-cp312-*.whl >/dev/null 2>&1 ||
    pip_dl "$WORK/wheels312" "apache-tvm-ffi==$TVM_FFI_VERSION" \
      --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
      --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
  if [ ! -f "$FULL/.unpacked-$FI_VERSION" ]; then
    rm -rf "$FULL"; mkdir -p "$FULL"
    "$BUILD_PY" -m zipfile -e "$WORK/wheels/flashinfer_python-$FI_VERSION-py3-none-any.whl" "$FULL"
    touch "$FULL/.unpacked-$FI_VERSION"
  fi
  if [ ! -x "$VENV/bin/python" ]; then
    "$BUILD_PY" -c 'import torch' 2>/dev/null || die "$BUILD_PY has no torch (set PEERS_BUILD_PYTHON)"
    "$BUILD_PY" -m venv --system-site-packages "$VENV"
  fi
  # FlashInfer's import-time deps, plus cuda-core and safetensors, which the device has and
  # which FlashInfer probes for, so that the trace sees what the device will see
  "$VENV/bin/python" -c "import tvm_ffi, einops, tqdm, tabulate, pynvml, jinja2, filelock, cuda.core, safetensors" 2>/dev/null ||
    "$VENV/bin/python" -m pip install -q "apache-tvm-ffi==$TVM_FFI_VERSION" einops tqdm tabulate \
      nvidia-ml-py jinja2 filelock cuda-core safetensors >&2
  "$VENV/bin/python" -c "import torch, tvm_ffi; print('build python', torch.__version__, 'tvm_ffi', tvm_ffi.__version__)" >&2
}

write_helpers() {
  mkdir -p "$PYDIR"
  # ---- build.py: generate FlashInfer's JIT specs for the variants and build them with nvcc ----
  cat > "$PYDIR/build.py" <<'PY'
import json, os, shutil, sys, time
import torch
import flashinfer  # noqa: F401  (imports the package the specs come from)
from flashinfer.jit.core import build_jit_specs
from flashinfer.jit.attention import modules as M
from flashinfer.jit.rope import gen_rope_module
from flashinfer.jit.page import gen_page_module
from flashinfer.utils import PosEncodingMode

aot_out = sys.argv[1]
q = o = torch.bfloat16
idx = torch.int32
kvs = [getattr(torch, n) for n in os.environ["PEERS_KV_DTYPES"].split()]
hds = [int(h) for h in os.environ["PEERS_HEAD_DIMS"].split()]
none = PosEncodingMode.NONE.value
specs = [gen_rope_module(), gen_page_module()]
for hd in hds:
    for kv in kvs:
        a = (q, kv, o, idx, hd, hd, none, False, False)
        # use_tensor_cores=False: CUDA-core decode kernel (decode.get_batch_decode_module)
        specs.append(M.gen_batch_decode_module(*a))
        # use_tensor_cores=True on SM90 with backend="auto": fa2 prefill kernels
        # (prefill.get_batch_prefill_module("fa2", ...)): the primary module (K/V with equal
        # strides) and the lazily loaded one for K/V caches whose strides differ
        specs.append(M._gen_batch_prefill_primary_module("fa2", *a, False))
        specs.append(M._gen_batch_prefill_independent_paged_module("fa2", *a, False))
names = [s.name for s in specs]
print("building %d modules:" % len(specs), *names, sep="\n  ", flush=True)
t = time.time()
build_jit_specs(specs, verbose=os.environ.get("PEERS_VERBOSE") == "1", skip_prebuilt=False)
print("build took %.0f s" % (time.time() - t), flush=True)
os.makedirs(aot_out, exist_ok=True)
for s in specs:
    src = s.jit_library_path
    if not src.exists():
        sys.exit("missing build output: %s" % src)
    dst = os.path.join(aot_out, s.name, s.name + ".so")
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copy2(src, dst)
json.dump(names, open(os.path.join(aot_out, "modules.json"), "w"), indent=1)
PY
  # ---- trace.py: emulated (no GPU) walk through the benchmark's FlashInfer calls ----
  cat > "$PYDIR/trace.py" <<'PY'
# Runs BatchDecodeWithPagedKVCacheWrapper plan/run (use_tensor_cores False/True, bf16 and fp8
# KV), append_paged_kv_cache and the RoPE ops on CPU tensors, with the SM90 capability
# queries faked and each JIT module's functions replaced after the real .so was loaded by
# tvm_ffi. It records the modules Python imported, the package files it opened and the JIT
# modules FlashInfer asked for. No kernel runs; numerical results are NOT checked.
import json, os, sys
out_path = sys.argv[1]
opened = set()
def _hook(ev, args):
    if ev == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        p = os.fspath(args[0])
        opened.add(os.path.abspath(p.decode() if isinstance(p, bytes) else p))
sys.addaudithook(_hook)
import torch
_empty = torch.empty
def _empty_nopin(*a, **k):  # pinned host memory needs a GPU
    k.pop("pin_memory", None)
    return _empty(*a, **k)
torch.empty = _empty_nopin
import contextlib
torch.cuda.device = lambda d=None: contextlib.nullcontext()  # CUDA device guards: no-ops here
torch.cuda.is_current_stream_capturing = lambda: False
torch.cuda.current_device = lambda: 0
import flashinfer
import flashinfer.decode, flashinfer.prefill, flashinfer.rope, flashinfer.page  # noqa: E401,F401
import flashinfer.jit.core as core
import tvm_ffi as _tvm_ffi

class _Props:
    major, minor, multi_processor_count, name = 9, 0, 132, "NVIDIA H200 (emulated)"
_fakes = {
    "get_compute_capability": lambda d=None: (9, 0),
    "get_device_properties": lambda d=None: _Props(),
    "device_support_pdl": lambda d=None: True,
    "is_sm90a_supported": lambda d=None: True,
    "is_sm100a_supported": lambda d=None: False,
    "is_sm100f_supported": lambda d=None: False,
    "get_device_sm_count": lambda d=None: 132,
}
def _patch():
    for name, m in list(sys.modules.items()):
        if name.startswith("flashinfer") and m is not None:
            for k, v in _fakes.items():
                if hasattr(m, k):
                    setattr(m, k, v)
_patch()

loaded = []
class _Module:
    def __init__(self, rec, real):
        self._rec, self._real = rec, real
    def __getattr__(self, fn):
        getattr(self._real, fn)  # AttributeError if the real .so lacks the function
        def call(*a, **k):
            self._rec["calls"].append(fn)
            return [0] * 64 if fn == "plan" else None
        return call
class _TvmShim:
    def __getattr__(self, k):
        return getattr(_tvm_ffi, k)
    def load_module(self, path):
        real = _tvm_ffi.load_module(path)  # real dlopen + symbol lookup of the prebuilt module
        rec = {"path": os.path.abspath(path), "calls": []}
        loaded.append(rec)
        return _Module(rec, real)
core.tvm_ffi = _TvmShim()

bf16, e4m3 = torch.bfloat16, torch.float8_e4m3fn
B, PAGE, HQ, HKV, D = 4, 64, 8, 1, 128
kv_lens = torch.tensor([100, 64, 1, 300], dtype=torch.int32)
pages = (kv_lens + PAGE - 1) // PAGE
indptr = torch.zeros(B + 1, dtype=torch.int32)
indptr[1:] = torch.cumsum(pages, 0)
NP = int(indptr[-1])
indices = torch.arange(NP, dtype=torch.int32)
last = ((kv_lens - 1) % PAGE + 1).to(torch.int32)
results = []
ws = torch.zeros(1 << 20, dtype=torch.uint8)
def _decode(tc, kvdt, cache_kind="tuple", kv_layout="NHD", graph=False, backend="auto", lse=False):
    kw = {}
    if graph:
        kw = dict(use_cuda_graph=True, paged_kv_indptr_buffer=torch.zeros(B + 1, dtype=torch.int32),
                  paged_kv_indices_buffer=torch.zeros(NP, dtype=torch.int32),
                  paged_kv_last_page_len_buffer=torch.zeros(B, dtype=torch.int32))
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, kv_layout, use_tensor_cores=tc, backend=backend, **kw)
    w.plan(indptr, indices, last, HQ, HKV, D, PAGE,
           q_data_type=bf16, kv_data_type=kvdt, o_data_type=bf16)
    qt = torch.randn(B, HQ, D).to(bf16)
    shape = (NP, PAGE, HKV, D) if kv_layout == "NHD" else (NP, HKV, PAGE, D)
    if cache_kind == "tuple":
        cache = (torch.zeros(shape).to(kvdt), torch.zeros(shape).to(kvdt))
    elif cache_kind == "tuple_unequal_strides":  # V a strided view: FA2 uses its second module
        cache = (torch.zeros(shape).to(kvdt), torch.zeros(*shape[:-1], 2 * D).to(kvdt)[..., :D])
    else:
        cache = torch.zeros(shape[0], 2, *shape[1:]).to(kvdt)
    scale = 0.5 if kvdt == e4m3 else None
    o = w.run(qt, cache, k_scale=scale, v_scale=scale, return_lse=lse)
    o = o[0] if lse else o
    results.append({"op": "decode", "use_tensor_cores": tc, "kv": str(kvdt), "cache": cache_kind,
                    "kv_layout": kv_layout, "cuda_graph": graph, "backend": backend, "return_lse": lse,
                    "resolved_backend": w.resolved_backend, "out": [list(o.shape), str(o.dtype)]})
    _patch()
for tc in (False, True):
    for kvdt in (bf16, e4m3):
        for cache_kind in ("tuple", "5d"):
            _decode(tc, kvdt, cache_kind)
        _decode(tc, kvdt, graph=True)
        _decode(tc, kvdt, kv_layout="HND", lse=True)
        if tc:
            _decode(tc, kvdt, "tuple_unequal_strides")
    _decode(tc, bf16, backend="fa2")
nnz = int(kv_lens.sum())
seq_indptr = torch.zeros(B + 1, dtype=torch.int32)
seq_indptr[1:] = torch.cumsum(kv_lens, 0)
try:
    bi, pos = flashinfer.get_batch_indices_positions(seq_indptr, kv_lens, nnz)
    results.append({"op": "get_batch_indices_positions", "ran": True})
except Exception as e:  # a Triton kernel: needs the GPU; the import path is what matters here
    results.append({"op": "get_batch_indices_positions", "ran": False, "why": type(e).__name__})
    bi = torch.zeros(nnz, dtype=torch.int32)
    pos = torch.zeros(nnz, dtype=torch.int32)
for kvdt in (bf16, e4m3):
    kc = torch.zeros(NP, PAGE, HKV, D).to(kvdt)
    vc = torch.zeros(NP, PAGE, HKV, D).to(kvdt)
    flashinfer.append_paged_kv_cache(torch.randn(nnz, HKV, D).to(kvdt), torch.randn(nnz, HKV, D).to(kvdt),
                                     bi, pos, (kc, vc), indices, indptr, last, kv_layout="NHD")
    results.append({"op": "append_paged_kv_cache", "kv": str(kvdt)})
qk_pos = torch.arange(nnz, dtype=torch.int64)
cos_sin = torch.randn(4096, D, dtype=torch.float32)
qr = torch.randn(nnz, HQ * D).to(bf16)
kr = torch.randn(nnz, HKV * D).to(bf16)
flashinfer.rope.apply_rope_with_cos_sin_cache_inplace(qk_pos, qr, kr, D, cos_sin, is_neox=True)
results.append({"op": "apply_rope_with_cos_sin_cache_inplace"})
flashinfer.rope.apply_rope_pos_ids_inplace(qr.view(nnz, HQ, D), kr.view(nnz, HKV, D),
                                           qk_pos.to(torch.int32), rope_theta=1e4)
results.append({"op": "apply_rope_pos_ids_inplace"})

pkg = os.path.dirname(os.path.abspath(flashinfer.__file__))
mods = sorted({os.path.abspath(m.__file__) for m in list(sys.modules.values())
               if getattr(m, "__file__", None)})
json.dump({"python": sys.version, "torch": torch.__version__, "tvm_ffi": _tvm_ffi.__file__,
           "flashinfer": flashinfer.__version__, "package_dir": pkg, "results": results,
           "loaded": loaded, "modules": mods, "opened": sorted(opened)},
          open(out_path, "w"), indent=1)
for r in results:
    print(json.dumps(r))
for l in loaded:
    print("loaded", os.path.relpath(l["path"], pkg), "calls:", ",".join(sorted(set(l["calls"]))))
PY
  # ---- assemble.py: copy the traced subset of the package plus the prebuilt modules ----
  cat > "$PYDIR/assemble.py" <<'PY'
import json, os, shutil, sys
full, aot, trace, dest = sys.argv[1:5]
t = json.load(open(trace))
pkg = os.path.realpath(t["package_dir"])            # <full>/flashinfer
root = os.path.dirname(pkg)
keep = set()
for f in t["modules"] + t["opened"]:
    f = os.path.realpath(f)
    if f.startswith(pkg + os.sep) and os.path.isfile(f) and os.sep + "data" + os.sep + "aot" + os.sep not in f:
        keep.add(os.path.relpath(f, root))
# every package on the way keeps its __init__.py; plus small metadata files
for rel in list(keep):
    d = os.path.dirname(rel)
    while d:
        init = os.path.join(d, "__init__.py")
        if os.path.exists(os.path.join(root, init)):
            keep.add(init)
        d = os.path.dirname(d)
for extra in ("flashinfer/py.typed", "flashinfer/_build_meta.py", "flashinfer/version.py"):
    if os.path.exists(os.path.join(root, extra)):
        keep.add(extra)
for rel in sorted(keep):
    os.makedirs(os.path.join(dest, os.path.dirname(rel)), exist_ok=True)
    shutil.copy2(os.path.join(root, rel), os.path.join(dest, rel))
# dist-info without RECORD (it would list the pruned files)
for d in os.listdir(root):
    if d.startswith("flashinfer_python-") and d.endswith(".dist-info"):
        shutil.copytree(os.path.join(root, d), os.path.join(dest, d),
                        ignore=shutil.ignore_patterns("RECORD"), dirs_exist_ok=True)
names = json.load(open(os.path.join(aot, "modules.json")))
for n in names:
    os.makedirs(os.path.join(dest, "flashinfer", "data", "aot", n), exist_ok=True)
    shutil.copy2(os.path.join(aot, n, n + ".so"), os.path.join(dest, "flashinfer", "data", "aot", n, n + ".so"))
print("kept %d package files, %d prebuilt modules" % (len(keep), len(names)))
PY
}

flashinfer_env() { # common environment for build/trace runs
  export FLASHINFER_CUDA_ARCH_LIST="$CUDA_ARCH"
  export FLASHINFER_LOGGING_LEVEL="${FLASHINFER_LOGGING_LEVEL:-warning}"
  export CUDA_HOME="${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}"
}

stage_build() {
  command -v nvcc >/dev/null || die "nvcc not on PATH"
  write_helpers
  flashinfer_env
  log "building modules for FLASHINFER_CUDA_ARCH_LIST=$CUDA_ARCH with $MAX_JOBS jobs (tens of minutes on 2 cores; ninja resumes)"
  FLASHINFER_WORKSPACE_BASE="$JITWS" PYTHONPATH="$FULL" "$VENV/bin/python" "$PYDIR/build.py" "$AOT"
}

stage_trace() {
  write_helpers
  flashinfer_env
  # the full package gets the prebuilt modules where FlashInfer's AOT lookup searches
  rm -rf "$FULL/flashinfer/data/aot"; mkdir -p "$FULL/flashinfer/data/aot"
  cp -r "$AOT"/*/ "$FULL/flashinfer/data/aot/"
  rm -rf "$WORK/trace-ws"
  log "tracing the benchmark's calls on the full package (emulated SM90, no GPU)"
  FLASHINFER_DISABLE_JIT=1 FLASHINFER_WORKSPACE_BASE="$WORK/trace-ws" PYTHONPATH="$FULL" \
    "$VENV/bin/python" "$PYDIR/trace.py" "$WORK/trace.json"
}

stage_assemble() {
  write_helpers
  ensure_exclude
  rm -rf "$PEERS"; mkdir -p "$PEERS/python"
  "$VENV/bin/python" "$PYDIR/assemble.py" "$FULL" "$AOT" "$WORK/trace.json" "$PEERS/python"
  # apache-tvm-ffi for CPython 3.12, without its C++ headers and sources (only needed to
  # compile; core.so itself links lib/libtvm_ffi.so and lib/libtvm_ffi_testing.so)
  "$VENV/bin/python" -m zipfile -e "$(ls "$WORK/wheels312"/apache_tvm_ffi-"$TVM_FFI_VERSION"-cp312-*.whl)" "$PEERS/python"
  rm -rf "$PEERS/python/tvm_ffi/3rdparty" "$PEERS/python/tvm_ffi/src" "$PEERS/python/tvm_ffi/cython" \
         "$PEERS/python/tvm_ffi/include"
  rm -f "$PEERS/python"/apache_tvm_ffi-*.dist-info/RECORD
  {
    echo "hopperkit peers bundle, built by scripts/fetch_peers.sh on $(date -u +%FT%TZ)"
    echo "flashinfer-python $FI_VERSION (pruned), apache-tvm-ffi $TVM_FFI_VERSION (cp312)"
    echo "modules prebuilt with FLASHINFER_CUDA_ARCH_LIST=$CUDA_ARCH (sm_90a SASS only, no PTX), $(nvcc --version | tail -1)"
    echo "build python: $("$VENV/bin/python" -c 'import sys,torch;print(sys.version.split()[0], "torch", torch.__version__)')"
    echo "host glibc/libstdc++ needed by the .so files:"
    find "$PEERS/python/flashinfer/data/aot" -name '*.so' -exec objdump -T {} \; 2>/dev/null |
      grep -oE 'GLIBC(XX)?_[0-9.]+' | sort -uV | tr '\n' ' '; echo
    echo "prebuilt modules (flashinfer/data/aot/<name>/<name>.so), sha256:"
    (cd "$PEERS/python/flashinfer/data/aot" && sha256sum */*.so)
    echo "calls walked through by the emulated trace (no kernel ran), with the modules they loaded:"
    "$VENV/bin/python" -c 'import json,sys,os; t=json.load(open(sys.argv[1]))
for r in t["results"]: print("  ", json.dumps(r))
for l in t["loaded"]: print("   loaded", os.path.basename(l["path"]), "calls", sorted(set(l["calls"])))' "$WORK/trace.json"
  } > "$PEERS/MANIFEST.txt"
  local mb; mb=$(du -sm --apparent-size "$PEERS" | cut -f1)
  log "bundle: $PEERS, $mb MiB (apparent size), $(find "$PEERS" -type f | wc -l) files"
  [ "$mb" -le "$MAX_BUNDLE_MB" ] || die "bundle is $mb MiB, above the $MAX_BUNDLE_MB MiB budget"
}

stage_verify() {
  write_helpers
  flashinfer_env
  local vdir="$WORK/verify" py pp
  rm -rf "$vdir"; mkdir -p "$vdir"
  if [ -n "$VERIFY_PY" ]; then
    py="$VERIFY_PY"; pp="$PEERS/python"
    log "verifying the bundle as carried: $VERIFY_PY, PYTHONPATH=.peers/python only"
  else
    py="$VENV/bin/python"; mkdir -p "$vdir/pp"; ln -s "$PEERS/python/flashinfer" "$vdir/pp/flashinfer"; pp="$vdir/pp"
    log "verifying the pruned flashinfer with the build Python and its own tvm_ffi (set PEERS_VERIFY_PYTHON for cp312)"
  fi
  (
    # what peers_env.sh sets on the device, apart from PYTHONPATH
    export FLASHINFER_DISABLE_JIT=1 FLASHINFER_WORKSPACE_BASE="$vdir/ws" FLASHINFER_CUDA_ARCH_LIST="$CUDA_ARCH"
    unset CUDA_HOME
    cd "$vdir" && PYTHONPATH="$pp" PYTHONNOUSERSITE=1 "$py" "$PYDIR/trace.py" "$vdir/trace.json"
  )
  "$VENV/bin/python" - "$WORK/trace.json" "$vdir/trace.json" "$PEERS/python" "$vdir/ws" <<'PY'
import json, os, sys
ref, got = (json.load(open(p)) for p in sys.argv[1:3])
peers, ws = os.path.realpath(sys.argv[3]), sys.argv[4]
assert got["results"] == ref["results"], "results differ from the full package"
names = lambda t: sorted(os.path.basename(l["path"]) for l in t["loaded"])
assert names(got) == names(ref), (names(got), names(ref))
for l in got["loaded"]:
    assert os.path.realpath(l["path"]).startswith(peers + "/flashinfer/data/aot/"), l["path"]
built = [os.path.join(d, f) for d, _, fs in os.walk(ws) for f in fs if f.endswith(".so")]
assert not built, "something was compiled: %s" % built
print("verify: OK: same results as the full package, %d prebuilt modules loaded from the bundle, "
      "nothing compiled; python %s" % (len(got["loaded"]), got["python"].split()[0]))
PY
}

case "$STAGE" in
  download) stage_download ;;
  build)    stage_build ;;
  trace)    stage_trace ;;
  assemble) stage_assemble ;;
  verify)   stage_verify ;;
  all)      stage_download; stage_build; stage_trace; stage_assemble; stage_verify ;;
  *) die "unknown stage $STAGE" ;;
esac
