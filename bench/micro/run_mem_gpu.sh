#!/usr/bin/env bash
# One batched GPU session for the memory-bound kinds: micro-benchmark (kernels only), build,
# the kinds' GPU tests, and fk_bench over the generated memory-bound tasks. Logs under $OUT.
#   bench/micro/run_mem_gpu.sh [micro-bench filter]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
OUT="${OUT:-$root/out/mem}"
mkdir -p "$OUT" build
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm --format=csv >"$OUT/nvidia-smi.txt" 2>&1
# 1. micro-benchmark (independent of the runtime build)
nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Ikernels/include bench/micro/mem_bench.cu \
  -o build/mem_bench >"$OUT/micro_build.log" 2>&1 && timeout 120 build/mem_bench "${1:-}" >"$OUT/micro.txt" 2>&1
echo "[mem] micro rc=$? $(( $(date +%s) - t0 ))s"; cat "$OUT/micro.txt"
# 2. build (keep going past other kinds' failures)
b=build/gpu
cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFK_BUILD_GENERATOR=OFF >"$OUT/configure.log" 2>&1 || tail -20 "$OUT/configure.log"
timeout 200 cmake --build $b -j 16 --target fk_gpu_tests fk_bench -- -k 0 >"$OUT/build.log" 2>&1
echo "[mem] build rc=$? $(( $(date +%s) - t0 ))s"; grep -E "error" "$OUT/build.log" | head -20
tests=$b/tests/fk_gpu_tests
if [ ! -x $tests ]; then  # fall back: link the memory-bound test objects alone
  o=$b/tests/CMakeFiles/fk_gpu_tests.dir/gpu
  g++ -o $b/mem_tests $o/test_{rms_norm,qk_norm,rotary_embedding,silu_and_mul,store_kvcache,vocab_parallel_embedding}.cu.o \
    $b/runtime/libfk_runtime.a $b/kernels/libfk_kernels.a $b/lib/libgtest_main.a $b/lib/libgtest.a \
    -L/usr/local/cuda/lib64 -lcudnn -lcublasLt -lcublas -lcudart -lpthread -ldl >"$OUT/link.log" 2>&1
  tests=$b/mem_tests
fi
# 3. tests of the memory-bound kinds (+ their generated tasks when the full binary exists)
filter='Kernels.RmsNorm*:Kernels.FusedAdd*:Kernels.QKNorm*:Kernels.Rotary*:Kernels.SiluAndMul*:Kernels.VocabParallel*:Kernels.StoreKVCache*:Tasks.*:RopeCache.*'
filter="$filter:*rms_norm*:*qk_norm*:*rotary_embedding*:*silu_and_mul*:*store_kvcache*:*vocab_parallel_embedding*"
timeout 120 $tests --gtest_filter="$filter" >"$OUT/tests.log" 2>&1
echo "[mem] tests rc=$? $(( $(date +%s) - t0 ))s"; grep -E "FAILED|PASSED|SKIPPED \]|Failure|error" "$OUT/tests.log" | head -40
# 4. the runner on the generated memory-bound tasks
if [ -x $b/fk_bench ]; then
  timeout "${FK_BENCH_TIMEOUT:-90}" $b/fk_bench --task '^(rms_norm|fused_add|qk_norm|rotary|silu|store_kv|vocab)' \
    --case '^t(1|32|256|4096|16384)$' --rounds 1 --max-iters 30 --jsonl "$OUT/results.jsonl" --markdown "$OUT/results.md" \
    >"$OUT/bench.out" 2>"$OUT/bench.log"
  echo "[mem] fk_bench rc=$? $(( $(date +%s) - t0 ))s"; tail -5 "$OUT/bench.log"; cat "$OUT/results.md" 2>/dev/null | head -80
fi
