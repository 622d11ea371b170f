"""The rollout correction (algo.rollout_correction) through the real vLLM engine (its CPU build, float32, one
rank): a few steps with tis and with mis train (the weights move), log every rollout_is_* metric finite, and
those metrics agree with the logged logprob_mismatch on the same tokens. In float32 the engine and the trainer
differ by float rounding only (measured: logprob_mismatch 7e-8 to 2e-7, |log ρ| at most 6e-6), so C = 1 + 1e-6
makes the truncation and the masking bite on some tokens (measured: up to 2.5% truncated, 3.8% masked a step)
while leaving most to train on."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "reproduce" / "presets" / "smoke.yaml"
C = 1.000001
KEYS = ("rollout_is_mean", "rollout_is_max", "rollout_is_min", "rollout_is_weight_mean",
        "rollout_is_truncated_frac", "rollout_is_masked_frac", "logprob_mismatch")
TOL = 1e-10          # the metrics are float64 sums of float32-exact log-prob differences


def train(world: Path, out: Path, mode: str) -> list[dict]:
    cmd = [sys.executable, "-m", "armor.train", "--config", str(SMOKE), f"model.path={world / 'base_model'}",
           f"data.train={world / 'data' / 'train.jsonl'}", "schedule.validate_every=0",
           "validation.benchmarks=[]", f"output_dir={out}", "rollout.engine=vllm",
           "rollout.enforce_eager=true", "schedule.total_steps=3", "schedule.save_every=3",
           f"algo.rollout_correction.mode={mode}", f"algo.rollout_correction.threshold={C}"]
    r = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "ARMOR_PROGRESS": "0", "PYTHONUNBUFFERED": "1"},
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


# "mis" behind -m slow: both modes take the same path through vLLM's log-probs; each mode's arithmetic is
# checked on one process in the default suite (tests/integration/test_rollout_correction.py)
@pytest.mark.parametrize("mode", ["tis", pytest.param("mis", marks=pytest.mark.slow)])
def test_rollout_correction_trains_through_vllm_and_its_metrics_match_the_mismatch(mode, vllm_world,
                                                                                   tmp_path):
    out = tmp_path / mode
    rows = train(vllm_world, out, mode)
    assert len(rows) == 3 and all(r["prompts_kept"] > 0 for r in rows)
    base = load_file(str(vllm_world / "base_model" / "model.safetensors"))
    trained = load_file(str(out / "checkpoints" / "step_000003" / "model.safetensors"))
    assert max(float((trained[k] - base[k]).abs().max()) for k in base) > 1e-4      # the weights move
    cut_key = "rollout_is_truncated_frac" if mode == "tis" else "rollout_is_masked_frac"
    other = "rollout_is_masked_frac" if mode == "tis" else "rollout_is_truncated_frac"
    for r in rows:
        assert all(math.isfinite(r[k]) for k in KEYS), r
        mm, f, hi, lo = r["logprob_mismatch"], r[cut_key], r["rollout_is_max"], r["rollout_is_min"]
        mean, wmean = r["rollout_is_mean"], r["rollout_is_weight_mean"]
        big = max(math.log(hi), -math.log(lo))            # M = max_t |log ρ_t| over the same tokens
        assert 0 < mm <= big + TOL < 1e-4, r              # a mean of |log ρ| is at most its max; fp32: tiny
        # |ρ − 1| ≤ |log ρ|·(e^M − 1)/M for |log ρ| ≤ M (convexity), so |mean ρ − 1| ≤ mismatch·(e^M − 1)/M
        assert abs(mean - 1) <= mm * math.expm1(big) / big + TOL, r
        assert r[other] == 0.0 and 0 <= f < 1
        if mode == "tis":                                 # w = min(ρ, C): the cut tokens are those above C
            assert (f > 0) == (hi > C), r
            assert 0 <= mean - wmean <= f * (hi - C) + TOL, r
        else:                                             # w = ρ inside [1/C, C], 0 outside
            assert (f > 0) == (big > math.log(C)), r
            assert f * math.log(C) <= mm + TOL, r         # every masked token has |log ρ| > log C
            assert f * lo - TOL <= mean - wmean <= f * hi + TOL, r       # the masked tokens' ρ, removed
    assert any(r[cut_key] > 0 for r in rows), rows       # the correction did cut somewhere
