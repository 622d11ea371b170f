"""The evaluation noise floor of the verdicts (docs/verdicts.md): θ* of dapo (the plan's first seed), the
checkpoint every stage-2 arm starts from, validated `protocol.noise_floor_repeats` times with different
sampling seeds, exactly as the runs validate (armor.trainer.Trainer.validate, the preset's validation
settings).

    python -m reproduce.jobs noise-floor --preset tiny --root runs --seed 0
    -> runs/<preset>/_noise_floor/noise_floor.json   (collect copies it beside results.parquet)

The floor is the standard deviation of those k values (n - 1 denominator): the spread of one validation of
fixed weights.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Optional

from armor.config import load_config
from common.jsonl import read_json, write_json_atomic
from common.results import NOISE_NAME
from reproduce.jobs.peaks import start_point
from reproduce.matrix.arms import arm_definitions
from reproduce.matrix.overrides import train_overrides
from reproduce.matrix.presets import STATE_JSON, ExperimentError, Preset, preset_root

NOISE_DIR = "_noise_floor"
BASE_ARM = "dapo_cont"       # its start (θ* of dapo) is the checkpoint measured; its settings are the runs'
SEED_BASE = 10_000           # the re-validations' sampling seeds: SEED_BASE + i (no run validates with these)


def applies(preset: Preset, arms) -> bool:
    """The plan measures a floor: repeats set and the arm whose start is θ* in the plan."""
    return preset.protocol.noise_floor_repeats > 0 and BASE_ARM in arms


def result_path(preset: Preset, root: Path) -> Path:
    return preset_root(root, preset) / NOISE_DIR / NOISE_NAME


def noise_done(preset: Preset, root: Path, seed: int) -> bool:
    d = read_json(result_path(preset, root))
    return bool(d) and d.get("repeats") == preset.protocol.noise_floor_repeats and d.get("seed") == seed


def summarize(values: list[float]) -> dict:
    """mean, sd (n - 1 denominator), range of k validation values."""
    n = len(values)
    m = sum(values) / n
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1)) if n > 1 else None
    return {"mean": m, "sd": sd, "range": max(values) - min(values)}


def measure(preset: Preset, root: Path, seed: int, fetch_dir: Optional[Path] = None) -> dict:
    """Validate θ* of dapo seed `seed` noise_floor_repeats times; write and return noise_floor.json."""
    from armor.trainer import Trainer
    k = preset.protocol.noise_floor_repeats
    arm = arm_definitions(preset.protocol).get(BASE_ARM)
    if arm is None or k < 2:
        raise ExperimentError(f"noise floor: needs arm {BASE_ARM} and protocol.noise_floor_repeats >= 2 (is "
                              f"{k})")
    start = start_point(preset, root, arm, seed)
    if start is None or not Path(start["checkpoint"]).is_dir():
        raise ExperimentError(f"noise floor: θ* of {arm.baseline} seed {seed} is not chosen or its "
                              f"checkpoint is missing ({start})")
    out = preset_root(root, preset) / NOISE_DIR
    ov = train_overrides(preset, root, arm, seed, start, fetch_dir) + [f"output_dir={out / 'run'}",
                                                            f"name={preset.name}/noise_floor"]
    tr = Trainer(load_config(preset.path, ov)).start()
    bench = metric = None
    values, resolution = [], None
    for i in range(k):
        row = tr.validate(seed=SEED_BASE + i)[0]
        bench, metric = row["benchmark"], row["metric"]
        values.append(float(row["value"]))
        # the smallest change the score can show: one sample of one problem
        resolution = 1.0 / (int(row["n_problems"]) * int(row["k"]))
    result = {"arm": arm.baseline, "seed": seed, "step": int(start["step"]),
              "checkpoint": os.path.relpath(start["checkpoint"], preset_root(root, preset)),
              "benchmark": bench, "metric": metric, "repeats": k, "seeds": [SEED_BASE + i for i in range(k)],
              "values": values, "resolution": resolution, **summarize(values)}
    write_json_atomic(out / NOISE_NAME, result, **STATE_JSON)
    return result


def read_noise(path: Path) -> Optional[dict]:
    d = read_json(path)
    return d if isinstance(d, dict) and d.get("values") else None


def cmd_noise_floor(preset: Preset, root: Path, seed: int, fetch_dir: Optional[Path] = None) -> int:
    """The verdicts' noise floor (reproduce/jobs/noise.py)."""
    r = measure(preset, root, seed, fetch_dir)
    print(f"noise floor: {r['arm']} seed {seed} step {r['step']} validated {r['repeats']} times: "
          f"{r['benchmark']} {r['metric']} sd {r['sd']:.4f}, range {r['range']:.4f}, values "
          + ", ".join(f"{v:.3f}" for v in r["values"]))
    return 0
