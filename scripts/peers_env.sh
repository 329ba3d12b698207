# peers_env.sh: source on the device (bash) to use the FlashInfer bundle in .peers/,
# built here by scripts/fetch_peers.sh and carried with the tree (carry: [".peers"]).
#   source scripts/peers_env.sh && python3 -c 'import flashinfer; print(flashinfer.__version__)'
# Nothing is installed and nothing is compiled: kernels come prebuilt for sm_90a from
# .peers/python/flashinfer/data/aot/. A call that needs a module not prebuilt raises
# flashinfer.jit.core.MissingJITCacheError instead of starting nvcc (FLASHINFER_DISABLE_JIT=1).
_peers_here="${BASH_SOURCE[0]:-$0}"
_peers_root="$(cd "$(dirname "$_peers_here")/.." && pwd)/.peers"
if [ ! -d "$_peers_root/python/flashinfer/data/aot" ]; then
  echo "peers_env.sh: $_peers_root is missing or incomplete: run scripts/fetch_peers.sh here and carry .peers" >&2
  return 1 2>/dev/null || exit 1
fi
case ":${PYTHONPATH:-}:" in
  *":$_peers_root/python:"*) ;;
  *) export PYTHONPATH="$_peers_root/python${PYTHONPATH:+:$PYTHONPATH}" ;;
esac
# FlashInfer writes logs, lock files and generated sources under this folder (small).
export FLASHINFER_WORKSPACE_BASE="${FLASHINFER_WORKSPACE_BASE:-/tmp/hopperkit-flashinfer}"
# Fail fast instead of JIT-compiling a module that was not prebuilt.
export FLASHINFER_DISABLE_JIT="${FLASHINFER_DISABLE_JIT:-1}"
# The prebuilt modules are sm_90a only; this also keeps FlashInfer from probing other archs.
export FLASHINFER_CUDA_ARCH_LIST="${FLASHINFER_CUDA_ARCH_LIST:-9.0a}"
export FLASHINFER_LOGGING_LEVEL="${FLASHINFER_LOGGING_LEVEL:-warning}"
# Fused MoE (scripts/fetch_peers_moe.sh): block scales through the prebuilt CUTLASS kernel, not DeepGEMM's
# runtime JIT (which would need nvcc and headers on the device).
export TRTLLM_DG_ENABLED="${TRTLLM_DG_ENABLED:-0}"
unset _peers_here _peers_root
