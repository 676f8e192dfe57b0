#!/usr/bin/env bash
# Example 03: from an embedding model's config to pooled vectors checked against HF transformers.
#
# What it shows, step by step:
#   1. How an embedding model is added: its config plus the serving choices HF configs do not
#      record: the dtype (BERT-era checkpoints are fp32) and the pooling (vLLM's PoolerConfig:
#      BGE-M3's dense vector is normalize(CLS)). `fastkernels add` runs in a scratch worktree so
#      this repository is untouched; it validates the config, records the choices beside it
#      (fastkernels.json) and generates the tasks; the model task's name spells the pooling
#      (`_cls_norm`), a mean pooling gives another task (`_mean_norm`).
#   2. `fastkernels parse` shows the resolved constants (RoBERTa positions from padding_idx + 1,
#      the pooling fields and where each value came from).
#   3. `fk_model --list` shows the embedding models compiled in (runner `embedding`).
#   4. On a GPU machine: `fk_model` builds the encoder with a reduced layer count and seeded
#      weights named like HF's, runs a packed variable-length batch and writes the hidden states
#      after every layer and the pooled vectors; `bench/parity/hf_parity.py` runs transformers'
#      XLMRobertaModel on the same weights and pools its last hidden state the same way, then
#      compares layer by layer and the pooled vectors (docs/parity.md).
#   5. `fk_model --bench` measures whole batches (1x128 .. 32x512) of the full 24-layer model.
# Run from anywhere after `scripts/run_main.sh` (or a CUDA build in build/default).
set -eu
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
build="${BUILD:-build/default}"
fk="$(cd "$(dirname "$build/generator/fastkernels")" && pwd)/fastkernels"
model="$build/fk_model"
arch="${ARCH:-BAAI/bge-m3}"
layers="${LAYERS:-4}"

echo "== 1. add an embedding model with its serving choices (scratch worktree)"
scratch="$(mktemp -d)/repo"
git worktree add --quiet --detach "$scratch" HEAD
trap 'git worktree remove --force "$scratch"' EXIT
cp hf_configs/BAAI/bge-m3/config.json "$scratch/bge-m3-config.json"
(cd "$scratch" && "$fk" add bge-m3-config.json --name acme/bge-m3-mean --dtype bfloat16 --pooling mean --normalize | tail -n 3)
cat "$scratch/hf_configs/acme/bge-m3-mean/fastkernels.json"
(cd "$scratch" && "$fk" list --tasks | grep -E "bert_model.*(cls|mean)_norm" | head -n 4)
echo "== 2. the resolved constants of $arch (values and origins)"
"$fk" parse "hf_configs/$arch/config.json" | grep -E "pooling|position_offset|torch_dtype|num_hidden_layers|hidden_size" | head -n 12
echo "== 3. compiled embedding models"
"$model" --list | grep -E "embedding|runner" | head -n 10
if nvidia-smi -L >/dev/null 2>&1; then
  out="${OUT:-/tmp/example03}"
  mkdir -p "$out"
  echo "== 4. $arch with $layers layers: fk_model dump, then HF transformers parity of every layer and the pooled vectors"
  python3 bench/parity/hf_parity.py --arch "$arch" --layers "$layers" --fk-model "$model" --out "$out"
  echo "== 5. throughput of the full model"
  "$model" --arch "$arch" --bench --markdown "$out/model.md"
  cat "$out/model.md"
else
  echo "== 4-5. skipped: no GPU on this machine"
fi
echo "example 03: PASS"
