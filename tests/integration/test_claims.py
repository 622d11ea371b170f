"""The claims engine (figures/claims.py) on constructed results folders (results.parquet + steps.parquet +
results.meta.json with the register as the driver writes it): each quantity against hand-computed values,
the not-testable and not-run cases, Holm over the confirmatory family (a raw pass that fails adjusted is not
"yes"), the checklist files and the forest plot, the README's claims table, the driver's record of the
register (collect), the power table and the fixed restart point."""
from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from common.results import steps_frame
from figures import claims as C
from figures import plots
from figures import stats as S
from figures.checklist import read_verdicts, verdict_lines
from figures.data import load_context
from reproduce.matrix.claims import load_register, parse_register, register_meta

ROOT = Path(__file__).resolve().parents[2]
SEEDS = (0, 1, 2)
STAGE2 = [10, 15, 20, 25, 30]          # θ* = 10, stage 2 of 20 steps, validated every 5


def _curves() -> dict:
    """{(arm, seed): [(step, value)]}: the hand-made validation curves (docstrings of the tests give the
    values each quantity reads)."""
    c = {}
    for s in SEEDS:
        c[("dapo", s)] = list(zip([0, 5, 10, 15, 20], [0.1, 0.3, 0.5, 0.2, 0.1 + 0.03 * s]))
        c[("dapo_cont", s)] = list(zip(STAGE2, [0.5, 0.4, 0.3, 0.2, 0.1 - 0.01 * s]))
        c[("armor_reset_never", s)] = list(zip(STAGE2, [0.5, 0.55, 0.6, 0.65, 0.7]))
        c[("armor_restart", s)] = list(zip([20, 25, 30], [0.6, 0.92 + 0.01 * s, 0.9 + 0.01 * s]))
        c[("armor_reset_5", s)] = list(zip(STAGE2, [0.5, 0.55, 0.7, 0.75 + 0.01 * s, 0.72]))
        c[("armor_reset_40", s)] = list(zip(STAGE2, [0.5, 0.55, 0.6, 0.65, 0.7]))
        c[("kl_k3_b1e-2", s)] = list(zip(STAGE2, [0.5, 0.5, 0.45 + 0.01 * s, 0.3, 0.2]))
        c[("kl_k3_b1", s)] = list(zip(STAGE2, [0.5] * 5))
        c[("mix_a0.9", s)] = list(zip(STAGE2, [0.5, 0.7 + 0.03 * s, 0.6, 0.4, 0.3]))
        c[("armor_late", s)] = list(zip([15, 20, 25, 30], [0.3, 0.35, 0.4, 0.5 + 0.01 * s]))
    return c


def _evals() -> list[tuple]:
    """(arm, seed, step, benchmark, metric, value): dapo at θ*; armor_restart at 25 (its best validation) and
    30 (its last step); b3 is not a protocol benchmark, avg@4 not the largest k: neither counts."""
    rows = []
    for s in SEEDS:
        rows += [("dapo", s, 10, "b1", "avg@8", 0.4), ("dapo", s, 10, "b1", "avg@4", 0.9),
                 ("dapo", s, 10, "b2", "avg@8", 0.2), ("dapo", s, 10, "b3", "avg@8", 0.99),
                 ("dapo", s, 10, "b1", "pass@4", 0.5), ("dapo", s, 10, "b2", "pass@4", 0.5),
                 ("armor_restart", s, 25, "b1", "avg@8", 0.5 + 0.01 * s),
                 ("armor_restart", s, 25, "b2", "avg@8", 0.4),
                 ("armor_restart", s, 25, "b1", "pass@4", 0.7), ("armor_restart", s, 25, "b1", "pass@2", 0.1),
                 ("armor_restart", s, 25, "b2", "pass@4", 0.6 + 0.01 * s),
                 ("armor_restart", s, 30, "b1", "avg@8", 0.6),
                 ("armor_restart", s, 30, "b2", "avg@8", 0.5 + 0.02 * s),
                 ("opd", s, 30, "b1", "avg@8", 0.3), ("opd", s, 30, "b2", "avg@8", 0.3)]
    return rows


FACTS = {  # arm: (stage, start, start step, sweep)
    "dapo": (1, "base", 0, None), "dapo_cont": (2, "peak", 10, None),
    "armor_reset_never": (2, "peak", 10, ("reset", None)), "armor_reset_5": (2, "peak", 10, ("reset", 5.0)),
    "armor_reset_40": (2, "peak", 10, ("reset", 40.0)), "armor_restart": (2, "restart", 20, None),
    "kl_k3_b1e-2": (2, "peak", 10, ("kl_k3", 0.01)), "kl_k3_b1": (2, "peak", 10, ("kl_k3", 1.0)),
    "mix_a0.9": (2, "peak", 10, ("mix", 0.9)), "armor_late": (2, "late", 15, None),
    "opd": (2, "peak", 10, None),
    "clip_expand": (2, "peak", 10, None),
}


def _steps() -> pd.DataFrame:
    """dapo's training reward (local = total step 1..20: step/20, + 0.01·seed from step 16) and the KLs of
    kl_k3_b1 and dapo_cont (stage-2 local steps 1..10: constant on the 5 steps nearest 5, i.e. 3..7, and
    far off elsewhere, so a wrong window shows)."""
    rows = []
    for s in SEEDS:
        rows += [{"arm": "dapo", "seed": s, "step": t, "local_step": t,
                  "reward_mean": t / 20 + (0.01 * s if t >= 16 else 0.0)} for t in range(1, 21)]
        for t in range(1, 11):
            near = 3 <= t <= 7
            rows += [{"arm": "kl_k3_b1", "seed": s, "step": 10 + t, "local_step": t,
                      "kl_reverse": 0.01 * (1 + s) if near else 5.0, "kl_forward": 0.1 if near else 0.001},
                     {"arm": "dapo_cont", "seed": s, "step": 10 + t, "local_step": t,
                      "kl_reverse": 0.1 if near else 0.001, "kl_forward": 0.2 if near else 9.0}]
    return steps_frame(rows)


REGISTER = {
    "roles": {"ARMOR": {"arm": "armor_restart", "before": "armor_reset_never"}},
    "claims": [dict(zip(("key", "quantity", "arms", "direction", "split"), row), paper="p",
                    claim=f"claim {row[0]}", **extra) for *row, extra in [
        ("e_theta", "end_minus_theta", ["ARMOR"], "greater", "validation", {"confirmatory": True}),
        ("e_fall", "end_minus_theta", ["dapo_cont"], "less", "validation", {"confirmatory": True}),
        ("e_start", "end_minus_start", ["armor_late"], "greater", "validation", {}),
        ("e_diff", "end_diff", ["ARMOR", "dapo_cont"], "greater", "validation", {}),
        ("s1_fall", "stage1_fall", ["dapo"], "greater", "validation", {}),
        ("rew", "reward_rise", ["dapo"], "greater", "train", {}),
        ("pk_theta", "peak_minus_theta", ["mix_a0.9"], "greater", "validation", {}),
        ("pk_pk", "peak_minus_peak", ["ARMOR", "dapo"], "greater", "validation", {}),
        ("restart", "peak_after_diff", ["armor_restart", "armor_reset_never"], "greater", "validation", {}),
        ("reset5", "peak_after_diff", ["armor_reset_5", "armor_reset_never"], "greater", "validation", {}),
        ("reset40", "peak_after_diff", ["armor_reset_40", "armor_reset_never"], "greater", "validation", {}),
        ("mid", "mid_diff", ["kl_k3_b1e-2", "dapo_cont"], "greater", "validation", {}),
        ("kl", "kl_contrast", ["kl_k3_b1", "dapo_cont"], "less", "train", {}),
        ("ev_best", "eval_diff", ["ARMOR", "dapo"], "greater", "test", {"at": "best"}),
        ("ev_last", "eval_diff", ["ARMOR", "dapo"], "greater", "test", {"at": "last"}),
        ("pass_best", "pass_diff", ["ARMOR", "dapo"], "greater", "test", {"at": "best"}),
        ("opd", "eval_diff", ["ARMOR", "opd"], "greater", "test", {"at": "best"}),
        ("absent", "end_minus_theta", ["clip_expand"], "less", "validation", {}),
        ("qae", "end_diff", ["qae_armor_reset_never", "qae_cont"], "greater", "validation", {}),
    ]]}


def _folder(d: Path, curves: dict, evals=(), steps=None, register=REGISTER, role="design", floor=0.005,
            runs=None) -> Path:
    """A results folder as the driver's collect writes one."""
    rows = [dict(preset="t", model="m", arm=a, seed=s, step=st, benchmark="val", metric="avg@4", k=4, value=v,
                 n=4, source="validation") for (a, s), pts in curves.items() for st, v in pts]
    rows += [dict(preset="t", model="m", arm=a, seed=s, step=st, benchmark=b, metric=m,
                  k=int(m.split("@")[1]), value=v, n=8, source="eval") for a, s, st, b, m, v in evals]
    d.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(d / "results.parquet")
    if steps is not None:
        steps.to_parquet(d / "steps.parquet")
    if floor is not None:
        (d / "noise_floor.json").write_text(json.dumps({"values": [0.5 - floor, 0.5 + floor], "sd": floor,
                                                        "range": 2 * floor, "mean": 0.5, "arm": "dapo",
                                                        "seed": 0, "step": 10}))
    facts = {a: {"stage": st, "baseline": "dapo", "start": kind, "starts": {str(s): at for s in SEEDS},
                 "sweep": None if sw is None else {"family": sw[0], "value": sw[1]},
                 "teacher_is_start": a == "opd", "table_step": None}
             for a, (st, kind, at, sw) in FACTS.items()}
    reg = parse_register(register)
    runs = runs if runs is not None else {a: list(SEEDS) for a in FACTS}
    meta = register_meta(reg, runs=runs)
    meta.update(role=role, design_preset="design-preset" if role == "confirm" else None)
    protocol = {"peak_selection_window": 3, "stage2_steps": 20, "kl_after_steps": 5,
                "eval_benchmarks": ["b1=data/b1.jsonl", "b2"]}
    (d / "results.meta.json").write_text(json.dumps({"arms": facts, "protocol": protocol, "claims": meta,
                                                     "validation_benchmark": "val"}))
    return d / "results.parquet"


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    path = _folder(tmp_path_factory.mktemp("c"), _curves(), _evals(), _steps())
    ctx = load_context(path)
    return ctx, {v.key: v for v in C.run_claims(ctx)}


def _per_seed(v) -> list[float]:
    return [v.numbers["per_seed"][s] for s in SEEDS]


# ------------------------------------------------------------------------------------------ quantities
def test_end_quantities_by_hand(verdicts):
    """ARMOR = armor_restart after armor_reset_never: steps 10, 15 are never's (0.5, 0.55), then the restart's
    0.6, 0.92 + s/100, 0.9 + s/100: end = (2.42 + 0.02 s)/3, θ* value 0.5."""
    _, v = verdicts
    assert _per_seed(v["e_theta"]) == pytest.approx([(2.42 + 0.02 * s) / 3 - 0.5 for s in SEEDS])
    assert v["e_theta"].numbers["at"][0] == {"theta_star": 10}
    # dapo_cont: end (0.3 + 0.2 + 0.1 − s/100)/3 − 0.5
    assert _per_seed(v["e_fall"]) == pytest.approx([(0.6 - 0.01 * s) / 3 - 0.5 for s in SEEDS])
    assert v["e_fall"].verdict == "yes"                         # falls, as the entry claims (direction less)
    # armor_late from its own start 0.3: (0.35 + 0.4 + 0.5 + s/100)/3 − 0.3
    assert _per_seed(v["e_start"]) == pytest.approx([(1.25 + 0.01 * s) / 3 - 0.3 for s in SEEDS])
    assert _per_seed(v["e_diff"]) == pytest.approx([(2.42 + 0.02 * s) / 3 - (0.6 - 0.01 * s) / 3
                                                    for s in SEEDS])
    # stage-1 dapo: 0.5 at θ* − (0.5 + 0.2 + 0.1 + 0.03 s)/3
    assert _per_seed(v["s1_fall"]) == pytest.approx([0.5 - (0.8 + 0.03 * s) / 3 for s in SEEDS])


def test_reward_and_kl_by_hand(verdicts):
    """reward: the last 5 steps (16..20: 0.9 + s/100) − the 5 nearest θ* = 10 (8..12: 0.5); KL: the 5 logged
    stage-2 steps nearest kl_after_steps = 5 (3..7): log(0.01(1+s) / 0.1) − log(0.1 / 0.2)."""
    _, v = verdicts
    assert _per_seed(v["rew"]) == pytest.approx([0.4 + 0.01 * s for s in SEEDS])
    assert _per_seed(v["kl"]) == pytest.approx([math.log(0.01 * (1 + s) / 0.1) - math.log(0.1 / 0.2)
                                                for s in SEEDS])
    assert v["kl"].numbers["kl_after_steps"] == 5
    # a training metric is decided on its interval alone (no floor, no minimum effect)
    assert v["rew"].verdict == "yes" and v["rew"].min_effect == 0.0 and v["rew"].floor is None
    assert "a training metric: its interval alone" in verdict_lines([v["rew"]])[0]


def test_peaks_by_hand(verdicts):
    """Smoothed over 3 (centred, fewer at the ends). mix_a0.9: 0.5, 0.7 + 0.03 s, 0.6, 0.4, 0.3 -> after θ*
    the max is (1.8 + 0.03 s)/3 (step 15), minus 0.5. ARMOR's composite curve 0.5, 0.55, 0.6, 0.92 + s/100,
    0.9 + s/100 -> its last point (1.82 + 0.02 s)/2; dapo's smoothed maximum (0.3 + 0.5 + 0.2)/3."""
    _, v = verdicts
    assert _per_seed(v["pk_theta"]) == pytest.approx([(1.8 + 0.03 * s) / 3 - 0.5 for s in SEEDS])
    assert _per_seed(v["pk_pk"]) == pytest.approx([(1.82 + 0.02 * s) / 2 - 1.0 / 3 for s in SEEDS])


def test_peaks_after_the_divergence_point(verdicts):
    """The restart diverges at its restart point (20): steps 25, 30; max(0.92 + s/100, 0.9 + s/100) − 0.7.
    reset every 5 diverges at θ* + 5 = 15: steps 20, 25, 30: 0.75 + s/100 − 0.7. Every 40: no point after
    step 50 (not testable, never "no")."""
    _, v = verdicts
    assert _per_seed(v["restart"]) == pytest.approx([0.22 + 0.01 * s for s in SEEDS])
    assert v["restart"].numbers["windows"][0] == [25, 30]
    assert _per_seed(v["reset5"]) == pytest.approx([0.05 + 0.01 * s for s in SEEDS])
    assert v["reset5"].numbers["windows"][0] == [20, 25, 30]
    r40 = v["reset40"]
    assert r40.verdict == "not testable here" and "no validation point after its first reset (θ* + 40)" in \
        r40.reason


def test_the_middle_third(verdicts):
    """stage 2 = 20 steps from 10: its middle third [16.7, 23.3] holds step 20: (0.45 + s/100) − 0.3."""
    _, v = verdicts
    assert _per_seed(v["mid"]) == pytest.approx([0.15 + 0.01 * s for s in SEEDS])
    assert v["mid"].numbers["windows"][0] == [20]


def test_eval_quantities_by_hand(verdicts):
    """score = mean over b1, b2 (protocol.eval_benchmarks; b3 left out) of the largest-k avg@k. dapo at θ*:
    (0.4 + 0.2)/2; the restart's best checkpoint by validation is 25: (0.5 + s/100 + 0.4)/2; its last, 30:
    (0.6 + 0.5 + 0.02 s)/2. pass@k: the largest k (pass@4): (0.7 + 0.6 + s/100)/2 − (0.5 + 0.5)/2."""
    _, v = verdicts
    assert _per_seed(v["ev_best"]) == pytest.approx([(0.9 + 0.01 * s) / 2 - 0.3 for s in SEEDS])
    assert v["ev_best"].numbers["steps"][0] == [25, 10]
    assert _per_seed(v["ev_last"]) == pytest.approx([(1.1 + 0.02 * s) / 2 - 0.3 for s in SEEDS])
    assert v["ev_last"].numbers["steps"][0] == [30, 10]
    assert _per_seed(v["pass_best"]) == pytest.approx([(1.3 + 0.01 * s) / 2 - 0.5 for s in SEEDS])


def test_not_testable_and_not_run(verdicts):
    _, v = verdicts
    assert v["opd"].verdict == "not testable here" and "teacher is its start" in v["opd"].reason
    assert v["absent"].verdict == "not run" and "no validation rows of clip_expand" in v["absent"].evidence
    assert v["qae"].verdict == "not run" and v["qae"].evidence.startswith(
        "not run in this preset: it does not run qae_armor_reset_never, qae_cont")
    assert "design preset" not in v["qae"].evidence                # a design preset decides it itself


def test_the_last_checkpoint_not_evaluated_is_not_run(tmp_path):
    evals = [e for e in _evals() if not (e[0] == "armor_restart" and e[2] == 30)]
    ctx = load_context(_folder(tmp_path, _curves(), evals, _steps()))
    v = {x.key: x for x in C.run_claims(ctx)}
    assert v["ev_last"].verdict == "not run"
    assert ("the last checkpoint of ARMOR (armor_restart) (step 30) was not evaluated (evaluated: [25])"
            in v["ev_last"].evidence)
    assert v["ev_best"].verdict == "yes"


def test_the_dose_response_across_seeds_by_hand(tmp_path):
    """fall_vs_covariate: per seed ARMOR's fall −(end − θ*) = 0.5 − (2.42 + 0.02 s)/3 and the mean of
    anchor_mode_shortcut along ARMOR's composite run: armor_reset_never's steps before the restart (11..19:
    0.1 s; its steps 20.. are not ARMOR's and hold 9.0) then armor_restart's (21..30: 0.5 − 0.1 s), so
    (0.9 s + 5 − s)/19; along armor_reset_never alone, every step: (0.9 s + 9.0·11)/20. Both fall with s as
    the fall does: Spearman ρ = 1 over the three seeds, with no interval (n < 4): undecided, never yes."""
    reg = copy.deepcopy(REGISTER)
    reg["claims"] += [{"key": k, "paper": "p", "claim": k, "quantity": "fall_vs_covariate",
                       "arms": ["ARMOR", b],
                       "covariate": "anchor_mode_shortcut", "direction": "greater", "split": "validation"}
                      for k, b in (("dose", "ARMOR"), ("dose_theta", "armor_reset_never"))]
    rows = []
    for s in SEEDS:
        rows += [{"arm": "armor_reset_never", "seed": s, "step": t, "local_step": t - 10,
                  "anchor_mode_shortcut": 0.1 * s if t < 20 else 9.0} for t in range(11, 31)]
        rows += [{"arm": "armor_restart", "seed": s, "step": t, "local_step": t - 20,
                  "anchor_mode_shortcut": 0.5 - 0.1 * s} for t in range(21, 31)]
    ctx = load_context(_folder(tmp_path, _curves(), _evals(), steps_frame(rows), register=reg))
    v = {x.key: x for x in C.run_claims(ctx)}
    fall = [0.5 - (2.42 + 0.02 * s) / 3 for s in SEEDS]
    assert _per_seed(v["dose"]) == pytest.approx(fall)
    assert [v["dose"].numbers["covariate"][s] for s in SEEDS] == pytest.approx(
        [(0.9 * s + 5 - s) / 19 for s in SEEDS])
    assert [v["dose_theta"].numbers["covariate"][s] for s in SEEDS] == pytest.approx(
        [(0.9 * s + 99.0) / 20 for s in SEEDS])
    for k in ("dose", "dose_theta"):
        assert v[k].stat["statistic"] == "spearman" and v[k].stat["mean"] == pytest.approx(1.0 if k == "dose"
                                                                                           else -1.0)
    assert v["dose"].verdict == "inconclusive" and v["dose"].min_effect == 0.0 and v["dose"].floor is None
    assert "Spearman ρ" in v["dose"].evidence and "per seed fall / anchor_mode_shortcut" in v["dose"].evidence
    # the forest plot draws them in the own-units panel
    fig = plots.fig_claims(list(v.values()), ctx, tmp_path / "f")
    assert {"dose", "dose_theta"} <= set(fig.armor_info["series"]["train"])


# ------------------------------------------------------------------------------------------ Holm
def _family_register(n_conf: int) -> dict:
    arms = ["anchor_only", "anchor_static_clip", "anchor_offpolicy", "kl_k3_b1"]
    return {"claims": [{"key": f"c{i}", "paper": "p", "claim": f"claim {i}", "quantity": "end_minus_theta",
                        "arms": [a], "direction": "greater", "split": "validation",
                        "confirmatory": i < n_conf} for i, a in enumerate(arms)]}


def _family_folder(d: Path, role: str) -> Path:
    """Four arms with the same change end − θ* = +0.02, +0.05, +0.01, +0.04 on seeds 0-3: raw p 0.046."""
    gains = [0.02, 0.05, 0.01, 0.04]
    curves = {(a, s): [(10, 0.5)] + [(st, 0.5 + g) for st in (15, 20, 25)]
              for a in ("anchor_only", "anchor_static_clip", "anchor_offpolicy", "kl_k3_b1")
              for s, g in enumerate(gains)}
    curves.update({("dapo_cont", s): [(10, 0.5), (15, 0.4)] for s in range(4)})
    reg = _family_register(3)
    runs = {a: [0, 1, 2, 3] for a in ("anchor_only", "anchor_static_clip", "anchor_offpolicy", "kl_k3_b1")}
    path = _folder(d, curves, register=reg, role=role, runs=runs)
    meta = json.loads(path.with_name("results.meta.json").read_text())
    for a in ("anchor_only", "anchor_static_clip", "anchor_offpolicy"):
        meta["arms"][a] = {"stage": 2, "baseline": "dapo", "start": "peak", "starts": {str(s): 10 for s in
                                                                                        range(4)}}
    meta["arms"]["dapo_cont"]["starts"] = {str(s): 10 for s in range(4)}
    path.with_name("results.meta.json").write_text(json.dumps(meta))
    return path


def test_holm_over_the_confirmatory_family(tmp_path):
    """Design seeds: every entry on its raw p (0.046 < 0.05: yes). Confirmation seeds: the 3 confirmatory
    entries are one Holm family, adjusted p = 3 × 0.046 = 0.14 >= 0.05: a raw pass that fails adjusted is
    not "yes"; the exploratory entry stays on its raw p."""
    design = {v.key: v for v in C.run_claims(load_context(_family_folder(tmp_path / "d", "design")))}
    raw = design["c0"].stat["p"]
    assert 0.04 < raw < 0.05
    assert all(v.verdict == "yes" and v.p_adjusted is None for v in design.values())
    assert design["c0"].decided_as == "confirmatory, on design seeds (raw p, no Holm)"
    confirm = {v.key: v for v in C.run_claims(load_context(_family_folder(tmp_path / "c", "confirm")))}
    for k in ("c0", "c1", "c2"):
        v = confirm[k]
        assert v.stat["p"] == pytest.approx(raw) and v.p_adjusted == pytest.approx(min(1.0, 3 * raw))
        assert v.verdict == "inconclusive" and "Holm-adjusted" not in v.reason and "raw p" in v.reason
        assert v.decided_as == "confirmatory (Holm, m = 3)"
        line = verdict_lines([v])[0]
        assert f"p {raw:.2g} (Holm-adjusted {3 * raw:.2g})" in line
    assert confirm["c3"].verdict == "yes" and confirm["c3"].p_adjusted is None
    assert confirm["c3"].decided_as == "exploratory (raw p)"


def test_a_confirm_preset_says_where_its_unrun_exploratory_entries_are_decided(tmp_path):
    ctx = load_context(_folder(tmp_path, _curves(), _evals(), _steps(), role="confirm"))
    v = {x.key: x for x in C.run_claims(ctx)}
    assert v["qae"].evidence.endswith("; decided on the design preset `design-preset`")
    # the family: the register's two confirmatory entries, both decided on their adjusted p
    fam = [v["e_theta"], v["e_fall"]]
    assert [x.p_adjusted for x in fam] == pytest.approx(S.holm([x.stat["p"] for x in fam]))
    assert all(x.decided_as == "confirmatory (Holm, m = 2)" for x in fam) and v["e_start"].p_adjusted is None


# ------------------------------------------------------------------------------------------ files
def test_checklist_files_and_the_forest_plot(tmp_path):
    path = _folder(tmp_path / "r", _curves(), _evals(), _steps())
    ctx = load_context(path)
    out = tmp_path / "figs"
    verdicts = C.write_checklist(ctx, out)
    saved = {v.key: v for v in read_verdicts(out / "checklist.json")}
    assert list(saved) == [e["key"] for e in REGISTER["claims"]]
    assert saved["e_theta"].numbers["per_seed"] == {str(s): pytest.approx((2.42 + 0.02 * s) / 3 - 0.5)
                                                   for s in SEEDS}
    md = (out / "checklist.md").read_text()
    assert "Seeds' role: **design**" in md and "| 1 | `e_theta` |" in md and "| p raw | p Holm |" in md
    assert (out / "claims.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "claims.pdf").read_bytes()[:5] == b"%PDF-"
    fig = plots.fig_claims(verdicts, ctx)
    info = fig.armor_info
    assert info["rows"][:2] == ["e_theta", "e_fall"]                    # the confirmatory family first
    assert info["series"]["train"] == ["rew", "kl"] and "e_theta" in info["series"]["score"]
    assert info["classes"]["opd"] == "not testable here"
    # sentences for the report
    s = C.sentence(saved["e_fall"])
    assert s.startswith("**holds here** — claim e_fall (p), `e_fall`, confirmatory, on design seeds")
    assert "seeds, raw p" in s
    assert C.sentence(saved["qae"]).startswith("**not run** — ")


def test_no_register_in_the_record_decides_nothing(tmp_path):
    path = _folder(tmp_path, _curves())
    meta = json.loads(path.with_name("results.meta.json").read_text())
    del meta["claims"]
    path.with_name("results.meta.json").write_text(json.dumps(meta))
    ctx = load_context(path)
    assert C.run_claims(ctx) == [] and "No claims register" in C.checklist_markdown([], ctx)


def test_the_readme_claims_table_is_the_commands_output(capsys):
    """The README's claims table is `python -m figures.claims --readme-table FOLDER` for the committed results
    folder its marker names."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- claims-table: (\S+) -->\n(.*?)<!-- /claims-table -->", text, re.S)
    assert m, "README.md lacks the claims-table markers"
    folder = ROOT / m.group(1)
    assert (folder / "results.parquet").is_file()
    assert C.main(["--readme-table", str(folder)]) == 0
    assert m.group(2) == capsys.readouterr().out


def test_the_committed_results_carry_the_register():
    """Each committed results folder's record names the register it was decided with, resolved: the main job's
    (and the control's design run) the register as it is, the older folders one that docs/claims.md records
    among the register's pre-registered versions (the positive control's entries came after them)."""
    digest = load_register().digest()
    recorded = re.findall(r"digest: `([0-9a-f]{64})`", (ROOT / "docs" / "claims.md").read_text())
    for name, role, current in (("tiny", "design", False), ("tiny-slow", "design", False),
                                ("tiny-v2", "design", False), ("tiny-paper", "design", False),
                                ("tiny-paper-control", "design", True),
                                ("tiny-paper-confirm", "confirm", True)):
        meta = json.loads((ROOT / "reproduce" / "results" / name / "results.meta.json").read_text())
        assert meta["claims"]["role"] == role, name
        assert meta["claims"]["digest"] == digest if current else meta["claims"]["digest"] in recorded, name


def test_the_drivers_collect_writes_the_register(tmp_path):
    from test_report import collect_one_row
    results = collect_one_row(tmp_path)
    meta = json.loads(results.with_name("results.meta.json").read_text())["claims"]
    reg = load_register()
    assert meta["digest"] == reg.digest() and meta["role"] == "design"
    assert [e["key"] for e in meta["entries"]] == [c.key for c in reg.claims]
    assert load_context(results).claims == meta                      # the figures read it from there
    assert {v.key for v in C.run_claims(load_context(results))} == {c.key for c in reg.claims}


# ------------------------------------------------------------------------------------------ power
def test_power_of_the_confirmatory_family(tmp_path, monkeypatch):
    """reproduce.studies.power --claims: each confirmatory entry's design mean, sd, Holm rank and level
    (α / (m − rank + 1)) and the seeds for power 0.8; an entry without values says why."""
    from reproduce.studies.power import claims_power, seeds_needed
    reg = parse_register(REGISTER)
    path = _folder(tmp_path, _curves(), _evals(), _steps())
    rows = {r["key"]: r for r in claims_power(path.parent, reg)}
    assert list(rows) == ["e_theta", "e_fall"]
    e = rows["e_fall"]
    xs = [(0.6 - 0.01 * s) / 3 - 0.5 for s in SEEDS]
    d = sum(xs) / 3
    sd = math.sqrt(sum((x - d) ** 2 for x in xs) / 2)
    assert (e["n"], e["d"], e["sd"]) == (3, pytest.approx(d), pytest.approx(sd)) and e["along"]
    ranks = sorted(rows.values(), key=lambda r: r["p"])
    assert [r["rank"] for r in ranks] == [1, 2]
    assert ranks[0]["level"] == pytest.approx(0.05 / 2) and ranks[1]["level"] == pytest.approx(0.05)
    assert e["n_m"] == seeds_needed(d, sd, alpha=0.05 / 2) and e["n_m"] is not None
    # a seed budget: the count covers the entries that need at most that many, the others are named
    from reproduce.studies import power as P
    monkey = [dict(rows["e_fall"], key="small", n_m=7), dict(rows["e_fall"], key="big", n_m=40),
              dict(rows["e_fall"], key="never", n_m=None)]
    monkeypatch.setattr(P, "claims_power", lambda *_: monkey)
    text = P.claims_report(path.parent, max_seeds=19)
    assert "the entries that need at most 19 (--max-seeds), at least 10: 10" in text
    assert "expected to stay undecided (n(α/m) > 19): big, never" in text
    monkey[0]["n_m"] = 13
    assert "at least 10: 13" in P.claims_report(path.parent, max_seeds=19)
    assert ": >100" in P.claims_report(path.parent)                  # without a budget: every entry


def test_the_fixed_restart_point_reads_no_curve(tmp_path, capsys):
    """protocol.restart_step: restart.json names that step for every seed, no validation read, no other seed
    waited for; a seed whose run has no checkpoint there fails naming the key."""
    from test_restart_and_seeds import THREE, _preset
    from test_seeds_and_late_start import _fake_run
    from reproduce.jobs import cli
    from reproduce.jobs.peaks import restart_file
    from reproduce.matrix.presets import load_preset, run_dir
    f = _preset(tmp_path, THREE.replace("  restart_within: 0.5\n",
                                        "  restart_within: 0.5\n  restart_step: 2\n"))
    p, root = load_preset(f), tmp_path / "runs"
    for s in (0, 1):
        run = run_dir(root, p, "armor_reset_never", s)
        _fake_run(run, [], [0, 2, 4] if s == 0 else [0, 4], done=False)     # no validation, no DONE
        dapo = run_dir(root, p, "dapo", s)
        dapo.mkdir(parents=True, exist_ok=True)
        (dapo / "peak.json").write_text(json.dumps({"step": 6, "checkpoint": str(dapo / "checkpoints/x")}))
    assert cli.main(["select-restart", "--preset", str(f), "--root", str(root), "--seed", "0"]) == 0
    assert "stage-2 step 2 (total 8, protocol.restart_step)" in capsys.readouterr().out
    rs = json.loads(restart_file(root, p, 0).read_text())
    assert (rs["stage2_step"], rs["method"], rs["seeds"]) == (2, "fixed", [0])
    assert cli.main(["select-restart", "--preset", str(f), "--root", str(root), "--seed", "1"]) == 2
    assert "protocol.restart_step=2: armor_reset_never seed 1 has no checkpoint at stage-2 step 2" in \
        capsys.readouterr().err
