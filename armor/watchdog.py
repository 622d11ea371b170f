"""A run whose ranks stopped advancing ends, naming the stuck rank, instead of idling until the collective
timeout (parallel.timeout_s: hours at the paper's scale) while every GPU of the job waits.

    dist = watch(Dist.from_env(...), run_dir, cfg.parallel)    # several ranks: a TrackedDist
    start(dist)                                                  # the monitor thread
    hook_modules(dist, policy, reference)                        # each forward is a mark too
    step_done(dist, step)                                        # at each step's end (after its save)
    close(dist)                                                  # the monitor stops

Every rank counts its marks, in program order, so all ranks pass the same sequence (SPMD): each collective
of common.distributed.Dist it enters, each forward of a hooked model (FSDP2 gathers parameters in it), each
step's end. Each mark is written at once over the rank's last in <run>/progress/rank_R.json (count, where,
step, whether it waits in a collective, when it got there, its longest step so far; the files stay after the
run: where each rank was last). A thread on ranks 0 and W-1 reads every rank's. When no rank has made a mark
for

    stall_s = parallel.stall_steps x max(the longest step so far, parallel.stall_min_s)

the monitor prints which rank is behind (the lowest count: the others passed a point it never reached;
among equals one that is not waiting in a collective) and exits the process with STALL_EXIT; torchrun then
stops the other ranks and the job fails with that message in its log. Ranks all at the same point (all
inside one FSDP collective) are named together: the hang is in that collective or a device.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from common.distributed import Dist

STALL_EXIT = 75          # the exit status of a process ended by the watchdog (a failure, not a requeue)
PROGRESS = "progress"    # <run>/progress/rank_R.json


RECORD_BYTES = 512       # a rank's record: one pwrite of this many bytes over the last (no rename per mark)


class Progress:
    """One rank's marks, each written at once into its file (a frozen process leaves its true last mark)."""

    def __init__(self, folder: Path, rank: int, world: int, stall_steps: float, stall_min_s: float):
        self.folder, self.rank, self.world = Path(folder), rank, world
        self.stall_steps, self.stall_min_s = stall_steps, stall_min_s
        self.count, self.where, self.step, self.waiting = 0, "start", 0, False
        self.t = self.step_t = time.time()
        self.longest_step = 0.0
        self.folder.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.folder / f"rank_{rank}.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.flush()

    def mark(self, where: str, waiting: bool = False) -> None:
        self.count += 1
        self.where, self.waiting, self.t = where, waiting, time.time()
        self.flush()

    def left(self) -> None:
        """Out of the collective entered last (not a new point: the count is unchanged)."""
        self.waiting, self.t = False, time.time()
        self.flush()

    def step_done(self, step: int) -> None:
        now = time.time()
        self.longest_step = max(self.longest_step, now - self.step_t)
        self.step, self.step_t = step, now
        self.mark(f"end of step {step}")

    def record(self) -> dict:
        return {"rank": self.rank, "count": self.count, "where": self.where, "step": self.step,
                "waiting": self.waiting, "time": self.t, "longest_step_s": self.longest_step}

    def flush(self) -> None:
        """The record, padded to RECORD_BYTES, over the file's last one (a reader that meets a half-written
        one skips it until the next poll)."""
        data = json.dumps(self.record()).encode()[:RECORD_BYTES - 1]
        os.pwrite(self._fd, data + b" " * (RECORD_BYTES - 1 - len(data)) + b"\n", 0)

    def stall_s(self, records: list[dict]) -> float:
        longest = max([r.get("longest_step_s", 0.0) for r in records] + [self.longest_step])
        return self.stall_steps * max(longest, self.stall_min_s)


def read_records(folder: Path, world: int) -> list[dict]:
    """Every rank's latest mark (ranks without a readable file are left out)."""
    out = []
    for r in range(world):
        try:
            out.append(json.loads((Path(folder) / f"rank_{r}.json").read_text().strip()))
        except (OSError, ValueError):
            pass
    return out


def diagnose(records: list[dict], world: int, now: float, stall_s: float) -> str | None:
    """The stall message when no rank has marked anything for stall_s seconds (None: the run advances).
    The stuck ranks: the lowest count (the others passed a point they never reached), and among them those
    not waiting in a collective; a rank with no file at all is named first."""
    if not records:
        return None
    last = max(r["time"] for r in records)
    if now - last <= stall_s:
        return None
    seen = {r["rank"] for r in records}
    missing = [r for r in range(world) if r not in seen]
    low = min(r["count"] for r in records)
    behind = [r for r in records if r["count"] == low]
    ahead = [r for r in records if r["count"] > low]
    busy = [r for r in behind if not r["waiting"]] or behind

    def at(r: dict) -> str:
        return (f"step {r['step'] + 1}, {'waiting at ' if r['waiting'] else 'after '}{r['where']} "
                f"(mark {r['count']}) since {time.strftime('%H:%M:%S', time.localtime(r['time']))}")
    head = (f"stall: no rank has advanced for {now - last:,.0f} s (parallel.stall_steps x max(longest "
            f"step, parallel.stall_min_s) = {stall_s:,.0f} s)")
    if missing:
        return f"{head}; rank(s) {','.join(map(str, missing))} never reported (no progress file)"
    if ahead or len(busy) < len(behind):
        names = ",".join(str(r["rank"]) for r in busy)
        first = ahead[0] if ahead else next(r for r in behind if r not in busy)
        return (f"{head}; rank {names} is stuck: {at(busy[0])}; the other ranks got further (rank "
                f"{first['rank']}: {at(first)})")
    return (f"{head}; every rank is at the same point ({at(records[0])}): the hang is inside it (a "
            f"collective of FSDP's, the network, or a device)")


@dataclass(frozen=True)
class TrackedDist(Dist):
    """common.distributed.Dist whose collectives are marks of this rank's Progress."""
    progress: Progress | None = field(default=None, compare=False, repr=False)

    def _enter(self, name: str) -> None:
        if self.progress is not None:
            self.progress.mark(name, waiting=True)

    def _leave(self) -> None:
        if self.progress is not None:
            self.progress.left()

    def all_gather_object(self, obj) -> list:
        self._enter("all_gather_object")
        try:
            return super().all_gather_object(obj)
        finally:
            self._leave()

    def all_reduce_sum(self, x):
        self._enter("all_reduce_sum")
        try:
            return super().all_reduce_sum(x)
        finally:
            self._leave()

    def barrier(self) -> None:
        self._enter("barrier")
        try:
            super().barrier()
        finally:
            self._leave()


class _Monitor(threading.Thread):
    """On a monitoring rank: every poll, every rank's latest mark checked."""

    def __init__(self, progress: Progress, watch_all: bool):
        super().__init__(name="armor-watchdog", daemon=True)
        self.progress, self.watch_all = progress, watch_all
        self.stop = threading.Event()

    def run(self) -> None:
        p = self.progress
        while not self.stop.is_set():
            if self.watch_all:
                recs = read_records(p.folder, p.world)
                msg = diagnose(recs, p.world, time.time(), p.stall_s(recs))
                if msg is not None:
                    print(f"[watchdog rank {p.rank}] {msg}; ending the job (exit {STALL_EXIT})",
                          file=sys.stderr, flush=True)
                    os._exit(STALL_EXIT)
            self.stop.wait(min(10.0, max(0.5, p.stall_s([]) / 20)))


_MONITORS: dict[int, _Monitor] = {}


def watch(dist: Dist, run_dir: Path, parallel) -> Dist:
    """`dist` as a TrackedDist (its collectives are marks) when it has several ranks and
    parallel.stall_steps is set; else `dist` itself (one process cannot wait for another)."""
    if not dist.distributed or not parallel.stall_steps:
        return dist
    p = Progress(Path(run_dir) / PROGRESS, dist.rank, dist.world_size, parallel.stall_steps,
                 parallel.stall_min_s)
    return TrackedDist(dist.rank, dist.world_size, dist.local_rank, dist.device, progress=p)


def start(dist: Dist) -> None:
    """Start the monitor thread (Trainer.fit: from loading the models to the run's end)."""
    p = getattr(dist, "progress", None)
    if p is None or id(p) in _MONITORS:
        return
    p.mark("fit")
    mon = _MONITORS[id(p)] = _Monitor(p, watch_all=p.rank in (0, p.world - 1))
    mon.start()


def hook_modules(dist: Dist, *modules) -> None:
    """Each forward of these modules (before FSDP2's own pre-forward, which gathers the parameters) is a
    mark."""
    p = getattr(dist, "progress", None)
    if p is None:
        return
    seen = set()
    for i, m in enumerate(modules):
        if m is None or id(m) in seen:       # a teacher that is πref: one hook
            continue
        seen.add(id(m))
        m.register_forward_pre_hook(lambda *a, _n=f"forward of model {i}": p.mark(_n), prepend=True)


def step_done(dist: Dist, step: int) -> None:
    p = getattr(dist, "progress", None)
    if p is not None:
        p.step_done(step)


def close(dist: Dist) -> None:
    """Stop the monitor (the run ended or stops for a requeue); the progress files stay, the last word on
    where each rank was (a new attempt overwrites them)."""
    p = getattr(dist, "progress", None)
    mon = _MONITORS.pop(id(p), None) if p is not None else None
    if mon is not None:
        mon.stop.set()
        mon.join()
