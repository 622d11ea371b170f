"""Named fault points: a test kills the trainer at a moment it chooses, never by racing a timer.

`ARMOR_FAULT=POINT@STEP` (comma-separated for several) makes the process SIGKILL itself the first time it
reaches POINT while working on RL step STEP (1-based: the step being computed, or the step just finished
for the points after it). The points, in the order one step reaches them:

    sample        after the first on-policy generate call of the step (mid-rollout)
    anchor        after the first reference generate call of the step (Anchor Rollout)
    update        after the step's first optimizer update (between mini-batches)
    reset         right after a reference reset θref <- θ
    metrics       right after the step's metrics row is written
    validate      after validation has sampled and graded, before its rows are written
    checkpoint    while a checkpoint is written: model saved, training state not yet
    saved         after the checkpoint folder is renamed into place, before pruning
    done          after the last step, before DONE is written

`ARMOR_HOLD=POINT@STEP:DIR` instead pauses the process there: it writes DIR/held and waits until DIR/release
exists, so a test can act on a run stopped at a known moment (e.g. `scontrol requeue` it) without racing it.

Unset (the normal case), `point()` is a dictionary lookup. This is test machinery only: no config key
enables it.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

ENV = "ARMOR_FAULT"
HOLD_ENV = "ARMOR_HOLD"
POINTS = ("sample", "anchor", "update", "reset", "metrics", "validate", "checkpoint", "saved", "done")


def _parse(spec: str) -> set[tuple[str, int]]:
    out = set()
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, step = item.partition("@")
        if name not in POINTS or not step.isdigit():
            raise ValueError(f"{ENV}={spec!r}: {item!r} is not POINT@STEP with POINT in {', '.join(POINTS)}")
        out.add((name, int(step)))
    return out


def _hold(spec: str) -> tuple[tuple[str, int], Path]:
    where, _, folder = spec.partition(":")
    try:
        at = _parse(where)
    except ValueError:
        at = set()
    if len(at) != 1 or not folder:
        raise ValueError(f"{HOLD_ENV}={spec!r} is not POINT@STEP:DIR with POINT in {', '.join(POINTS)}")
    return at.pop(), Path(folder)


def check_env() -> None:
    """Refuse a malformed ARMOR_FAULT or ARMOR_HOLD before any work is spent (called at trainer start)."""
    if os.environ.get(ENV):
        _parse(os.environ[ENV])
    if os.environ.get(HOLD_ENV):
        _hold(os.environ[HOLD_ENV])


def point(name: str, step: int) -> None:
    """SIGKILL this process if ARMOR_FAULT names (name, step); pause it if ARMOR_HOLD does."""
    spec = os.environ.get(ENV)
    if spec and (name, step) in _parse(spec):
        os.kill(os.getpid(), signal.SIGKILL)
    hold = os.environ.get(HOLD_ENV)
    if hold:
        at, folder = _hold(hold)
        if at == (name, step):
            (folder / "held").write_text(f"{os.getpid()}\n")
            while not (folder / "release").exists():
                time.sleep(0.05)
