#!/usr/bin/env bash
# One device session for the linear/attention work: build the kernels, run the micro benchmark
# (GEMM/GEMV, flash decode, cuDNN prefill, torch SDPA peers), then build and run the GPU tests
# of these kinds, each step under a time budget. Logs under $OUT (default out/mm).
#   bench/micro/gpu_session_mm.sh [bench what: all|gemm|decode|prefill|none] [build budget s]
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
OUT="${OUT:-$root/out/mm}"
mkdir -p "$OUT"
what="${1:-all}"
budget="${2:-300}"
b="$root/build/mm-gpu"
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm --format=csv >"$OUT/nvidia-smi.txt" 2>&1
cmake -S . -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFK_BUILD_GENERATOR=OFF >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
timeout "$budget" cmake --build "$b" -j "$(nproc)" --target fk_kernels >"$OUT/build_kernels.log" 2>&1 || { grep -E "error" -A3 "$OUT/build_kernels.log" | head -40; exit 1; }
echo "[mm] kernels built $(( $(date +%s) - t0 ))s"
if [ "$what" != none ]; then
  bench/micro/run_mm_attn_bench.sh "$b" "$what" >"$OUT/micro_bench.txt" 2>&1
  echo "[mm] micro bench rc=$? $(( $(date +%s) - t0 ))s"
  cat "$OUT/micro_bench.txt" | cut -c1-400
fi
left=$(( budget + 60 - ($(date +%s) - t0) ))
[ "$left" -lt 30 ] && { echo "[mm] no time left for the tests"; exit 0; }
timeout "$left" cmake --build "$b" -j "$(nproc)" --target fk_gpu_tests >"$OUT/build_tests.log" 2>&1
rc=$?
echo "[mm] test build rc=$rc $(( $(date +%s) - t0 ))s"
[ $rc -ne 0 ] && { grep -E "error" -A3 "$OUT/build_tests.log" | head -40; exit 1; }
left=$(( 400 - ($(date +%s) - t0) ))
FK_GEMM_DISPATCH_VERBOSE=1 timeout "$left" "$b/tests/fk_gpu_tests" \
  --gtest_filter='*Gemm*:*Gemv*:*Linear*:*Attn*:*FlashDecode*:*linear*:*lm_head*:*flash_attn*' >"$OUT/gpu_tests.txt" 2>&1
echo "[mm] tests rc=$? $(( $(date +%s) - t0 ))s"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |OK \]|FAILED|Failure|expected|dispatch" "$OUT/gpu_tests.txt" | cut -c1-300 | head -80
