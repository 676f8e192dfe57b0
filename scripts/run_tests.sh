#!/usr/bin/env bash
# The test job (README command 2): install what is needed, build everything that this machine
# can build (the generator always; kernels, runtime and every generated task source when the
# CUDA toolkit is present), and run all tests. GPU tests skip cleanly without a GPU.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export NCCL_NVLS_ENABLE=0
"$root/scripts/setup.sh"
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
  preset=default
else
  echo "[tests] no CUDA toolkit: building and testing the generator only"
  preset=generator-only
fi
jobs="$(nproc 2>/dev/null || echo 2)"
# Without a GPU nothing compiled here runs: a compile-check build (Note [Compile-check builds] in
# CMakeLists.txt). FK_COMPILE_CHECK=0 or 1 in the environment decides it instead.
check="${FK_COMPILE_CHECK:-}"
if [ -z "$check" ]; then
  if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then check=0; else check=1; fi
fi
if [ "$preset" = default ]; then
  if [ "$check" = 1 ]; then
    echo "[tests] no GPU: compile-check build (PTX only, host code at -O1); GPU tests will skip"
    cmake --preset "$preset" -DFK_COMPILE_CHECK=ON
  else
    cmake --preset "$preset" -DFK_COMPILE_CHECK=OFF
  fi
else
  cmake --preset "$preset"
fi
cmake --build --preset "$preset" -j "$jobs"
if [ "$preset" = default ] && [ "$check" = 1 ]; then
  # No GPU: fk_gpu_tests' ~1800 tests (label gpu_suite) each only skip; one process runs them all (each must skip or
  # pass cleanly) instead of one process per test, ~1.5 minutes less on 2 cores. Every other test runs under ctest.
  ctest --test-dir "build/$preset" --output-on-failure -j "$jobs" -LE gpu_suite "$@"
  echo "[tests] fk_gpu_tests, every test in one process (no GPU: each skips)"
  "build/$preset/tests/fk_gpu_tests" --gtest_brief=1 >"build/$preset/fk_gpu_tests_no_gpu.log" 2>&1 ||
    { tail -40 "build/$preset/fk_gpu_tests_no_gpu.log"; echo "[tests] fk_gpu_tests failed without a GPU"; exit 1; }
  grep -E "^\[==========\]|^\[  (PASSED|SKIPPED|FAILED) *\] [0-9]+ test" "build/$preset/fk_gpu_tests_no_gpu.log" || true
else
  ctest --test-dir "build/$preset" --output-on-failure -j "$jobs" "$@"
fi
