#!/usr/bin/env bash
# The test command: builds hopperkit (all kernels for sm_90a) and its C++ tests, then runs
#   1. the C++ CPU tests (planner twin, heuristics, input validation) with ctest,
#   2. the Python tests (pytest). GPU tests run only on an sm_90 GPU and are skipped with a reason elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
echo "== build + install the Python package (pip install .)"
$PY -m pip install --no-build-isolation --no-deps . 
echo "== C++ tests"
cmake -S . -B build/cpp-tests -DHOPPERKIT_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build/cpp-tests --target hopperkit_cpu_tests hopperkit_example_fused_moe -j "$JOBS"
ctest --test-dir build/cpp-tests --output-on-failure
echo "== decode trace build (HOPPERKIT_DECODE_TRACE): compile check of a kernel variant, its twin without the sliced merge, and the launcher"
NVCC=${CUDACXX:-nvcc}
TRACE_FLAGS=(-std=c++17 -O3 -Iinclude -Isrc -Ibuild/cpp-tests/generated -DHOPPERKIT_DECODE_TRACE=1)
$NVCC "${TRACE_FLAGS[@]}" -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
  -c src/decode/variants/attention_bf16_r16.cu -o build/cpp-tests/trace_check_kernel.o
$NVCC "${TRACE_FLAGS[@]}" -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
  -c src/decode/variants/attention_bf16_r16_ns.cu -o build/cpp-tests/trace_check_kernel_ns.o
$NVCC "${TRACE_FLAGS[@]}" -c src/decode/attention_launch.cpp -o build/cpp-tests/trace_check_launch.o
echo "== MoE trace build (HOPPERKIT_MOE_TRACE): compile check of the down GEMM's kernels and the launcher"
MOE_TRACE_FLAGS=(-std=c++17 -O3 -Iinclude -Isrc -Ibuild/cpp-tests/generated -DHOPPERKIT_MOE_TRACE=1)
$NVCC "${MOE_TRACE_FLAGS[@]}" -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
  -c src/moe/gemm_down.cu -o build/cpp-tests/moe_trace_check_kernel.o
$NVCC "${MOE_TRACE_FLAGS[@]}" -c src/moe/fused_moe.cpp -o build/cpp-tests/moe_trace_check_launch.o
echo "== micro-benchmarks (bench/micro): compile check"
for m in weight_stream down_stream cta_placement cluster_merge; do
  $NVCC -std=c++17 -O3 -Iinclude -Isrc -gencode arch=compute_90a,code=sm_90a bench/micro/$m.cu \
    src/common/tensor_map.cpp src/common/error.cpp -o build/cpp-tests/micro_$m
done
echo "== Python tests"
cd tests/python && $PY -m pytest -q -rs
