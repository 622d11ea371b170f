"""armor.health: a run computing garbage stops with the metric, value, engine and step named, never DONE.
(The same with the real vLLM and the push that once left the tied lm_head random: tests/vllm_real.)"""
from pathlib import Path

import pytest
import torch

from armor.config import load_config
from armor.health import HealthMonitor, RunHealthError, mismatch_bound
from armor.trainer import Trainer

SMOKE = Path(__file__).resolve().parents[2] / "reproduce" / "presets" / "smoke.yaml"


def test_bounds_by_dtype_and_configured():
    assert mismatch_bound(None, "float32") == 1e-3 and mismatch_bound(None, "bfloat16") == 0.1
    assert mismatch_bound(0.5, "float32") == 0.5


def test_monitor_counts_consecutive_steps_without_a_kept_prompt():
    h = HealthMonitor(1e-3, 3, "hf")
    for step, kept in enumerate([0, 0, 2, 0, 0], 1):             # a kept prompt resets the count
        h.check({"step": step, "prompts_kept": kept, "logprob_mismatch": 5e-4})
    assert h.steps_without_kept == 2
    with pytest.raises(RunHealthError, match=r"step 6: prompts_kept 0 on 3 consecutive steps .*engine hf"):
        h.check({"step": 6, "prompts_kept": 0})
    h2 = HealthMonitor(1e-3, None, "hf")
    h2.load_state_dict(h.state_dict())
    assert h2.steps_without_kept == 3
    h2.check({"step": 7, "prompts_kept": 0})                      # null: never


@pytest.mark.parametrize("value", [2e-3, float("nan")])
def test_monitor_stops_on_a_mismatch_above_the_bound(value):
    with pytest.raises(RunHealthError, match=r"step 4: logprob_mismatch .* exceeds "
                                             r"rollout.max_logprob_mismatch 0.001 \(engine vllm\)"):
        HealthMonitor(1e-3, 5, "vllm").check({"step": 4, "prompts_kept": 3, "logprob_mismatch": value})


def _cfg(world, out, *extra):
    return load_config(SMOKE, ["model.path=" + str(world / "base_model"),
                               "data.train=" + str(world / "data" / "train.jsonl"),
                               f"validation.benchmarks=[toy_val={world / 'data' / 'validation.jsonl'}]",
                               "validation.max_problems=4", f"output_dir={out}", *extra])


def test_a_corrupted_push_stops_the_run_before_its_next_update(world, tmp_path, monkeypatch):
    """The HF engine handed weights other than the policy's (a corrupted push): step 1's logprob_mismatch
    stops the run; no step 2, no checkpoint, no DONE."""
    from common.rollout.hf import HFEngine
    push = HFEngine._push

    def corrupted(self, model):
        bad = type(model)(model.config)
        bad.load_state_dict(model.state_dict())
        with torch.no_grad():
            bad.lm_head.weight.add_(torch.randn_like(bad.lm_head.weight))
        push(self, bad.eval())
    monkeypatch.setattr(HFEngine, "_push", corrupted)
    out = tmp_path / "run"
    t = Trainer(_cfg(world, out))
    steps = []
    monkeypatch.setattr(Trainer, "update", lambda self, *a, real=Trainer.update: steps.append(self.step)
                        or real(self, *a))
    with pytest.raises(RunHealthError, match=r"step 1: logprob_mismatch .* \(engine hf\)"):
        t.fit()
    assert steps in ([], [0]) and not (out / "DONE").exists()
    assert not list((out / "checkpoints").glob("step_*")) if (out / "checkpoints").exists() else True
    t.grader.close()


def test_nothing_kept_stops_the_run(world, tmp_path, monkeypatch):
    """Every sample graded wrong: nothing is kept, and after rollout.max_steps_without_kept such steps the run
    stops (the mismatch is still measured on the step's first samples, and is float rounding here)."""
    monkeypatch.setattr(Trainer, "_grade", lambda self, texts, golds, tm: [False] * len(texts))
    out = tmp_path / "run"
    t = Trainer(_cfg(world, out, "rollout.max_steps_without_kept=2", "schedule.validate_every=0"))
    with pytest.raises(RunHealthError, match=r"step 2: prompts_kept 0 on 2 consecutive steps"):
        t.fit()
    assert not (out / "DONE").exists()
    t.health.max_steps_without_kept = None
    row = t.train_step()          # a third step: kept nothing, its mismatch measured on the first samples
    assert row["prompts_kept"] == 0 and row["logprob_mismatch"] < 1e-4
    t.grader.close()
