#!/usr/bin/env bash
# Builds and runs bench/micro/flash_prefill_micro.cu (the soft-capping prefill kernel against
# cuDNN SDPA) against an existing build's fk_kernels library.
# Usage: bench/micro/run_flash_prefill_micro.sh <build dir>
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:?build dir}"
lib="$(find "$build" -name libfk_kernels.a | head -1)"
cudnn_lib="$(dirname "$(find /usr/lib/x86_64-linux-gnu /usr/local/cuda/lib64/ -name 'libcudnn.so*' 2>/dev/null | head -1)")"
nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -lineinfo -I "$root/kernels/include" \
  "$root/bench/micro/flash_prefill_micro.cu" "$lib" -L"$cudnn_lib" -lcudnn -lcublasLt -lcublas -lnvrtc -o "$build/flash_prefill_micro"
"$build/flash_prefill_micro"
