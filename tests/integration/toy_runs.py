"""armor.train on the toy world as the integration tests launch it: the world's overrides, one process or
torchrun ranks, an injected fault (armor/faults.py), and a checkpoint's HF export read back."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ROOT / "reproduce" / "presets"
SMOKE = PRESETS / "smoke.yaml"


def world_overrides(world: Path, out: Path) -> list[str]:
    """The toy world's model, training data and validation set, and the run folder."""
    return ["model.path=" + str(world / "base_model"), "data.train=" + str(world / "data" / "train.jsonl"),
            f"validation.benchmarks=[toy_val={world / 'data' / 'validation.jsonl'}]", f"output_dir={out}"]


def train_cmd(world: Path, out: Path, *overrides: str, preset: Path = SMOKE, ranks: int = 1,
              entry: tuple = ("-m", "armor.train")) -> list[str]:
    """The command line of one training run: `entry` (a module or a script and its arguments) under one
    process, or under torchrun with `ranks` local ranks."""
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"] \
        if ranks > 1 else [sys.executable]
    return [*launch, *entry, "--config", str(preset), *world_overrides(world, out), *overrides]


def run(cmd: list[str], fault: str | None = None, threads: int | None = None,
        timeout: float = 900) -> subprocess.CompletedProcess:
    """`cmd` in the repository root without progress bars, with ARMOR_FAULT=fault (None: unset) and
    OMP_NUM_THREADS=threads (None: inherited)."""
    env = {**os.environ, "ARMOR_PROGRESS": "0"}
    env.pop("ARMOR_FAULT", None)
    if fault:
        env["ARMOR_FAULT"] = fault
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def hf_weights(folder: Path) -> dict:
    """A checkpoint's HF export: one model.safetensors (one rank), or the parts its index names (several)."""
    from safetensors.torch import load_file

    from armor.checkpoint import INDEX
    index = folder / INDEX
    if not index.is_file():
        return load_file(str(folder / "model.safetensors"))
    out = {}
    for part in sorted(set(json.loads(index.read_text())["weight_map"].values())):
        out.update(load_file(str(folder / part)))
    return out
