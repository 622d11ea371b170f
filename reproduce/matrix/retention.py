"""Checkpoint retention as the driver plans it: which steps each run must keep for θ*, the late start and the
evaluation, passed to the trainer through its config (schedule.keep_steps: saved and never deleted;
schedule.keep_best_window: the best validation's checkpoint under the peak selection's smoothing), and the
plan-time check that the preset's schedule.keep_last deletes nothing a pending θ* or evaluation needs.

    retention_overrides(preset, arm, start)    # ["schedule.keep_steps=[140,200]", ...] (none without
                                                 keep_last)
    check_retention(preset, arms, seeds)       # ExperimentError naming the key and value, before any job

What each consumer needs (reproduce/jobs/peaks.py, reproduce/jobs/evaluate.py): θ* = protocol.peak_step (or
qae_peak_step) when fixed, else the argmax of the smoothed validation curve (of the seed mean with several
seeds) among checkpoints; the late start = protocol.late_start_step, or by rule any DAPO checkpoint after θ*;
a stage-2 arm's evaluation = its best checkpoint by smoothed validation, every protocol.eval_every-th
checkpoint, the paper's table step. The figures read validation and evaluation files only: no checkpoint.
"""
from __future__ import annotations

from typing import Optional

from reproduce.matrix.arms import RESTART_FROM, RESTART_START, arm_definitions, arm_seeds, table_step
from reproduce.matrix.presets import ExperimentError, Preset, fixed_peak, stage_steps


def paper_table_step(preset: Preset, arm) -> Optional[int]:
    """Total step of the paper's table row for this arm (protocol.table_steps; paper presets only)."""
    return table_step(preset.protocol, arm.name)


def keep_steps(preset: Preset, arm, start: Optional[dict] = None) -> list[int]:
    """The run-local steps a run must save and keep: a stage-1 baseline its fixed θ* and (DAPO) the fixed late
    start, plus the preset's own schedule.keep_steps; a stage-2 arm the paper's table step (with a known
    start); armor_reset_never (a restart's source), with protocol.restart_within, every validated step the
    restart point may be."""
    p = preset.protocol
    source = arm.name == RESTART_FROM or any(a.start == RESTART_START and a.restart_from == arm.name
                                             for a in arm_definitions(p).values())
    if source and (p.restart_within is not None or p.restart_sweep):
        every = p.stage2_validate_every or preset.cfg.schedule.validate_every
        window = (list(range(every, int(p.restart_within * stage_steps(preset)[1]) + 1, every))
                  if p.restart_within is not None else [])
        sweep = p.restart_sweep if arm.name == RESTART_FROM else []
        return sorted(set(window) | set(sweep) | set(_table_steps(preset, arm, start)))
    if arm.stage == 1:
        fixed = {fixed_peak(preset, arm.name), p.late_start_step if arm.name == "dapo" else None}
        return sorted({x for x in fixed if x is not None} | set(preset.cfg.schedule.keep_steps))
    return _table_steps(preset, arm, start)


def _table_steps(preset: Preset, arm, start: Optional[dict]) -> list[int]:
    table = paper_table_step(preset, arm)
    if table is None or start is None:
        return []
    local = table - int(start["step"])
    return [local] if 0 < local <= stage_steps(preset)[1] else []


def retention_overrides(preset: Preset, arm, start: Optional[dict] = None, extra=()) -> list[str]:
    """The trainer's retention overrides of one run (the arm's train job). Without schedule.keep_last nothing
    is deleted, and only the stage-1 keep_steps (fixed θ*, late start) are passed, as before retention
    existed. `extra`: the steps other runs branch from (reproduce/matrix/branching.py), saved even off the
    save grid and kept."""
    keep = sorted(set(keep_steps(preset, arm, start)) | set(extra))
    pruned = preset.cfg.schedule.keep_last is not None
    out = ([f"schedule.keep_steps=[{','.join(map(str, keep))}]"]
           if keep and (arm.stage == 1 or pruned or extra) else [])
    if pruned:
        out.append(f"schedule.keep_best_window={preset.protocol.peak_selection_window}")
    return out


def check_retention(preset: Preset, arms: dict, seeds: list[int]) -> None:
    """Fail at plan time when schedule.keep_last would delete a checkpoint a pending θ*, late start or
    evaluation needs, naming the key and value; and when a fixed step lies outside its stage. (keep_last with
    protocol.late_start_fraction is refused when the preset loads: reproduce.matrix.presets.load_preset.)"""
    p, s = preset.protocol, preset.cfg.schedule
    s1, s2 = stage_steps(preset)
    for name in ("peak_step", "qae_peak_step", "late_start_step"):
        v = getattr(p, name)
        if v is not None and not 1 <= v <= s1:
            raise ExperimentError(f"protocol.{name}={v}: no checkpoint of the {s1}-step stage 1 can be it")
    k = s.keep_last
    if k is None:
        return
    for arm in arms.values():
        if arm.stage != 1 or arm.alias_of:
            continue
        starts = any(a.baseline == arm.name and a.stage == 2 for a in arms.values())
        if (starts or arm.evaluate) and fixed_peak(preset, arm.name) is None and \
                len(arm_seeds(p, arm, seeds)) > 1:
            raise ExperimentError(
                f"schedule.keep_last={k}: θ* of {arm.name} is the argmax of the seed-mean validation curve "
                f"among the checkpoints every seed kept, which no run can know alone; set "
                f"schedule.keep_last: null or fix protocol.{'qae_' if arm.name == 'qae' else ''}peak_step")
    if p.eval_every and any(a.evaluate and a.stage == 2 for a in arms.values()):
        raise ExperimentError(f"schedule.keep_last={k}: protocol.eval_every={p.eval_every} evaluates every "
                              f"{p.eval_every}-th checkpoint of each evaluated arm, which keep_last deletes; "
                              "set schedule.keep_last: null or protocol.eval_every: 0")
