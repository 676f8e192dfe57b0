#!/usr/bin/env bash
# Builds and runs bench/micro/mm_attn_bench.cu against an existing build's fk_kernels library,
# then the torch SDPA peers. Usage: bench/micro/run_mm_attn_bench.sh <build dir> [all|gemm|decode|prefill]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:?build dir}"
what="${2:-all}"
lib="$(find "$build" -name libfk_kernels.a | head -1)"
cudnn_lib="$(dirname "$(find /usr/lib/x86_64-linux-gnu /usr/local/cuda/lib64 -name 'libcudnn.so*' 2>/dev/null | head -1)")"
nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -lineinfo -I "$root/kernels/include" \
  "$root/bench/micro/mm_attn_bench.cu" "$lib" -L"$cudnn_lib" -lcudnn -lcublasLt -lcublas -lnvrtc -o "$build/mm_attn_bench"
"$build/mm_attn_bench" "$what"
if [[ "$what" == all || "$what" == prefill ]] && python3 -c 'import torch' 2>/dev/null; then
  python3 "$root/bench/micro/sdpa_torch.py"
fi
