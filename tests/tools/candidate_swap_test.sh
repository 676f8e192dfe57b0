#!/usr/bin/env bash
# Candidate builds swap a task in at every level (cmake/candidates.cmake): configures a build with
# FK_CANDIDATES_DIR=tests/fixtures/candidate_swap (a SiluAndMul and an all-reduce candidate carrying markers) and
# preprocesses, from the build's own compile commands, the task's registration source and the
# L2/L3/L4 sources built on it: each must contain the marker; a task that does not use it must
# not. A candidate named after no task must fail the configure with a message naming it.
# Exit 77 (skip) without the CUDA toolkit.   Usage: candidate_swap_test.sh <source dir> <work dir>
set -uo pipefail
src="$1" work="$2"
nvcc_bin="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
[ -x "$nvcc_bin" ] || { echo "no nvcc: skipped"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
cfg() {  # cfg <build dir> <candidates dir>
  cmake -S "$src" -B "$1" -DCMAKE_CUDA_COMPILER="$nvcc_bin" -DFK_BUILD_TESTS=OFF -DFK_BUILD_GENERATOR=OFF \
    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DFK_CANDIDATES_DIR="$2" >"$1.log" 2>&1
}
cfg "$work/b" "$src/tests/fixtures/candidate_swap" || { tail -20 "$work/b.log"; fail "configure with the candidate"; }
grep -q "candidate build, 2 task(s) replaced: all_reduce_n4096_tp2_bf16,silu_and_mul_i14336_bf16" "$work/b.log" ||
  { grep "candidate build" "$work/b.log"; fail "configure did not report the candidates"; }
preprocess() {  # preprocess <source path regex> -> path of the .i file
  python3 - "$work/b/compile_commands.json" "$1" "$work" <<'PY'
import json, re, shlex, subprocess, sys
cmds, pat, work = json.load(open(sys.argv[1])), re.compile(sys.argv[2]), sys.argv[3]
hits = [c for c in cmds if pat.search(c["file"])]
if len(hits) != 1:
    sys.exit(f"expected one source matching {sys.argv[2]}, found {len(hits)}")
c = hits[0]
argv = shlex.split(c["command"])
if "-o" in argv:
    i = argv.index("-o"); del argv[i:i + 2]
argv = [a for a in argv if a not in ("-c",) and not a.startswith("-MD") and a not in ("-MT", "-MF")]
out = f"{work}/{abs(hash(c['file']))}.i"
r = subprocess.run(argv + ["-E", "-o", out], cwd=c["directory"], capture_output=True, text=True)
if r.returncode != 0:
    sys.exit("preprocessing failed: " + r.stderr[-2000:])
print(out)
PY
}
for pat in 'generated/L1/silu_and_mul_i14336_bf16\.cu$' 'generated/L2/gate_up_silu_h4096_i14336_.*\.cu$' \
           'generated/L2/llama_mlp_h4096_i14336_.*\.cu$' 'generated/L3/llama_decoder_layer_h4096_i14336_.*base500000.*\.cu$' \
           'generated/L4/llama_for_causal_lm_l32_v128256_untied_h4096_i14336_.*\.cu$'; do
  i="$(preprocess "$pat")" || fail "$pat: $i"
  grep -q fk_candidate_swap_marker "$i" || fail "$pat does not use the candidate"
  echo "ok: $pat uses the candidate"
done
i="$(preprocess 'generated/L2/llama_mlp_h4096_i12288_.*\.cu$')" || fail "$i"
if grep -q fk_candidate_swap_marker "$i"; then fail "llama_mlp_h4096_i12288 (another SiluAndMul) uses the candidate"; fi
echo "ok: a task that does not use it is untouched"
# A collective candidate (Note [Collective tasks]): Llama-3.1-8B's TP-2 all-reduce reaches the row-parallel linears and
# the embedding (L1), the attention output and MLP blocks (L2), the decoder layer (L3) and the model (L4); Qwen3's
# all-reduce of another width does not.
for pat in 'generated/L1/row_parallel_linear_k2048_n4096_nobias_tp2_bf16\.cu$' 'generated/L1/vocab_parallel_embedding_v64128_h4096_tp2_bf16\.cu$' \
           'generated/L2/attention_o_proj_hq16_hkv4_d128_h4096_nobias_tp2_bf16\.cu$' 'generated/L2/llama_mlp_h4096_i7168_nobias_tp2_bf16\.cu$' \
           'generated/L3/llama_decoder_layer_h4096_i7168_hq16_hkv4_.*\.cu$' 'generated/L4/llama_for_causal_lm_l32_v128256_untied_h4096_i7168_hq16_hkv4_.*\.cu$'; do
  i="$(preprocess "$pat")" || fail "$pat: $i"
  grep -q fk_candidate_swap_collective_marker "$i" || fail "$pat does not use the collective candidate"
  echo "ok: $pat uses the collective candidate"
done
i="$(preprocess 'generated/L1/row_parallel_linear_k2048_n2048_nobias_tp2_bf16\.cu$')" || fail "$i"
if grep -q fk_candidate_swap_collective_marker "$i"; then fail "row_parallel_linear_k2048_n2048_nobias_tp2 (another all-reduce) uses the candidate"; fi
echo "ok: a linear with another all-reduce is untouched"
mkdir -p "$work/bad/L1" && cp "$src/tests/fixtures/candidate_swap/L1/silu_and_mul_i14336_bf16.cu" "$work/bad/L1/silu_and_mul_i99_bf16.cu"
if cfg "$work/c" "$work/bad"; then fail "a candidate named after no task was accepted"; fi
# (CMake wraps long messages: match the joined text)
tr -s ' \n' ' ' <"$work/c.log" | grep -q "silu_and_mul_i99_bf16.cu: no generated task L1/silu_and_mul_i99_bf16 in generated/manifest.json" ||
  { tail -8 "$work/c.log"; fail "unknown candidate message"; }
echo "ok: an unknown candidate fails the configure, naming the file"
echo "candidate swap: PASS"
