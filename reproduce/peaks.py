"""θ* (the peak a stage-2 arm starts from): read the validation curve, smooth it, choose, keep it in peak.json.

θ* of a stage-1 baseline = protocol.peak_step (qae_peak_step for QAE) if set, else the argmax of the
validation curve smoothed over peak_selection_window points, among steps that have a checkpoint; written to
runs/<preset>/<baseline>/seed<s>/peak.json by `python -m reproduce.experiments select-peak`. A stage-2 arm
starts from it (`start_point`), armor_late/dapo_late from the DAPO checkpoint at late_start_step.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

from common.jsonl import read_json, read_jsonl
from common.layout import list_checkpoints
from reproduce.arms import Arm
from reproduce.presets import ExperimentError, Preset, ckpt_dir, fixed_peak, run_dir


def validation_benchmark(preset: Preset) -> Optional[str]:
    b = preset.cfg.validation.benchmarks
    return b[0].split("=", 1)[0] if b else None


def read_validation(run: Path, benchmark: Optional[str] = None) -> list[tuple[int, float]]:
    """(run-local step, value) of one benchmark (default: the first in the file), last row per step wins."""
    rows = read_jsonl(Path(run) / "validation.jsonl")
    if not rows:
        return []
    bench = benchmark if benchmark and any(r.get("benchmark") == benchmark for r in rows) else rows[0].get("benchmark")
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


def select_peak(preset: Preset, root: Path, baseline: str, seed: int) -> dict:
    run = run_dir(root, preset, baseline, seed)
    fixed = fixed_peak(preset, baseline)
    bench = validation_benchmark(preset)
    info = choose_peak(read_validation(run, bench), list_checkpoints(run), preset.protocol.peak_selection_window,
                       fixed)
    info.update(baseline=baseline, seed=seed, benchmark=bench, checkpoint=str(ckpt_dir(run, info["step"])),
                time=time.time())
    return info


def peak_file(root: Path, preset: Preset, baseline: str, seed: int) -> Path:
    return run_dir(root, preset, baseline, seed) / "peak.json"


def read_peak(root: Path, preset: Preset, baseline: str, seed: int) -> Optional[dict]:
    try:
        return json.loads(peak_file(root, preset, baseline, seed).read_text())
    except (OSError, ValueError):
        return None


def start_point(preset: Preset, root: Path, arm: Arm, seed: int) -> Optional[dict]:
    """{step, checkpoint} a stage-2 arm starts from, or None while θ* is not chosen yet."""
    if arm.start == "late":
        step = preset.protocol.late_start_step
        return {"step": step, "checkpoint": str(ckpt_dir(run_dir(root, preset, "dapo", seed), step))}
    pk = read_peak(root, preset, arm.baseline, seed)
    if pk is None:
        return None
    return {"step": int(pk["step"]), "checkpoint": pk["checkpoint"]}


def peak_done(pf: Path, fixed: Optional[int]) -> bool:
    """peak.json is written, names the fixed step if the protocol fixes one, and its checkpoint exists."""
    d = read_json(pf)
    return bool(d) and (fixed is None or int(d.get("step", -1)) == fixed) and Path(d.get("checkpoint", "")).exists()
