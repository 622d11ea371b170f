"""The rollout correction (algo.rollout_correction, armor.objectives.rollout_correction) through the
trainer on the smoke preset: with the HF engine in float32 the engine's log-probs are the trainer's up to
rounding, so a run with tis or mis equals one without; an engine whose log-probs are off by a known amount is
truncated or masked on exactly the tokens it is off on; anchors are never corrected; two ranks log what one
process does."""
import json
import math
from array import array
from pathlib import Path

import pytest
from safetensors.torch import load_file

import armor.trainer as trainer_module
from armor.config import load_config
from armor.trainer import train

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "reproduce" / "presets" / "smoke.yaml"
QUIET = ("schedule.validate_every=0", "validation.benchmarks=[]")
TIS = ("algo.rollout_correction.mode=tis", "algo.rollout_correction.threshold=2")
MIS = ("algo.rollout_correction.mode=mis", "algo.rollout_correction.threshold=2")


def run(world: Path, out: Path, *extra: str) -> list[dict]:
    train(load_config(SMOKE, ["model.path=" + str(world / "base_model"),
                              "data.train=" + str(world / "data" / "train.jsonl"), f"output_dir={out}",
                              *QUIET, *extra]))
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]


def weights(out: Path, step: int) -> dict:
    return load_file(str(out / "checkpoints" / f"step_{step:06d}" / "model.safetensors"))


def max_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def test_with_the_hf_engine_a_corrected_run_equals_an_uncorrected_one_and_anchors_are_left_alone(world,
                                                                                                 tmp_path):
    """ARMOR without resets, 3 steps: from step 2 on θold has moved away from πref (kl_reverse > 0.01), and
    the anchors' engine log-probs are πref's, so an anchor in the correction would put ρ = πθold/π_rollout
    far from 1 (measured: max 1.77 at step 2, 3.9 at step 3, with the anchor rows in the mask). On the
    on-policy tokens ρ is 1 to float rounding (measured within 6e-6), so every step's metrics agree to 1e-5
    and the weights after 3 steps to 5e-5 (measured 1.3e-5; they move ~6e-3; a rerun's are bit-equal)."""
    armor = ("schedule.total_steps=3", "schedule.save_every=3", "algo.anchor.enabled=true",
             "algo.mix.variant=mixed", "algo.mix.alpha=0.875")
    off = run(world, tmp_path / "off", *armor)
    assert all("rollout_is_mean" not in r for r in off)
    w_off = weights(tmp_path / "off", 3)
    assert max_diff(w_off, load_file(str(world / "base_model" / "model.safetensors"))) > 1e-3
    for name, mode in (("tis", TIS), ("mis", MIS)):
        rows = run(world, tmp_path / name, *armor, *mode)
        assert len(rows) == len(off) == 3 and rows[-1]["kl_reverse"] > 0.01
        for x, y in zip(off, rows):
            assert (x["prompts_kept"], x["anchors"]) == (y["prompts_kept"], y["anchors"]) and y["anchors"] > 0
            for k in ("loss", "pg_loss", "grad_norm", "entropy", "clipfrac", "kl_reverse", "reward_mean"):
                assert y[k] == pytest.approx(x[k], abs=1e-5), (name, k)
            for k in ("rollout_is_mean", "rollout_is_max", "rollout_is_min", "rollout_is_weight_mean"):
                assert y[k] == pytest.approx(1.0, abs=1e-4), (name, k, y[k])
            assert y["rollout_is_truncated_frac"] == y["rollout_is_masked_frac"] == 0.0
        assert max_diff(weights(tmp_path / name, 3), w_off) <= 5e-5, name


def test_an_engine_off_by_a_known_amount_is_truncated_or_masked_on_exactly_those_tokens(world, tmp_path,
                                                                                        monkeypatch):
    """The engine reports every even response position's log-prob 0.5 lower than it is: there ρ = e^0.5 =
    1.65 > C = 1.5, elsewhere ρ = 1 (to rounding). On step 1 (the same samples in every run) the share p of
    such tokens is 2·logprob_mismatch; tis truncates exactly them (w = 1.5: weight mean 1 + 0.5·p), mis masks
    exactly them (weight mean 1 − p), and the updates differ from an uncorrected run's. Sequence level:
    every response's ρ is e^(0.5·its even positions) > 1.5, so mis masks every token and the gradient is 0."""
    honest = trainer_module.engine_logprobs

    def lowered(ro):
        return [array("f", [x - 0.5 if t % 2 == 0 else x for t, x in enumerate(lp)]) for lp in honest(ro)]
    monkeypatch.setattr(trainer_module, "engine_logprobs", lowered)
    base = ("schedule.total_steps=2", "rollout.max_logprob_mismatch=1e9")     # else armor.health stops it
    c15 = ("algo.rollout_correction.threshold=1.5",)
    off = run(world, tmp_path / "off", *base)
    tis = run(world, tmp_path / "tis", *base, "algo.rollout_correction.mode=tis", *c15)
    mis = run(world, tmp_path / "mis", *base, "algo.rollout_correction.mode=mis", *c15)
    p = 2 * off[0]["logprob_mismatch"]
    assert 0.5 <= p < 1 and tis[0]["logprob_mismatch"] == off[0]["logprob_mismatch"]
    t, m = tis[0], mis[0]
    assert t["rollout_is_truncated_frac"] == pytest.approx(p, abs=1e-5) and t["rollout_is_masked_frac"] == 0.0
    assert m["rollout_is_masked_frac"] == pytest.approx(p, abs=1e-5) and m["rollout_is_truncated_frac"] == 0.0
    assert t["rollout_is_max"] == pytest.approx(math.exp(0.5), rel=1e-5)
    assert t["rollout_is_min"] == pytest.approx(1.0, abs=1e-4)
    assert t["rollout_is_mean"] == pytest.approx(1 + p * (math.exp(0.5) - 1), abs=1e-5)
    assert t["rollout_is_weight_mean"] == pytest.approx(1 + 0.5 * p, abs=1e-5)
    assert m["rollout_is_weight_mean"] == pytest.approx(1 - p, abs=1e-5)
    w_off = weights(tmp_path / "off", 2)
    assert max_diff(weights(tmp_path / "tis", 2), w_off) > 1e-4
    assert max_diff(weights(tmp_path / "mis", 2), w_off) > 1e-4
    seq = run(world, tmp_path / "seq", "schedule.total_steps=1", "rollout.max_logprob_mismatch=1e9",
              "algo.rollout_correction.mode=mis", *c15, "algo.rollout_correction.level=sequence")
    assert seq[0]["rollout_is_masked_frac"] == 1.0 and seq[0]["rollout_is_weight_mean"] == 0.0
    assert seq[0]["grad_norm"] == 0.0 and seq[0]["pg_loss"] == 0.0


# an engine whose log-probs are off by row-dependent amounts (a hash of the response in [0, 1): u, v): even
# positions 0.3·u lower (ρ = e^(0.3·u) > 1), odd ones 0.3·v higher (ρ < 1), so the step's max and min ρ are
# some rows', held by one rank or the other
SKEWED = """
import sys
from array import array
import armor.trainer as T
honest = T.engine_logprobs


def skew(ids, lp):
    u, v = (sum(ids) * 31 + len(ids)) % 97 / 97, (sum(ids) * 17 + 3 * len(ids)) % 89 / 89
    return array("f", [x - 0.3 * u if t % 2 == 0 else x + 0.3 * v for t, x in enumerate(lp)])


T.engine_logprobs = lambda ro: [skew(ids, lp) for ids, lp in zip(ro.response_ids, honest(ro))]
from armor.train import main
sys.exit(main(sys.argv[1:]))
"""


# "mis" behind -m slow: both modes log through the same all-rank reductions; each mode's arithmetic on one
# process: the known-amount test above
@pytest.mark.parametrize("mode", ["tis", pytest.param("mis", marks=pytest.mark.slow)])
def test_two_ranks_log_the_correction_of_one_process(mode, world, tmp_path, monkeypatch):
    """Each rank holds its own rows' θold log-probs: the weight means are over all ranks' tokens and the max /
    min over all ranks' rows, as one process (rollout.shards=2, half-mini-batch micro-batches: the same
    samples and partition) computes them; the updates agree as tests/integration/test_distributed.py's do."""
    from toy_runs import hf_weights, run as run_cmd, train_cmd
    # both on HF's forward, as FSDP2 computes (tests/integration/test_distributed.py)
    script = tmp_path / "skewed.py"
    script.write_text(SKEWED)
    args = ("compute.fast=off", "schedule.total_steps=2", "schedule.save_every=2", *QUIET, "rollout.shards=2",
            "batch.micro_batch_responses=4", "rollout.max_logprob_mismatch=1e9", "parallel.timeout_s=600",
            f"algo.rollout_correction.mode={mode}", "algo.rollout_correction.threshold=1.1")
    out = {}
    for ranks in (1, 2):
        out[ranks] = tmp_path / f"r{ranks}"
        r = run_cmd(train_cmd(world, out[ranks], *args, ranks=ranks, entry=(str(script),)), threads=1)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    one, two = ([json.loads(x) for x in (out[n] / "metrics.jsonl").read_text().splitlines()] for n in (1, 2))
    assert len(one) == len(two) == 2
    cut = "rollout_is_truncated_frac" if mode == "tis" else "rollout_is_masked_frac"
    assert 0 < one[0][cut] < 1 and one[0]["rollout_is_max"] > 1.1 and one[0]["rollout_is_min"] < 1
    for a, b in zip(one, two):
        assert a["prompts_kept"] == b["prompts_kept"] > 0
        for k in ("rollout_is_mean", "rollout_is_max", "rollout_is_min", "rollout_is_weight_mean",
                  "rollout_is_truncated_frac", "rollout_is_masked_frac", "logprob_mismatch", "loss"):
            assert b[k] == pytest.approx(a[k], rel=1e-5, abs=1e-6), (a["step"], k, a[k], b[k])
    wa, wb = (hf_weights(out[n] / "checkpoints" / "step_000002") for n in (1, 2))
    assert max_diff(wa, wb) <= 1e-5
