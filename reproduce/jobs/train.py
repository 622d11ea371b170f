"""The `train` job: one arm and seed of the matrix, resolved to its full config and exec'd as armor.train.

    python -m reproduce.jobs train --preset tiny --root runs --arm armor --seed 0

A stage-2 arm's start (θ*, the late start, the restart point) is read when the job runs (jobs/peaks.py); the
run's arm.json records the arm, its start and the override list.
"""
from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Optional

from common.jsonl import write_json_atomic
from reproduce.entrypoints import entry
from reproduce.jobs.peaks import late_error, peak_file, restart_file, start_point
from reproduce.matrix.arms import arm_definitions
from reproduce.matrix.overrides import train_overrides
from reproduce.matrix.presets import STATE_JSON, ExperimentError, Preset, run_dir
from slurm import warm


def cmd_train(preset: Preset, root: Path, arm_name: str, seed: int, stage_dir: Optional[Path] = None) -> int:
    arms = arm_definitions(preset.protocol)
    if arm_name not in arms:
        raise ExperimentError(f"unknown arm {arm_name!r} for preset {preset.name} (known: {', '.join(arms)})")
    arm = arms[arm_name]
    run = run_dir(root, preset, arm.run_arm, seed)
    if (run / "DONE").is_file():
        print(f"{run}: DONE; nothing to do")
        return 0
    start = None
    if arm.stage == 2:
        start = start_point(preset, root, arm, seed)
        why = late_error(preset, root, seed) if start is None and arm.start == "late" else None
        if why:
            raise ExperimentError(f"{arm.name} seed {seed}: no late start: {why}")
        if start is None and arm.start == "restart":
            raise ExperimentError(f"{arm.name} seed {seed}: {restart_file(root, preset, seed)} is missing "
                                  f"(run select-restart first)")
        if start is None:
            raise ExperimentError(f"{arm.name} seed {seed}: {peak_file(root, preset, arm.baseline, seed)} is "
                                  f"missing (run select-peak first)")
        if not Path(start["checkpoint"]).is_dir():
            raise ExperimentError(f"{arm.name} seed {seed}: start checkpoint {start['checkpoint']} does not "
                                  f"exist")
    overrides = train_overrides(preset, root, arm, seed, start, stage_dir)
    run.mkdir(parents=True, exist_ok=True)
    # every torchrun rank runs this; one writes the run's files
    if int(os.environ.get("RANK", "0")) == 0:
        write_json_atomic(run / "arm.json", {"arm": arm.name, "preset": preset.name, "seed": seed,
                                             "start": start, "overrides": overrides,
                                             "config": str(preset.path)}, **STATE_JSON)
    argv = entry("armor.train") + ["--config", str(preset.path)] + overrides
    print("exec:", " ".join(shlex.quote(a) for a in argv), flush=True)
    return warm.exec_or_run(argv)   # a warm local job runs it in this process (slurm/warm.py)
