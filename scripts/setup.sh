#!/usr/bin/env bash
# Create .venv and install the suite with its test and evaluation extras (CPU torch pinned).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch first and pinned: an unpinned torch makes pip fetch a multi-GB CUDA build on CPU machines
.venv/bin/python -m pip install -q -c constraints.txt "torch==2.13.0"
.venv/bin/python -m pip install -q -c constraints.txt -e ".[dev,eval]"
# the compiled decode kernel of `compute.fast: native` (the tiny presets), built once now; without a C compiler
# it says so, and those presets fail at their start naming compute.fast (auto and off need no compiler)
.venv/bin/python -m common.fast.decode_kernel
