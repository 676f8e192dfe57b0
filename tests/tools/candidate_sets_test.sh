#!/usr/bin/env bash
# Candidate sets side by side (cmake/candidates.cmake, FK_CANDIDATE_SETS): configures a build with
# two sets of the runtime suite and checks what the driver reads from it (set.json: the set's
# tasks, the tasks that include them up to FK_CANDIDATE_MAX_LEVEL, whether a model is built), that
# the baseline targets exist, and that a set named `baseline` or a misnamed candidate fails the
# configure naming it. With a LibTooling checker (arg 3), the committed static verdicts of the
# suite (tests/fixtures/candidates_runtime/static.jsonl) must be what the checker says now.
# Exit 77 (skip) without the CUDA toolkit.
#   Usage: candidate_sets_test.sh <source dir> <work dir> [<fastkernels binary>]
set -uo pipefail
src="$1" work="$2" checker="${3:-}"
nvcc_bin="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
[ -x "$nvcc_bin" ] || { echo "no nvcc: skipped"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
suite="$src/tests/fixtures/candidates_runtime"
cfg() {  # cfg <build dir> <max level> <sets...>
  local b="$1" lvl="$2"; shift 2
  local sets; sets="$(IFS=';'; echo "$*")"
  cmake -S "$src" -B "$b" -DCMAKE_CUDA_COMPILER="$nvcc_bin" -DFK_BUILD_TESTS=OFF -DFK_BUILD_GENERATOR=OFF \
    -DFK_CANDIDATE_MAX_LEVEL="$lvl" -DFK_CANDIDATE_SETS="$sets" >"$b.log" 2>&1
}
cfg "$work/b" 4 "$suite/bad_wrong_result" "$suite/good_flash_decode_gqa7" || { tail -20 "$work/b.log"; fail "configure with two sets"; }
python3 - "$work/b" "$src/generated/manifest.json" <<'PY' || exit 1
import json, sys
b, manifest = sys.argv[1], json.load(open(sys.argv[2]))
tasks = {t["name"]: t for t in manifest["tasks"]}
def closure(seed):
    out = {seed}
    for level in (2, 3, 4):
        for t in manifest["tasks"]:
            if t["level"] == level and set(t.get("children", {}).values()) & out:
                out.add(t["name"])
    return out
for name, task in [("bad_wrong_result", "silu_and_mul_i14336_bf16"), ("good_flash_decode_gqa7", "flash_attn_decode_hq28_hkv4_d128_bf16")]:
    s = json.load(open(f"{b}/candidate_sets/{name}/set.json"))
    want = closure(task)
    if s["tasks"] != [task]: sys.exit(f"FAIL: {name}: tasks {s['tasks']}, expected [{task}]")
    if set(s["affected"]) != want: sys.exit(f"FAIL: {name}: affected {sorted(s['affected'])}, expected {sorted(want)}")
    if not any(tasks[t]["level"] == 4 for t in want) or s["model"] is not True: sys.exit(f"FAIL: {name}: model flag {s['model']}")
    if not {tasks[t]["level"] for t in want} >= {1, 2, 3, 4}: sys.exit(f"FAIL: {name}: expected tasks at every level")
print("set.json: tasks, affected closure and model flag as expected")
PY
targets="$(cmake --build "$work/b" --target help 2>/dev/null)"
for t in fk_bench_baseline fk_model_baseline fk_bench_bad_wrong_result fk_model_bad_wrong_result fk_bench_good_flash_decode_gqa7; do
  grep -qw "$t" <<<"$targets" || fail "no target $t"
done
cfg "$work/l1" 1 "$suite/bad_wrong_result" || fail "configure with FK_CANDIDATE_MAX_LEVEL=1"
grep -q '"affected":\["silu_and_mul_i14336_bf16"\],"model":false' "$work/l1/candidate_sets/bad_wrong_result/set.json" ||
  fail "max level 1 should keep only the candidate's own task: $(cat "$work/l1/candidate_sets/bad_wrong_result/set.json")"
mkdir -p "$work/baseline/L1" && cp "$suite/bad_wrong_result/L1/silu_and_mul_i14336_bf16.cu" "$work/baseline/L1/"
cfg "$work/c" 4 "$work/baseline" && fail "a set named baseline configured"
tr -s " \n" " " <"$work/c.log" | grep -q "'baseline' is the name of the reference side" || fail "no message for a set named baseline"
mkdir -p "$work/misnamed/L1" && cp "$suite/bad_wrong_result/L1/silu_and_mul_i14336_bf16.cu" "$work/misnamed/L1/no_such_task.cu"
cfg "$work/d" 4 "$work/misnamed" && fail "a misnamed candidate configured"
tr -s " \n" " " <"$work/d.log" | grep -q "misnamed/L1/no_such_task.cu: no generated task L1/no_such_task" || fail "no message naming the misnamed candidate"
if [ -n "$checker" ] && [ -x "$checker" ]; then
  python3 "$src/scripts/bench_candidates.py" "$suite"/bad_* "$suite"/good_* --static-only --checker "$checker" \
    --static-results "$work/static.jsonl" >"$work/static.log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    diff -u "$suite/static.jsonl" "$work/static.jsonl" || fail "static.jsonl is stale: rerun bench_candidates.py --static-only"
    echo "static verdicts current"
  elif grep -q "without LibTooling" "$work/static.log"; then
    echo "checker without LibTooling: static verdicts not rechecked"
  else
    cat "$work/static.log"; fail "static check run"
  fi
fi
echo "candidate sets: OK"
