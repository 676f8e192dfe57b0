#!/usr/bin/env bash
# One batched GPU-machine session: configure + build (Release, Ninja when present), GPU tests,
# fk_bench over the selected tasks, torch peers on the same cases, and the merged report.
# Logs and results go to $OUT (default out/gpu). Used for the committed benchmark results.
#
#   scripts/gpu_bench.sh [--skip-tests] [--skip-peers] [--no-compile] -- [fk_bench filters]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT="${OUT:-$root/out/gpu}"
mkdir -p "$OUT"
skip_tests=0 skip_peers=0 peer_flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --skip-tests) skip_tests=1 ;;
    --skip-peers) skip_peers=1 ;;
    --no-compile) peer_flags+=(--no-compile) ;;
    --) shift; break ;;
    *) break ;;
  esac
  shift
done
export FK_COMMIT="${FK_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
b="$root/build/gpu"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm --format=csv >"$OUT/nvidia-smi.txt" 2>&1
t0=$(date +%s)
cmake -S . -B "$b" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DFK_BUILD_GENERATOR=OFF -DFK_BUILD_TESTS=ON \
  >"$OUT/configure.log" 2>&1 || { tail -40 "$OUT/configure.log"; exit 1; }
cmake --build "$b" -j "$(nproc)" >"$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -40; exit 1; }
echo "[gpu] build $(( $(date +%s) - t0 ))s"
rc_tests=0
if [ "$skip_tests" = 0 ]; then
  (cd "$b" && ctest -L gpu --output-on-failure -j 1 --timeout 600) >"$OUT/gpu_tests.log" 2>&1
  rc_tests=$?
  grep -E "tests passed|tests failed|Failed|\*\*\*" "$OUT/gpu_tests.log" | tail -25
  echo "[gpu] tests rc=$rc_tests $(( $(date +%s) - t0 ))s"
fi
"$b/fk_bench" "$@" --graph --jsonl "$OUT/results.jsonl" --markdown "$OUT/results.md" 2>"$OUT/bench.log"
rc_bench=$?
tail -3 "$OUT/bench.log"
grep -E "INCORRECT|RUNTIME_ERROR" "$OUT/bench.log" | head -20
echo "[gpu] bench rc=$rc_bench $(( $(date +%s) - t0 ))s"
if [ "$skip_peers" = 0 ]; then
  "$b/fk_bench" "$@" --off-registry 0 --export-cases "$OUT/cases.json" >/dev/null  # peers: registry cases
  python3 bench/peers/torch_peers.py "$OUT/cases.json" --out "$OUT/peers.jsonl" "${peer_flags[@]}" 2>"$OUT/peers.log"
  echo "[gpu] peers rc=$? $(( $(date +%s) - t0 ))s"
  python3 bench/report.py "$OUT/results.jsonl" "$OUT/peers.jsonl" --out "$OUT/report.md"
fi
# The device tool returns at most 8 files: keep results, peers, report and the bench/test logs
# as files and pack the rest.
(cd "$OUT" && tar czf logs.tar.gz --remove-files $(ls nvidia-smi.txt configure.log build.log cases.json peers.log 2>/dev/null))
exit $(( rc_tests || rc_bench ))
