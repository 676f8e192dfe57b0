#!/usr/bin/env bash
# Example 01: from a HuggingFace config to a whole-model (L4) run checked against HF transformers.
#
# What it shows, step by step:
#   1. `fastkernels list --tasks` shows the composite tasks the config lowers to besides the L1
#      ones: L2 fused ops (qkv_rope_cache, attention_o_proj, gate_up_silu, llama_mlp,
#      llama_attention), the L3 decoder layer and the L4 model; generated/manifest.json records
#      which child task each composite is built from (levels compose: a better L1 kernel lifts
#      every level above it).
#   2. `fk_model --list` shows the models compiled into the runtime.
#   3. On a GPU machine: `fk_model` builds the model with a reduced layer count, seeded weights
#      named like HF transformers', runs a variable-length prefill and 64 greedy decode steps
#      (CUDA-graph replays), and writes the weights and a dump (per-layer residual stream,
#      logits, tokens) as safetensors.
#   4. `bench/parity/hf_parity.py` builds the HF model from the same config.json, loads the same
#      weights and compares layer by layer, the logits, and every greedy token (teacher forcing);
#      tolerances and their justification are in docs/parity.md.
#   5. `fk_model --bench` measures decode tokens/s (batch 1) and prefill tokens/s.
# Run from anywhere after `scripts/run_main.sh` (or a CUDA build in build/default).
set -eu
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
build="${BUILD:-build/default}"
arch="${ARCH:-meta-llama/Llama-3.1-8B-Instruct}"
layers="${LAYERS:-4}"
fk="$build/generator/fastkernels"
model="$build/fk_model"

echo "== 1. composite tasks of every config (L2-L4)"
"$fk" list --tasks | grep -E "^ *L[234]|llama_|qkv_rope|attention_o|gate_up" | head -n 30 || true
echo "== 2. compiled models"
"$model" --list
if nvidia-smi -L >/dev/null 2>&1; then
  out="${OUT:-/tmp/example01}"
  mkdir -p "$out"
  echo "== 3+4. $arch with $layers layers: fk_model dump, then HF transformers parity"
  python3 bench/parity/hf_parity.py --arch "$arch" --layers "$layers" --fk-model "$model" --out "$out"
  echo "== 5. throughput of the full model (decode batch 1, prefill 1x2048)"
  "$model" --arch "$arch" --bench --decode-batches 1 --prefill 1x2048 --mem-steps 0 --markdown "$out/model.md"
  cat "$out/model.md"
else
  echo "== 3-5. skipped: no GPU on this machine"
fi
echo "example 01: PASS"
