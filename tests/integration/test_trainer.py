"""The trainer on the smoke preset: every arm runs; anchors, resets and πref behave; resume is exact."""
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from armor.config import load_config
from common.yaml_config import ConfigError
from armor.trainer import Trainer, PhaseTimes, RolloutStats, train

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "reproduce" / "presets" / "smoke.yaml"


def smoke(world: Path, out: Path, *extra: str):
    return ["model.path=" + str(world / "base_model"), "data.train=" + str(world / "data" / "train.jsonl"),
            f"validation.benchmarks=[toy_val={world / 'data' / 'validation.jsonl'}]", f"output_dir={out}",
            *extra]


def rows(path: Path) -> list[dict]:
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


ARMS = {
    "dapo": [],
    "dapo_hf_forward": ["compute.fast=off"],        # HF's forward and decoding (the fast paths off)
    "grpo_kl_k3": ["algo.kl.coef=0.1", "algo.kl.estimator=k3", "algo.dynamic_sampling=false",
                   "algo.loss_agg=seq-mean-token-mean"],
    "kl_k2": ["algo.kl.coef=0.1", "algo.kl.estimator=k2"],
    "qae": ["algo.advantage=qae"],
    "anchor_only": ["algo.anchor.enabled=true"],
    "mix_only": ["algo.mix.variant=mixed", "algo.mix.alpha=0.8"],
    "armor": ["algo.anchor.enabled=true", "algo.mix.variant=mixed", "algo.mix.alpha=0.875",
              "algo.reference.reset.every=1"],
    "anchor_static_clip": ["algo.anchor.enabled=true", "algo.mix.variant=static_clip",
                           "algo.mix.alpha=0.875"],
    "anchor_offpolicy": ["algo.anchor.enabled=true", "algo.mix.variant=offpolicy_anchor"],
    "opd": ["algo.distill.mode=opd"],
    "mopd": ["algo.distill.mode=mopd"],
}


@pytest.mark.parametrize("arm", list(ARMS))
def test_each_arm_runs(arm, world, tmp_path):
    cfg = load_config(SMOKE, smoke(world, tmp_path / arm, "schedule.total_steps=2",
                                   "validation.max_problems=8", *ARMS[arm]))
    train(cfg)
    m = rows(tmp_path / arm / "metrics.jsonl")
    assert [r["step"] for r in m] == [1, 2]
    assert (tmp_path / arm / "DONE").is_file()
    assert any(r["prompts_kept"] > 0
               for r in m), "no prompt kept: the smoke world must have non-trivial accuracy"
    for r in m:
        for k in ("reward_mean", "kl_reverse", "kl_forward", "entropy", "loss"):
            if k in r:
                assert r[k] == r[k] and abs(r[k]) != float("inf"), (k, r[k])
    if "algo.anchor.enabled=true" in ARMS[arm]:
        assert all(r["anchors"] == r["prompts_kept"] for r in m)   # one anchor per kept group
    # the fast-path choice is in the run's config.yaml; numerics.json says what decode steps computed with
    mode = "off" if "compute.fast=off" in ARMS[arm] else "auto"
    assert load_config(tmp_path / arm / "config.yaml").compute.fast == mode
    assert json.loads((tmp_path / arm / "numerics.json").read_text())["decode_kernel"] == \
        {"off": "off", "auto": "torch"}[mode]


def test_anchors_are_correct_reference_samples(world, tmp_path, monkeypatch):
    """ARMOR's keep rule, applied by hand to what a step sampled: the kept groups are, in draw order, the
    first B prompts whose on-policy verdicts are not all equal AND that have a correct reference sample; each
    is its on-policy samples, then its first correct reference sample (the anchor), which the grader finds
    correct."""
    from common.grading import grade_one
    drawn, real = [], Trainer._sample_round

    def spy(self, which, pids, golds, n, seed, tm):
        out = real(self, which, pids, golds, n, seed, tm)
        drawn.append((which, pids, out))
        return out

    monkeypatch.setattr(Trainer, "_sample_round", spy)
    cfg = load_config(SMOKE, smoke(world, tmp_path / "a", "algo.anchor.enabled=true", "algo.anchor.ref_n=4",
                                   "batch.prompts_per_step=4", "rollout.max_rounds=5"))
    t = Trainer(cfg).start()
    groups = t.collect(PhaseTimes(), RolloutStats())
    assert groups, "no group kept"
    rounds = []          # each round's prompts, on-policy samples, its reference chunks' (prompt, samples)
    for which, pids, samples in drawn:
        if which == "policy":
            rounds.append((pids, samples, []))
        else:
            rounds[-1][2].extend((p, samples.prompt(j)) for j, p in enumerate(pids))
    expected = []
    for pids, on, sampled in rounds:
        for i, p in enumerate(pids):
            verdicts = on.correct[i * on.n:(i + 1) * on.n]
            mixed = True in verdicts and False in verdicts
            # lazy anchors sample the reference for mixed prompts only, in draw order
            ref = sampled.pop(0)[1] if mixed and sampled and sampled[0][0] is p else None
            if mixed and ref is not None and True in ref.correct:
                anchor = ref.responses[ref.correct.index(True)]
                expected.append((p, on.responses[i * on.n:(i + 1) * on.n] + [anchor]))
        assert not sampled                  # every reference sample belongs to a mixed prompt of its round
    assert [(g.prompt_ids, g.responses) for g in groups] == expected[:cfg.batch.prompts_per_step]
    G = cfg.batch.group_size
    for g in groups:
        assert g.is_anchor == [False] * (G - 1) + [True] and g.correct[-1] is True
        assert grade_one(t.tokenizer.decode(g.responses[-1], skip_special_tokens=True), g.gold).correct


def test_reference_reset_on_schedule(world, tmp_path):
    out = tmp_path / "r"
    cfg = load_config(SMOKE, smoke(world, out, "schedule.total_steps=5", "schedule.validate_every=0",
                                   "validation.benchmarks=[]", "algo.reference.reset.every=2",
                                   "algo.reference.reset.until_step=3", "algo.mix.variant=mixed",
                                   "algo.mix.alpha=0.9"))
    t = Trainer(cfg).start()
    t.fit()
    assert [r["reference_reset"] for r in rows(out / "metrics.jsonl")] == [False, True, False, False, False]
    assert t.models.reference_step == 2
    # πref holds θ_2: the checkpoint of step 2 has the same weights
    from common.models import load_model
    at2 = load_model(str(out / "checkpoints" / "step_000002"))
    for (k, a), b in zip(at2.state_dict().items(), t.models.reference.state_dict().values()):
        assert torch.equal(a, b), k


def _perturbed_copy(world: Path, dst: Path) -> Path:
    from common.models import load_model, load_tokenizer
    m = load_model(str(world / "base_model"))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    m.save_pretrained(dst)
    load_tokenizer(str(world / "base_model")).save_pretrained(dst)
    return dst


@pytest.mark.parametrize("extra", [["algo.kl.coef=0.5"], ["algo.mix.variant=mixed", "algo.mix.alpha=0.5"]],
                         ids=["kl", "mixed"])
def test_kl_and_mixed_arms_use_the_reference(extra, world, tmp_path, monkeypatch):
    import armor.trainer as tr
    ref = _perturbed_copy(world, tmp_path / "ref")
    seen = []
    real = tr.policy_loss

    def spy(*a, **kw):
        seen.append({**kw, "cfg": a[4]})        # (logp, old_logp, advantages, mask, LossConfig)
        return real(*a, **kw)

    monkeypatch.setattr(tr, "policy_loss", spy)
    cfg = load_config(SMOKE, smoke(world, tmp_path / "o", "schedule.total_steps=2",
                                   "schedule.validate_every=0", "validation.benchmarks=[]",
                                   f"algo.reference.path={ref}", *extra))
    t = Trainer(cfg).start()
    t.fit()
    assert seen and all(kw["ref_logp"] is not None for kw in seen)
    assert any(float(kw["ref_logp"].abs().sum()) > 0 for kw in seen)
    m = rows(tmp_path / "o" / "metrics.jsonl")
    assert any(r.get("kl_reverse", 0) > 1e-4 for r in m)   # πref is not the policy
    if "algo.kl.coef=0.5" in extra:
        assert all(kw["cfg"].kl_coef == 0.5 for kw in seen)
    else:
        assert all(kw["cfg"].ratio_variant == "mixed" and kw["cfg"].alpha == 0.5 for kw in seen)


def test_old_logprobs_are_the_pre_update_policy(world, tmp_path, monkeypatch):
    """θold's log-probs: the first mini-batch reuses its own forward pass (ratio exactly 1); every later
    mini-batch gets log-probs of the policy as it was before the step's first optimizer update."""
    import copy

    import armor.models as models
    import armor.trainer as tr
    from armor.policy import forward_logprobs
    calls, snapshots = [], []
    real_loss, real_fwd, real_update = tr.policy_loss, models.forward_logprobs, tr.Trainer.update

    def fwd(model, batch, *a, **kw):
        out = real_fwd(model, batch, *a, **kw)
        if torch.is_grad_enabled():
            calls.append({"batch": batch, "snapshot": snapshots[-1]})
        return out

    def loss(logp, old_logp, *a, **kw):
        calls[-1].update(logp=logp.detach().clone(), old_logp=old_logp.clone())
        return real_loss(logp, old_logp, *a, **kw)

    def update(self, groups, tm):
        snapshots.append(copy.deepcopy(self.models.policy))
        return real_update(self, groups, tm)

    monkeypatch.setattr(models, "forward_logprobs", fwd)
    monkeypatch.setattr(tr, "policy_loss", loss)
    monkeypatch.setattr(tr.Trainer, "update", update)
    cfg = load_config(SMOKE, smoke(world, tmp_path / "o", "schedule.total_steps=2",
                                   "schedule.validate_every=0", "validation.benchmarks=[]",
                                   "batch.micro_batch_responses=4"))
    assert cfg.batch.mini_batch_prompts < cfg.batch.prompts_per_step   # several updates per step
    Trainer(cfg).fit()
    firsts = 0
    for c in calls:
        if torch.equal(c["old_logp"], c["logp"]):
            firsts += 1
        with torch.no_grad():
            expect, _ = forward_logprobs(c["snapshot"].eval(), c["batch"], cfg.rollout.temperature)
        torch.testing.assert_close(c["old_logp"], expect, rtol=0, atol=1e-5)
    assert len(snapshots) == 2 and 2 <= firsts < len(calls)


def test_dapo_without_kl_monitor_skips_the_reference(world, tmp_path, monkeypatch):
    import armor.models as hosting
    real, models = hosting.forward_logprobs, []
    monkeypatch.setattr(hosting, "forward_logprobs", lambda m, *a,
                        **kw: models.append(m) or real(m, *a, **kw))
    cfg = load_config(SMOKE, smoke(world, tmp_path / "o", "schedule.total_steps=2",
                                   "schedule.validate_every=0", "validation.benchmarks=[]",
                                   "algo.reference.kl_monitor=false"))
    t = Trainer(cfg).start()
    t.fit()
    assert models and all(m is t.models.policy for m in models)
    assert not any("kl_reverse" in r for r in rows(tmp_path / "o" / "metrics.jsonl"))


def test_token_micro_batches_and_chunked_logprobs_change_no_value(world, tmp_path):
    """batch.micro_batch_tokens (rows packed by length, each micro-batch padded to its own longest) and
    batch.logprob_chunk_tokens (the lm_head in chunks, recomputed in backward) are memory and speed only: the
    same kept prompts and anchors, metrics within 3e-5 and weights within 1e-5 of the default path after 12
    AdamW updates (float rounding only: the default path itself moves 3.4e-6 when micro_batch_responses goes
    from 16 to 4; HF's forward moves grad_norm 4.7e-6 between the two paths, the lean forward 1.3e-5, its
    shared prompt tokens summing their rows' gradients in an order that follows the micro-batches; the
    weights move 1.1e-2 in all; a wrong normaliser or weight moves them by ~1e-3)."""
    from safetensors.torch import load_file
    common = ("schedule.total_steps=3", "schedule.validate_every=0", "validation.benchmarks=[]",
              "algo.anchor.enabled=true", "algo.mix.variant=mixed", "algo.mix.alpha=0.875", "batch.epochs=2")
    train(load_config(SMOKE, smoke(world, tmp_path / "a", *common)))
    train(load_config(SMOKE, smoke(world, tmp_path / "b", *common, "batch.micro_batch_tokens=150",
                                   "batch.logprob_chunk_tokens=7")))
    ra, rb = rows(tmp_path / "a" / "metrics.jsonl"), rows(tmp_path / "b" / "metrics.jsonl")
    assert len(ra) == len(rb) == 3
    for x, y in zip(ra, rb):
        assert (x["prompts_kept"], x["anchors"]) == (y["prompts_kept"], y["anchors"])
        for k in ("loss", "entropy", "clipfrac", "grad_norm", "kl_reverse", "reward_mean"):
            assert y[k] == pytest.approx(x[k], abs=3e-5), k
    wa = load_file(str(tmp_path / "a" / "checkpoints" / "step_000003" / "model.safetensors"))
    wb = load_file(str(tmp_path / "b" / "checkpoints" / "step_000003" / "model.safetensors"))
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) <= 1e-5


def test_contracts_list_every_metric_key_a_step_writes(world, tmp_path):
    """docs/CONTRACTS.md's metrics.jsonl keys are exactly those of a real ARMOR row (anchors, mixed ratio, KL
    monitor, a reset, a rollout correction): none undocumented, none documented that no row has."""
    import re
    text = (ROOT / "docs" / "CONTRACTS.md").read_text()
    block = text[text.index("<!-- metric-keys"):text.index("<!-- /metric-keys -->")].split("-->", 1)[1]
    documented = set(re.findall(r"`([a-z_]+)`", block))
    cfg = load_config(SMOKE, smoke(world, tmp_path / "c", "schedule.total_steps=1",
                                   "schedule.validate_every=0", "validation.benchmarks=[]",
                                   "algo.anchor.enabled=true", "algo.mix.variant=mixed",
                                   "algo.mix.alpha=0.875", "algo.reference.reset.every=1",
                                   "algo.rollout_correction.mode=tis", "algo.rollout_correction.threshold=2"))
    train(cfg)
    (row,) = rows(tmp_path / "c" / "metrics.jsonl")
    assert set(row) == documented, (sorted(set(row) - documented), sorted(documented - set(row)))


def test_missing_model_path_fails_before_work(world, tmp_path):
    out = tmp_path / "never"
    r = subprocess.run([sys.executable, "-m", "armor.train", "--config", str(SMOKE),
                        *smoke(world, out, "model.path=" + str(tmp_path / "nope"))],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "model.path" in r.stderr and "nope" in r.stderr
    assert not out.exists()
    r = subprocess.run([sys.executable, "-m", "armor.train", "--config", str(SMOKE),
                        *smoke(world, out, "algo.mix.alpha=2")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "algo.mix.alpha" in r.stderr and not out.exists()
    afile = tmp_path / "a_file"             # output_dir: an existing file is a clear error, not a traceback
    afile.write_text("x")
    r = subprocess.run([sys.executable, "-m", "armor.train", "--config", str(SMOKE), *smoke(world, afile)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and f"output_dir: {str(afile)!r} is an existing file" in r.stderr
    assert "Traceback" not in r.stderr and afile.read_text() == "x"


def test_rerun_after_done_is_a_noop(world, tmp_path):
    cfg = load_config(SMOKE, smoke(world, tmp_path / "d", "schedule.total_steps=2",
                                   "validation.max_problems=4"))
    train(cfg)
    before = (tmp_path / "d" / "metrics.jsonl").read_text()
    train(cfg)
    assert (tmp_path / "d" / "metrics.jsonl").read_text() == before


def _oracle_rollouts(monkeypatch):
    """Replace sampling and grading by an oracle: response j of prompt p from model m is correct by a fixed
    hash of (p, j, m), whatever the call it is sampled in. Returns the list of ("policy" | "ref", rows) of
    every generate call."""
    import hashlib

    from common.rollout import Rollout
    calls = []

    def generate(self, which, prompt_ids, n, seed, tm):
        kind = "ref" if which == "reference" else "policy"
        calls.append((kind, len(prompt_ids) * n))
        ro = Rollout()
        for i, p in enumerate(prompt_ids):
            for j in range(n):
                ro.prompt_index.append(i)
                ro.prompt_ids.append(p)
                ro.response_ids.append([j])
                ro.texts.append(f"{p}|{j}|{kind}")
        return ro

    def grade(self, texts, golds, tm):
        # policy samples right 45% of the time, reference samples 20%: a chunk of candidates often falls short
        return [int(hashlib.md5(t.encode()).hexdigest(), 16) % 100 < (20 if t.endswith("ref") else 45)
                for t in texts]

    monkeypatch.setattr(Trainer, "_generate", generate)
    monkeypatch.setattr(Trainer, "_grade", grade)
    return calls


@pytest.mark.parametrize("anchors", [False, True])
def test_rollout_economies_keep_the_same_prompts(anchors, world, tmp_path, monkeypatch):
    """Lazy reference sampling and refill_margin change what a step samples, never which prompts it keeps: the
    first B in stream order that pass the keep rule (and, with anchors, the same anchor for each)."""
    calls = _oracle_rollouts(monkeypatch)
    arm = ["algo.anchor.enabled=true", "algo.anchor.ref_n=4"] if anchors else []
    modes = {"full": ["algo.anchor.lazy=false"] if anchors else [],
             "economical": ["rollout.refill_margin=1.5"]}
    trainers = {name: Trainer(load_config(SMOKE, smoke(world, tmp_path / name, "batch.prompts_per_step=8",
                                                         "rollout.gen_batch_prompts=16",
                                                         "rollout.max_rounds=10", *arm, *extra))).start()
                for name, extra in modes.items()}
    sampled = {name: {"policy": 0, "ref": 0} for name in modes}
    for _ in range(4):   # 4 steps, each from the same stream position in both modes
        position = trainers["full"].stream.state_dict()
        kept = {}
        for name, t in trainers.items():
            t.stream.load_state_dict(position)
            calls.clear()
            groups = t.collect(PhaseTimes(), RolloutStats())
            assert len(groups) == 8
            kept[name] = [(tuple(g.prompt_ids), tuple(map(tuple, g.responses)),
                           tuple(g.correct)) for g in groups]
            for kind, n in calls:
                sampled[name][kind] += n
            t.step += 1
        assert kept["economical"] == kept["full"]
    assert sampled["economical"]["policy"] <= sampled["full"]["policy"]
    if anchors:
        assert 0 < sampled["economical"]["ref"] < sampled["full"]["ref"]


def test_draw_size():
    from armor.data import draw_size
    assert draw_size(need=8, full=16, kept=0, drawn=0, margin=2) == 16    # the first round draws a full round
    assert draw_size(need=3, full=16, kept=6, drawn=16, margin=2) == 16   # ceil(2 * 3 * 16 / 6) = 16
    assert draw_size(need=1, full=16, kept=8, drawn=16, margin=2) == 4    # ceil(2 * 1 * 16 / 8)
    assert draw_size(need=2, full=16, kept=0, drawn=16, margin=2) == 16   # nothing kept yet: no rate to go by
    assert draw_size(need=1, full=16, kept=8, drawn=16, margin=None) == 16   # no margin: always full rounds


def test_answer_modes_are_logging_only(world, tmp_path):
    """logging.answer_modes adds each step's mode shares and changes nothing else: the same weights, bit for
    bit, as a run without it; a classifier that is not "module:function" with `modes` fails before work."""
    common = ["schedule.total_steps=2", "schedule.validate_every=0", "validation.benchmarks=[]",
              "algo.anchor.enabled=true", "algo.mix.variant=mixed", "algo.mix.alpha=0.875"]
    digests = {}
    for name, extra in (("with", []), ("without", ["logging.answer_modes="])):
        train(load_config(SMOKE, smoke(world, tmp_path / name, *common, *extra)))
        digests[name] = hashlib.sha256((tmp_path / name / "checkpoints" / "step_000002" /
                                        "model.safetensors").read_bytes()).hexdigest()
        last = rows(tmp_path / name / "metrics.jsonl")[-1]
        assert (("mode_chain" in last) == (name == "with")
                and ("anchor_mode_shortcut" in last) == (name == "with"))
    assert digests["with"] == digests["without"]
    row = rows(tmp_path / "with" / "metrics.jsonl")[-1]
    assert sum(v for k, v in row.items() if k.startswith("mode_")) == pytest.approx(1.0)
    with pytest.raises(ConfigError, match="logging.answer_modes"):
        load_config(SMOKE, smoke(world, tmp_path / "bad",
                                 "logging.answer_modes=reproduce.toy.task:parse_problem"))


def test_auto_keeps_hf_forward_where_the_fast_paths_were_not_measured(world, tmp_path):
    """compute.fast=auto in bfloat16 (as on a GPU): the trainer's update and the HF engine take HF's forward;
    in float32 on the CPU, the lean forward and the static-KV decoder (common/fast/__init__.py)."""
    from common.fast import OFF, FastPaths
    for dtype, want in (("bfloat16", OFF), ("float32", FastPaths(True, True, False))):
        t = Trainer(load_config(SMOKE, smoke(world, tmp_path / dtype, f"model.dtype={dtype}")))
        assert t.fast == want, dtype
        t.start()
        try:
            assert t.models.fast == want and t.models.engine.fast == want
        finally:
            t.grader.close()
