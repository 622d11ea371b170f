"""The commands the driver's jobs run: `python -m MODULE`, or what ARMOR_REPRO_ENTRYPOINTS replaces it with.

    ARMOR_REPRO_ENTRYPOINTS='{"armor.train": ["python", "x.py"]}'    (tests, containers)
"""
from __future__ import annotations

import json
import os
import shlex
import sys

from reproduce.matrix.presets import REPO_ROOT, ExperimentError, Preset

ENV = "ARMOR_REPRO_ENTRYPOINTS"


def entry(module: str) -> list[str]:
    """argv prefix that runs a module: `python -m module`, unless ARMOR_REPRO_ENTRYPOINTS replaces it."""
    raw = os.environ.get(ENV)
    if raw:
        try:
            table = json.loads(raw)
        except ValueError as e:
            raise ExperimentError(f"{ENV} is not JSON: {e}") from e
        if module in table:
            v = table[module]
            return shlex.split(v) if isinstance(v, str) else list(v)
    return [sys.executable, "-m", module]


def _module_exists(module: str) -> bool:
    if os.environ.get(ENV) and module in json.loads(os.environ[ENV]):
        return True
    parts = module.split(".")
    base = REPO_ROOT.joinpath(*parts)
    return base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()


def missing_entry_points(preset: Preset) -> list[str]:
    """The entry points the preset's jobs need that are neither a module of this repository nor replaced."""
    mods = ["armor.train", "eval.evaluate", "figures"]
    if preset.world() is not None:
        mods.append("reproduce.toy.build")
    if not preset.protocol.eval_benchmarks:
        mods.remove("eval.evaluate")
    return [m for m in mods if not _module_exists(m)]
