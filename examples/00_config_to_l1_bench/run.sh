#!/usr/bin/env bash
# Example 00: from a HuggingFace config to checked and timed L1 tasks.
#
# What it shows, step by step:
#   1. `fastkernels parse` reads a real config strictly and prints the typed, resolved constants
#      (head_dim derived, rope scaling parsed, aliases applied).
#   2. `fastkernels list --tasks` shows which tasks the config lowers to; tasks shared with other
#      configs (same constants -> same name) appear once.
#   3. `fastkernels generate --check` confirms generated/ is what the generator produces now.
#   4. `fk_bench --list` / `--dry-run` show the compiled task set and the input registry
#      (decode and prefill shapes derived from the config) without a GPU.
#   5. On a GPU machine, `fk_bench` checks the config's RMSNorm and attention tasks against their
#      fp32 references and times them (cold L2, rotating inputs, median/min/max).
# Run from anywhere after `scripts/run_tests.sh` (or `cmake --preset default && cmake --build --preset default`).
set -eu
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
build="${BUILD:-build/default}"
fk="$build/generator/fastkernels"
bench="$build/fk_bench"
config=hf_configs/meta-llama/Llama-3.1-8B-Instruct/config.json

echo "== 1. parse $config"
"$fk" parse "$config" | head -n 30
echo "== 2. tasks of every config"
"$fk" list --tasks | head -n 25
echo "== 3. generated/ up to date?"
"$fk" generate --check
echo "== 4. compiled tasks used by Llama-3.1-8B, and the plan for its RMSNorm"
"$bench" --list | grep -E "Llama-3.1-8B|^level" | head -n 20
"$bench" --dry-run --arch Llama-3.1-8B --task '^rms_norm'
if nvidia-smi -L >/dev/null 2>&1; then
  echo "== 5. check + time on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  "$bench" --arch Llama-3.1-8B --task '^(rms_norm|flash_attn_prefill)' --markdown /tmp/example00.md
  cat /tmp/example00.md
else
  echo "== 5. skipped: no GPU on this machine"
fi
echo "example 00: PASS"
