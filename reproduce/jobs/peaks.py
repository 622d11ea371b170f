"""θ* (the peak a stage-2 arm starts from): read the validation curve, smooth it, choose, keep it in
peak.json.

θ* of a stage-1 baseline = protocol.peak_step (qae_peak_step for QAE) if set, else the argmax of the
validation curve smoothed over peak_selection_window points, among steps that have a checkpoint; written to
runs/<preset>/<baseline>/seed<s>/peak.json by `python -m reproduce.jobs select-peak`. With several
seeds the curve is the seed mean (steps validated in every seed) and the candidates the steps checkpointed in
every seed: one θ* for all seeds, so their stage-2 curves share a step axis and the choice averages out the
noise of one evaluation. protocol.selection_seeds fixes the seeds of that curve: seeds added later take their
choice (tiny: seeds 0-2 choose, 3-4 follow, so adding seeds changes no earlier run). A stage-2 arm starts from
it (`start_point`). armor_late/dapo_late start from the DAPO checkpoint at late_start_step, or, with
late_start_fraction f, from the first checkpoint after θ* whose smoothed validation is ≤ peak − f·(peak −
floor), floor = the lowest smoothed value after θ* (`choose_late`, peak.json's "late"): chosen only when the
plan runs a late arm (`select-peak --late`), and only from stage-1 runs that have finished, so the choice
never depends on how far a run had got when the job ran (a fixed θ* is chosen as soon as its checkpoint
exists).

The authors' reset (armor_restart, protocol.restart_within = w): the restart point is chosen as θ* is, on
armor_reset_never's stage-2 curve: the argmax of its seed-mean validation smoothed over peak_selection_window,
among the stage-2 steps r with a checkpoint in every seed and 0 < r ≤ w · stage2_steps (`choose_restart`;
ties: earliest). One r for all seeds; each seed restarts from its own run's checkpoint at r. Written to
runs/<preset>/armor_reset_never/seed<s>/restart.json by `python -m reproduce.jobs select-restart`. With
protocol.restart_step fixed (a confirmation preset: r from the design seeds) no curve is read: r is that step,
and this seed's checkpoint at r must exist. Another restart arm's source (its Arm.restart_from, e.g.
armor_reset_never_clean) gets the same rule on its own curve (`select-restart --arm SOURCE`).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

from common.jsonl import read_json, read_jsonl, write_json_atomic
from common.layout import list_checkpoints
from reproduce.matrix.arms import (RESTART_FROM, RESTART_START, Arm, arm_definitions, arm_seeds,
                                   selection_seeds)
from reproduce.matrix.presets import (STATE_JSON, ExperimentError, Preset, ckpt_dir, fixed_peak, run_dir,
                                      run_done, stage_steps)


def validation_benchmark(preset: Preset) -> Optional[str]:
    b = preset.cfg.validation.benchmarks
    return b[0].split("=", 1)[0] if b else None


def read_validation(run: Path, benchmark: Optional[str] = None) -> list[tuple[int, float]]:
    """(run-local step, value) of one benchmark (default: the first in the file), last row per step wins."""
    rows = read_jsonl(Path(run) / "validation.jsonl")
    if not rows:
        return []
    bench = (benchmark if benchmark and any(r.get("benchmark") == benchmark for r in rows)
             else rows[0].get("benchmark"))
    curve: dict[int, float] = {}
    for r in rows:
        if r.get("benchmark") == bench and r.get("value") is not None:
            curve[int(r["step"])] = float(r["value"])
    return sorted(curve.items())


def smooth(curve: list[tuple[int, float]], window: int) -> list[tuple[int, float]]:
    """Centered moving average over `window` points (fewer at the ends)."""
    if window <= 1:
        return list(curve)
    vals = [v for _, v in curve]
    lo, hi = (window - 1) // 2, window // 2
    out = []
    for i, (s, _) in enumerate(curve):
        seg = vals[max(0, i - lo): i + hi + 1]
        out.append((s, sum(seg) / len(seg)))
    return out


def choose_peak(curve: list[tuple[int, float]], checkpoints: list[int], window: int = 1,
                fixed: Optional[int] = None) -> dict:
    """θ*: the fixed step (must have a checkpoint), else the argmax of the smoothed curve among steps with a
    checkpoint (ties: earliest)."""
    if fixed is not None:
        if fixed not in checkpoints:
            raise ExperimentError(f"fixed peak step {fixed} has no checkpoint (have {checkpoints[:20]})")
        return {"step": int(fixed), "method": "fixed"}
    if not curve:
        raise ExperimentError("no validation curve to choose the peak from")
    sm = dict(smooth(curve, window))
    raw = dict(curve)
    cands = [s for s in sorted(sm) if s in set(checkpoints)]
    if not cands:
        raise ExperimentError(f"no validated step has a checkpoint (validated {sorted(sm)[:20]}, "
                              f"checkpoints {checkpoints[:20]})")
    best = max(cands, key=lambda s: (sm[s], -s))
    return {"step": int(best), "method": "argmax", "window": window, "value": raw[best], "smoothed": sm[best],
            "candidates": len(cands)}


def mean_curve(curves: list[list[tuple[int, float]]]) -> list[tuple[int, float]]:
    """The seed-mean curve: the steps validated in every curve, each with the mean of their values."""
    if not curves:
        return []
    maps = [dict(c) for c in curves]
    steps = sorted(set.intersection(*(set(m) for m in maps)))
    return [(s, sum(m[s] for m in maps) / len(maps)) for s in steps]


def choose_late(curve: list[tuple[int, float]], checkpoints: list[int], peak_step: int, fraction: float,
                window: int = 1) -> dict:
    """The late start: the first checkpointed step after θ* whose smoothed value v satisfies

        v ≤ v(θ*) − f · (v(θ*) − floor),   floor = min of the smoothed curve after θ*

    (f = 0: θ* itself would qualify; f = 1: the floor). Raises when the curve has no point after θ* or never
    falls below θ*'s value (a run that does not degrade has no late start)."""
    sm = smooth(curve, window)
    val = dict(sm)
    if peak_step not in val:
        raise ExperimentError(f"θ* step {peak_step} has no validation point to measure the fall from")
    after = [(s, v) for s, v in sm if s > peak_step]
    if not after:
        raise ExperimentError(f"no validation after θ* (step {peak_step}) to choose a late start from")
    peak, floor = val[peak_step], min(v for _, v in after)
    if floor >= peak:
        raise ExperimentError(f"validation never falls below θ*'s {peak:.4f} after step {peak_step}")
    threshold = peak - fraction * (peak - floor)
    ck, raw = set(checkpoints), dict(curve)
    for s, v in after:
        if s in ck and v <= threshold:
            return {"step": int(s), "value": raw[s], "smoothed": v, "peak_smoothed": peak, "floor": floor,
                    "fraction": fraction, "threshold": threshold}
    raise ExperimentError(f"no checkpoint after θ* (step {peak_step}) has smoothed validation "
                          f"≤ {threshold:.4f} "
                          f"(peak {peak:.4f}, floor {floor:.4f}, fraction {fraction})")


def select_peak(preset: Preset, root: Path, baseline: str, seed: int,
                seeds: Optional[list[int]] = None, late: bool = False) -> dict:
    """peak.json of one baseline and seed: θ* from the mean curve over `seeds` (default: this seed alone; with
    protocol.selection_seeds a seed outside them takes their choice), and with `late` (DAPO, protocol.
    late_start_fraction) the late start of this seed's run (an {"error": ...} if none) from finished stage-1
    runs only: an ExperimentError names a run that has not finished."""
    p = preset.protocol
    seeds = sorted(set(seeds or [seed]))
    run = run_dir(root, preset, baseline, seed)
    fixed = fixed_peak(preset, baseline)
    bench = validation_benchmark(preset)
    runs = [run_dir(root, preset, baseline, x) for x in seeds]
    curves = [read_validation(r, bench) for r in runs]
    if len(seeds) > 1:
        lacking = [x for x, c in zip(seeds, curves) if not c]
        if lacking:
            raise ExperimentError(f"θ* of {baseline} is chosen from the mean curve of seeds {seeds}, "
                                  f"but seed(s) "
                                  f"{lacking} have no validation yet ({runs[seeds.index(lacking[0])]})")
    curve = mean_curve(curves)
    ckpts = sorted(set.intersection(*(set(list_checkpoints(r)) for r in runs + [run])))
    info = choose_peak(curve, ckpts, p.peak_selection_window, fixed)
    if len(seeds) > 1:
        info["seeds"] = seeds
    if late and baseline == "dapo" and p.late_start_fraction is not None:
        s1 = stage_steps(preset)[0]
        running = [str(r) for r in dict.fromkeys(runs + [run]) if not run_done(r, s1)]
        if running:
            raise ExperimentError(f"the late start of {baseline} seed {seed} is chosen from finished stage-1 "
                                  f"runs; not finished ({s1} steps): {', '.join(running)}")
        try:
            late = choose_late(curve, ckpts, info["step"], p.late_start_fraction, p.peak_selection_window)
            late["checkpoint"] = str(ckpt_dir(run, late["step"]))
        except ExperimentError as e:
            late = {"error": str(e)}
        info["late"] = late
    info.update(baseline=baseline, seed=seed, benchmark=bench, checkpoint=str(ckpt_dir(run, info["step"])),
                time=time.time())
    return info


def choose_restart(curve: list[tuple[int, float]], checkpoints: list[int], last: int,
                   window: int = 1, source: str = RESTART_FROM) -> dict:
    """The restart point of the authors' reset: choose_peak over the run-local steps r with 0 < r ≤ last (the
    start, r = 0, is θ* itself: restarting there would only repeat the run)."""
    cands = [s for s in checkpoints if 0 < s <= last]
    if not cands:
        raise ExperimentError(f"no checkpoint of {source} at a stage-2 step in (0, {last}] "
                              f"(checkpoints {checkpoints[:20]}) to restart from")
    info = choose_peak(curve, cands, window)
    info["last"] = last
    return info


def restart_file(root: Path, preset: Preset, seed: int, source: str = RESTART_FROM) -> Path:
    """restart.json of a restart's source run (armor_reset_never, or another arm's Arm.restart_from)."""
    return run_dir(root, preset, source, seed) / "restart.json"


def select_restart(preset: Preset, root: Path, seed: int, seeds: Optional[list[int]] = None,
                   source: str = RESTART_FROM) -> dict:
    """restart.json of one seed: the restart point from the source run's (armor_reset_never's) mean curve over
    `seeds` (default: this seed), its checkpoint in this seed's run, and the total step the restarted run
    counts from."""
    p = preset.protocol
    if p.restart_within is None:
        raise ExperimentError(f"preset {preset.name}: protocol.restart_within is not set (no armor_restart)")
    seeds = sorted(set(seeds or [seed]))
    bench = validation_benchmark(preset)
    s2 = stage_steps(preset)[1]
    run = run_dir(root, preset, source, seed)
    if p.restart_step is not None:
        r = int(p.restart_step)
        if r not in list_checkpoints(run):
            raise ExperimentError(f"protocol.restart_step={r}: {source} seed {seed} has no checkpoint "
                                  f"at stage-2 step {r} ({ckpt_dir(run, r)})")
        info = {"step": r, "method": "fixed", "last": int(p.restart_within * s2)}
        seeds = [seed]                     # no curve is read: the step is the protocol's
    else:
        runs = [run_dir(root, preset, source, x) for x in seeds]
        curves = [read_validation(x, bench) for x in runs]
        lacking = [x for x, r in zip(seeds, runs) if not (r / "DONE").is_file()]
        if lacking:
            raise ExperimentError(f"the restart point is chosen from {source}'s finished runs of seeds "
                                  f"{seeds}, but seed(s) {lacking} are not DONE "
                                  f"({runs[seeds.index(lacking[0])]})")
        ckpts = sorted(set.intersection(*(set(list_checkpoints(x)) for x in runs + [run])))
        info = choose_restart(mean_curve(curves), ckpts, int(p.restart_within * s2), p.peak_selection_window,
                              source)
    pk = read_peak(root, preset, "dapo", seed)
    if pk is None:
        raise ExperimentError(f"θ* of dapo seed {seed} is not chosen "
                              f"({peak_file(root, preset, 'dapo', seed)})")
    offset = int(pk["step"])              # armor_reset_never's stage 2 counts from θ*
    r = info["step"]
    info.update(source=source, seed=seed, seeds=seeds, benchmark=bench, stage2_step=r, step=offset + r,
                checkpoint=str(ckpt_dir(run, r)), remaining=s2 - r, within=p.restart_within, time=time.time())
    return info


def read_restart(root: Path, preset: Preset, seed: int, source: str = RESTART_FROM) -> Optional[dict]:
    try:
        return json.loads(restart_file(root, preset, seed, source).read_text())
    except (OSError, ValueError):
        return None


def restart_done(path: Path) -> bool:
    """restart.json is written and its checkpoint exists."""
    d = read_json(path)
    return bool(d) and Path(d.get("checkpoint", "")).exists()


def peak_file(root: Path, preset: Preset, baseline: str, seed: int) -> Path:
    return run_dir(root, preset, baseline, seed) / "peak.json"


def read_peak(root: Path, preset: Preset, baseline: str, seed: int) -> Optional[dict]:
    try:
        return json.loads(peak_file(root, preset, baseline, seed).read_text())
    except (OSError, ValueError):
        return None


def start_point(preset: Preset, root: Path, arm: Arm, seed: int) -> Optional[dict]:
    """{step, checkpoint} a stage-2 arm starts from (armor_restart: and stage2_step), or None while θ* (the
    restart point) is not chosen yet."""
    if arm.start == RESTART_START and arm.restart_step:
        # armor_restart_<τ>: the source run's checkpoint at the fixed stage-2 step τ, no restart.json (no
        # select-restart job chooses it); the source starts at θ* of the arm's baseline
        pk = read_peak(root, preset, arm.baseline, seed)
        source = run_dir(root, preset, arm.restart_from or RESTART_FROM, seed)
        return None if pk is None else {"step": int(pk["step"]) + arm.restart_step,
                                        "checkpoint": str(ckpt_dir(source, arm.restart_step)),
                                        "stage2_step": arm.restart_step}
    if arm.start == RESTART_START:
        rs = read_restart(root, preset, seed, arm.restart_from or RESTART_FROM)
        return None if rs is None else {k: rs[k] for k in ("step", "checkpoint", "stage2_step")}
    if arm.start == "late" and preset.protocol.late_start_step is not None:
        step = preset.protocol.late_start_step
        return {"step": step, "checkpoint": str(ckpt_dir(run_dir(root, preset, "dapo", seed), step))}
    pk = read_peak(root, preset, arm.baseline, seed)
    if pk is None:
        return None
    if arm.start == "late":
        late = pk.get("late") or {}
        return {"step": int(late["step"]), "checkpoint": late["checkpoint"]} if "step" in late else None
    return {"step": int(pk["step"]), "checkpoint": pk["checkpoint"]}


def late_error(preset: Preset, root: Path, seed: int) -> Optional[str]:
    """Why DAPO seed `seed` has no late start by rule (peak.json's late error), or None."""
    pk = read_peak(root, preset, "dapo", seed) or {}
    return (pk.get("late") or {}).get("error")


def peak_done(pf: Path, fixed: Optional[int], late: bool = False) -> bool:
    """peak.json is written, names the fixed step if the protocol fixes one, its checkpoint exists, and (late)
    it holds the late start's verdict."""
    d = read_json(pf)
    return (bool(d) and (fixed is None or int(d.get("step", -1)) == fixed)
            and Path(d.get("checkpoint", "")).exists() and (not late or isinstance(d.get("late"), dict)))


def cmd_select_peak(preset: Preset, root: Path, arm: str, seed: int,
                    seeds: Optional[list[int]] = None, late: bool = False) -> int:
    """peak.json of `arm` seed `seed`; θ* from the mean curve over `seeds` (default: the arm's seeds in the
    protocol); with `late` the late start by rule too."""
    arms = arm_definitions(preset.protocol)
    if arm not in arms or arms[arm].stage != 1:
        raise ExperimentError(f"select-peak --arm {arm!r}: not a stage-1 baseline of preset {preset.name} "
                              f"(those: {', '.join(a for a in arms if arms[a].stage == 1)})")
    seeds = seeds if seeds is not None else selection_seeds(
        preset.protocol, arm_seeds(preset.protocol, arms[arm], preset.protocol.seeds))
    info = select_peak(preset, root, arm, seed, seeds, late)
    write_json_atomic(peak_file(root, preset, arm, seed), info, **STATE_JSON)
    over = f" (mean of seeds {info['seeds']})" if "seeds" in info else ""
    print(f"θ* of {arm} seed {seed}: step {info['step']} ({info['method']}{over}) -> {info['checkpoint']}")
    late = info.get("late")
    if late:
        print(f"late start of {arm} seed {seed}: " + (f"step {late['step']} -> {late['checkpoint']}"
                                                      if "step" in late
                                                       else f"none ({late['error']})"))
    return 0


def cmd_select_restart(preset: Preset, root: Path, seed: int, seeds: Optional[list[int]] = None,
                       source: str = RESTART_FROM) -> int:
    """restart.json of `source` (armor_reset_never: armor_restart's start) seed `seed`, from the mean curve
    over `seeds`."""
    arms = arm_definitions(preset.protocol)
    if not any(a.start == RESTART_START and a.restart_from == source for a in arms.values()):
        raise ExperimentError(f"select-restart: no arm of preset {preset.name} restarts from {source!r} "
                              f"(protocol.restart_within)")
    src = arms[source]
    seeds = seeds if seeds is not None else selection_seeds(
        preset.protocol, arm_seeds(preset.protocol, src, preset.protocol.seeds))
    info = select_restart(preset, root, seed, seeds, source)
    write_json_atomic(restart_file(root, preset, seed, source), info, **STATE_JSON)
    how = ("protocol.restart_step" if info.get("method") == "fixed"
           else f"mean of seeds {info['seeds']}")
    print(f"restart point of {src.name} seed {seed}: stage-2 step {info['stage2_step']} "
          f"(total {info['step']}, {how}) -> {info['checkpoint']}; {info['remaining']} steps left")
    return 0
