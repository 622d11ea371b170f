"""figures/world_checks.py on constructed runs: each check passes and fails where its rule says."""
import json

import pandas as pd

from figures import world_checks as W
from figures.build import draw_all
from figures.data import load_context

RISE_FALL = [0.40, 0.55, 0.60, 0.58, 0.50, 0.45, 0.44, 0.44]   # validation every 10 steps, steps 0..70
FLAT = [0.40, 0.45, 0.47, 0.47, 0.47, 0.47, 0.47, 0.47]
CONT = [0.70, 0.68, 0.64, 0.60, 0.58, 0.58]      # dapo_cont from θ*, every 10 steps: −16 % at its end


def _runs(tmp_path, dapo: dict, natural=None, acc=None, clip=(0.024, 0.4), world=True, cont=CONT):
    """A results folder as the driver's collect writes it: results.parquet, steps.parquet (DAPO's training
    accuracy, dapo_cont's clipping) and results.meta.json (the arms, the world's ceiling)."""
    d = tmp_path / "tiny"
    d.mkdir(parents=True)
    rows, steps = [], []
    for seed, vals in dapo.items():
        rows += [dict(arm="dapo", seed=seed, step=10 * i, value=v) for i, v in enumerate(vals)]
        rows += [dict(arm="dapo_cont", seed=seed, step=20 + 10 * i, value=v) for i, v in enumerate(cont)]
        a = acc or (lambda s: 0.5 + 0.005 * s)
        steps += [dict(arm="dapo", seed=seed, step=s, local_step=s, accuracy=a(s)) for s in range(1, 71)]
        both, unc = clip
        steps += [dict(arm="dapo_cont", seed=seed, step=20 + s, local_step=s, clipfrac=both,
                       uncertain_frac=unc,
                       clipfrac_and_uncertain=both) for s in range(1, 11)]
    if natural:
        rows += [dict(arm="dapo_natural", seed=0, step=10 * i, value=v) for i, v in enumerate(natural)]
    df = pd.DataFrame([dict(preset="tiny", model="m", benchmark="toy_val", metric="avg@4", k=4, n=4,
                            source="validation", **r) for r in rows])
    df.to_parquet(d / "results.parquet")
    pd.DataFrame(steps).to_parquet(d / "steps.parquet")
    arms = {"dapo": {"stage": 1, "baseline": "dapo", "start": "base"},
            "dapo_cont": {"stage": 2, "baseline": "dapo", "start": "peak", "starts": {"0": 20}}}
    if natural:
        arms["dapo_natural"] = {"stage": 1, "baseline": "dapo_natural", "start": "base"}
    meta = {"arms": arms, "world": {"validation_chain_ceiling": 0.7} if world else {},
            "figure_arms": {"world": list(arms)} if natural else {}}
    (d / "results.meta.json").write_text(json.dumps(meta))
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
    # dapo_cont: θ* .70 → end mean(.60, .58, .58) = .5867 (−16 %), .147 above DAPO's floor (.44)
    assert abs(v["regime"].numbers["decline"] - (0.70 - 1.76 / 3) / 0.70) < 1e-9
    md = W.world_checks_markdown(list(v.values()))
    assert md.count("**pass**") == 6
    assert W.applies(ctx)


def test_each_check_fails_where_its_rule_says(tmp_path):
    # seed 1 never falls: the per-seed fall check fails on it (and with it the world)
    v = _verdicts(_runs(tmp_path / "a", {0: RISE_FALL, 1: FLAT}, natural=[0.4, 0.6, 0.66, 0.68, 0.69],
                        clip=(0.01, 0.4)))
    assert v["dapo_fall"].verdict == W.FAIL and "s1: peak 0.470" in v["dapo_fall"].evidence
    assert v["dapo_gain"].verdict == W.FAIL                       # FLAT gains only .07 within 50 steps
    assert v["headroom"].verdict == W.FAIL                        # .677 < .60 + .10
    assert v["clipping"].verdict == W.FAIL                        # 2.5% of uncertain tokens
    # too fast (to the floor) and too slow (−3 %): the regime check fails either way
    for cont in ([0.70, 0.60, 0.50, 0.46, 0.45, 0.45], [0.70, 0.70, 0.69, 0.68, 0.68, 0.68]):
        v = _verdicts(_runs(tmp_path / f"r{cont[-1]}", {0: RISE_FALL}, cont=cont))
        assert v["regime"].verdict == W.FAIL, v["regime"].evidence
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


def test_the_driver_records_the_world_a_preset_trains_in(tmp_path):
    """The ceiling comes from the world the preset's base model lives in, as the driver's collect read it
    (a preset sharing another's world, e.g. tiny-slow: runs/tiny/world); no world.json: unknown."""
    from reproduce.jobs.collect import world_facts
    from reproduce.matrix.presets import load_preset
    assert world_facts(load_preset("tiny-slow"))["dir"] == "runs/tiny/world"
    world = tmp_path / "shared" / "world"
    (world / "data").mkdir(parents=True)
    preset = tmp_path / "p.yaml"
    preset.write_text(f"base: {load_preset('smoke').path}\nmodel:\n  path: {world / 'base_model'}\n"
                      f"data:\n  train: {world / 'data' / 'train.jsonl'}\n")
    assert world_facts(load_preset(preset))["validation_chain_ceiling"] is None
    (world / "world.json").write_text(json.dumps({"splits": {"validation": {"chain_ceiling": 0.65}}}))
    assert world_facts(load_preset(preset)) == {"dir": str(world), "validation_chain_ceiling": 0.65}
