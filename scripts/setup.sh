#!/usr/bin/env bash
# Installs what FastKernels needs on a fresh Debian/Ubuntu machine, idempotently:
#   Debian packages: cmake, g++, ninja, nlohmann-json3-dev, libcli11-dev, libkainjow-mustache-dev,
#                    libgtest-dev, python3-pip (skipped when already installed or when not root);
#                    and, for `fastkernels check` (optional: FK_WITH_LIBTOOLING), Clang LibTooling:
#                    llvm-14-dev libclang-14-dev clang-14 + their link deps (skipped where the
#                    distribution has no llvm-14 packages, e.g. the GPU machine; FK_SETUP_NO_CLANG=1
#                    skips them too);
#   PyPI: the nvidia-cudnn-frontend wheel, whose C++ headers are unpacked into .deps/ (nothing of
#         it is committed). The header-only packages are also mirrored into .deps/include so the
#         tree can be carried to a machine without them (the GPU machine has no network).
# The CUDA toolkit (nvcc, cuBLAS/cuBLASLt, cuDNN, NCCL) is expected under /usr/local/cuda (or NCCL / cuDNN in the
# system library paths), as on the GPU machine and CI.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deps="$root/.deps"
CUDNN_FRONTEND_VERSION="${CUDNN_FRONTEND_VERSION:-1.32.0}"

log() { printf '[setup] %s\n' "$*"; }

pkgs=(cmake g++ ninja-build nlohmann-json3-dev libcli11-dev libkainjow-mustache-dev libgtest-dev python3-pip unzip git)
# Clang LibTooling for `fastkernels check` (optional): only where the distribution ships llvm-14
# (Debian bookworm); elsewhere the build turns FK_WITH_LIBTOOLING off and `check` says so.
if [ "${FK_SETUP_NO_CLANG:-0}" != 1 ] && command -v apt-cache >/dev/null 2>&1 && apt-cache show libclang-14-dev >/dev/null 2>&1; then
  pkgs+=(llvm-14-dev libclang-14-dev clang-14 libffi-dev libncurses-dev zlib1g-dev libzstd-dev libxml2-dev libedit-dev)
fi
if command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    if [ "$(id -u)" = 0 ]; then
      log "apt-get install ${missing[*]}"
      export DEBIAN_FRONTEND=noninteractive
      if ! { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1; }; then
        log "apt-get could not install ${missing[*]} (offline?); continuing with what is present and .deps/"
      fi
    else
      log "missing Debian packages (run as root to install): ${missing[*]}"
    fi
  else
    log "Debian packages present"
  fi
fi

mkdir -p "$deps/include"
# Mirror header-only packages (for carrying to machines without them).
for d in /usr/include/CLI /usr/include/kainjow /usr/include/nlohmann; do
  [ -d "$d" ] && [ ! -d "$deps/include/$(basename "$d")" ] && cp -r "$d" "$deps/include/"
done

fe="$deps/cudnn_frontend"
if [ ! -f "$fe/include/cudnn_frontend.h" ] || [ "$(cat "$fe/VERSION" 2>/dev/null)" != "$CUDNN_FRONTEND_VERSION" ]; then
  log "fetching nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION headers from PyPI"
  tmp="$(mktemp -d)"
  py=python3
  python3 -m pip --version >/dev/null 2>&1 || { log "error: pip is needed to fetch nvidia-cudnn-frontend"; exit 1; }
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
      -d "$tmp" "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION"
  rm -rf "$fe" && mkdir -p "$fe"
  (cd "$fe" && unzip -q "$tmp"/nvidia_cudnn_frontend-*.whl 'include/*')
  echo "$CUDNN_FRONTEND_VERSION" >"$fe/VERSION"
  rm -rf "$tmp"
else
  log "cudnn-frontend $CUDNN_FRONTEND_VERSION headers present"
fi
log "done"
