#!/usr/bin/env bash
# The HF transformers operator audit (docs/audit-rules.md, docs/hf-audit.md): installs transformers
# from PyPI without its dependencies into a temporary folder, runs `fastkernels audit --hf` on it and
# writes the markdown report and the JSON summary. Nothing of transformers is kept or committed.
#
#   scripts/audit_hf.sh [VERSION] [--out DIR] [--update] [--explain MODEL]
#
#   VERSION         transformers release to audit (default: the pinned one below)
#   --out DIR       where hf-audit.md and hf_audit_summary.json go (default: out/hf-audit)
#   --update        also copy them to docs/hf-audit.md and generator/audit/hf_audit_summary.json
#                   (the committed summary `fastkernels add` reads for model types without a descriptor)
#   --explain MODEL print one model's operators with their evidence instead of the reports
#
# FASTKERNELS=<binary> uses that fastkernels; otherwise the generator-only preset is built.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
log() { printf '[audit_hf] %s\n' "$*" >&2; }

version=5.23.0  # pinned: a recent release; the committed report and summary are of this one
out="out/hf-audit"
update=0
explain=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    --update) update=1; shift ;;
    --explain) explain="${2:?--explain needs a model folder or model_type}"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "audit_hf.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) version="$1"; shift ;;
  esac
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
log "pip install --no-deps transformers==$version into a temporary folder"
python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$tmp" "transformers==$version"

bin="${FASTKERNELS:-}"
if [ -z "$bin" ]; then
  log "build fastkernels (preset generator-only)"
  cmake --preset generator-only -DFK_BUILD_TESTS=OFF >/dev/null
  cmake --build --preset generator-only -j "$(nproc 2>/dev/null || echo 2)" --target fastkernels >/dev/null
  bin="$root/build/generator-only/generator/fastkernels"
fi

if [ -n "$explain" ]; then
  exec "$bin" audit --root "$root" --hf "$tmp" --explain "$explain"
fi

mkdir -p "$out"
"$bin" audit --root "$root" --hf "$tmp" --hf-markdown "$out/hf-audit.md" --hf-json "$out/hf_audit_summary.json"
log "wrote $out/hf-audit.md and $out/hf_audit_summary.json"
if [ "$update" = 1 ]; then
  cp "$out/hf-audit.md" docs/hf-audit.md
  cp "$out/hf_audit_summary.json" generator/audit/hf_audit_summary.json
  log "updated docs/hf-audit.md and generator/audit/hf_audit_summary.json"
fi
