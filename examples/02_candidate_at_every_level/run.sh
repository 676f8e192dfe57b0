#!/usr/bin/env bash
# Example 02: write a candidate for one L1 task, check it, bench it against the baseline, and see
# its effect at L2, L3 and L4 (docs/candidates.md).
#
# What it shows, step by step:
#   1. `fastkernels scaffold` writes candidates/L1/<task>.cu: the generated task's exact interface
#      (namespace, Config, class, constructor, forward), compilable and correct as written.
#   2. Here we put a real candidate in its place: the hand-optimised GQA-7 decode attention of
#      the runtime suite (tensor cores for the 7 query heads of a KV head, split KV + combine).
#   3. `fastkernels check` (Clang LibTooling) compares the interface with the generated header
#      and flags baseline/vendor calls, other streams, host timing and static caches; its
#      verdict is saved for the GPU machine, which has no libclang.
#   4. On a GPU machine, `scripts/bench_candidates.py` builds the candidate in place of its task
#      in every L2-L4 task that includes it (attention_o_proj, llama_attention, the decoder layer
#      and Qwen2.5-7B) beside the baseline, checks and times both with the runtime's method
#      (fresh inputs, guards, the stream gate, the watchdog), and runs fk_model for greedy tokens
#      and end-to-end tokens/s.
#   5. `fastkernels compare` prints the status, the speedup per case, the effect per level, the
#      greedy check, the end-to-end speedup and the set's score.
# Run after `scripts/run_main.sh` (or with a build in build/default).
set -eu
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
build="${BUILD:-build/default}"
fk="$build/generator/fastkernels"
task=flash_attn_decode_hq28_hkv4_d128_bf16
work="${OUT:-/tmp/example02}"
set_dir="$work/sets/my_decode"
mkdir -p "$work"

echo "== 1. scaffold a candidate for $task"
rm -rf "$work/sets"
"$fk" scaffold --task "$task" --out "$set_dir"
head -n 12 "$set_dir/L1/$task.cu"
echo "== 2. replace it with a hand-optimised kernel"
cp tests/fixtures/candidates_runtime/good_flash_decode_gqa7/L1/$task.cu "$set_dir/L1/$task.cu"
echo "== 3. static check"
rc=0
"$fk" check "$set_dir/L1/$task.cu" || rc=$?
case $rc in
  0) python3 scripts/bench_candidates.py "$set_dir" --static-only --checker "$fk" --static-results "$work/static.jsonl" ;;
  2) echo "(fastkernels was built without LibTooling: the static check is skipped; statuses say UNCHECKED)" ;;
  *) echo "the static check failed (exit $rc): fix the candidate first"; exit 1 ;;
esac
if nvidia-smi -L >/dev/null 2>&1; then
  echo "== 4. bench the candidate in place at every level, beside the baseline (decode cases)"
  static=()
  [ -f "$work/static.jsonl" ] && static=(--static-results "$work/static.jsonl")
  python3 scripts/bench_candidates.py "$set_dir" --out "$work/results" --build-dir "$build-candidates" \
    --model "${static[@]}" --bench-arg=--regime=decode
  echo "== 5. compare"
  "$fk" compare "$work/results" --markdown "$work/results/compare.md" || true
else
  echo "== 4-5. no GPU here: run this script on the GPU machine to bench and compare"
fi
