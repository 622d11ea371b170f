"""Stopping for a requeue: SLURM's time-limit warning (`--signal=USR2@T`) or a preemption (SIGTERM) asks the
run to stop; the trainer finishes the step in flight, saves it and exits, so a requeue loses at most that
step. On SIGTERM a run that keeps training states (schedule.state_every) saves the state alone, which fits
the cluster's short grace better than a checkpoint (armor.checkpoint.AsyncStateSaver); a preemption's
SIGKILL before the step ends leaves the newest state saved in the background.

    stop = StopRequest(["SIGUSR2", "SIGTERM"])     # handlers installed (schedule.stop_signals)
    signum = stop.agreed(dist)                      # at a step boundary: a collective, the same on every rank
    stop.close()                                    # the previous handlers back

A job wrapper may ask the same without a signal: it creates the file `$ARMOR_STOP_FILE` (slurm/jobwrap.py, on
SLURM's warning), read at each step boundary as SIGUSR2. A signal through torchrun would reach the ranks
with torchrun's own 30 s kill behind it, too short for a 7B step and its save. A handler only records the
signal; the decision is taken at the step boundary by every rank together (the
first signal any rank got, gathered with Dist.all_gather_object: identity at world size 1), so all ranks save
the same step and leave together. The process then exits with 128 + the signal's number (armor.train), as a
process killed by it would report, so a job wrapper counts the attempt interrupted, not finished.
"""
from __future__ import annotations

import os
import signal
from pathlib import Path

STOP_FILE_ENV = "ARMOR_STOP_FILE"    # a path: its existence asks the run to stop (the job wrapper's request)


class StopRequest:
    def __init__(self, names: list[str]):
        self.signum: int | None = None
        self._previous = {}
        for name in names:
            sig = getattr(signal, name)
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:          # not the main thread (a caller driving steps from another thread)
                pass

    def _handle(self, signum, frame) -> None:
        if self.signum is None:
            self.signum = signum

    def agreed(self, dist) -> int | None:
        """The signal that stops the run (the first rank's that got one, in rank order), or None: every rank
        must call this at the same step boundary."""
        path = os.environ.get(STOP_FILE_ENV)
        if self.signum is None and path and Path(path).exists():
            self.signum = int(signal.SIGUSR2)
        return next((s for s in dist.all_gather_object(self.signum) if s is not None), None)

    def close(self) -> None:
        for sig, prev in self._previous.items():
            signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
        self._previous = {}
