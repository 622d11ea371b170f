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

`POINT@STEP:SIGNAL` sends SIGNAL (e.g. SIGUSR2, SLURM's time-limit warning) instead, and `POINT@STEP:SIGNAL:R`
only on rank R (torchrun's RANK): a test stops a run at a moment it controls (armor.stop).

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


def _parse(spec: str) -> dict[tuple[str, int], tuple[int, int | None]]:
    """{(point, step): (signal, rank or None = every rank)}."""
    out = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, rest = item.partition("@")
        step, _, action = rest.partition(":")
        sig_name, _, rank = action.partition(":")
        sig = getattr(signal, sig_name, None) if sig_name else signal.SIGKILL
        if name not in POINTS or not step.isdigit() or not isinstance(sig, signal.Signals) or \
                (rank and not rank.isdigit()):
            raise ValueError(f"{ENV}={spec!r}: {item!r} is not POINT@STEP[:SIGNAL[:RANK]] with POINT in "
                             f"{', '.join(POINTS)}")
        out[(name, int(step))] = (sig, int(rank) if rank else None)
    return out


def _hold(spec: str) -> tuple[tuple[str, int], Path]:
    where, _, folder = spec.partition(":")
    try:
        at = set(_parse(where))       # {(point, step)}; a signal in it would be misread as the folder
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
    """SIGKILL this process (or send it the named signal) if ARMOR_FAULT names (name, step) for this rank;
    pause it if ARMOR_HOLD does."""
    spec = os.environ.get(ENV)
    hit = _parse(spec).get((name, step)) if spec else None
    if hit and (hit[1] is None or hit[1] == int(os.environ.get("RANK", "0"))):
        os.kill(os.getpid(), hit[0])
    hold = os.environ.get(HOLD_ENV)
    if hold:
        at, folder = _hold(hold)
        if at == (name, step):
            (folder / "held").write_text(f"{os.getpid()}\n")
            while not (folder / "release").exists():
                time.sleep(0.05)
