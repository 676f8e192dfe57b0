#!/usr/bin/env bash
# The main job (README command 1): install what is needed, build the generator, regenerate the
# task sources from hf_configs/, compile the task set, and on a GPU machine check and time every
# task (fk_bench) beside its torch peers; without a GPU, say so and print the plan instead.
#
#   scripts/run_main.sh [fk_bench filters, e.g. --arch Llama --case '^t(1|4096)$']
#
# Results: out/bench/results.{jsonl,md}, out/bench/peers.jsonl, out/bench/report.md; then the
# whole Llama-3.1-8B (fk_model: decode/prefill tokens/s, memory) in out/bench/model.{jsonl,md}
# and, where torch + transformers are installed, HF transformers parity of the four configs
# (4 layers) in out/bench/parity/.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export NCCL_NVLS_ENABLE=0
log() { printf '[main] %s\n' "$*"; }

"$root/scripts/setup.sh"

have_cuda=0
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  have_cuda=1
  export PATH="/usr/local/cuda/bin:$PATH"
fi
have_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then have_gpu=1; fi
export FK_COMMIT="${FK_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
jobs="$(nproc 2>/dev/null || echo 2)"

if [ "$have_cuda" = 1 ]; then preset=default; else preset=generator-only; fi
log "configure + build (preset $preset)"
cmake --preset "$preset" -DFK_BUILD_TESTS=OFF -DFK_COMPILE_CHECK=OFF >/dev/null
cmake --build --preset "$preset" -j "$jobs" --target fastkernels
bin="build/$preset"

log "generate task sources from hf_configs/"
"$bin/generator/fastkernels" generate --root "$root"
"$bin/generator/fastkernels" list --root "$root"

if [ "$have_cuda" = 0 ]; then
  log "no CUDA toolkit: generated sources are up to date; kernels and tasks were not compiled"
  exit 0
fi
# The manifest may have changed: reconfigure so the build sees it, then compile every task.
cmake --preset "$preset" -DFK_BUILD_TESTS=OFF -DFK_COMPILE_CHECK=OFF >/dev/null
log "compile the generated task set"
cmake --build --preset "$preset" -j "$jobs" --target fk_bench fk_model
"$bin/fk_bench" --list

if [ "$have_gpu" = 0 ]; then
  log "no GPU on this machine: the tasks were generated and compiled but not run; the plan on a GPU machine is:"
  "$bin/fk_bench" --dry-run "$@" | tail -n 15
  exit 0
fi

out="$root/out/bench"
mkdir -p "$out"
log "check and time every selected task (fk_bench)"
set +e
"$bin/fk_bench" "$@" --jsonl "$out/results.jsonl" --markdown "$out/results.md"
rc=$?
set -e
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  log "torch peers (eager, torch.compile, cuBLAS via F.linear, SDPA backends) on the same cases"
  "$bin/fk_bench" "$@" --off-registry 0 --export-cases "$out/cases.json" >/dev/null  # peers: registry cases
  python3 bench/peers/torch_peers.py "$out/cases.json" --out "$out/peers.jsonl" || log "torch peers failed"
  python3 bench/report.py "$out/results.jsonl" "$out/peers.jsonl" --out "$out/report.md" || true
else
  log "torch with CUDA not available: peers skipped"
fi
log "whole model: Llama-3.1-8B throughput and memory (fk_model --bench)"
set +e
"$bin/fk_model" --arch meta-llama/Llama-3.1-8B-Instruct --bench --jsonl "$out/model.jsonl" --markdown "$out/model.md"
rc_model=$?
rc_parity=0
if python3 -c 'import torch, transformers; assert torch.cuda.is_available()' 2>/dev/null; then
  log "HF transformers parity of every config (4 layers)"
  python3 bench/parity/hf_parity.py --all --layers 4 --fk-model "$bin/fk_model" --out "$out/parity"
  rc_parity=$?
else
  log "torch/transformers with CUDA not available: HF parity skipped"
fi
set -e
log "results in $out (fk_bench exit code $rc, fk_model $rc_model, parity $rc_parity)"
[ "$rc" = 0 ] && [ "$rc_model" = 0 ] && [ "$rc_parity" = 0 ]
