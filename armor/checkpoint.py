"""Checkpoints: Hugging Face model folders plus the training state beside them, written atomically.

    run_dir/checkpoints/step_000040/
        config.json, model.safetensors, tokenizer files      <- save_pretrained: vLLM/lm-eval load it as is
        trainer_state.pt                                     <- optimizer, scheduler, RNG, data position, step
        reference/model.safetensors                          <- πref's weights, only when they are neither the
                                                                initial model nor this checkpoint's own
A checkpoint is written into `step_NNNNNN.tmp` and renamed when complete, so a folder without the
suffix is always whole; leftovers of a killed save are removed on the next start.
"""
from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path

# torch and numpy are imported inside the functions that need them: the layout helpers (list_checkpoints,
# step_dir) serve the experiment driver, which should not pay for loading torch.

STEP_RE = re.compile(r"^step_(\d{6,})$")


def step_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{step:06d}"


def list_checkpoints(run_dir: Path) -> list[int]:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    steps = []
    for p in root.iterdir():
        m = STEP_RE.match(p.name)
        if m and (p / "trainer_state.pt").is_file():
            steps.append(int(m.group(1)))
    return sorted(steps)


def clean_partial(run_dir: Path) -> None:
    root = Path(run_dir) / "checkpoints"
    if root.is_dir():
        for p in root.glob("*.tmp"):
            shutil.rmtree(p, ignore_errors=True)


def rng_state() -> dict:
    import numpy as np
    import torch
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(s: dict) -> None:
    import numpy as np
    import torch
    random.setstate(s["python"])
    np.random.set_state(s["numpy"])
    torch.set_rng_state(s["torch"])
    if s.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, state: dict, reference=None) -> Path:
    """Write model (HF format), tokenizer, `state` (+ RNG) and optionally the reference's weights."""
    final = step_dir(run_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    if reference is not None:
        reference.save_pretrained(tmp / "reference")
    import torch
    torch.save({**state, "rng": rng_state()}, tmp / "trainer_state.pt")
    if final.exists():  # a rerun of a step whose checkpoint survived a crash before `DONE`
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def load_state(run_dir: Path, step: int) -> dict:
    import torch
    return torch.load(step_dir(run_dir, step) / "trainer_state.pt", weights_only=False)


def prune(run_dir: Path, keep_last: int | None, protected: set[int]) -> list[int]:
    """Delete all but the newest `keep_last` checkpoints, never touching `protected` steps."""
    if keep_last is None:
        return []
    steps = list_checkpoints(run_dir)
    doomed = [s for s in steps[:-keep_last] if s not in protected]
    for s in doomed:
        shutil.rmtree(step_dir(run_dir, s), ignore_errors=True)
    return doomed
