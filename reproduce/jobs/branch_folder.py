"""A branch's run folder from its source's (reproduce/matrix/branching.py): the source's checkpoints up to the
branch point and its metrics/validation rows up to it, so that armor.train resumes the source's state there
with the branch's own config (armor/run_folder.py's resume point: the newest complete checkpoint). The
driver's side only: the trainer is unchanged.

    seed_run(src, 159, dst)               # dst resumes src's step-159 state (checkpoints <= 159 linked)
    seed_run(src, 360, dst, only_last=True)   # a continuation: the source's last checkpoint only
    slice_run(src, 380, dst)              # a continuation that needs no step beyond the source's
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from common.jsonl import read_jsonl, write_json_atomic, write_jsonl
from common.layout import list_checkpoints, step_dir
from reproduce.matrix.presets import STATE_JSON, ExperimentError

ROWS = ("metrics.jsonl", "validation.jsonl")
BRANCH_FILE = "branch.json"     # in the branch's run folder: where it came from


def _link_tree(src: Path, dst: Path) -> None:
    """dst: a copy of the folder src made of hard links (no bytes copied; a checkpoint is never changed in
    place, only replaced), or of copies where src's file system refuses links; written under a .tmp name
    and renamed, so a half-made folder is never taken for a checkpoint (armor.checkpoint.clean_partial)."""
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for d, _, files in os.walk(src):
        rel = Path(d).relative_to(src)
        (tmp / rel).mkdir(parents=True, exist_ok=True)
        for f in files:
            try:
                os.link(Path(d) / f, tmp / rel / f)
            except OSError:
                shutil.copy2(Path(d) / f, tmp / rel / f)
    os.replace(tmp, dst)


def _rows(src: Path, dst: Path, step: int) -> None:
    for name in ROWS:
        if (src / name).is_file():
            write_jsonl(dst / name, [r for r in read_jsonl(src / name) if int(r.get("step", 0)) <= step])


def seed_run(src: Path, step: int, dst: Path, only_last: bool = False) -> list[int]:
    """Fill the empty run folder dst with src's complete checkpoints up to `step` (only_last: `step` alone)
    and its JSONL rows up to `step`; returns the checkpoint steps linked. Raises when src has no complete
    checkpoint at `step`, or dst already holds a checkpoint (a branch seeds a run once)."""
    src, dst = Path(src), Path(dst)
    have = list_checkpoints(src)
    if step not in have:
        raise ExperimentError(f"{src}: no complete checkpoint at step {step} to branch from "
                              f"(have {have[-10:]})")
    if list_checkpoints(dst):
        raise ExperimentError(f"{dst}: holds checkpoints already; a branch seeds an empty run only")
    steps = [step] if only_last else [s for s in have if s <= step]
    (dst / "checkpoints").mkdir(parents=True, exist_ok=True)
    _rows(src, dst, step)
    for s in steps:
        _link_tree(step_dir(src, s), step_dir(dst, s))
    write_json_atomic(dst / BRANCH_FILE, {"source": str(src), "step": step, "checkpoints": steps,
                                          "time": time.time()}, **STATE_JSON)
    return steps


def slice_run(src: Path, end: int, dst: Path) -> None:
    """dst as a finished run made of src's rows up to `end` (a continuation the source already ran): its
    config and numerics beside them, and DONE; no checkpoint (a control is not evaluated)."""
    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    _rows(src, dst, end)
    for name in ("config.yaml", "numerics.json"):
        if (src / name).is_file():
            shutil.copy2(src / name, dst / name)
    write_json_atomic(dst / BRANCH_FILE, {"source": str(src), "step": end, "checkpoints": [],
                                          "time": time.time()}, **STATE_JSON)
    write_json_atomic(dst / "DONE", {"steps": end, "sliced_from": str(src)})
