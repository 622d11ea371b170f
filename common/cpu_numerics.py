"""Pinned CPU numerics: the same run gives the same bits on any x86-64 CPU with AVX2, not only on one model.

Torch picks its CPU kernels for the best instruction set the processor has (DEFAULT, AVX2 or AVX512 on
x86-64), and MKL and oneDNN pick their code paths the same way. Each path rounds differently, and the tiny
world turns a last-bit difference into another trajectory: before this pinning, a rerun of the same commit
on another machine changed ARMOR's final validation from 0.207 to 0.455. On this project's CPU (AVX-512),
the quick world's base weights hash differently under ATEN_CPU_CAPABILITY=default, avx2 and avx512
(`python -m reproduce.toy.numerics_probe` shows it).

`pin()` sets, unless the environment already sets them:
    ATEN_CPU_CAPABILITY=avx2   torch's vectorised CPU kernels (read once, when torch loads)
    MKL_CBWR=AVX2,STRICT       MKL's conditional numerical reproducibility: one code path for every CPU
                               with AVX2, and results independent of memory alignment
    ONEDNN_MAX_CPU_ISA=AVX2    oneDNN's kernels (bf16 matmuls, convolutions)
and, numerics aside, OMP_WAIT_POLICY=PASSIVE (libgomp's default spin-waiting makes torch's CPU threads several
times slower on a shared, loaded machine, measured by bench.step_time; it too is read when torch loads).
`ARMOR_CPU_ISA=native` turns the pinning off (faster on AVX-512 machines, reproducible only on the same CPU
model). GPU kernels are not affected.

It must run before torch is imported, so it runs once, where a process starts: the entry points call it
before their other imports (`python -m armor.train`, `python -m eval.evaluate`, `python reproduce/run_all.py`,
the job wrapper slurm/jobwrap.py), the packages of commands do in their `__init__` (`reproduce`: `python -m
reproduce.toy.build` ...; `bench`), and so does the test suite's conftest. The library packages (common,
armor, eval, slurm, figures) do not pin on import. Child processes inherit the pins with the environment.

The HF engine's CPU decode steps compute other bits with the compiled kernel of `compute.fast: native`
(common/fast/decode_kernel.py; the same bits on every x86-64 CPU) than with torch operations; each run's
numerics.json records which (`decode_kernel`, from its config).

What this does not pin: the thread count (the presets fix it: `threads: 1`), the torch build (the install
pins torch==2.13.0+cpu), and non-x86 CPUs (an aarch64 machine takes other paths altogether).
"""
from __future__ import annotations

import os
import sys

SWITCH = "ARMOR_CPU_ISA"
PINS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX2"}
THREADS = {"OMP_WAIT_POLICY": "PASSIVE"}   # not numerics: speed on a shared machine; set even when native


def pin() -> dict[str, str]:
    """Set the pins (environment first) unless ARMOR_CPU_ISA=native; returns what is in force. Harmless to
    call again; after torch has loaded it can no longer change torch's choice (see `describe`). Also sets
    THREADS' defaults (before torch loads, whatever the switch)."""
    if "torch" not in sys.modules:
        for k, v in THREADS.items():
            os.environ.setdefault(k, v)
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
    if described.get(SWITCH, "avx2").lower() == "native":
        return False
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    return str(described.get("cpu_capability", "")).upper() != "AVX2"


if __name__ == "__main__":
    pin()
    for k, v in describe().items():
        print(f"{k}: {v}")
