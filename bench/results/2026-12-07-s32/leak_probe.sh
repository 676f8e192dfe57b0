#!/usr/bin/env bash
# Probes of the in-process failure (bench/results/2026-12-07-s32/README.md): which pairs of tests reproduce it, and
# whether keeping freed blocks out of reuse (FK_ALLOCATOR_NO_REUSE=1) removes it. Run on the GPU machine after
# scripts/gpu_protocol.sh build; logs into out/protocol/probe_*.log.
set -u
cd "$(dirname "$0")/../../.."
bin=build/gpu/tests/fk_gpu_tests
P=out/protocol
GD='L4/WholeModel.GraphDecodeEqualsEagerAndPrefill/llama_for_causal_lm_l28_v152064_untied_h3584_i18944_hq28_hkv4_d128_eps1e_06_rot128_pos32_xecba189a719fb4f5_bf16'
TF='L4/WholeModel.TeacherForcedStepsMatchTheReferenceOverTheForcedSequence/llama_for_causal_lm_l28_v152064_untied_h3584_i18944_hq28_hkv4_d128_eps1e_06_rot128_pos12_x169fe7c2c3a56d76_bf16'
MLP='All/GeneratedTask.MatchesReference/L2_llama_mlp_h4096_i14336_nobias_bf16_t1'
probe() {  # name env... -- gtest args...
  local name="$1"; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout 300 "$bin" "$@" >"$P/probe_$name.log" 2>&1
  echo "$name rc=$? ok=$(grep -c '^\[       OK \]' "$P/probe_$name.log") failed=$(grep -c '^\[  FAILED  \] .* ms)$' "$P/probe_$name.log")"
}
probe tf_alone X=1 -- --gtest_filter="$TF"
probe tf_twice X=1 -- --gtest_filter="$TF" --gtest_repeat=2
probe gd_then_tf X=1 -- --gtest_filter="$GD:$TF"
probe gd_then_tf_noreuse FK_ALLOCATOR_NO_REUSE=1 -- --gtest_filter="$GD:$TF"
probe tf_twice_noreuse FK_ALLOCATOR_NO_REUSE=1 -- --gtest_filter="$TF" --gtest_repeat=2
probe mlp_twice X=1 -- --gtest_filter="$MLP" --gtest_repeat=3
probe gd_twice X=1 -- --gtest_filter="$GD" --gtest_repeat=2
