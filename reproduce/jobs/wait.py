"""The `wait-checkpoint` job (a checkpoint-ready job): a step a run must reach before its end (a fixed θ*, a
late start, a branch or restart point), so what starts there starts while the run goes on. It does not poll:
the launcher starts it only once the checkpoint is complete (its `slurm.launcher.Gate`: held on SLURM,
released by the watched train job's wrapper or the driver when the step's trainer_state.pt appears), so
however long the run takes to reach the step, no time limit runs out while it waits. The job itself checks
the checkpoint and ends.

    python -m reproduce.jobs wait-checkpoint --run runs/P/dapo/seed0 --step 140
"""
from __future__ import annotations

import sys
from pathlib import Path

from common.layout import STATE_FILE, list_checkpoints, step_dir


def gate_path(run: Path, step: int) -> Path:
    """The file whose existence opens the gate: the step's trainer_state.pt, which is in the step folder only
    once the checkpoint is complete (written into step_NNNNNN.tmp, renamed when whole; common/layout.py)."""
    return step_dir(run, step) / STATE_FILE


def check_checkpoint(run: Path, step: int, log=print) -> int:
    """0 when `run` has a complete checkpoint of `step`, else 1 with a line naming the run and the step."""
    if step in list_checkpoints(run):
        log(f"{run}: checkpoint of step {step} is complete")
        return 0
    log(f"{run}: no complete checkpoint of step {step} (expected {gate_path(run, step)})", file=sys.stderr)
    return 1


def add_parser(sub) -> None:
    """The subcommand's arguments (reproduce/jobs/__main__.py)."""
    w = sub.add_parser("wait-checkpoint", help="check that a run has saved a step (a checkpoint-ready job, "
                                               "started once the checkpoint exists)")
    w.add_argument("--run", required=True)
    w.add_argument("--step", type=int, required=True)


def run(a) -> int:
    return check_checkpoint(Path(a.run), a.step, log=lambda *x, **k: print(*x, **k, flush=True))
