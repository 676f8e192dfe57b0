#!/bin/sh
# CPU self-test of the HF parity tooling (bench/parity/selftest.py): exit 0 pass, 1 fail,
# 77 skip (torch/transformers not importable). Usage: parity_selftest.sh [PYTHON]
here=$(cd "$(dirname "$0")/../.." && pwd)
exec "${1:-python3}" "$here/bench/parity/selftest.py"
