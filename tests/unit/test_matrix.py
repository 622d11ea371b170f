"""Pure parts of the arm matrix: seeds per arm, the seeds a choice is made on, the restart point's rule, and
the power calculation behind the seed counts (reproduce/matrix/arms.py, reproduce/jobs/peaks.py,
reproduce/studies/power.py)."""
import dataclasses
import math

import pandas as pd
import pytest
from scipy import stats

from reproduce.studies import power as pw
from figures.synthetic import FIGURE_PANELS
from reproduce.matrix.arms import (RESTART_ARM, arm_definitions, arm_seeds, figure_arms, figure_panels,
                                   selection_seeds)
from reproduce.jobs.peaks import choose_restart
from reproduce.matrix.presets import ExperimentError
from reproduce.matrix.protocol import ProtocolConfig, load_protocol

P = ProtocolConfig(seeds=[0, 1, 2, 3, 4], reset_sweep=[20], restart_within=0.5, stage2_warmup_steps=2,
                   single_seed_arms=["mopd"], side_arms=["opd"], side_arm_seeds=3, selection_seeds=[0, 1, 2])


def test_seeds_per_arm():
    a = arm_definitions(P)
    assert arm_seeds(P, a["armor"], P.seeds) == [0, 1, 2, 3, 4]
    assert arm_seeds(P, a["opd"], P.seeds) == [0, 1, 2] and arm_seeds(P, a["mopd"], P.seeds) == [0]
    assert arm_seeds(P, a["opd"], [3]) == [3]                       # a plan of fewer seeds (--seeds 3)
    assert selection_seeds(P, [0, 1, 2, 3, 4]) == [0, 1, 2] and selection_seeds(P, [3, 4]) == [3, 4]


def test_the_restart_arm_is_armor_without_in_run_resets():
    a = arm_definitions(P)
    r = a[RESTART_ARM]
    assert r.start == "restart" and r.stage == 2 and r.alias_of is None
    never = dict(o.split("=", 1) for o in a["armor_reset_never"].overrides)
    assert dict(o.split("=", 1) for o in r.overrides) == never      # its warm-up is every stage-2 run's
    assert figure_arms(P)["fig4"][-1] == RESTART_ARM
    # the authors' restarts selectable without the in-run reset sweep (--only fig4_restarts, the budget)
    rest = figure_arms(P)["fig4_restarts"]
    assert RESTART_ARM in rest and not any(x.startswith("armor_reset_") and x != "armor_reset_never"
                                           for x in rest)
    assert set(rest) < set(figure_arms(P)["fig4"])
    assert RESTART_ARM not in arm_definitions(dataclasses.replace(P, restart_within=None))


def test_every_stage2_run_gets_the_same_warm_up(tmp_path):
    """One warm-up rule (protocol.stage2_warmup_steps) for every stage-2 arm, the restart included; stage 1
    keeps the preset's; null: no override."""
    from reproduce.matrix.overrides import train_overrides
    from reproduce.matrix.presets import load_preset
    preset = load_preset("smoke")
    preset.protocol = dataclasses.replace(preset.protocol, stage2_warmup_steps=2)
    arms = arm_definitions(preset.protocol)
    start = {"step": 2, "checkpoint": str(tmp_path / "ck"), "stage2_step": 1}

    def warm(arm):
        ov = train_overrides(preset, tmp_path, arm, 0, None if arm.stage == 1 else start)
        return [o for o in ov if o.startswith("optim.warmup_steps=")]
    assert all(warm(a) == ["optim.warmup_steps=2"] for a in arms.values() if a.stage == 2)
    assert warm(arms["dapo"]) == []
    preset.protocol = dataclasses.replace(preset.protocol, stage2_warmup_steps=None)
    assert warm(arm_definitions(preset.protocol)["armor"]) == []


def test_restart_point_rule():
    curve = [(0, 0.6), (10, 0.55), (20, 0.58), (30, 0.4), (40, 0.7)]
    assert choose_restart(curve, [0, 10, 20, 30, 40], 30)["step"] == 20
    assert choose_restart(curve, [0, 10, 20, 30, 40], 40)["step"] == 40
    assert choose_restart(curve, [0, 10, 30], 30)["step"] == 10
    with pytest.raises(ExperimentError):
        choose_restart(curve, [0, 40], 30)


@pytest.mark.parametrize("section,message", [
    ({"restart_within": 0.5}, "needs protocol.reset_sweep"),
    ({"reset_sweep": [20], "restart_within": 0}, "must be in"),
    ({"seeds": [0, 1], "selection_seeds": [2]}, "must be seeds of protocol.seeds"),
    ({"side_arms": ["opd"], "single_seed_arms": ["opd"]}, "names arms of protocol.single_seed_arms too"),
    ({"stage2_overrides": ["optim.lr"]}, "must be key=value"),
])
def test_bad_protocol_values(section, message):
    with pytest.raises(Exception, match=message):
        load_protocol(section)


def test_power_matches_the_noncentral_t_and_grows_with_seeds():
    for n, d, s in ((5, 1.0, 1.0), (10, 0.05, 0.05), (4, 0.3, 0.2)):
        t = stats.t.ppf(0.975, n - 1)
        nc = d * math.sqrt(n) / s
        assert pw.power(n, d, s) == pytest.approx(stats.nct.sf(t, n - 1, nc) + stats.nct.cdf(-t, n - 1, nc),
                                                  abs=1e-6)
    ps = [pw.power(n, 0.05, 0.05) for n in range(2, 15)]
    assert ps == sorted(ps) and pw.power(3, 0.0, 1.0) == pytest.approx(0.05, abs=1e-6)
    n = pw.seeds_needed(0.05, 0.05)
    assert pw.power(n, 0.05, 0.05) >= 0.8 > pw.power(n - 1, 0.05, 0.05)


def test_gaps_end_values_and_the_evaluation_noise_from_a_table():
    rows = []
    for seed, (a, b) in enumerate(((0.3, 0.1), (0.5, 0.2), (0.4, 0.4))):
        for step, (va, vb) in enumerate(((0.6, 0.6), (a, b), (a, b), (a, b))):
            rows += [{"arm": "armor", "seed": seed, "step": 10 * step, "value": va},
                     {"arm": "dapo_cont", "seed": seed, "step": 10 * step, "value": vb}]
        rows += [{"arm": "opd", "seed": seed, "step": 10 * k, "value": v}
                 for k, v in enumerate((0.5, 0.52, 0.48))]
    df = pd.DataFrame(rows).assign(source="validation", metric="avg@4", benchmark="toy_val")
    c = pw.validation_curves(df)
    assert pw.gaps(c, "armor", "dapo_cont") == pytest.approx({0: 0.2, 1: 0.3, 2: 0.0})
    assert pw.gaps(c, "armor", pw.THETA) == pytest.approx({0: -0.3, 1: -0.1, 2: -0.2})
    assert pw.eval_sd(c, "opd") == pytest.approx(0.02)
    assert "ARMOR vs dapo_cont" in pw.report(df)


def test_the_oracle_clean_anchor_arms_are_defined_by_the_protocol_and_run_by_the_control_item(tmp_path):
    """protocol.clean_anchor_modes defines anchor_only_clean and armor_reset_never_clean: anchor_only's and
    armor_reset_never's overrides plus the oracle filter, whose configs validate in the tiny world (its
    classifier has the mode), marked `oracle` in their facts; only the item `control` runs them (beside the
    paper's-rule arms and dapo_cont), and only the presets of the positive control define them."""
    from armor.config import load_config
    from reproduce.matrix.overrides import train_overrides
    from reproduce.matrix.presets import load_preset
    assert "anchor_only_clean" not in arm_definitions(P)
    for name in ("tiny", "tiny-paper", "smoke", "qwen25-math-7b", "qwen3-8b-base"):
        assert "anchor_only_clean" not in arm_definitions(load_preset(name).protocol), name
    for name in ("tiny-paper-control", "tiny-paper-confirm"):
        assert figure_arms(load_preset(name).protocol)["control"] == [
            "dapo", "dapo_cont", "anchor_only", "anchor_only_clean", "armor_reset_never",
            "armor_reset_never_clean", "armor_restart", "armor_restart_clean"], name
    preset = load_preset("tiny-paper")
    preset.protocol = dataclasses.replace(preset.protocol, clean_anchor_modes=["shortcut"])
    a = arm_definitions(preset.protocol)
    oracle = ["algo.anchor.filter=exclude_modes", "algo.anchor.exclude_modes=[shortcut]"]
    for clean, paper in (("anchor_only_clean", "anchor_only"),
                         ("armor_reset_never_clean", "armor_reset_never")):
        assert sorted(a[clean].overrides) == sorted(a[paper].overrides + oracle)
        assert (a[clean].stage, a[clean].start, a[clean].alias_of, a[clean].sweep) == (2, "peak", None, None)
        assert a[clean].facts()["oracle"] and "oracle" not in a[paper].facts()
        assert [f for f, arms in figure_arms(preset.protocol).items() if clean in arms] == ["control"]
        start = {"step": 15, "checkpoint": str(tmp_path / "ck")}
        cfg = load_config(preset.path, train_overrides(preset, tmp_path, a[clean], 0, start))
        assert (cfg.algo.anchor.filter, cfg.algo.anchor.exclude_modes) == ("exclude_modes", ["shortcut"])
    from common.yaml_config import ConfigError
    with pytest.raises(ConfigError, match="protocol.clean_anchor_modes"):
        load_protocol({"clean_anchor_modes": ["not a mode"]})


def test_figure_panels():
    """Each panel's arms (results.meta.json `figure_panels`, which figures/ draws): every figure whatever the
    protocol runs, sweeps in the protocol's order after their reference arm, the restart arm only where the
    protocol has it; the synthetic results (figures/synthetic.py) list what the driver would."""
    p = load_protocol({"kl_betas": [1e-2, 1.0], "kl_k2_sweep": True, "alpha_sweep": [0.9, 0.8],
                       "reset_sweep": [20, 40], "restart_within": 0.5, "qae_reset_sweep": [20],
                       "qwen3_tau1_until": [40], "late_start_step": 45})
    assert figure_panels(p) == FIGURE_PANELS
    assert figure_panels(P)["fig4"] == {"a": ["armor_reset_never", "armor_reset_20", RESTART_ARM]}
    bare = figure_panels(ProtocolConfig(reset_sweep=[40, 20]))
    assert list(bare) == ["fig1", "fig2", "fig3", "fig4", "fig5", "fig6", "fig7"]
    assert bare["fig4"]["a"] == ["armor_reset_never", "armor_reset_40", "armor_reset_20"]
    assert bare["fig2"]["a"] == ["dapo_cont"] and bare["fig6"]["a"] == ["qae", "qae_cont"]
