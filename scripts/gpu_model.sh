#!/usr/bin/env bash
# GPU-machine session for the composite levels (L2-L4): build, then any of
#   tests   ctest -L gpu restricted to the composite and whole-model tests
#   bench   fk_bench --level 2..4 (correctness + timing of every composite task and case)
#   parity  bench/parity/hf_parity.py for the four configs (reduced layer count)
#   model   fk_model --bench for one architecture (decode/prefill tokens/s, memory over 1000 steps)
#   peers   bench/peers/hf_llama_perf.py (HF transformers eager / torch.compile) with the same weights
# Each device call is limited to 10 minutes, so steps are chosen per call; the build folder
# stays on a warm machine. Logs and results go to $OUT.
#
#   scripts/gpu_model.sh --steps build,tests [--arch ID] [--layers N] [--peer-modes eager,compile]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT="${OUT:-$root/out/gpu}"
mkdir -p "$OUT"
steps="build,tests" arch="meta-llama/Llama-3.1-8B-Instruct" layers=4 peer_modes="eager,compile" bench_filter=""
model_flags=() peer_flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift ;;
    --arch) arch="$2"; shift ;;
    --layers) layers="$2"; shift ;;
    --peer-modes) peer_modes="$2"; shift ;;
    --bench-filter) bench_filter="$2"; shift ;;
    --model-flags) read -r -a model_flags <<<"$2"; shift ;;
    --peer-flags) read -r -a peer_flags <<<"$2"; shift ;;
    *) echo "gpu_model.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
has() { [[ ",$steps," == *",$1,"* ]]; }
export FK_COMMIT="${FK_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
b="$root/build/gpu"
t0=$(date +%s)
rc=0
if has build || [ ! -x "$b/fk_model" ]; then
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S . -B "$b" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DFK_BUILD_GENERATOR=OFF -DFK_BUILD_TESTS=ON \
    >"$OUT/configure.log" 2>&1 || { tail -40 "$OUT/configure.log"; exit 1; }
  cmake --build "$b" -j "$(nproc)" >"$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -40; exit 1; }
  echo "[gpu] build $(( $(date +%s) - t0 ))s"
fi
if has tests; then
  (cd "$b" && ctest -L gpu -R "${FK_TEST_FILTER:-L[234]_|WholeModel}" --output-on-failure -j 1 --timeout 600) >"$OUT/gpu_tests.log" 2>&1
  r=$?; rc=$((rc || r))
  grep -E "tests passed|tests failed|Failed|\*\*\*" "$OUT/gpu_tests.log" | tail -30
  echo "[gpu] tests rc=$r $(( $(date +%s) - t0 ))s"
fi
if has bench; then
  "$b/fk_bench" --level "${FK_LEVEL:-0}" ${bench_filter:+--task "$bench_filter"} --jsonl "$OUT/results.jsonl" \
    --markdown "$OUT/results.md" 2>"$OUT/bench.log"
  r=$?; rc=$((rc || r))
  grep -vE "^\s*$" "$OUT/bench.log" | tail -4
  grep -E "INCORRECT|RUNTIME_ERROR" "$OUT/bench.log" | head -20
  echo "[gpu] bench rc=$r $(( $(date +%s) - t0 ))s"
fi
if has parity; then
  python3 bench/parity/hf_parity.py --all --layers "$layers" --fk-model "$b/fk_model" --out "$OUT/parity" >"$OUT/parity.log" 2>&1
  r=$?; rc=$((rc || r))
  tail -30 "$OUT/parity.log"
  echo "[gpu] parity rc=$r $(( $(date +%s) - t0 ))s"
fi
if has model; then
  "$b/fk_model" --arch "$arch" --bench --jsonl "$OUT/model.jsonl" --markdown "$OUT/model.md" "${model_flags[@]}" 2>"$OUT/model.log"
  r=$?; rc=$((rc || r))
  cat "$OUT/model.log" | tail -20
  echo "[gpu] model rc=$r $(( $(date +%s) - t0 ))s"
fi
if has peers; then
  w="$root/build/gpu/weights-$(echo "$arch" | tr '/' '_').safetensors"
  [ -f "$w" ] || "$b/fk_model" --arch "$arch" --save-weights "$w" 2>>"$OUT/peers.log"
  python3 bench/peers/hf_llama_perf.py --arch "$arch" --weights "$w" --modes "$peer_modes" --jsonl "$OUT/hf_peers.jsonl" \
    "${peer_flags[@]}" >>"$OUT/peers.log" 2>&1
  r=$?; rc=$((rc || r))
  tail -20 "$OUT/peers.log"
  echo "[gpu] peers rc=$r $(( $(date +%s) - t0 ))s"
fi
(cd "$OUT" && ls configure.log build.log >/dev/null 2>&1 && tar czf logs.tar.gz --remove-files $(ls configure.log build.log 2>/dev/null))
exit $rc
