"""Pinned CPU numerics: the same run gives the same bits on any x86-64 CPU with AVX2, not only on one model.

Torch picks its CPU kernels for the best instruction set the processor has (DEFAULT, AVX2 or AVX512 on
x86-64), and MKL and oneDNN pick their code paths the same way. Each path rounds differently, and the tiny
world turns a last-bit difference into another trajectory: before this pinning, a rerun of the same commit
on another machine changed ARMOR's final validation from 0.207 to 0.455. On this project's CPU (AVX-512),
the quick world's base weights hash differently under ATEN_CPU_CAPABILITY=default, avx2 and avx512
(`python -m common.cpu_numerics --probe` shows it).

`pin()` sets, unless the environment already sets them:
    ATEN_CPU_CAPABILITY=avx2   torch's vectorised CPU kernels (read once, when torch loads)
    MKL_CBWR=AVX2,STRICT       MKL's conditional numerical reproducibility: one code path for every CPU
                               with AVX2, and results independent of memory alignment
    ONEDNN_MAX_CPU_ISA=AVX2    oneDNN's kernels (bf16 matmuls, convolutions)
It must run before torch is imported: every package of the suite calls it in its `__init__`, and so does
the test suite's conftest. `ARMOR_CPU_ISA=native` turns the pinning off (faster on AVX-512 machines,
reproducible only on the same CPU model). GPU kernels are not affected.

What this does not pin: the thread count (the presets fix it: `threads: 1`), the torch build (the install
pins torch==2.13.0+cpu), and non-x86 CPUs (an aarch64 machine takes other paths altogether).
"""
from __future__ import annotations

import os
import sys

SWITCH = "ARMOR_CPU_ISA"
PINS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def pin() -> dict[str, str]:
    """Set the pins (environment first) unless ARMOR_CPU_ISA=native; returns what is in force. Harmless to
    call again; after torch has loaded it can no longer change torch's choice (see `describe`)."""
    if os.environ.get(SWITCH, "avx2").lower() == "native":
        return {}
    if "torch" not in sys.modules:
        for k, v in PINS.items():
            os.environ.setdefault(k, v)
    return {k: os.environ.get(k, "") for k in PINS}


def describe() -> dict:
    """What this process computes with: torch's kernel capability, the pins' variables, the thread count."""
    import torch
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(), **{k: os.environ.get(k) for k in PINS},
            SWITCH: os.environ.get(SWITCH, "avx2")}


def unpinned(described: dict) -> bool:
    """True when pinning was asked for (not ARMOR_CPU_ISA=native) on x86-64 but torch computes with other
    kernels than AVX2: torch had been imported before `pin()`, or ATEN_CPU_CAPABILITY was set otherwise."""
    import platform
    if described.get(SWITCH, "avx2").lower() == "native" or platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    return str(described.get("cpu_capability", "")).upper() != "AVX2"


def _probe() -> None:
    """Hash the weights of a --quick world built in a child process under each capability."""
    import subprocess
    import tempfile
    code = ("import hashlib,sys,torch;from pathlib import Path;from reproduce.toy.build import build_world;"
            "from safetensors.torch import load_file;o=Path(sys.argv[1]);"
            "build_world(o,seed=0,quick=True,log=lambda *a,**k:None);"
            "sd=load_file(str(o/'base_model'/'model.safetensors'));"
            "print(torch.backends.cpu.get_cpu_capability(),"
            "hashlib.sha256(b''.join(v.numpy().tobytes() for _,v in sorted(sd.items()))).hexdigest()[:16])")
    print("quick world's base weights (sha256 prefix) under each torch CPU capability:")
    for cap in ("default", "avx2", "avx512"):
        with tempfile.TemporaryDirectory() as d:
            env = {**os.environ, "ATEN_CPU_CAPABILITY": cap, "ARMOR_PROGRESS": "0"}
            r = subprocess.run([sys.executable, "-c", code, d + "/w"], env=env, capture_output=True, text=True)
            print(f"  ATEN_CPU_CAPABILITY={cap:8s} ->", (r.stdout.strip().splitlines() or [r.stderr[-300:]])[-1])


if __name__ == "__main__":
    if "--probe" in sys.argv:
        _probe()
    else:
        pin()
        for k, v in describe().items():
            print(f"{k}: {v}")
