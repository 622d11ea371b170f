"""The `figures` job (python -m figures on the results table: figures, tables, checklist, report) and the
driver's wall-time log that the report quotes.

    python -m reproduce.jobs figures --preset tiny --root runs
"""
from __future__ import annotations

import contextlib
import os
import shlex
import time
from pathlib import Path
from typing import Optional

from common.jsonl import append_jsonl, read_jsonl
from reproduce.entrypoints import entry
from reproduce.jobs.collect import write_figures_stamp
from reproduce.matrix.arms import CONTROL, HEADLINE, RESTARTS_ITEM
from reproduce.matrix.presets import Preset, preset_root
from slurm import warm

DRIVER_RUNS = "driver_runs.jsonl"           # under <preset root>/_jobs: one line per run_all invocation
DRIVER_START_ENV = "ARMOR_DRIVER_START"    # the running invocation's start time, set for its jobs


def record_driver_run(out: Path, start: float, end: float) -> None:
    """Append one run_all invocation (start, end) to the preset root's driver log."""
    (out / "_jobs").mkdir(parents=True, exist_ok=True)
    append_jsonl(out / "_jobs" / DRIVER_RUNS, {"start": start, "end": end})


def driver_wall_time(out: Path, now: Optional[float] = None) -> Optional[float]:
    """Seconds spent by run_all on this preset root so far: the finished invocations in the driver log plus
    the running one (ARMOR_DRIVER_START). None when neither is known (figures made outside the driver)."""
    total, known = 0.0, False
    log = out / "_jobs" / DRIVER_RUNS
    for r in read_jsonl(log):
        with contextlib.suppress(ValueError, KeyError, TypeError):
            total += float(r["end"]) - float(r["start"])
            known = True
    start = os.environ.get(DRIVER_START_ENV)
    if start is not None:
        with contextlib.suppress(ValueError):
            total += (now or time.time()) - float(start)
            known = True
    return total if known else None


def cmd_figures(preset: Preset, root: Path, seeds: list[int], only: Optional[list[str]]) -> int:
    out = preset_root(root, preset)
    res = out / "results.parquet"
    argv = entry("figures") + ["--results", str(res), "--out", str(out / "figures"), "--preset", preset.name,
                               "--runs", str(out), "--report", str(out / "REPRODUCTION.md"),
                               "--seeds", ",".join(map(str, seeds)),
                               "--command", f"python reproduce/run_all.py --preset {preset.cli_arg}"
                               + (f" --only {','.join(only)}" if only else "")]
    if only:   # the headline is Tables 1 and 2's DAPO and +ARMOR rows (figures/ draws tables, not items);
        # Fig. 4's restarts alone are drawn as Fig. 4 (with the arms that ran); the control as the steps
        # figure and the claims' checklist with its forest plot
        drawn = [x for i in only for x in (("table1", "table2") if i == HEADLINE else
                                          ("fig4",) if i == RESTARTS_ITEM else
                                          ("steps", "checklist") if i == CONTROL else (i,))]
        argv += ["--only", ",".join(dict.fromkeys(drawn))]
    wall = driver_wall_time(out)
    if wall is not None:
        argv += ["--wall-time-s", f"{wall:.0f}"]
    print("run:", " ".join(shlex.quote(a) for a in argv), flush=True)
    rc = warm.run(argv)
    if rc == 0:
        write_figures_stamp(preset, root, only)
    return rc
