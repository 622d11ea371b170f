"""The `train` job: one arm and seed of the matrix, resolved to its full config and exec'd as armor.train.

    python -m reproduce.jobs train --preset tiny --root runs --arm armor --seed 0
        [--steps N] [--keep-steps 19,39] [--branch-from armor_reset_never --branch-step 39]

A stage-2 arm's start (θ*, the late start, the restart point) is read when the job runs (jobs/peaks.py); the
run's arm.json records the arm, its start and the override list. `--steps`: the steps the plan needs of the
run; a finished run with fewer is extended from its last checkpoint (its DONE is removed). A branch
(reproduce/matrix/branching.py) first fills its empty run folder from its source's checkpoint
(reproduce/jobs/branch_folder.py): a sibling from step k of the source, a continuation from its baseline's end
(or, when the baseline ran as far as the control needs, from its rows alone).
"""
from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Optional, Sequence

from common.jsonl import write_json_atomic
from common.layout import list_checkpoints
from reproduce.entrypoints import entry
from reproduce.jobs import branch_folder
from reproduce.jobs.peaks import late_error, peak_file, restart_file, start_point
from reproduce.matrix.arms import arm_definitions
from reproduce.matrix.overrides import continuation_overrides, train_overrides
from reproduce.matrix.presets import STATE_JSON, ExperimentError, Preset, done_steps, run_dir, stage_steps
from slurm import warm


def _check_start(preset: Preset, root: Path, arm, seed: int, continuation: bool = False) -> dict:
    start = start_point(preset, root, arm, seed)
    why = late_error(preset, root, seed) if start is None and arm.start == "late" else None
    if why:
        raise ExperimentError(f"{arm.name} seed {seed}: no late start: {why}")
    if start is None and arm.start == "restart":
        raise ExperimentError(f"{arm.name} seed {seed}: {restart_file(root, preset, seed, arm.restart_from)} "
                              f"is missing "
                              f"(run select-restart first)")
    if start is None:
        raise ExperimentError(f"{arm.name} seed {seed}: {peak_file(root, preset, arm.baseline, seed)} is "
                              f"missing (run select-peak first)")
    if not Path(start["checkpoint"]).is_dir() and not continuation:   # a continuation needs its rows only
        raise ExperimentError(f"{arm.name} seed {seed}: start checkpoint {start['checkpoint']} does not "
                              f"exist")
    return start


def _node_checks(preset: Preset) -> None:
    """On a GPU node, the pre-flight's checks that need one (reproduce/preflight.py), before any model loads:
    a failure ends the job with its fix."""
    from reproduce import preflight
    bad = preflight.failures(preflight.node_checks(preset.cfg, int(os.environ.get("WORLD_SIZE", "1"))))
    if bad:
        raise ExperimentError("pre-flight on this node: " + "; ".join(f"{c.name}: {c.detail}" for c in bad))


def _wait_gone(path: Path, limit_s: float = 600.0) -> None:
    import time
    t0 = time.time()
    while path.exists():
        if time.time() - t0 > limit_s:
            raise ExperimentError(f"{path}: rank 0 did not remove it within {limit_s:.0f} s")
        time.sleep(0.2)


def cmd_train(preset: Preset, root: Path, arm_name: str, seed: int, fetch_dir: Optional[Path] = None,
              steps: Optional[int] = None, keep: Sequence[int] = (), branch_from: Optional[str] = None,
              branch_step: Optional[str] = None) -> int:
    arms = arm_definitions(preset.protocol)
    if arm_name not in arms:
        raise ExperimentError(f"unknown arm {arm_name!r} for preset {preset.name} (known: {', '.join(arms)})")
    arm = arms[arm_name]
    if branch_from is not None and branch_from not in arms:
        raise ExperimentError(f"--branch-from: {branch_from!r} is not an arm of preset {preset.name}")
    run = run_dir(root, preset, arm.run_arm, seed)
    main = int(os.environ.get("RANK", "0")) == 0       # every torchrun rank runs this; one writes files
    n = done_steps(run)
    if n is not None:
        if steps is None or n < 0 or n >= steps:
            print(f"{run}: DONE; nothing to do")
            return 0
        print(f"{run}: finished {n} steps, the plan needs {steps}: extending from its last checkpoint",
              flush=True)
        if main:
            (run / "DONE").unlink(missing_ok=True)
        else:       # every rank's trainer reads DONE on its own: start once rank 0 has removed it
            _wait_gone(run / "DONE")
    start = _check_start(preset, root, arm, seed, branch_step == "end") if arm.stage == 2 else None
    _node_checks(preset)
    if branch_step == "end":
        if arm.continues not in (branch_from, arms[branch_from].continues):     # its baseline's run
            raise ExperimentError(f"--branch-step end: {arm.name} continues {arm.continues!r}, not "
                                  f"{branch_from!r}")
        end = int(start["step"]) + stage_steps(preset)[1]
        src = run_dir(root, preset, branch_from, seed)
        last = done_steps(src)
        if last is None or last < 0:
            raise ExperimentError(f"{arm.name} seed {seed} continues {branch_from}, whose run {src} has not "
                                  f"finished")
        if end <= last:
            if main:
                branch_folder.slice_run(src, end, run)
                print(f"{run}: the rows of {src} up to step {end}; no step to train")
            return 0
        if main and not list_checkpoints(run):
            branch_folder.seed_run(src, last, run, only_last=True)
        overrides = continuation_overrides(preset, root, arm, arms[arm.continues], seed, end, fetch_dir)
    else:
        if branch_step is not None and main and not list_checkpoints(run) and not (run / "DONE").exists():
            src = run_dir(root, preset, branch_from, seed)
            linked = branch_folder.seed_run(src, int(branch_step), run)
            print(f"{run}: starts from {src} at step {branch_step} (checkpoints {linked} linked)", flush=True)
        overrides = train_overrides(preset, root, arm, seed, start, fetch_dir, steps=steps, keep=keep)
    run.mkdir(parents=True, exist_ok=True)
    if main:
        write_json_atomic(run / "arm.json", {"arm": arm.name, "preset": preset.name, "seed": seed,
                                             "start": start, "overrides": overrides,
                                             "branch": ({"source": branch_from, "step": branch_step}
                                                        if branch_from else None),
                                             "config": str(preset.path)}, **STATE_JSON)
    argv = entry("armor.train") + ["--config", str(preset.path)] + overrides
    print("exec:", " ".join(shlex.quote(a) for a in argv), flush=True)
    return warm.exec_or_run(argv)   # a warm local job runs it in this process (slurm/warm.py)
