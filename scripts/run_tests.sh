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
    echo "[tests] no GPU: compile-check build (PTX only, CUDA host code at -O1); GPU tests will skip"
    cmake --preset "$preset" -DFK_COMPILE_CHECK=ON
  else
    cmake --preset "$preset" -DFK_COMPILE_CHECK=OFF
  fi
else
  cmake --preset "$preset"
fi
cmake --build --preset "$preset" -j "$jobs"
ctest --test-dir "build/$preset" --output-on-failure -j "$jobs" "$@"
