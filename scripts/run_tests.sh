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
cmake --preset "$preset"
cmake --build --preset "$preset" -j "$jobs"
ctest --test-dir "build/$preset" --output-on-failure -j "$jobs" "$@"
