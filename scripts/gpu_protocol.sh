#!/usr/bin/env bash
# GPU-machine session for the checking and timing protocol (docs/candidates.md): build, the GPU
# tests, the whole task set under fk_bench (zero false alarms, the protocol's overhead), the
# known-bad candidate suite, and a compute-sanitizer sweep of the smallest L1 cases. Long runs
# go to the background (setsid) so that they outlive one device call; `collect` packs what is
# there. Results accumulate in out/protocol/ (outside $OUT, which each call empties).
#
#   scripts/gpu_protocol.sh build,tests,bench-l1@1 ...      steps, comma-separated, in order:
#     build                 configure + build build/gpu (Release, every target)
#     tests, tests@G        ctest -L gpu on GPU 0 (on GPU G in the background)
#     bench-l1@G, bench-l234@G
#                           fk_bench over every L1 (L2-L4) task and case, off-registry cases
#                           included, on GPU G in the background (resumed after a TIMEOUT or a
#                           lost context)
#     candidates@G          scripts/bench_candidates.py over the bad suite on GPU G (background)
#     candidates-dist@G-H   the collective candidates (tests/fixtures/candidates_dist: an NCCL-only all-reduce and two
#                           known-bad ones) swapped into Llama-3.1-8B@tp2 at every level, fk_bench --world-size 2 and
#                           fk_model --tp 2 (4 layers) on GPUs G and H (background), compared with the baseline
#     candidates-ep@G-H     the expert-parallel all-to-all candidates (tests/fixtures/candidates_ep: the NCCL backend and one
#                           that never sends a token away) swapped into Qwen3-30B-A3B@ep2 at every level, fk_bench --world-size 2
#                           and fk_model --ep 2 (4 layers) on GPUs G and H (background), compared with the baseline
#     cand-build-dist       candidates-dist's build alone, in the background (no GPU); candidates-dist then relinks
#     candidates-l4@G       good_rms_norm and bad_layer_drift at every level (one decode case per task, so that
#                           compare can judge), the whole models also through fk_model's
#                           greedy and teacher-forced checks on 4-layer models (background)
#     sanitizer@G           compute-sanitizer memcheck, racecheck (our kernels only), initcheck over
#                           every L1 task's smallest registry case, on GPU G (background);
#                           sanitizer:TOOL@G runs one tool
#     encoders@G            the encoder families (issue 22) on GPU G (background): their GPU tests,
#                           fk_bench over every BERT and BGE-M3 task, HF parity at 4 layers, and
#                           fk_model --bench beside HF eager/torch.compile with the same weights
#     vision@G              the vision encoders (issue 22) on GPU G (background): patch embedding, interpolate and
#                           ViT GPU tests, fk_bench over every ViT task, HF parity at 4 layers (ViT-B/16 at 224 and
#                           served at 384), fk_model --bench beside HF eager/compile and timm
#                           (bench/peers/hf_vision_perf.py) with the same weights
#     xattn@G               cross-attention (issue 22) on GPU G (background): the cross_attention kind's and the BERT
#                           decoder's GPU tests, fk_bench over every task of bert2bert's decoder, HF parity at 4
#                           layers with the dump's encoder states, fk_model --bench, and the cross_attention and
#                           interpolate L1 tasks beside their torch peers (SDPA backends, F.interpolate)
#     heads@G               the per-token heads of embedding models (issue 22) on GPU G (background): the token_classifier
#                           and drop_sequence_ends GPU tests, fk_bench over every ColBERTv2 task and BGE-M3's model task
#                           (token vectors and lexical weights checked), HF parity at 4 layers (the heads in torch
#                           beside HF's encoder), fk_model --bench beside HF eager/compile with the same heads, and the
#                           token_classifier L1 task beside its torch peers
#     lexical@G             BGE-M3's lexical-weight check (issue 22, Note [ReLU output tolerance]) on GPU G (background):
#                           fk_bench over BGE-M3's model task (token vectors and lexical weights) at the run's seed and at
#                           the two seeds that failed the earlier elementwise bounds (76656637278103, 1234567)
#     towers@G              DINOv3 and SigLIP's vision tower (issue 22) on GPU G (background): the layer_scale GPU tests,
#                           fk_bench over every task of the tiny random DINOv3, of ViT-7B/16 (40 layers, 13.4 GB of bf16
#                           weights) and of the SigLIP towers (SigLIP-2 base/512, so400m/14 at 384), HF parity (tiny DINOv3: its
#                           2 layers; the others: 4 layers), every bidirectional attention task (BERT, ViT, DINOv3, SigLIP head
#                           dims 64/72/128) beside the torch SDPA backends with the report (encoder-attention target), and
#                           fk_model --bench of the towers beside HF eager/compile with the same weights
#     mrope@G               the mrope kind and the VLM text models (issue 22) on GPU G (background): the mrope GPU tests,
#                           HF parity at 4 layers of the three text models (Qwen2-VL-7B's, Qwen2.5-VL-7B's, Qwen3-VL-32B's;
#                           text-only prompts, transformers' *TextModel + lm_head), the mrope L1 tasks beside their torch
#                           peers, then fk_bench over their rope-carrying composites, L2 to L4 (on [3, T] prefill positions)
#     vlm@G                 Qwen2-VL as a whole vision-language model (issue 22) on GPU G (background): HF parity of fk_model's
#                           tower + text model against transformers' Qwen2VLForConditionalGeneration (4 blocks, 4 layers, one
#                           image per prompt), then fk_model --bench of the whole model (images + prompt, decode tokens/s)
#     qwen25vl@G            Qwen2.5-VL's vision tower and the whole VLM (issue 22) on GPU G (background): the window-order,
#                           grid and Qwen2.5-VL task GPU tests, fk_bench over every task of the tower, HF parity of the tower
#                           at 8 blocks (block 7 attends over whole frames, the others inside windows) and of the whole VLM
#                           (4 text layers, 8 blocks), fk_model --bench of the tower beside HF eager / torch.compile
#                           (bench/peers/hf_vision_perf.py) with the same weights, and of the whole VLM
#     qwen3vl@G             Qwen3-VL's vision tower (issue 22) on GPU G (background): the interpolated-position and Qwen3-VL
#                           task GPU tests, fk_bench over every task of the tower, HF parity at 9 blocks (block 8 feeds a
#                           deepstack merger), fk_model --bench beside HF eager / torch.compile with the same weights; then the
#                           whole Qwen3-VL (DeepStack into the text model): HF parity at 4 text layers and 9 blocks, fk_model --bench
#     siglip2@G             SigLIP-2 NaFlex's vision tower (issue 22) on GPU G (background): the position-resize taps and
#                           weighted-row GPU tests, fk_bench over every task of the tower (square, elongated and mixed grids),
#                           HF parity at 4 layers (images of four aspect ratios, the pooled vectors too), fk_model --bench
#                           beside HF eager / torch.compile (bench/peers/hf_vision_perf.py) with the same weights
#     towers-recheck@G      the part of towers@G that checks (no timing): its GPU tests, fk_bench over the DINOv3 tasks, HF
#                           parity of every tower (after a fix of the references or of the parity loader)
#     qwen2vl-model@G       fk_bench over Qwen2-VL's tower model and patch merger tasks only (a recheck)
#     qwen2vl@G             Qwen2-VL's vision tower (issue 22) on GPU G (background): the vision-rope / grid / 3-D patch
#                           embedding GPU tests, fk_bench over every task of the tower (mixed image sizes included), HF
#                           parity at 4 blocks (images of three sizes and a two-frame video), fk_model --bench beside HF
#                           eager / torch.compile with the same weights (bench/peers/hf_vision_perf.py)
#     tests-shard:K/N@G     the K-th of N interleaved shards of ctest -L gpu (tests K, K+N, ...; the multi-rank
#                           dist_* tests excluded: see dist) on GPU G in the background, into gpu_tests_K.log
#     suite:K/N@G           the K-th of N gtest shards of fk_gpu_tests (and fk_howto_kind_tests) in one process each, on GPU G
#                           in the background, into gpu_suite_K.log (no per-test process start: the whole suite in minutes;
#                           a test that fails there counts only after suite-rerun: Note in bench/results/2026-12-07-s31;
#                           two shards on one GPU can run each other out of memory: bench/results/2026-12-07-s32)
#     suite-rerun@G         every test the suite:K/N shards failed, again alone in its own process on GPU G (foreground)
#     gemm-force@G          the tests in $FK_FORCE_LIST (one per line; default: those the suite shards failed) in one process
#                           each under every GEMM path (measured, then FK_GEMM_FORCE=gemv / cublaslt / cublas; Note [Forced
#                           GEMM dispatch]), foreground, into gemm_force*.log: which path, if any, gives the wrong results
#     bisect:K/N@G          the earlier test of shard K of N that breaks $FK_BISECT_TEST when they share a process
#                           (scripts/bisect_test_leak.py; foreground, into bisect_K.out / .log)
#     tests-re:K/N@G        the K-th of N shards of the GPU tests whose names match $FK_TESTS_RE (ctest -R) on GPU G (background)
#     tests-touched:K/N@G   the K-th of N shards of the GPU tests of what session 25 touched (every linear, embedding, LM head
#                           and llama composite task, the whole models, the kernel and task unit tests) on GPU G (background)
#     dist                  the multi-GPU checks (issue 23) on every visible GPU, in the foreground: the communicator
#                           tests at 2 ranks (ctest -R dist_) and at every GPU, then fk_collectives sweeps (NCCL's
#                           all_reduce, all_gather, reduce_scatter; the own peer all-reduce, auto / one-shot / two-shot;
#                           eager and one CUDA graph) and their torch peers (bench/peers/torch_collectives.py: NCCL through
#                           torch.distributed, symmetric-memory one-shot / two-shot) at 2 ranks and at every GPU
#     dist-fused            the part of dist after a change of the fused kernels: the communicator tests at 2 ranks and
#                           at every GPU, then the fused all-reduce + RMSNorm sweeps beside the own all-reduce alone and
#                           NCCL + fused_add_rms_norm (eager and graph) at 2 ranks and at every GPU, into coll_<n>r_fused.jsonl
#     tp                    tensor-parallel runs (issue 23) on every visible GPU, in the foreground: Llama-3.1-8B (32 layers,
#                           seeded weights) under fk_model at TP 1 on GPU 0, then at TP 2 and at every GPU (fk_launch,
#                           --tp N): greedy tokens of the same prompts compared with TP 1 (bench/tp_tokens.py, near-tie
#                           rule), every step's logits fed TP 1's tokens against the unsharded fp32 reference, held to
#                           TP 1's errors (bench/tp_tokens.py --teacher-forced), and decode / prefill throughput (slowest
#                           rank), into tp*.json / tf*.json / tp*_bench.jsonl
#     dist-bench            fk_bench --world-size over the tasks of the tensor-parallel layouts (issue 23), in the foreground:
#                           every tp2 task under 2 ranks, and the tasks of the machine's GPU count under that many (L1-L3,
#                           then the L4 models at decode batch 1), every rank checking against the unsharded reference,
#                           the slowest rank's time, into tpbench<n>_*.jsonl
#     dist-tests            the multi-rank GPU tests alone (ctest -R dist_ at 2 ranks, the test binary at every GPU, and
#                           the killed-rank test at every GPU, timed)
#     dist-coll[:N]         the collective tasks and the fused all-reduce + RMSNorm tasks under fk_bench --world-size, at
#                           2 ranks and at every GPU (at N only with :N), in the foreground, into coll<n>.jsonl / .md
#     dist-bench-l1[:N]     the level-1 part of dist-bench (at N ranks only with :N); dist-ep:N likewise
#     tp-parity             HF parity of tensor-parallel runs (issue 23), in the foreground: Llama-3.1-8B at 4 layers, the
#                           weights saved by the unsharded model and loaded by every rank (each keeps its slice), the parity
#                           dump written by rank 0 at TP 2 and at every GPU, then bench/parity/hf_parity.py against
#                           transformers with the same weights, into tp_parity<n>/; tp-parity:ds DeepSeek-V3 (4 layers: 3 dense,
#                           1 MoE) at TP n + EP n, tp-parity:moe Qwen3-30B-A3B at TP n + EP n (issue 23's sharded-DeepSeek parity)
#     dist-ep               expert-parallel dispatch + combine (issue 23), in the foreground, at 2 ranks and at every GPU:
#                           fk_collectives --op ep_dispatch_combine (own kernels, eager and graph) and _nccl (the NCCL send /
#                           recv baseline), hidden 7168, top-8 of 256 experts, 1-512 tokens per rank, beside torch's
#                           all_to_all_single dispatcher (bench/peers/torch_ep.py), into ep_<n>r*.jsonl
#     dist-linear[:N]       the overlapped linears (issue 23), in the foreground, at 2 ranks and at every GPU (at N only with
#                           :N): fk_collectives --op all_gather_matmul / matmul_reduce_scatter (own) and their _nccl serial
#                           baselines over Llama-3.1-8B's column-parallel (qkv, gate_up) and row-parallel (o_proj, down)
#                           shapes at TP n, 1024-8192 rows, beside torch's fused symmetric-memory ops and serial forms
#                           (bench/peers/torch_async_tp.py), into lin_<n>r.jsonl / lin_<n>r_torch.jsonl
#     tp-moe                the tensor-parallel MoE layouts (issue 23), in the foreground: Mixtral-8x7B and Qwen3-30B-A3B
#                           at 4 layers under fk_model at TP 1 (GPU 0), TP 2 and TP 2 + EP 2: greedy tokens (near-tie rule), the
#                           teacher-forced logits against the unsharded reference, throughput, into moe*.json / moe*.jsonl;
#                           tp-moe:4 (issue 24) Qwen3-30B-A3B at TP 1, TP 2 + EP 2, TP 4 and TP 4 + EP 4;
#                           tp-moe:ds DeepSeek-V3 at 5 layers (3 dense, 2 MoE) at TP 1 and TP 2 + EP 2 (Note [DeepSeek
#                           sharding]); tp-moe:ds4 also at TP 4 + EP 4, a layout not committed (CI time): generate it first
#                           (hf_configs/deepseek-ai/DeepSeek-V3/fastkernels.json "parallel" + {"tp": 4, "ep": 4}, then
#                           fastkernels generate) and ship that tree; tp-moe:dp4 (issue 24) Qwen3-30B-A3B and DeepSeek-V3
#                           with data-parallel attention at EP 2 and EP 4; tp-moe:dp Qwen3-30B-A3B at TP 2 + EP 2 and at EP 2
#                           with data-parallel attention (Note [Data-parallel runs]: rank 0's prompts are TP 1's)
#     dist-ds[:N]           DeepSeek-V3's sharded tasks under fk_bench --world-size (2 and every GPU; :N alone), levels 1-3,
#                           in the foreground, into ds<n>_l<level>.jsonl / .md
#     dist-dp:4             (issue 24) the @ep4 layouts' tasks, levels 1-3, under fk_launch --nproc 4 -- fk_bench --world-size 4
#     dist-dp               the data-parallel expert-parallel tasks (Note [Data-parallel expert MoE]: the @ep2 layouts' MoE
#                           blocks, decoder layers and models: Qwen3-30B-A3B, DeepSeek-V3) under fk_launch --nproc 2 -- fk_bench
#                           --world-size 2, levels 2-4, in the foreground, into dp2_l<level>.jsonl / .md; then the same blocks
#                           beside the TP 2 + EP 2 ones
#     dist-sp               the sequence-parallel collectives (reduce_scatter, all_gather_rows), the overlapped linears
#                           (matmul_reduce_scatter, all_gather_matmul: Note [Overlapped linear tasks]) and the expert-parallel
#                           all-to-all (ep_all_to_all) under fk_launch --nproc 2 -- fk_bench --world-size 2, each beside its
#                           peer (NCCL serial pair / NCCL send-recv), into sp2.jsonl / .md
#     serial:A+B+...@G      the background steps A, B, ... on GPU G one after another, in one background job
#                           (e.g. serial:encoders+vision+tests@0 on a one-GPU machine; `wait` waits for it)
#     wait:S                wait up to S seconds for the background steps
#     collect               pack out/protocol into $OUT
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PATH="/usr/local/cuda/bin:$PATH"
OUT="${OUT:-$root/out/gpu}"
P="$root/out/protocol"
mkdir -p "$OUT" "$P"
# The device machine holds the landed HEAD plus this tree as changes: say so (+wt), or pass FK_COMMIT.
export FK_COMMIT="${FK_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo +wt)}"
b="$root/build/gpu"
seed="${FK_SEED:-$(cat "$P/seed" 2>/dev/null || od -An -N6 -tu8 /dev/urandom | tr -d ' ')}"
echo "$seed" >"$P/seed"
t0=$(date +%s)
say() { echo "[gpu $(( $(date +%s) - t0 ))s] $*"; }

bench_part() {  # name gpu filters...: fk_bench resumed after TIMEOUT (4) / context lost (5)
  local name="$1" gpu="$2"
  shift 2
  local first=1 rc=0
  for _ in $(seq 1 50); do
    CUDA_VISIBLE_DEVICES="$gpu" "$b/fk_bench" "$@" --seed "$seed" --case-timeout 300 --jsonl "$P/$name.jsonl" \
      --markdown "$P/$name.md" $([ $first = 1 ] || echo --resume) 2>>"$P/$name.log"
    rc=$?
    first=0
    [ $rc = 4 ] || [ $rc = 5 ] || break
  done
  echo "$rc" >"$P/$name.rc"
}

bg() {  # name command...: run in its own session, so it outlives this device call
  local name="$1"
  shift
  rm -f "$P/$name.done"
  if [ "${FK_PROTOCOL_FOREGROUND:-0}" = 1 ]; then  # inside a serial@ job: one step after another
    say "running $name"
    bash -c "$*" >"$P/$name.out" 2>&1 < /dev/null
    touch "$P/$name.done"
    say "$name done"
    return
  fi
  setsid bash -c "$* ; touch '$P/$name.done'" >"$P/$name.out" 2>&1 < /dev/null &
  say "started $name in the background"
}

shard_failures() {  # the names of the tests the suite:K/N shards failed, once each
  grep -h '^\[  FAILED  \] [^ ]*\(, where\| (\)' "$P"/gpu_suite_[0-9]*.log | sed -e 's/^\[  FAILED  \] //' -e 's/, where .*//' -e 's/ (.*//' | sort -u
}

IFS=, read -r -a steps <<<"${1:-build,tests}"
for step in "${steps[@]}"; do
  case "$step" in
    build)
      gen=()
      command -v ninja >/dev/null && gen=(-G Ninja)
      nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,clocks.max.sm --format=csv >"$P/nvidia-smi.txt" 2>&1
      cmake -S . -B "$b" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DFK_BUILD_GENERATOR=OFF -DFK_BUILD_TESTS=ON \
        >"$P/configure.log" 2>&1 || { tail -40 "$P/configure.log"; exit 1; }
      cmake --build "$b" -j "$(nproc)" >"$P/build.log" 2>&1 || { grep -E "error" "$P/build.log" | head -40; exit 1; }
      say "build done"
      ;;
    tests)
      (cd "$b" && CUDA_VISIBLE_DEVICES=0 ctest -L gpu --output-on-failure -j 1 --timeout 600) >"$P/gpu_tests.log" 2>&1
      say "tests rc=$?"
      grep -E "tests passed|tests failed|Failed|\*\*\*" "$P/gpu_tests.log" | tail -25
      ;;
    tests@*) bg tests "cd '$b' && CUDA_VISIBLE_DEVICES=${step#*@} ctest -L gpu --output-on-failure -j 1 --timeout 600 >'$P/gpu_tests.log' 2>&1" ;;
    tests-shard:*@*)
      k="${step#tests-shard:}"; k="${k%@*}"; n="${k#*/}"; k="${k%/*}"
      bg "tests-$k" "cd '$b' && CUDA_VISIBLE_DEVICES=${step##*@} ctest -L gpu -E '^dist_' -I $k,,$n --output-on-failure -j 1 --timeout 600 >'$P/gpu_tests_$k.log' 2>&1"
      ;;
    suite:*@*)  # fk_gpu_tests in one process per shard (gtest sharding): no process start or CUDA init per test
      k="${step#suite:}"; k="${k%@*}"; n="${k#*/}"; k="${k%/*}"
      bg "suite-$k" "cd '$b' && CUDA_VISIBLE_DEVICES=${step##*@} GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$((k - 1)) tests/fk_gpu_tests >'$P/gpu_suite_$k.log' 2>&1; echo \"exit \$?\" >>'$P/gpu_suite_$k.log'; CUDA_VISIBLE_DEVICES=${step##*@} GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$((k - 1)) tests/fk_howto_kind_tests >>'$P/gpu_suite_$k.log' 2>&1; echo \"howto exit \$?\" >>'$P/gpu_suite_$k.log'"
      ;;
    suite-rerun@*)  # every test a suite:K/N shard failed, alone in its own process (as ctest runs it), into gpu_suite_rerun.log
      : >"$P/gpu_suite_rerun.log"
      shard_failures |
        while read -r t; do
          (cd "$b" && CUDA_VISIBLE_DEVICES=${step##*@} timeout 600 tests/fk_gpu_tests --gtest_filter="$t" >"$P/rerun_one.log" 2>&1)
          rc=$?
          echo "rc=$rc $t" >>"$P/gpu_suite_rerun.log"
          [ $rc = 0 ] || cat "$P/rerun_one.log" >>"$P/gpu_suite_rerun_failures.log"
        done
      say "suite-rerun: $(grep -c '^rc=0 ' "$P/gpu_suite_rerun.log") of $(wc -l <"$P/gpu_suite_rerun.log") pass alone"
      # shards side by side on one GPU can run each other out of memory (bench/results/2026-12-07-s32): say how many
      say "suite-rerun: $(cat "$P"/gpu_suite_[0-9]*.log | grep -c 'failed: cudaErrorMemoryAllocation (out of memory)') shard failures said out of memory"
      for f in "$P"/gpu_suite_[0-9]*.log; do  # a shard whose fk_gpu_tests died (its log then holds only the howto tests' summary)
        [ "$(grep -c '^\[==========\] .* ran\.' "$f")" -ge 2 ] || say "$(basename "$f"): the process ended inside $(grep '^\[ RUN      \]' "$f" | tail -1 | cut -c14-); later tests of the shard did not run"
      done
      ;;
    gemm-force@*)  # the listed tests ($FK_FORCE_LIST, else what the suite shards failed) in one process per GEMM path
      list="${FK_FORCE_LIST:-}"
      if [ -z "$list" ]; then
        list="$P/force_list.txt"
        shard_failures >"$list"
      fi
      filter="$(paste -sd: "$list")"
      : >"$P/gemm_force.log"
      for mode in measured gemv cublaslt cublas; do  # Note [Forced GEMM dispatch]
        f=""; [ $mode = measured ] || f=$mode
        (cd "$b" && CUDA_VISIBLE_DEVICES=${step##*@} FK_GEMM_FORCE=$f FK_GEMM_DISPATCH_VERBOSE=1 timeout 580 tests/fk_gpu_tests --gtest_filter="$filter" >"$P/gemm_force_$mode.log" 2>&1)
        echo "$mode rc=$? passed=$(grep -c '^\[       OK \]' "$P/gemm_force_$mode.log") failed=$(grep -c '^\[  FAILED  \] .* ms)$' "$P/gemm_force_$mode.log")" | tee -a "$P/gemm_force.log"
      done
      ;;
    bisect:*@*)  # the earlier test of shard K of N that breaks $FK_BISECT_TEST in one process (scripts/bisect_test_leak.py)
      k="${step#bisect:}"; k="${k%@*}"; n="${k#*/}"; k="${k%/*}"
      [ -n "${FK_BISECT_TEST:-}" ] || { echo "bisect: set FK_BISECT_TEST to the failing test's exact name" >&2; exit 2; }
      CUDA_VISIBLE_DEVICES=${step##*@} timeout 580 python3 scripts/bisect_test_leak.py --binary "$b/tests/fk_gpu_tests" --shards "$n" \
        --shard "$k" --test "$FK_BISECT_TEST" --log "$P/bisect_$k.log" 2>&1 | tee "$P/bisect_$k.out"
      ;;
    tests-re:*@*)
      k="${step#tests-re:}"; k="${k%@*}"; n="${k#*/}"; k="${k%/*}"
      [ -n "${FK_TESTS_RE:-}" ] || { echo "tests-re: set FK_TESTS_RE to the ctest -R regex" >&2; exit 2; }
      bg "re-$k" "cd '$b' && CUDA_VISIBLE_DEVICES=${step##*@} ctest -L gpu -E '^dist_' -R '$FK_TESTS_RE' -I $k,,$n --output-on-failure -j 1 --timeout 600 >'$P/gpu_re_$k.log' 2>&1"
      ;;
    tests-touched:*@*)
      k="${step#tests-touched:}"; k="${k%@*}"; n="${k#*/}"; k="${k%/*}"
      re='GeneratedTask[.]L[1-4]_(vocab_parallel_embedding|scaled_word_embedding|parallel_lm_head|row_parallel_linear|qkv_parallel_linear|merged_column_parallel_linear|column_parallel_linear|replicated_linear|llama_|gemma_|olmo2_|attention_o_proj)|WholeModel|^Tasks[.]|^Kernels[.]'
      bg "touched-$k" "cd '$b' && CUDA_VISIBLE_DEVICES=${step##*@} ctest -L gpu -E '^dist_' -R '$re' -I $k,,$n --output-on-failure -j 1 --timeout 600 >'$P/gpu_touched_$k.log' 2>&1"
      ;;
    dist)
      ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
      (cd "$b" && ctest -R '^dist_' --output-on-failure --timeout 300) >"$P/dist_tests.log" 2>&1
      say "dist tests (2 ranks) rc=$?"; grep -E "tests passed|tests failed|Failed|Passed" "$P/dist_tests.log" | tail -5
      for n in $(echo 2 "$ngpu" | tr ' ' '\n' | sort -un); do
        [ "$n" -ge 2 ] || continue
        if [ "$n" != 2 ]; then
          timeout 300 "$b/fk_launch" --nproc "$n" -- "$b/tests/fk_dist_gpu_tests" --gtest_filter=-*KilledRank* >"$P/dist_tests_$n.log" 2>&1
          say "dist tests ($n ranks) rc=$?"; grep -E "PASSED|FAILED|SKIPPED" "$P/dist_tests_$n.log" | sort | uniq -c | head
          timeout 120 "$b/fk_launch" --nproc "$n" --grace 2 -- "$b/tests/fk_dist_gpu_tests" --gtest_filter=*KilledRank* >"$P/dist_killed_$n.log" 2>&1
          say "killed-rank test ($n ranks) rc=$?"
        fi
        for op in all_reduce all_reduce_peer all_reduce_lamport all_reduce_one_shot all_reduce_two_shot all_gather reduce_scatter; do
          for mode in eager graph; do
            timeout 300 "$b/fk_launch" --nproc "$n" -- "$b/fk_collectives" --op $op --min-bytes 8 --max-bytes 1G \
              $([ $mode = graph ] && echo --graph) --jsonl "$P/coll_${n}r.jsonl" >"$P/coll_${n}r_${op}_$mode.log" 2>&1
            say "fk_collectives $n ranks $op $mode rc=$?"
          done
        done
        for op in all_reduce_add_rms_norm nccl_add_rms_norm; do
          for mode in eager graph; do
            timeout 300 "$b/fk_launch" --nproc "$n" -- "$b/fk_collectives" --op $op --hidden 4096 --min-bytes 8K --max-bytes 2M \
              $([ $mode = graph ] && echo --graph) --jsonl "$P/coll_${n}r.jsonl" >"$P/coll_${n}r_${op}_$mode.log" 2>&1
            say "fk_collectives $n ranks $op $mode rc=$?"
          done
        done
        timeout 400 torchrun --nproc-per-node "$n" bench/peers/torch_collectives.py --jsonl "$P/coll_${n}r_torch.jsonl" \
          >"$P/coll_${n}r_torch.log" 2>&1
        say "torch peers $n ranks rc=$?"
      done
      ;;
    dist-fused)
      ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
      (cd "$b" && ctest -R '^dist_' --output-on-failure --timeout 300) >"$P/dist_tests.log" 2>&1
      say "dist tests (2 ranks) rc=$?"; grep -E "tests passed|tests failed|Failed|Passed" "$P/dist_tests.log" | tail -5
      for n in $(echo 2 "$ngpu" | tr ' ' '\n' | sort -un); do
        [ "$n" -ge 2 ] || continue
        if [ "$n" != 2 ]; then
          timeout 300 "$b/fk_launch" --nproc "$n" -- "$b/tests/fk_dist_gpu_tests" --gtest_filter=-*KilledRank* >"$P/dist_tests_$n.log" 2>&1
          say "dist tests ($n ranks) rc=$?"; grep -E "PASSED|FAILED|SKIPPED" "$P/dist_tests_$n.log" | sort | uniq -c | head
        fi
        for op in all_reduce_peer all_reduce_add_rms_norm nccl_add_rms_norm; do
          for mode in eager graph; do
            if [ $op = all_reduce_peer ]; then sz="--min-bytes 8K --max-bytes 2M"; else sz="--hidden 4096 --min-bytes 8K --max-bytes 2M"; fi
            timeout 300 "$b/fk_launch" --nproc "$n" -- "$b/fk_collectives" --op $op $sz $([ $mode = graph ] && echo --graph) \
              --jsonl "$P/coll_${n}r_fused.jsonl" >"$P/coll_${n}r_fused_${op}_$mode.log" 2>&1
            say "fk_collectives $n ranks $op $mode rc=$?"
          done
        done
      done
      ;;
    tp)
      ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
      tpa="--arch meta-llama/Llama-3.1-8B-Instruct --seed $seed --decode-steps 64 --bench --decode-batches 1,8 --prefill 1x2048 --mem-steps 0"
      CUDA_VISIBLE_DEVICES=0 timeout 500 "$b/fk_model" $tpa --greedy "$P/tp1.json" --teacher-forced "$P/tf1.json" \
        --jsonl "$P/tp1_bench.jsonl" --markdown "$P/tp1_bench.md" \
        >"$P/tp1.log" 2>&1
      say "fk_model tp 1 rc=$?"; grep -E "^decode|^prefill" "$P/tp1.log"
      runs=(); tfs=()
      for n in $(echo 2 "$ngpu" | tr ' ' '\n' | sort -un); do
        [ "$n" -ge 2 ] || continue
        timeout 500 "$b/fk_launch" --nproc "$n" -- "$b/fk_model" $tpa --tp "$n" --greedy "$P/tp$n.json" --teacher-forced "$P/tf$n.json" \
          --force-tokens "$P/tp1.json" --jsonl "$P/tp${n}_bench.jsonl" --markdown "$P/tp${n}_bench.md" >"$P/tp$n.log" 2>&1
        say "fk_model tp $n rc=$?"; grep -E "^decode|^prefill|rank .* of" "$P/tp$n.log" | sort | uniq | head -20
        [ -f "$P/tp$n.json" ] && runs+=("$P/tp$n.json")
        [ -f "$P/tf$n.json" ] && tfs+=("$P/tf$n.json")
      done
      [ ${#runs[@]} -gt 0 ] && python3 bench/tp_tokens.py "$P/tp1.json" "${runs[@]}" --base-teacher "$P/tf1.json" --json "$P/tp_tokens.json" >"$P/tp_tokens.txt" 2>&1
      say "tp tokens rc=$?"; cat "$P/tp_tokens.txt" 2>/dev/null | grep -v "^  sequence" | head
      [ ${#tfs[@]} -gt 0 ] && python3 bench/tp_tokens.py --teacher-forced "$P/tf1.json" "${tfs[@]}" --json "$P/tp_teacher.json" \
        >"$P/tp_teacher.txt" 2>&1
      say "tp teacher-forced rc=$?"; head -20 "$P/tp_teacher.txt" 2>/dev/null
      ;;
    dist-ep|dist-ep:*)  # expert-parallel dispatch + combine (issue 23): the own kernels, the NCCL baseline and torch's all_to_all_single
      ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
      ranks="2 $ngpu"; [ "$step" != dist-ep ] && ranks="${step#dist-ep:}"
      for n in $(echo $ranks | tr ' ' '\n' | sort -un); do
        [ "$n" -ge 2 ] || continue
        for run in "ep_dispatch_combine eager" "ep_dispatch_combine graph" "ep_dispatch_combine_nccl eager"; do
          set -- $run
          timeout 200 "$b/fk_launch" --nproc "$n" -- "$b/fk_collectives" --op $1 --hidden 7168 --topk 8 --experts 256 \
            $([ $2 = graph ] && echo --graph) --jsonl "$P/ep_${n}r.jsonl" >"$P/ep_${n}r_$1_$2.log" 2>&1
          say "fk_collectives $n ranks $1 $2 rc=$?"; cat "$P/ep_${n}r_$1_$2.log" | head -12
        done
        timeout 300 torchrun --nproc-per-node "$n" bench/peers/torch_ep.py --jsonl "$P/ep_${n}r_torch.jsonl" >"$P/ep_${n}r_torch.log" 2>&1
        say "torch ep peer $n ranks rc=$?"; grep -v Warning "$P/ep_${n}r_torch.log" | head -8
      done
      ;;
    dist-linear|dist-linear:*)  # overlapped row/column-parallel linears (issue 23) against serial GEMM + NCCL and torch's fused ops
      ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
      ranks="2 $ngpu"; [ "$step" != dist-linear ] && ranks="${step#dist-linear:}"
      for n in $(echo $ranks | tr ' ' '\n' | sort -un); do
        [ "$n" -ge 2 ] || continue
        # Llama-3.1-8B at TP n: qkv (K 4096, N 6144/n) and gate_up (K 4096, N 28672/n) after the all-gather;
        # o_proj (K 4096/n, N 4096) and down (K 14336/n, N 4096) before the reduce-scatter.
        for shape in "all_gather_matmul 4096 $((6144 / n))" "all_gather_matmul 4096 $((28672 / n))" \
                     "matmul_reduce_scatter $((4096 / n)) 4096" "matmul_reduce_scatter $((14336 / n)) 4096"; do
          set -- $shape
          for v in "" _nccl; do
            timeout 200 "$b/fk_launch" --nproc "$n" -- "$b/fk_collectives" --op "$1$v" --k "$2" --n "$3" --iters 10 \
              --jsonl "$P/lin_${n}r.jsonl" >"$P/lin_${n}r_$1${v}_$2_$3.log" 2>&1
            say "fk_collectives $n ranks $1$v K $2 N $3 rc=$?"; cat "$P/lin_${n}r_$1${v}_$2_$3.log" | head -8
          done
          timeout 300 torchrun --nproc-per-node "$n" bench/peers/torch_async_tp.py --op "$1" --inner "$2" --cols "$3" --iters 10 \
            --jsonl "$P/lin_${n}r_torch.jsonl" >"$P/lin_${n}r_torch_$1_$2_$3.log" 2>&1
          say "torch async-tp peers $n ranks $1 K $2 N $3 rc=$?"; grep -v Warning "$P/lin_${n}r_torch_$1_$2_$3.log" | grep -v "^W1" | head -10
        done
      done
      python3 bench/linear_report.py "$P"/lin_*r.jsonl "$P"/lin_*r_torch.jsonl --out "$P/linear_report.md" >/dev/null 2>&1
      say "linear report rc=$?"; tail -1 "$P/linear_report.md" 2>/dev/null
      ;;
    tp-moe|tp-moe:4|tp-moe:ds|tp-moe:ds4|tp-moe:dp|tp-moe:dp4)  # the tensor-parallel MoE layouts (Mixtral-8x7B, Qwen3-30B-A3B at TP 2, few layers) against TP 1
      models="mistralai/Mixtral-8x7B-v0.1 Qwen/Qwen3-30B-A3B"; pars="2 2e"; layers=4
      # tp-moe:4 (issue 24): Qwen3-30B-A3B at TP 2 + EP 2, TP 4 and TP 4 + EP 4 (one KV head per rank: Note [Replicated KV heads])
      [ "$step" = tp-moe:4 ] && models="Qwen/Qwen3-30B-A3B" && pars="2e 4 4e"
      # DeepSeek-V3 at 5 layers: its 3 dense layers and 2 MoE layers (Note [DeepSeek sharding])
      [ "$step" = tp-moe:ds ] && models="deepseek-ai/DeepSeek-V3" && pars="2e" && layers=5
      [ "$step" = tp-moe:ds4 ] && models="deepseek-ai/DeepSeek-V3" && pars="2e 4e" && layers=5
      # Qwen3-30B-A3B with data-parallel attention at EP 2 ("2d": --ep 2 alone, Note [Data-parallel runs]) beside TP 2 + EP 2
      [ "$step" = tp-moe:dp ] && models="Qwen/Qwen3-30B-A3B" && pars="2e 2d"
      # issue 24: both data-parallel models at EP 2 and EP 4 (DeepSeek-V3 at its 5 layers), layer timings against EP 2
      [ "$step" = tp-moe:dp4 ] && models="Qwen/Qwen3-30B-A3B deepseek-ai/DeepSeek-V3" && pars="2d 4d"
      for A in $models; do
        s="$(basename "$A")"
        [ "$step" = tp-moe:dp4 ] && case "$A" in deepseek*) layers=5 ;; *) layers=4 ;; esac
        ma="--arch $A --layers $layers --seed $seed --decode-steps 64 --bench --decode-batches 1,8 --prefill 1x512 --mem-steps 0"
        CUDA_VISIBLE_DEVICES=0 timeout 300 "$b/fk_model" $ma --greedy "$P/moe1_$s.json" --teacher-forced "$P/moetf1_$s.json" \
          --jsonl "$P/moe1_$s.jsonl" >"$P/moe1_$s.log" 2>&1
        say "fk_model $s tp 1 rc=$?"; grep -E "^decode|^prefill" "$P/moe1_$s.log"
        runs=(); tfs=()
        for par in $pars; do  # TP n (every expert's slice), TP n + EP n ("ne": whole experts, Note [Expert-parallel MoE]),
          # EP n with data-parallel attention ("nd": Note [Data-parallel runs])
          n="${par%[ed]}"
          case "$par" in *e) extra="--tp $n --ep $n" ;; *d) extra="--ep $n" ;; *) extra="--tp $n" ;; esac
          timeout 300 "$b/fk_launch" --nproc "$n" -- "$b/fk_model" $ma $extra --greedy "$P/moe${par}_$s.json" \
            --teacher-forced "$P/moetf${par}_$s.json" --force-tokens "$P/moe1_$s.json" --jsonl "$P/moe${par}_$s.jsonl" >"$P/moe${par}_$s.log" 2>&1
          say "fk_model $s $extra rc=$?"; grep -E "^decode|^prefill|error" "$P/moe${par}_$s.log" | sort | uniq | head -12
          runs+=("$P/moe${par}_$s.json"); tfs+=("$P/moetf${par}_$s.json")
        done
        python3 bench/tp_tokens.py "$P/moe1_$s.json" "${runs[@]}" --base-teacher "$P/moetf1_$s.json" >"$P/moe_tokens_$s.txt" 2>&1
        say "$s tokens rc=$?"; grep -v "^  sequence" "$P/moe_tokens_$s.txt" | head -5
        python3 bench/tp_tokens.py --teacher-forced "$P/moetf1_$s.json" "${tfs[@]}" >"$P/moe_teacher_$s.txt" 2>&1
        say "$s teacher-forced rc=$?"; head -12 "$P/moe_teacher_$s.txt"
      done
      ;;
    dist-tests)
      ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
      (cd "$b" && ctest -R '^dist_' --output-on-failure --timeout 300) >"$P/dist_tests.log" 2>&1
      say "dist tests (2 ranks) rc=$?"; grep -E "tests passed|tests failed|Failed|Passed" "$P/dist_tests.log" | tail -5
      if [ "$ngpu" -gt 2 ]; then
        timeout 300 "$b/fk_launch" --nproc "$ngpu" -- "$b/tests/fk_dist_gpu_tests" --gtest_filter=-*KilledRank* >"$P/dist_tests_$ngpu.log" 2>&1
        say "dist tests ($ngpu ranks) rc=$?"; grep -E "PASSED|FAILED|SKIPPED" "$P/dist_tests_$ngpu.log" | sort | uniq -c | head
        # The rank-failure test at every GPU (issue 24): rank 1 is killed inside an all-reduce; every rank must end
        # with the launcher's report within seconds (timed here; the 2-rank form is ctest dist_killed_rank_2ranks).
        k0=$(date +%s.%N)
        timeout 120 "$b/fk_launch" --nproc "$ngpu" --grace 2 -- "$b/tests/fk_dist_gpu_tests" --gtest_filter=*KilledRank* \
          >"$P/dist_killed_rank_$ngpu.log" 2>&1
        krc=$?; k1=$(date +%s.%N)
        say "killed-rank test ($ngpu ranks) rc=$krc in $(python3 -c "print(f'{$k1 - $k0:.1f}')") s"
        grep -E "was killed by signal|every rank ended" "$P/dist_killed_rank_$ngpu.log" | head -3
      fi
      ;;
    dist-coll|dist-coll:*)  # the collective tasks (Note [Collective tasks]) and the fused all-reduce + RMSNorm tasks (Note [Fused
      # all-reduce task]) under fk_bench --world-size N (N = 2 and the GPU count; :N alone), in the foreground
      ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
      ranks="2 $ngpu"; [ "${step#dist-coll:}" != "$step" ] && ranks="${step#dist-coll:}"
      for n in $(echo $ranks | tr ' ' '\n' | sort -un); do
        [ "$n" -ge 2 ] || continue
        timeout 300 "$b/fk_launch" --nproc "$n" -- "$b/fk_bench" --world-size "$n" --seed "$seed" --max-iters 50 --case-timeout 120 \
          --task '^all_(reduce|gather)' --jsonl "$P/coll${n}.jsonl" --markdown "$P/coll${n}.md" >"$P/coll${n}.log" 2>&1
        say "fk_bench --world-size $n collective tasks rc=$?"; tail -2 "$P/coll${n}.log"
      done
      ;;
    dist-ds|dist-ds:*)  # DeepSeek-V3's sharded tasks (Note [DeepSeek sharding]) under fk_bench --world-size N, levels 1-3
      ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
      ranks="2 $ngpu"; [ "${step#dist-ds:}" != "$step" ] && ranks="${step#dist-ds:}"
      for n in $(echo $ranks | tr ' ' '\n' | sort -un); do
        [ "$n" -ge 2 ] || continue
        for lv in 1 2 3; do
          cases='.'; [ $lv -gt 1 ] && cases='^(t1|t8|t256|t1024|b1_kv2048|b8_kv2048|b64_kv2048|b1_s2048)$'
          timeout 560 "$b/fk_launch" --nproc "$n" -- "$b/fk_bench" --world-size "$n" --seed "$seed" --max-iters 30 --case-timeout 180 \
            --arch 'DeepSeek-V3@' --level $lv --case "$cases" --off-registry 0 --jsonl "$P/ds${n}_l$lv.jsonl" --markdown "$P/ds${n}_l$lv.md" \
            >"$P/ds${n}_l$lv.log" 2>&1
          say "fk_bench --world-size $n DeepSeek-V3 level $lv rc=$?"; tail -2 "$P/ds${n}_l$lv.log"
        done
      done
      ;;
    dist-dp:4)  # issue 24: the @ep4 tasks at 4 ranks (levels 1-3: the all-to-all, blocks, layers) and the MoE blocks at EP 4 beside EP 2's
      for lv in 1 2 3; do
        timeout 560 "$b/fk_launch" --nproc 4 -- "$b/fk_bench" --world-size 4 --seed "$seed" --max-iters 30 --case-timeout 180 \
          --arch '@ep4$' --level $lv --jsonl "$P/dp4_l$lv.jsonl" --markdown "$P/dp4_l$lv.md" >"$P/dp4_l$lv.log" 2>&1
        say "fk_bench --world-size 4 @ep4 level $lv rc=$?"; tail -3 "$P/dp4_l$lv.log"
      done
      ;;
    dist-dp)  # Note [Data-parallel expert MoE]: the @ep2 tasks at 2 ranks, every rank against the unsharded block on its tokens
      for lv in 2 3 4; do
        cases='.'; [ $lv -gt 2 ] && cases='^(t1|t8|t256|t1024|b1_kv2048|b8_kv2048|b64_kv2048|b1_s2048|b1_s512|b8_s512)$'
        timeout 560 "$b/fk_launch" --nproc 2 -- "$b/fk_bench" --world-size 2 --seed "$seed" --max-iters 30 --case-timeout 180 \
          --arch '@ep2$' --level $lv --case "$cases" --jsonl "$P/dp2_l$lv.jsonl" --markdown "$P/dp2_l$lv.md" >"$P/dp2_l$lv.log" 2>&1
        say "fk_bench --world-size 2 @ep2 level $lv rc=$?"; tail -3 "$P/dp2_l$lv.log"
      done
      timeout 300 "$b/fk_launch" --nproc 2 -- "$b/fk_bench" --world-size 2 --seed "$seed" --max-iters 50 --case-timeout 120 \
        --task '^(sparse_moe_block_e128_top8_h2048_i768_renorm_(tp2_)?ep2|deepseek_moe_h7168_.*_ep2)_bf16$' --jsonl "$P/dp2_vs_tp2ep2.jsonl" \
        --markdown "$P/dp2_vs_tp2ep2.md" >"$P/dp2_vs_tp2ep2.log" 2>&1
      say "MoE block @ep2 vs @tp2_ep2 rc=$?"; tail -3 "$P/dp2_vs_tp2ep2.log"
      ;;
    dist-sp)  # the sequence-parallel collectives, the overlapped linears and the expert-parallel all-to-all at 2 ranks (issue 23)
      timeout 560 "$b/fk_launch" --nproc 2 -- "$b/fk_bench" --world-size 2 --seed "$seed" --max-iters 30 --case-timeout 180 \
        --task '^(reduce_scatter|all_gather_rows|matmul_reduce_scatter|all_gather_matmul|ep_all_to_all)_' \
        --jsonl "$P/sp2.jsonl" --markdown "$P/sp2.md" >"$P/sp2.log" 2>&1
      say "fk_bench --world-size 2 sequence-parallel / overlapped / all-to-all tasks rc=$?"; tail -3 "$P/sp2.log"
      ;;
    dist-bench|dist-bench-l1|dist-bench-l1:*)
      ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
      ranks="2 $ngpu"; [ "${step#dist-bench-l1:}" != "$step" ] && ranks="${step#dist-bench-l1:}"
      for n in $(echo $ranks | tr ' ' '\n' | sort -un); do
        [ "$n" -ge 2 ] || continue
        timeout 560 "$b/fk_launch" --nproc "$n" -- "$b/fk_bench" --world-size "$n" --seed "$seed" --max-iters 50 --case-timeout 120 \
          --level 1 --jsonl "$P/tpbench${n}_l1.jsonl" --markdown "$P/tpbench${n}_l1.md" >"$P/tpbench${n}_l1.log" 2>&1
        say "fk_bench --world-size $n level 1 rc=$?"; tail -2 "$P/tpbench${n}_l1.log"
        [ "$step" != dist-bench ] && continue
        for lv in 2 3; do
          timeout 560 "$b/fk_launch" --nproc "$n" -- "$b/fk_bench" --world-size "$n" --seed "$seed" --max-iters 30 --case-timeout 180 \
            --level $lv --off-registry 0 --jsonl "$P/tpbench${n}_l$lv.jsonl" --markdown "$P/tpbench${n}_l$lv.md" >"$P/tpbench${n}_l$lv.log" 2>&1
          say "fk_bench --world-size $n level $lv rc=$?"; tail -2 "$P/tpbench${n}_l$lv.log"
        done
        timeout 560 "$b/fk_launch" --nproc "$n" -- "$b/fk_bench" --world-size "$n" --seed "$seed" --max-iters 20 --case-timeout 300 \
          --level 4 --case '^b1_kv2048$' --off-registry 0 --jsonl "$P/tpbench${n}_l4.jsonl" --markdown "$P/tpbench${n}_l4.md" \
          >"$P/tpbench${n}_l4.log" 2>&1
        say "fk_bench --world-size $n level 4 rc=$?"; tail -2 "$P/tpbench${n}_l4.log"
      done
      ;;
    tp-parity|tp-parity:ds|tp-parity:moe)
      ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
      A=meta-llama/Llama-3.1-8B-Instruct; ep=0
      # DeepSeek-V3 at TP n + EP n (4 layers: the 3 dense and one MoE layer; Note [DeepSeek sharding]); Qwen3-30B-A3B likewise
      [ "$step" = tp-parity:ds ] && A=deepseek-ai/DeepSeek-V3 && ep=1
      [ "$step" = tp-parity:moe ] && A=Qwen/Qwen3-30B-A3B && ep=1
      CUDA_VISIBLE_DEVICES=0 timeout 500 "$b/fk_model" --arch $A --layers 4 --seed "$seed" --save-weights "$P/tpw.safetensors" \
        >"$P/tp_parity_weights.log" 2>&1
      say "tp-parity weights $A rc=$?"
      for n in $(echo 2 "$ngpu" | tr ' ' '\n' | sort -un); do
        [ "$n" -ge 2 ] || continue
        timeout 500 "$b/fk_launch" --nproc "$n" -- "$b/fk_model" --arch $A --tp "$n" $([ $ep = 1 ] && echo --ep "$n") --layers 4 \
          --seed "$seed" --load-weights "$P/tpw.safetensors" --dump "$P/tpd$n.safetensors" >"$P/tp_parity_dump$n.log" 2>&1
        say "tp-parity dump tp $n rc=$?"
        python3 bench/parity/hf_parity.py --arch $A --weights "$P/tpw.safetensors" --dump "$P/tpd$n.safetensors" --seed "$seed" \
          --out "$P/tp_parity$n" >"$P/tp_parity$n.log" 2>&1
        say "tp-parity hf tp $n rc=$?"; tail -3 "$P/tp_parity$n.log"
        rm -f "$P/tpd$n.safetensors"
      done
      rm -f "$P/tpw.safetensors"
      ;;
    bench-l1@*) bg bench-l1 "$(declare -f bench_part); b='$b' P='$P' seed='$seed' bench_part l1 ${step#*@} --level 1" ;;
    bench-l234@*)
      bg bench-l234 "$(declare -f bench_part); b='$b' P='$P' seed='$seed'; bench_part l2 ${step#*@} --level 2; \
        bench_part l3 ${step#*@} --level 3; bench_part l4 ${step#*@} --level 4"
      ;;
    candidates@*)
      S=tests/fixtures/candidates_runtime
      bg candidates "CUDA_VISIBLE_DEVICES=${step#*@} python3 scripts/bench_candidates.py $S/bad_* --out '$P/cand' \
        --build-dir build/cand --max-level 1 --case-timeout 30 --run-timeout 900 --static-results $S/static.jsonl \
        --cmake-arg=-DFK_BUILD_GENERATOR=OFF '--bench-arg=--case=^(t1|t256|t16384)\$' --seed $seed --jobs $(nproc)"
      ;;
    cand-build-dist)  # the build of candidates-dist alone (background, no GPU), so that candidates-dist later only relinks
      S=tests/fixtures/candidates_dist
      bg cand-build-dist "python3 scripts/bench_candidates.py $S/good_* $S/bad_* --out '$P/cand-dist' --build-dir build/cand-dist \
        --world-size 2 --max-level 4 --model --build-only --cmake-arg=-DFK_BUILD_GENERATOR=OFF --jobs $(nproc)"
      ;;
    candidates-dist@*)  # collective candidates (Note [Collective tasks]) on GPUs G-H: L1-L4 of Llama-3.1-8B@tp2 + fk_model
      S=tests/fixtures/candidates_dist
      gs="${step#*@}"
      bg candidates-dist "CUDA_VISIBLE_DEVICES=${gs//-/,} python3 scripts/bench_candidates.py $S/good_* $S/bad_* --out '$P/cand-dist' \
        --build-dir build/cand-dist --world-size 2 --arch 'Llama-3.1-8B-Instruct@tp2\$' --max-level 4 --model --model-layers 4 \
        --model-checks-only --case-timeout 120 --run-timeout 900 --cmake-arg=-DFK_BUILD_GENERATOR=OFF \
        '--bench-arg=--case=^(t1|t8|t1024|t4096|b1_kv2048|p1x512)\$' --bench-arg=--off-registry=0 --bench-arg=--max-iters=30 \
        --seed $seed --jobs $(nproc)"
      ;;
    candidates-ep@*)  # the expert-parallel all-to-all candidates (tests/fixtures/candidates_ep) in Qwen3-30B-A3B@ep2 at every level
      gs="${step#candidates-ep@}"
      S=tests/fixtures/candidates_ep
      bg candidates-ep "CUDA_VISIBLE_DEVICES=${gs//-/,} python3 scripts/bench_candidates.py $S/good_* $S/bad_* --out '$P/cand-ep' \
        --build-dir build/cand-ep --world-size 2 --arch 'Qwen3-30B-A3B@ep2\$' --max-level 4 --model --model-layers 4 \
        --model-checks-only --case-timeout 120 --run-timeout 900 --cmake-arg=-DFK_BUILD_GENERATOR=OFF \
        '--bench-arg=--case=^(t1|t8|t128|t1024|b1_kv2048|p1x512)\$' --bench-arg=--off-registry=0 --bench-arg=--max-iters=30 \
        --seed $seed --jobs $(nproc)"
      ;;
    candidates-l4@*)
      S=tests/fixtures/candidates_runtime
      bg candidates-l4 "CUDA_VISIBLE_DEVICES=${step#*@} python3 scripts/bench_candidates.py $S/good_rms_norm $S/bad_layer_drift --out '$P/cand-l4' --build-dir build/cand-l4 --max-level 4 --model --model-layers 4 \
        --model-checks-only --case-timeout 120 --run-timeout 1500 --static-results $S/static.jsonl \
        --cmake-arg=-DFK_BUILD_GENERATOR=OFF '--bench-arg=--case=^(t256|b1_kv2048)\$' --bench-arg=--off-registry=0 --seed $seed --jobs $(nproc)"
      ;;
    encoders@*)
      g="${step#*@}"
      bg encoders "export CUDA_VISIBLE_DEVICES=$g; \
        (cd '$b' && ctest -L gpu -R 'Pool|L2Normalize|RopeCache|LayerNorm|layer_norm|bert_|Bert' --output-on-failure -j 1 --timeout 600) >'$P/enc_tests.log' 2>&1; \
        for a in bert-base-uncased bge-m3; do '$b/fk_bench' --arch \$a --seed $seed --case-timeout 300 --jsonl '$P/enc_bench_'\$a.jsonl \
          --markdown '$P/enc_bench_'\$a.md >'$P/enc_bench_'\$a.log 2>&1; done; \
        python3 bench/parity/hf_parity.py --arch google-bert/bert-base-uncased,BAAI/bge-m3 --layers 4 --fk-model '$b/fk_model' \
          --out '$P/enc_parity' >'$P/enc_parity.log' 2>&1; \
        for a in google-bert/bert-base-uncased BAAI/bge-m3; do t=\$(echo \$a | tr / _); \
          '$b/fk_model' --arch \$a --save-weights '$P/w.safetensors' --bench --jsonl '$P/enc_model_'\$t.jsonl \
            --markdown '$P/enc_model_'\$t.md >'$P/enc_model_'\$t.log 2>&1; \
          python3 bench/peers/hf_encoder_perf.py --arch \$a --weights '$P/w.safetensors' --modes eager,compile \
            --jsonl '$P/enc_hf_'\$t.jsonl >'$P/enc_hf_'\$t.log 2>&1; rm -f '$P/w.safetensors'; done"
      ;;
    lexical@*)
      bg lexical "export CUDA_VISIBLE_DEVICES=${step#*@}; for sd in $seed 76656637278103 1234567; do \
        '$b/fk_bench' --task '^bert_model_l24.*_mv1024_' --seed \$sd --case-timeout 300 --jsonl '$P/lexical_'\$sd.jsonl \
          --markdown '$P/lexical_'\$sd.md >'$P/lexical_'\$sd.log 2>&1; echo \"seed \$sd rc=\$?\"; done"
      ;;
    heads@*)
      g="${step#*@}"
      bg heads "export CUDA_VISIBLE_DEVICES=$g; \
        (cd '$b' && ctest -L gpu -R 'TokenClassif|DropSequenceEnds|token_classifier_|_mv128_|_mv1024_' --output-on-failure -j 1 --timeout 900) \
          >'$P/heads_tests.log' 2>&1; \
        '$b/fk_bench' --arch colbertv2.0 --seed $seed --case-timeout 300 --jsonl '$P/heads_bench_colbert.jsonl' \
          --markdown '$P/heads_bench_colbert.md' >'$P/heads_bench_colbert.log' 2>&1; \
        '$b/fk_bench' --task '^(bert_model_l24.*_mv1024_|token_classifier_|l2_normalize_h1024)' --seed $seed --case-timeout 300 \
          --jsonl '$P/heads_bench_bgem3.jsonl' --markdown '$P/heads_bench_bgem3.md' >'$P/heads_bench_bgem3.log' 2>&1; \
        python3 bench/parity/hf_parity.py --arch colbert-ir/colbertv2.0,BAAI/bge-m3 --layers 4 --fk-model '$b/fk_model' \
          --out '$P/heads_parity' >'$P/heads_parity.log' 2>&1; \
        for a in colbert-ir/colbertv2.0 BAAI/bge-m3; do t=\$(echo \$a | tr / _); \
          '$b/fk_model' --arch \$a --save-weights '$P/hw.safetensors' --bench --jsonl '$P/heads_model_'\$t.jsonl \
            --markdown '$P/heads_model_'\$t.md >'$P/heads_model_'\$t.log 2>&1; \
          python3 bench/peers/hf_encoder_perf.py --arch \$a --weights '$P/hw.safetensors' --modes eager,compile \
            --jsonl '$P/heads_hf_'\$t.jsonl >'$P/heads_hf_'\$t.log 2>&1; rm -f '$P/hw.safetensors'; done; \
        '$b/fk_bench' --task '^token_classifier_' --off-registry 0 --export-cases '$P/heads_cases.json' >/dev/null 2>&1; \
        python3 bench/peers/torch_peers.py '$P/heads_cases.json' --out '$P/heads_peers.jsonl' >'$P/heads_peers.log' 2>&1; \
        python3 bench/report.py '$P/heads_bench_bgem3.jsonl' '$P/heads_peers.jsonl' --out '$P/heads_l1_report.md' >>'$P/heads_peers.log' 2>&1"
      ;;
    towers@*)
      g="${step#*@}"
      bg towers "export CUDA_VISIBLE_DEVICES=$g; \
        (cd '$b' && ctest -L gpu -R 'LayerScale|PrependTokens|dinov3_|layer_scale_|siglip' --output-on-failure -j 1 --timeout 900) \
          >'$P/towers_tests.log' 2>&1; \
        '$b/fk_bench' --arch 'tiny-random-dinov-3|dinov3-vit7b16|siglip' --seed $seed --case-timeout 300 \
          --jsonl '$P/towers_bench.jsonl' --markdown '$P/towers_bench.md' >'$P/towers_bench.log' 2>&1; \
        python3 bench/parity/hf_parity.py --arch optimum-intel-internal-testing/tiny-random-dinov-3 --layers 2 --fk-model '$b/fk_model' \
          --out '$P/towers_parity_tiny' >'$P/towers_parity.log' 2>&1; \
        python3 bench/parity/hf_parity.py --arch google/siglip2-base-patch16-512,google/siglip-so400m-patch14-384,facebook/dinov3-vit7b16-pretrain-lvd1689m --layers 4 \
          --fk-model '$b/fk_model' --out '$P/towers_parity' >>'$P/towers_parity.log' 2>&1; \
        '$b/fk_bench' --task '^flash_attn_prefill_.*_bidir_' --seed $seed --case-timeout 300 --jsonl '$P/towers_attn.jsonl' \
          --markdown '$P/towers_attn.md' >'$P/towers_attn.log' 2>&1; \
        '$b/fk_bench' --task '^flash_attn_prefill_.*_bidir_' --off-registry 0 --export-cases '$P/towers_attn_cases.json' >/dev/null 2>&1; \
        python3 bench/peers/torch_peers.py '$P/towers_attn_cases.json' --out '$P/towers_attn_peers.jsonl' >'$P/towers_attn_peers.log' 2>&1; \
        python3 bench/report.py '$P/towers_attn.jsonl' '$P/towers_attn_peers.jsonl' --out '$P/towers_attn_report.md' >>'$P/towers_attn_peers.log' 2>&1; \
        for a in google/siglip2-base-patch16-512 google/siglip-so400m-patch14-384 facebook/dinov3-vit7b16-pretrain-lvd1689m; do t=\$(echo \$a | tr / _); \
          '$b/fk_model' --arch \$a --save-weights '$P/tw.safetensors' --bench --jsonl '$P/towers_model_'\$t.jsonl \
            --markdown '$P/towers_model_'\$t.md >'$P/towers_model_'\$t.log 2>&1; \
          python3 bench/peers/hf_vision_perf.py --arch \$a --weights '$P/tw.safetensors' --modes hf_eager,hf_compile \
            --jsonl '$P/towers_peers_'\$t.jsonl >'$P/towers_peers_'\$t.log 2>&1; rm -f '$P/tw.safetensors'; done"
      ;;
    mrope@*)
      g="${step#*@}"
      bg mrope "export CUDA_VISIBLE_DEVICES=$g; \
        (cd '$b' && ctest -L gpu -R 'Mrope|mrope' --output-on-failure -j 1 --timeout 900) >'$P/mrope_tests.log' 2>&1; \
        python3 bench/parity/hf_parity.py --arch pbarker/Qwen2-VL-7B-sk-googleflights-full-750-47ep-text,Qwen/Qwen2.5-VL-7B-Instruct-text,Qwen/Qwen3-VL-32B-Instruct-text \
          --layers 4 --fk-model '$b/fk_model' --out '$P/mrope_parity' >'$P/mrope_parity.log' 2>&1; \
        '$b/fk_bench' --task '^mrope_' --seed $seed --case-timeout 300 \
          --jsonl '$P/mrope_l1.jsonl' --markdown '$P/mrope_l1.md' >'$P/mrope_l1.log' 2>&1; \
        '$b/fk_bench' --task '^mrope_' --off-registry 0 --export-cases '$P/mrope_cases.json' >/dev/null 2>&1; \
        python3 bench/peers/torch_peers.py '$P/mrope_cases.json' --out '$P/mrope_peers.jsonl' >'$P/mrope_peers.log' 2>&1; \
        python3 bench/report.py '$P/mrope_l1.jsonl' '$P/mrope_peers.jsonl' --out '$P/mrope_l1_report.md' >>'$P/mrope_peers.log' 2>&1; \
        '$b/fk_bench' --arch 'VL.*-text' --task '^(qkv_rope_cache|llama_attention|llama_decoder_layer|llama_for_causal_lm)_' \
          --seed $seed --case-timeout 300 --jsonl '$P/mrope_bench.jsonl' --markdown '$P/mrope_bench.md' >'$P/mrope_bench.log' 2>&1"
      ;;
    vlm@*)
      g="${step#*@}"
      bg vlm "export CUDA_VISIBLE_DEVICES=$g; \
        python3 bench/parity/hf_parity.py --arch pbarker/Qwen2-VL-7B-sk-googleflights-full-750-47ep-text \
          --vision-arch pbarker/Qwen2-VL-7B-sk-googleflights-full-750-47ep --layers 4 --vision-layers 4 --fk-model '$b/fk_model' \
          --out '$P/vlm_parity' >'$P/vlm_parity.log' 2>&1; \
        '$b/fk_model' --arch pbarker/Qwen2-VL-7B-sk-googleflights-full-750-47ep-text \
          --vision-arch pbarker/Qwen2-VL-7B-sk-googleflights-full-750-47ep --bench --decode-batches 1,8,32 \
          --jsonl '$P/vlm_model.jsonl' --markdown '$P/vlm_model.md' >'$P/vlm_model.log' 2>&1"
      ;;
    towers-recheck@*)
      g="${step#*@}"
      bg towers-recheck "export CUDA_VISIBLE_DEVICES=$g; \
        (cd '$b' && ctest -L gpu -R 'LayerScale|PrependTokens|dinov3_|layer_scale_|siglip' --output-on-failure -j 1 --timeout 900) \
          >'$P/towers_recheck_tests.log' 2>&1; \
        '$b/fk_bench' --arch 'tiny-random-dinov-3|dinov3-vit7b16' --seed $seed --case-timeout 300 \
          --jsonl '$P/towers_recheck_bench.jsonl' --markdown '$P/towers_recheck_bench.md' >'$P/towers_recheck_bench.log' 2>&1; \
        python3 bench/parity/hf_parity.py --arch google/siglip2-base-patch16-512,google/siglip-so400m-patch14-384,facebook/dinov3-vit7b16-pretrain-lvd1689m --layers 4 \
          --fk-model '$b/fk_model' --out '$P/towers_recheck_parity' >'$P/towers_recheck_parity.log' 2>&1"
      ;;
    qwen2vl-model@*)
      g="${step#*@}"
      bg qwen2vl-model "export CUDA_VISIBLE_DEVICES=$g; \
        '$b/fk_bench' --task '^qwen2_vl_(vision_model|patch_merger)_' --seed $seed --case-timeout 300 \
          --jsonl '$P/qwen2vl_model_bench.jsonl' --markdown '$P/qwen2vl_model_bench.md' >'$P/qwen2vl_model_bench.log' 2>&1"
      ;;
    qwen2vl@*)
      g="${step#*@}"
      bg qwen2vl "export CUDA_VISIBLE_DEVICES=$g; \
        (cd '$b' && ctest -L gpu -R 'VisionRope|VisionGrid|PatchEmbedding3D' --output-on-failure -j 1 --timeout 900) \
          >'$P/qwen2vl_tests.log' 2>&1; \
        '$b/fk_bench' --arch 'Qwen2-VL' --seed $seed --case-timeout 300 \
          --jsonl '$P/qwen2vl_bench.jsonl' --markdown '$P/qwen2vl_bench.md' >'$P/qwen2vl_bench.log' 2>&1; \
        python3 bench/parity/hf_parity.py --arch pbarker/Qwen2-VL-7B-sk-googleflights-full-750-47ep --layers 4 --fk-model '$b/fk_model' \
          --out '$P/qwen2vl_parity' >'$P/qwen2vl_parity.log' 2>&1; \
        '$b/fk_model' --arch pbarker/Qwen2-VL-7B-sk-googleflights-full-750-47ep --save-weights '$P/qw.safetensors' --bench \
          --jsonl '$P/qwen2vl_model.jsonl' --markdown '$P/qwen2vl_model.md' >'$P/qwen2vl_model.log' 2>&1; \
        python3 bench/peers/hf_vision_perf.py --arch pbarker/Qwen2-VL-7B-sk-googleflights-full-750-47ep --weights '$P/qw.safetensors' \
          --modes hf_eager,hf_compile --jsonl '$P/qwen2vl_peers.jsonl' >'$P/qwen2vl_peers.log' 2>&1; rm -f '$P/qw.safetensors'"
      ;;
    qwen25vl@*)
      g="${step#*@}"
      q=Qwen/Qwen2.5-VL-7B-Instruct
      bg qwen25vl "export CUDA_VISIBLE_DEVICES=$g; \
        (cd '$b' && ctest -L gpu -R 'VisionWindow|VisionBatch|VisionBlockListed|VisionGrid|qwen2_5_vl|silu_and_mul_i3420|llama_mlp_h1280|_h1280_eps1e_06|k1280_n3420|k3420_n1280' \
          --output-on-failure -j 1 --timeout 900) >'$P/qwen25vl_tests.log' 2>&1; \
        '$b/fk_bench' --arch '^Qwen/Qwen2[.]5-VL-7B-Instruct\$' --seed $seed --case-timeout 300 \
          --jsonl '$P/qwen25vl_bench.jsonl' --markdown '$P/qwen25vl_bench.md' >'$P/qwen25vl_bench.log' 2>&1; \
        python3 bench/parity/hf_parity.py --arch $q --layers 8 --fk-model '$b/fk_model' \
          --out '$P/qwen25vl_parity' >'$P/qwen25vl_parity.log' 2>&1; \
        python3 bench/parity/hf_parity.py --arch $q-text --vision-arch $q --layers 4 --vision-layers 8 --fk-model '$b/fk_model' \
          --out '$P/qwen25vl_vlm_parity' >'$P/qwen25vl_vlm_parity.log' 2>&1; \
        '$b/fk_model' --arch $q --save-weights '$P/qw25.safetensors' --bench \
          --jsonl '$P/qwen25vl_model.jsonl' --markdown '$P/qwen25vl_model.md' >'$P/qwen25vl_model.log' 2>&1; \
        python3 bench/peers/hf_vision_perf.py --arch $q --weights '$P/qw25.safetensors' \
          --modes hf_eager,hf_compile --jsonl '$P/qwen25vl_peers.jsonl' >'$P/qwen25vl_peers.log' 2>&1; rm -f '$P/qw25.safetensors'; \
        '$b/fk_model' --arch $q-text --vision-arch $q --bench --decode-batches 1,8,32 \
          --jsonl '$P/qwen25vl_vlm_model.jsonl' --markdown '$P/qwen25vl_vlm_model.md' >'$P/qwen25vl_vlm_model.log' 2>&1"
      ;;
    qwen3vl@*)
      g="${step#*@}"
      q=Qwen/Qwen3-VL-32B-Instruct
      bg qwen3vl "export CUDA_VISIBLE_DEVICES=$g; \
        (cd '$b' && ctest -L gpu -R 'InterpolatedRows|VisionPosTaps|ScatterAddRows|qwen3_vl|_h4608_|k4608|p16_h1152|d72_g28|VisionRope|VisionGrid' \
          --output-on-failure -j 1 --timeout 900) >'$P/qwen3vl_tests.log' 2>&1; \
        '$b/fk_bench' --arch '^Qwen/Qwen3-VL-32B-Instruct\$' --seed $seed --case-timeout 300 \
          --jsonl '$P/qwen3vl_bench.jsonl' --markdown '$P/qwen3vl_bench.md' >'$P/qwen3vl_bench.log' 2>&1; \
        python3 bench/parity/hf_parity.py --arch $q --layers 9 --fk-model '$b/fk_model' \
          --out '$P/qwen3vl_parity' >'$P/qwen3vl_parity.log' 2>&1; \
        '$b/fk_model' --arch $q --save-weights '$P/qw3.safetensors' --bench \
          --jsonl '$P/qwen3vl_model.jsonl' --markdown '$P/qwen3vl_model.md' >'$P/qwen3vl_model.log' 2>&1; \
        python3 bench/peers/hf_vision_perf.py --arch $q --weights '$P/qw3.safetensors' \
          --modes hf_eager,hf_compile --jsonl '$P/qwen3vl_peers.jsonl' >'$P/qwen3vl_peers.log' 2>&1; rm -f '$P/qw3.safetensors'; \
        python3 bench/parity/hf_parity.py --arch $q-text --vision-arch $q --layers 4 --vision-layers 9 --fk-model '$b/fk_model' \
          --out '$P/qwen3vl_vlm_parity' >'$P/qwen3vl_vlm_parity.log' 2>&1; \
        '$b/fk_model' --arch $q-text --vision-arch $q --bench --decode-batches 1,8 \
          --jsonl '$P/qwen3vl_vlm_model.jsonl' --markdown '$P/qwen3vl_vlm_model.md' >'$P/qwen3vl_vlm_model.log' 2>&1"
      ;;
    siglip2@*)
      g="${step#*@}"
      q=google/siglip2-so400m-patch16-naflex
      bg siglip2 "export CUDA_VISIBLE_DEVICES=$g; \
        (cd '$b' && ctest -L gpu -R 'Naflex|WeightedRows|siglip2|k768_n1152' \
          --output-on-failure -j 1 --timeout 900) >'$P/siglip2_tests.log' 2>&1; \
        '$b/fk_bench' --arch '^google/siglip2-so400m-patch16-naflex\$' --seed $seed --case-timeout 300 \
          --jsonl '$P/siglip2_bench.jsonl' --markdown '$P/siglip2_bench.md' >'$P/siglip2_bench.log' 2>&1; \
        python3 bench/parity/hf_parity.py --arch $q --layers 4 --fk-model '$b/fk_model' \
          --out '$P/siglip2_parity' >'$P/siglip2_parity.log' 2>&1; \
        '$b/fk_model' --arch $q --save-weights '$P/sg2.safetensors' --bench \
          --jsonl '$P/siglip2_model.jsonl' --markdown '$P/siglip2_model.md' >'$P/siglip2_model.log' 2>&1; \
        python3 bench/peers/hf_vision_perf.py --arch $q --weights '$P/sg2.safetensors' \
          --modes hf_eager,hf_compile --jsonl '$P/siglip2_peers.jsonl' >'$P/siglip2_peers.log' 2>&1; rm -f '$P/sg2.safetensors'"
      ;;
    xattn@*)
      g="${step#*@}"
      bg xattn "export CUDA_VISIBLE_DEVICES=$g; \
        (cd '$b' && ctest -L gpu -R 'CrossAttention|cross_attention|causal_xattn|d64_causal' --output-on-failure -j 1 --timeout 600) >'$P/xattn_tests.log' 2>&1; \
        '$b/fk_bench' --arch bert2bert_cnn_daily_mail-decoder --seed $seed --case-timeout 300 --jsonl '$P/xattn_bench.jsonl' \
          --markdown '$P/xattn_bench.md' >'$P/xattn_bench.log' 2>&1; \
        python3 bench/parity/hf_parity.py --arch patrickvonplaten/bert2bert_cnn_daily_mail-decoder --layers 4 --fk-model '$b/fk_model' \
          --out '$P/xattn_parity' >'$P/xattn_parity.log' 2>&1; \
        '$b/fk_model' --arch patrickvonplaten/bert2bert_cnn_daily_mail-decoder --bench --jsonl '$P/xattn_model.jsonl' \
          --markdown '$P/xattn_model.md' >'$P/xattn_model.log' 2>&1; \
        '$b/fk_bench' --task '^(cross_attention|interpolate)_' --seed $seed --case-timeout 300 --jsonl '$P/xattn_l1.jsonl' \
          --markdown '$P/xattn_l1.md' >'$P/xattn_l1.log' 2>&1; \
        '$b/fk_bench' --task '^(cross_attention|interpolate)_' --off-registry 0 --export-cases '$P/xattn_cases.json' >/dev/null 2>&1; \
        python3 bench/peers/torch_peers.py '$P/xattn_cases.json' --out '$P/xattn_peers.jsonl' >'$P/xattn_peers.log' 2>&1; \
        python3 bench/report.py '$P/xattn_l1.jsonl' '$P/xattn_peers.jsonl' --out '$P/xattn_l1_report.md' >>'$P/xattn_peers.log' 2>&1"
      ;;
    vision@*)
      g="${step#*@}"
      bg vision "export CUDA_VISIBLE_DEVICES=$g; \
        (cd '$b' && ctest -L gpu -R 'PatchEmbed|Patchify|ClsPositions|vit_|Interpolat|interpolate_' --output-on-failure -j 1 --timeout 600) >'$P/vis_tests.log' 2>&1; \
        '$b/fk_bench' --arch vit-base-patch16-224-in21k --seed $seed --case-timeout 300 --jsonl '$P/vis_bench.jsonl' \
          --markdown '$P/vis_bench.md' >'$P/vis_bench.log' 2>&1; \
        python3 bench/parity/hf_parity.py --arch google/vit-base-patch16-224-in21k,google/vit-base-patch16-224-in21k-served384 --layers 4 \
          --fk-model '$b/fk_model' --out '$P/vis_parity' >'$P/vis_parity.log' 2>&1; \
        for a in google/vit-base-patch16-224-in21k google/vit-base-patch16-224-in21k-served384; do t=\$(echo \$a | tr / _); \
          '$b/fk_model' --arch \$a --save-weights '$P/vw.safetensors' --bench \
            --jsonl '$P/vis_model_'\$t.jsonl --markdown '$P/vis_model_'\$t.md >'$P/vis_model_'\$t.log 2>&1; \
          python3 bench/peers/hf_vision_perf.py --arch \$a --weights '$P/vw.safetensors' \
            --jsonl '$P/vis_peers_'\$t.jsonl >'$P/vis_peers_'\$t.log 2>&1; rm -f '$P/vw.safetensors'; done"
      ;;
    sanitizer@* | sanitizer:*@*)  # sanitizer@G: all three tools; sanitizer:TOOL@G: one. A lost CUDA
      # context or a timeout (fk_bench says "rerun with --resume"; the case is a RUNTIME_ERROR) is resumed after that case.
      tools="memcheck racecheck initcheck"
      [[ "$step" == sanitizer:* ]] && tools="$(echo "${step#sanitizer:}" | cut -d@ -f1)"
      # racecheck looks at shared-memory hazards inside one kernel, so it checks only our kernels
      # (mangled names in namespace fk: "2fk"); cuBLAS and cuDNN kernels under racecheck take
      # minutes per GEMM and are not ours to fix. Its cases are capped at 256 tokens (--max-length:
      # Note [Capped cases]): racecheck takes 250 s per 1024-token prefill attention case. memcheck and initcheck see every kernel (initcheck
      # must see the writes of library kernels, or reads of their outputs would look uninitialised).
      # one background job per tool set (sanitizer-memcheck, ...), so that the tools can run side by side
      # FK_SANITIZER_ARGS (more compute-sanitizer options), FK_SANITIZER_BENCH_ARGS (more fk_bench
      # options, e.g. --task) and FK_SANITIZER_TAG (a suffix of the job's file names) serve one-off sweeps.
      tag="${FK_SANITIZER_TAG:+-$FK_SANITIZER_TAG}"
      bg "sanitizer-${tools// /-}$tag" "export CUDA_VISIBLE_DEVICES=${step##*@} FK_UNDER_SANITIZER=1; for tool in $tools; do \
        filter=''; cap=''; [ \$tool = racecheck ] && filter='--kernel-name kns=2fk' && cap='--max-length 256'; \
        log='$P/sanitizer-'\$tool'$tag.log'; echo \"sanitizer options: ${FK_SANITIZER_ARGS:-} fk_bench options: ${FK_SANITIZER_BENCH_ARGS:-}\" >>\$log; \
        resume=''; for attempt in \$(seq 1 300); do \
        compute-sanitizer --tool \$tool \$filter ${FK_SANITIZER_ARGS:-} --error-exitcode 9 --print-limit 20 '$b/fk_bench' --level 1 --smallest 1 \
        --off-registry 0 --no-time --rounds 1 --seed $seed --jsonl '$P/sanitizer-'\$tool'$tag.jsonl' \$resume \${cap:-} ${FK_SANITIZER_BENCH_ARGS:-} \
        >>\$log 2>&1; rc=\$?; echo \$tool$tag attempt \$attempt rc=\$rc >> '$P/sanitizer.rc'; \
        tail -n 4 \$log | grep -q 'rerun with --resume' || break; resume=--resume; done; done"
      ;;
    serial:*@*)  # serial:A+B+C@G: steps A@G, B@G, C@G one after another in one background job
      # (a one-GPU machine: each step alone on the GPU, the whole sequence outliving this call).
      # The job runs the steps in the foreground of its own invocation, which does not wait: a
      # background job that ran `wait` would wait for its own .out file.
      g="${step##*@}"
      inner="$(echo "${step#serial:}" | cut -d@ -f1 | tr '+' '\n' | sed "s/\$/@$g/" | paste -sd, -)"
      case ",$inner," in *",build@"* | *",collect@"* | *",wait"* | *",serial"*)
        echo "gpu_protocol.sh: serial takes background steps only, got $inner" >&2; exit 2 ;; esac
      bg "serial-$g" "cd '$root' && FK_PROTOCOL_FOREGROUND=1 FK_SEED='$seed' FK_COMMIT='$FK_COMMIT' OUT='$P/serial-out' scripts/gpu_protocol.sh '$inner'"
      ;;
    wait:*)
      limit="${step#wait:}"
      while [ $(( $(date +%s) - t0 )) -lt "$limit" ]; do
        pending=0
        for f in "$P"/*.out; do
          [ -e "$f" ] || continue
          [ -e "${f%.out}.done" ] || pending=1
        done
        [ $pending = 0 ] && break
        sleep 10
      done
      for f in "$P"/l[1-4].log; do
        [ -e "$f" ] && echo "$(basename "$f"): $(grep -c '^\[' "$f") cases; $(tail -n 1 "$f" | cut -c1-160)"
      done
      for f in "$P"/gpu_tests*.log; do
        [ -e "$f" ] && echo "$(basename "$f"):" && grep -E "tests passed|tests failed|\*\*\*Failed|\(Failed\)|\(Timeout\)" "$f" | tail -12
      done
      say "waited"
      ;;
    collect)
      (cd "$root/out" && tar czf "$OUT/protocol.tar.gz" --exclude='*.safetensors' --exclude='protocol/cand/*/build*' --exclude='protocol/cand-l4/*/build*' --exclude='protocol/cand-dist/*/build*' protocol)
      ls -la "$OUT"
      ;;
    *) echo "gpu_protocol.sh: unknown step $step" >&2; exit 2 ;;
  esac
done
