"""figures/world_checks.py on constructed runs: each check passes and fails where its rule says."""
import json

import pandas as pd

from figures import world_checks as W
from figures.build import draw_all
from figures.data import load_context

RISE_FALL = [0.40, 0.55, 0.60, 0.58, 0.50, 0.45, 0.44, 0.44]   # validation every 10 steps, steps 0..70
FLAT = [0.40, 0.45, 0.47, 0.47, 0.47, 0.47, 0.47, 0.47]


def _runs(tmp_path, dapo: dict, natural=None, acc=None, clip=(0.024, 0.4), world=True):
    d = tmp_path / "tiny"
    rows = []
    for seed, vals in dapo.items():
        rows += [dict(arm="dapo", seed=seed, step=10 * i, value=v) for i, v in enumerate(vals)]
        run = d / "dapo" / f"seed{seed}"
        run.mkdir(parents=True)
        a = acc or (lambda s: 0.5 + 0.005 * s)
        run.joinpath("metrics.jsonl").write_text("".join(json.dumps({"step": s, "accuracy": a(s)}) + "\n"
                                                         for s in range(1, 71)))
        cont = d / "dapo_cont" / f"seed{seed}"
        cont.mkdir(parents=True)
        both, unc = clip
        cont.joinpath("metrics.jsonl").write_text("".join(json.dumps(
            {"step": s, "clipfrac": both, "uncertain_frac": unc, "clipfrac_and_uncertain": both}) + "\n"
            for s in range(1, 11)))
    if natural:
        rows += [dict(arm="dapo_natural", seed=0, step=10 * i, value=v) for i, v in enumerate(natural)]
    df = pd.DataFrame([dict(preset="tiny", model="m", benchmark="toy_val", metric="avg@4", k=4, n=4,
                            source="validation", **r) for r in rows])
    df.to_parquet(d / "results.parquet")
    if world:
        (d / "world").mkdir()
        (d / "world" / "world.json").write_text(
            json.dumps({"splits": {"validation": {"chain_ceiling": 0.7}}}))
    return load_context(d / "results.parquet")


def _verdicts(ctx):
    return {c.key: c for c in W.run_world_checks(ctx)}


def test_a_world_that_passes_every_check(tmp_path):
    ctx = _runs(tmp_path, {0: RISE_FALL, 1: [v + 0.01 for v in RISE_FALL]},
                natural=[0.4, 0.6, 0.72, 0.8, 0.85])
    v = _verdicts(ctx)
    assert {k: c.verdict for k, c in v.items()} == {k: W.PASS for k in v}
    assert abs(v["dapo_gain"].numbers["0"]["gain"] - 0.2) < 1e-9
    assert "s1:" in v["dapo_fall"].evidence
    # control end = mean(.72, .8, .85) = .79 >= highest peak .61 + .10, and above the ceiling .70
    assert abs(v["headroom"].numbers["control_end"] - 0.79) < 1e-9
    assert abs(v["clipping"].numbers["uncertain_clip_share"] - 0.06) < 1e-9
    md = W.world_checks_markdown(list(v.values()))
    assert md.count("**pass**") == 5
    assert W.applies(ctx)


def test_each_check_fails_where_its_rule_says(tmp_path):
    # seed 1 never falls: the per-seed fall check fails on it (and with it the world)
    v = _verdicts(_runs(tmp_path / "a", {0: RISE_FALL, 1: FLAT}, natural=[0.4, 0.6, 0.66, 0.68, 0.69],
                        clip=(0.01, 0.4)))
    assert v["dapo_fall"].verdict == W.FAIL and "s1: peak 0.470" in v["dapo_fall"].evidence
    assert v["dapo_gain"].verdict == W.FAIL                       # FLAT gains only .07 within 50 steps
    assert v["headroom"].verdict == W.FAIL                        # .677 < .60 + .10
    assert v["clipping"].verdict == W.FAIL                        # 2.5% of uncertain tokens
    # training accuracy above the bound at the peak
    v = _verdicts(_runs(tmp_path / "b", {0: RISE_FALL}, acc=lambda s: 0.9))
    assert v["dapo_train_acc"].verdict == W.FAIL and v["headroom"].verdict == W.NOT_RUN
    # headroom above the peak but no world.json: the chain's ceiling is unknown, so the check cannot pass
    v = _verdicts(_runs(tmp_path / "c", {0: RISE_FALL}, natural=[0.4, 0.6, 0.72, 0.8, 0.85], world=False))
    assert v["headroom"].verdict == W.FAIL and "unknown" in v["headroom"].evidence


def test_the_world_item_is_drawn_only_where_the_control_ran(tmp_path):
    ctx = _runs(tmp_path / "a", {0: RISE_FALL}, natural=[0.4, 0.9])
    produced = draw_all(ctx, tmp_path / "a" / "figs", only=["world"])
    assert (tmp_path / "a" / "figs" / "world_checks.md").is_file() and "world" in produced
    # the control ends at .65 < .60 + .10: FAIL -> rc 1
    assert W.main([str(tmp_path / "a" / "tiny")]) == 1
    plain = _runs(tmp_path / "b", {0: RISE_FALL})
    assert not W.applies(plain)
    assert "world" not in draw_all(plain, tmp_path / "b" / "figs", only=None)


def test_a_preset_sharing_another_presets_world_finds_its_ceiling(tmp_path):
    """No runs/<preset>/world (tiny-slow shares runs/tiny/world): the ceiling comes from the world folder
    of the base model that stage-1 DAPO's config.yaml names; with neither, it is unknown."""
    ctx = _runs(tmp_path, {0: RISE_FALL}, world=False)
    assert W.chain_ceiling(ctx) is None
    shared = tmp_path / "other" / "world"
    (shared / "base_model").mkdir(parents=True)
    (shared / "world.json").write_text(json.dumps({"splits": {"validation": {"chain_ceiling": 0.65}}}))
    (tmp_path / "tiny" / "dapo" / "seed0" / "config.yaml").write_text(
        f"model:\n  path: {shared / 'base_model'}\n")
    assert W.chain_ceiling(load_context(tmp_path / "tiny" / "results.parquet")) == 0.65
