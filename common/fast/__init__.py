"""The CPU fast paths: the same functions as HF's forward and KV-cache decoding, computed faster for the small
Llama-family models (Qwen2, Qwen3, Llama) of the tiny world, kept apart from the method's path.

- `lean_forward.py`: the update's forward with a hand-written backward (real tokens only, a shared prompt
  computed once);
- `static_kv_decode.py`: the HF engine's decode stepper over a preallocated KV cache;
- `decode_kernel.py` (`decode_kernel.c`): a compiled C kernel for that stepper's CPU float32 steps.

One switch chooses them, the run's `compute.fast` (armor/config.py), resolved once per run by `choose`:

    off     HF's forward and HF's KV-cache decoding everywhere;
    auto    on a one-process CPU float32 run (where they were measured), the lean forward and the static-KV
            decoder for the models whose layout they know; elsewhere (GPUs, FSDP2) as off;
    native  auto's paths plus the compiled kernel; a run where they cannot all run fails at its start.

The method's path (armor/, common/rollout/hf.py) calls into this folder only through the `FastPaths` that
`choose` returns; nothing here reads the environment to decide which path runs.
"""
from __future__ import annotations

from typing import NamedTuple

from common.yaml_config import ConfigError

MODES = ("auto", "off", "native")
KEY = "compute.fast"


class FastPaths(NamedTuple):
    """Which fast paths a run takes (each only for a model whose layout it supports)."""
    lean_forward: bool      # the update's log-probs through lean_forward.hidden_states
    static_decode: bool     # the HF engine decodes with static_kv_decode.StaticStepper
    decode_kernel: bool     # StaticStepper's CPU float32 steps through the compiled kernel

    def describe(self) -> str:
        """'native', 'torch' or 'off': what the HF engine's CPU decode steps compute with."""
        return "native" if self.decode_kernel else "torch" if self.static_decode else "off"


OFF = FastPaths(False, False, False)


def measured(device: str, dtype: str, distributed: bool) -> str | None:
    """Why a run is not where the fast paths were measured (None: it is): one process, CPU, float32."""
    if device != "cpu":
        return f"runs on {device} (the fast paths are measured on the CPU only; GPUs keep HF's forward)"
    if dtype != "float32":
        return f"computes in {dtype} (the fast paths are measured in float32 only)"
    if distributed:
        return "runs on several ranks (FSDP2 shards compute through HF's forward)"
    return None


def choose(mode: str, device: str, dtype: str, distributed: bool = False) -> FastPaths:
    """The fast paths of a run in `mode` on `device` ("cpu", "cuda") computing in `dtype`. `native` where it
    cannot run (not measured here, or no kernel: no C compiler, a failed build) raises ConfigError naming
    compute.fast; `auto` never raises."""
    if mode not in MODES:
        raise ConfigError(f"{KEY}: {mode!r} is not one of {list(MODES)}")
    why = measured(device, dtype, distributed)
    if mode == "off" or (mode == "auto" and why is not None):
        return OFF
    if mode == "auto":
        return FastPaths(True, True, False)
    if why is not None:
        raise ConfigError(f"{KEY}: 'native' cannot run: the run {why}; use auto or off")
    from common.fast import decode_kernel
    try:
        decode_kernel.kernel()
    except (RuntimeError, OSError) as e:
        why = " ".join(str(e).split())        # a compiler's message on one line
        raise ConfigError(f"{KEY}: 'native' cannot run: the decode kernel is unavailable ({why}); use auto "
                          "or off") from None
    return FastPaths(True, True, True)
