"""The `wait-checkpoint` job: ends once a stage-1 run has saved a step (a fixed θ* or late start before the
end of stage 1), so stage 2 starts while stage 1 goes on.

    python -m reproduce.jobs wait-checkpoint --run runs/P/dapo/seed0 --step 140 --job-dir runs/P/_jobs/...
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional

from common.jsonl import read_json
from common.layout import list_checkpoints


def wait_checkpoint(run: Path, step: int, job_dir: Optional[Path], poll_s: float = 30.0,
                    log=print) -> int:
    """Block until `run` has a complete checkpoint of `step` (0), or fail (1) when the job writing it (its
    launcher folder `job_dir`) has failed since this wait began, or the run ended without that step."""
    t0 = time.time()
    while True:
        if step in list_checkpoints(run):
            log(f"{run}: checkpoint of step {step} is complete")
            return 0
        if (run / "DONE").is_file():
            log(f"{run} ended (DONE) without a checkpoint of step {step}", file=sys.stderr)
            return 1
        if job_dir is not None:
            failed = read_json(job_dir / "failed")
            if isinstance(failed, dict) and float(failed.get("end", 0)) >= t0:
                log(f"{job_dir.name}: the job writing {run} failed (exit {failed.get('rc')}) before step "
                    f"{step}", file=sys.stderr)
                return 1
        time.sleep(poll_s)


def add_parser(sub) -> None:
    """The subcommand's arguments (reproduce/jobs/__main__.py)."""
    w = sub.add_parser("wait-checkpoint", help="wait until a run has saved a step (a checkpoint-ready job)")
    w.add_argument("--run", required=True)
    w.add_argument("--step", type=int, required=True)
    w.add_argument("--job-dir", default=None, help="the launcher folder of the job writing the run")
    w.add_argument("--poll", type=float, default=30.0)


def run(a) -> int:
    return wait_checkpoint(Path(a.run), a.step, Path(a.job_dir) if a.job_dir else None, a.poll,
                           log=lambda *x, **k: print(*x, **k, flush=True))
