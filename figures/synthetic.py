"""A synthetic but realistic results folder, as the driver's collect writes one (results.parquet,
steps.parquet, results.meta.json), for the tests of this package and for trying the figures without runs:

    python -m figures.synthetic /tmp/demo/runs/tiny && python -m figures --results
    /tmp/demo/runs/tiny/results.parquet --out /tmp/demo/fig

Shapes follow the paper's story: DAPO rises, peaks at θ* and (collapse=True) falls while its training reward
keeps rising; ARMOR rises past the peak; anchor-only and β = 1 stay flat; mix-only peaks higher then
collapses; resets beat "never"; OPD/MOPD stay below ARMOR. Nothing here is a measurement.
"""
from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path
from typing import Optional, Sequence

import pandas as pd

from common.results import META_NAME, STEPS_NAME

MATH = ("aime24", "aime25", "amc")
GENERAL = ("gpqa_diamond", "mmlu_pro")
BENCH_OFFSET = {"aime24": 0.0, "aime25": -0.12, "amc": 0.3, "gpqa_diamond": 0.02, "mmlu_pro": 0.05}

# arm: (start, kind, params) ; start "theta" | "late" | "qae_theta" | 0
ALL_ARMS = ["dapo", "dapo_cont", "armor", "anchor_only", "kl_k3_b1e-2", "kl_k3_b1", "kl_k2_b1e-2", "kl_k2_b1",
            "mix_a0.9", "mix_a0.8", "anchor_static_clip", "anchor_offpolicy", "armor_reset_never",
            "armor_reset_20", "armor_reset_40", "armor_restart", "armor_late", "dapo_late", "opd", "mopd",
            "qae", "qae_cont", "qae_armor_reset_never", "qae_armor_reset_20", "armor_tau1",
            "armor_tau1_until40", "clip_expand"]


# what the driver's results.meta.json says of each arm (reproduce/jobs/collect.py arm_facts): stage, baseline,
# start, and the sweep (family, value) it belongs to
ARM_FACTS = {
    "dapo": (1, "dapo", "base", None), "qae": (1, "qae", "base", None),
    "dapo_cont": (2, "dapo", "peak", None), "armor": (2, "dapo", "peak", None),
    "anchor_only": (2, "dapo", "peak", None),
    "kl_k3_b1e-2": (2, "dapo", "peak", ("kl_k3", 1e-2)), "kl_k3_b1": (2, "dapo", "peak", ("kl_k3", 1.0)),
    "kl_k2_b1e-2": (2, "dapo", "peak", ("kl_k2", 1e-2)), "kl_k2_b1": (2, "dapo", "peak", ("kl_k2", 1.0)),
    "mix_a0.9": (2, "dapo", "peak", ("mix", 0.9)), "mix_a0.8": (2, "dapo", "peak", ("mix", 0.8)),
    "anchor_static_clip": (2, "dapo", "peak", None), "anchor_offpolicy": (2, "dapo", "peak", None),
    "armor_reset_never": (2, "dapo", "peak", ("reset", None)),
    "armor_reset_20": (2, "dapo", "peak", ("reset", 20.0)),
    "armor_reset_40": (2, "dapo", "peak", ("reset", 40.0)),
    "armor_restart": (2, "dapo", "restart", None),
    "armor_late": (2, "dapo", "late", None), "dapo_late": (2, "dapo", "late", None),
    "opd": (2, "dapo", "peak", None), "mopd": (2, "dapo", "peak", None),
    "qae_cont": (2, "qae", "peak", None), "qae_armor_reset_never": (2, "qae", "peak", ("qae_armor", None)),
    "qae_armor_reset_20": (2, "qae", "peak", ("qae_armor", 20.0)),
    "armor_tau1": (2, "dapo", "peak", None), "armor_tau1_until40": (2, "dapo", "peak", ("tau1_until", 40.0)),
    "clip_expand": (2, "dapo", "peak", None),
}
# what the driver's results.meta.json lists each panel of Figs. 1-7 drawing (reproduce/matrix/arms.py
# figure_panels of the synthetic protocol; tests/unit/test_matrix.py holds the two equal)
FIGURE_PANELS = {
    "fig1": {"reward": ["dapo"], "length": ["dapo"],
             "validation": ["dapo", "dapo_cont", "anchor_only", "armor"]},
    "fig2": {"a": ["dapo_cont", "kl_k3_b1e-2", "kl_k3_b1"], "b": ["dapo_cont", "kl_k3_b1e-2", "kl_k3_b1"]},
    "fig3": {"a": ["dapo_cont", "mix_a0.9", "mix_a0.8"],
             "b": ["anchor_only", "anchor_static_clip", "anchor_offpolicy"],
             "c": ["armor", "dapo_cont", "armor_late", "dapo_late"]},
    "fig4": {"a": ["armor_reset_never", "armor_reset_20", "armor_reset_40", "armor_restart"]},
    "fig5": {"a": ["dapo_cont", "kl_k2_b1e-2", "kl_k2_b1"]},
    "fig6": {"a": ["qae", "qae_cont", "qae_armor_reset_never", "qae_armor_reset_20"]},
    "fig7": {"a": ["dapo_cont", "armor_tau1", "armor_tau1_until40", "clip_expand"]},
}
KL_BETA = {"kl_k3_b1e-2": 1e-2, "kl_k3_b1": 1.0, "kl_k2_b1e-2": 1e-2, "kl_k2_b1": 1.0}


def _shape(arm: str, t: float, collapse: bool) -> float:
    """Validation (fraction) of a stage-2 arm, t = stage-2 progress in [0, 1], starting at 0."""
    fall = (lambda d: -d * t) if collapse else (lambda d: 0.0)
    rise = lambda h: h * (1 - math.exp(-4 * t))  # noqa: E731
    hump = lambda h, d: h * math.sin(math.pi * min(t, 0.5)) - (d * max(0.0, t - 0.4) / 0.6)  # noqa: E731
    if arm in ("dapo_cont", "dapo_late", "qae_cont"):
        return fall(0.10)
    family = (ARM_FACTS[arm][3] or ("",))[0]
    if family in ("kl_k3", "kl_k2") and KL_BETA[arm] == 1.0:
        return 0.004 * math.sin(6 * t)
    if family in ("kl_k3", "kl_k2"):
        return fall(0.08) if t > 0.4 else 0.01 * t
    if family == "mix":
        return hump(0.03, 0.10 if collapse else 0.0)
    if arm in ("anchor_only", "anchor_static_clip", "anchor_offpolicy"):
        return -0.005 * t
    if arm == "armor_reset_never":
        return rise(0.02)
    if arm in ("opd", "mopd"):
        return rise(0.005)
    if arm == "armor_tau1":
        return hump(0.04, 0.06)
    if arm == "clip_expand":
        return hump(0.02, 0.04) + 0.01 * math.sin(12 * t)
    if arm == "armor_restart":   # t from the restart point: never's value there, then a higher rise
        return 0.02 * (1 - math.exp(-4 / 3)) + rise(0.04)
    return rise(0.05)  # armor, armor_reset_<τ>, armor_late, qae_armor_*, armor_tau1_until*


def make_synthetic(root, preset: str = "tiny", model: str = "tiny-lm", arms: Optional[Sequence[str]] = None,
                   seeds: Sequence[int] = (0, 1), val_bench: str = "tiny_val", val_k: int = 4,
                   theta: int = 30, stage1: int = 60, stage2: int = 60, every: int = 5, eval_every: int = 10,
                   collapse: bool = True, eval_benches: Sequence[str] = MATH + GENERAL,
                   kl_after_steps: int = 20, write_metrics: bool = True, late: Optional[int] = None,
                   qae_theta: Optional[int] = None, table_steps: Optional[dict] = None,
                   claims: Optional[dict] = None) -> Path:
    """Write runs/<preset>-like folder `root` and return the results.parquet path. `table_steps`: arm -> the
    paper's table step the driver would record (protocol.table_steps); `claims`: the claims register as the
    driver records it (results.meta.json `claims`), none by default."""
    root = Path(root)
    arms = list(ALL_ARMS if arms is None else arms)
    late = late if late is not None else theta + 15
    qae_theta = qae_theta if qae_theta is not None else theta + 5
    protocol = {"peak_step": None, "late_start_step": late, "qae_peak_step": None,
                "kl_after_steps": kl_after_steps, "kl_betas": [1e-2, 1.0], "alpha_sweep": [0.9, 0.8],
                "reset_sweep": [20, 40], "qae_reset_sweep": [20], "qwen3_tau1_until": [40],
                "stage1_steps": stage1, "stage2_steps": stage2}
    rows, step_rows = [], []
    # the matrix (every arm the synthetic protocol has), as the driver records it; starts only where run
    facts = {a: {"stage": st, "baseline": base, "start": kind, "figures": [], "alias_of": None,
                 "sweep": None if sw is None else {"family": sw[0], "value": sw[1]},
                 "table_step": (table_steps or {}).get(a), "starts": {}, "teacher_is_start": False}
             for a, (st, base, kind, sw) in ARM_FACTS.items()}
    for arm in arms:
        stage, baseline, kind, _ = ARM_FACTS[arm]
        if stage == 1:
            start, n_steps = 0, stage1
        elif kind == "late":
            start, n_steps = late, stage2
        elif kind == "restart":            # from armor_reset_never's checkpoint a third into stage 2
            start, n_steps = theta + stage2 // 3, stage2 - stage2 // 3
        elif baseline == "qae":
            start, n_steps = qae_theta, stage2
        else:
            start, n_steps = theta, stage2
        facts[arm]["starts"] = {str(x): start for x in seeds}
        for seed in seeds:
            rng = random.Random(f"{arm}-{seed}")
            bias = (seed - (len(seeds) - 1) / 2) * 0.006

            def val(step: int) -> float:
                if arm in ("dapo", "qae"):
                    peak = theta if arm == "dapo" else qae_theta
                    base = 0.15 + 0.25 * min(step, peak) / peak
                    if step > peak and collapse:
                        base -= 0.10 * (step - peak) / (stage1 - peak)
                    return base + bias
                at_start = 0.40 if start != late else (0.40 - (0.10 * (late - theta) / (stage1 - theta)
                                                              if collapse else 0.0))
                return at_start + _shape(arm, (step - start) / n_steps, collapse) + bias

            for step in range(start, start + n_steps + 1, every):
                rows.append(dict(preset=preset, model=model, arm=arm, seed=seed, step=step,
                                 benchmark=val_bench, metric=f"avg@{val_k}", k=val_k,
                                 value=round(val(step) + rng.gauss(0, 0.002), 5), n=val_k,
                                 source="validation"))
            for step in range(start, start + n_steps + 1, eval_every):
                for b in eval_benches:
                    v = min(0.99, max(0.01, val(step) + BENCH_OFFSET.get(b, 0.0)))
                    k = 32 if b not in GENERAL else 8
                    rows.append(dict(preset=preset, model=model, arm=arm, seed=seed, step=step, benchmark=b,
                                     metric=f"avg@{k}", k=k, value=round(v, 5), n=k, source="eval"))
                    if b in MATH:
                        rows.append(dict(preset=preset, model=model, arm=arm, seed=seed, step=step,
                                         benchmark=b, metric="pass@16", k=16,
                                         value=round(min(0.99, v + 0.2), 5), n=32, source="eval"))
            if not write_metrics:
                continue
            beta = KL_BETA.get(arm, 0.0)
            for s in range(1, n_steps + 1):
                total = start + s
                reward = -0.4 + 0.9 * total / (stage1 + stage2) + rng.gauss(0, 0.01)
                kl_scale = (total - start) / n_steps if start else 0.0
                kl_r = (0.02 * kl_scale + 1e-4) / (1 + 200 * beta)
                kl_f = (0.025 * kl_scale + 1e-4) / (1 + 20 * beta)
                step_rows.append({"arm": arm, "seed": seed, "step": total, "local_step": s,
                                  "reward_mean": reward, "accuracy": (reward + 1) / 2,
                                  "response_length": 300 + 150 * total / (stage1 + stage2), "entropy": 0.5,
                                  "clipfrac": 0.01, "kl_reverse": kl_r, "kl_forward": kl_f,
                                  "prompts_drawn": 64, "prompts_kept": 32, "time_step": 1.0})
    df = pd.DataFrame(rows)
    root.mkdir(parents=True, exist_ok=True)
    path = root / "results.parquet"
    df.to_parquet(path, index=False)
    if step_rows:
        pd.DataFrame(step_rows).to_parquet(root / STEPS_NAME, index=False)
    meta = {"preset": preset, "model": model, "protocol": protocol, "seeds": list(seeds),
            "validation_benchmark": val_bench, "arms": facts, "figure_panels": FIGURE_PANELS, "world": {},
            "live_logs": []}
    if claims is not None:
        meta["claims"] = claims
    (root / META_NAME).write_text(json.dumps(meta, indent=1))
    return path


if __name__ == "__main__":
    print(make_synthetic(sys.argv[1] if len(sys.argv) > 1 else "runs/synthetic"))
