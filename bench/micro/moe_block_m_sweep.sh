#!/usr/bin/env bash
# The decode/prefill tile boundary of moe_gemm_block_m (kernels/include/fk/kernels/moe_gemm.cuh) by measurement:
# both grouped GEMMs of four MoE shapes at expected rows per expert R = T * top_k / E from 8 to 48, each with
# block_m 16 (mma.sync decode tile) and 64 (the prefill tile production takes there), timed round-robin
# (--interleave) with L2 flushed before every call, through the production dispatch (moe_grouped_gemm: Mma64 is the
# name of its block_m-64 entry, which runs the warp-specialised Ws64 on sm_90a). GPU machine only.
#
#   bench/micro/moe_block_m_sweep.sh [out_dir]       -> out_dir/moe_block_m_<model>_g<gemm>.log
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-$root/out/moe_block_m}"
mkdir -p "$out"
bin="$out/moe_gemm_micro"
[ -x "$bin" ] || nvcc -std=c++17 -O3 -arch=sm_90a --expt-relaxed-constexpr -DFK_MOE_GEMM_HAVE_SM90A \
  -I "$root/kernels/include" "$root/bench/micro/moe_gemm_micro.cu" -o "$bin"
# R = 8, 12, 16, 20, 24, 28, 32, 40, 48 per model (T = R * E / top_k).
declare -A tokens=(
  [DeepSeek]=256,384,512,640,768,896,1024,1280,1536   # E 256, top 8
  [Qwen3]=128,192,256,320,384,448,512,640,768         # E 128, top 8
  [Mixtral]=32,48,64,80,96,112,128,160,192            # E 8, top 2
  [gpt-oss]=64,96,128,160,192,224,256,320,384         # E 32, top 4
)
for model in DeepSeek Qwen3 Mixtral gpt-oss; do
  for gemm in 1 2; do
    "$bin" --model "$model" --gemm "$gemm" --tokens "${tokens[$model]}" --bms 16,64 --only Decode16,Mma64 --interleave --rounds 5 \
      --iters 20 --skip-robust >"$out/moe_block_m_${model}_g${gemm}.log" 2>&1 || echo "moe_gemm_micro $model gemm $gemm: exit $?"
  done
done
