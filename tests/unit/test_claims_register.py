"""The claims register (reproduce/matrix/claims.py): the committed register loads and is the pre-registered
one;
every kind of bad entry is refused with the entry's key and the field; the seeds' role keys of the protocol;
a confirmation preset is checked against the register (arms run and evaluated, enough seeds, seeds disjoint
from the design preset's selection seeds); the fixed restart point's checks."""
import copy
import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from armor.config import ConfigError
from figures.claims import QUANTITIES
from reproduce.matrix.arms import arm_definitions, preset_runs
from reproduce.matrix.claims import (ARM_NAME, MIN_CONFIRM_SEEDS, REGISTER, ClaimsError, check_preset,
                                     load_register, parse_register, register_meta)
from reproduce.matrix.presets import PRESETS_DIR, ExperimentError, load_preset
from reproduce.matrix.protocol import ProtocolConfig, validate_protocol

ROOT = Path(__file__).resolve().parents[2]
RAW = yaml.safe_load(REGISTER.read_text())


def test_the_committed_register_loads_resolves_its_roles_and_is_the_preregistered_one():
    reg = load_register()
    assert len(reg.claims) == 44 and len(reg.confirmatory) == 14
    assert [c.key for c in reg.claims[:14]] == [c.key for c in reg.confirmatory]     # the family first
    clean = reg.resolve("CLEAN_ARMOR")                   # the positive control: a fixed arm, not the headline
    assert (clean.arm, clean.before) == ("armor_restart_clean", "armor_reset_never_clean")
    assert reg.bound("armor", False).resolve("CLEAN_ARMOR") == clean
    armor = reg.resolve("ARMOR")
    assert (armor.arm, armor.before) == ("headline", "armor_reset_never")      # the preset's headline arm
    tiny = reg.bound("armor_restart", True)
    assert (tiny.resolve("ARMOR").arm, tiny.resolve("ARMOR").before) == ("armor_restart",
                                                                         "armor_reset_never")
    assert reg.bound("armor", False).resolve("ARMOR").before is None   # an in-run arm continues nothing
    assert reg.resolve("dapo").arm == "dapo" and reg.resolve("dapo").before is None
    assert tiny.arms_of(tiny.claims[0]) == ["armor_restart", "armor_reset_never"]
    # the pre-registration record (docs/claims.md) names this digest of the pre-registered fields last
    doc = (ROOT / "docs" / "claims.md").read_text()
    recorded = re.findall(r"pre-registration digest: `([0-9a-f]{64})`", doc)
    assert recorded and recorded[-1] == reg.digest()
    # an entry without a covariate hashes as before the field existed (the older digests still hold)
    old = copy.deepcopy(RAW)
    old["claims"] = [c for c in old["claims"]
                     if "clean" not in str(c["arms"]).lower() and "covariate" not in c]
    old["roles"].pop("CLEAN_ARMOR")
    assert parse_register(old).digest() == recorded[0]
    # the digest covers the pre-registered fields, not the wording
    edited = copy.deepcopy(RAW)
    edited["claims"][0]["claim"] = "reworded"
    assert parse_register(edited).digest() == reg.digest()
    edited["claims"][0]["direction"] = "less"
    assert parse_register(edited).digest() != reg.digest()


def test_every_register_arm_is_one_the_matrix_can_name():
    """ARM_NAME (the register's typo guard) accepts every arm of every shipped preset's matrix."""
    names = set()
    for f in sorted(PRESETS_DIR.glob("*.yaml")):
        names |= set(arm_definitions(load_preset(f).protocol))
    assert names and all(ARM_NAME.match(n) for n in names), sorted(n for n in names if not ARM_NAME.match(n))
    assert not ARM_NAME.match("armor_restrat") and not ARM_NAME.match("ARMOR")


def _bad(edit):
    raw = copy.deepcopy(RAW)
    edit(raw)
    return raw


def _set(i, **kv):
    def edit(raw):
        raw["claims"][i].update(kv)
    return edit


@pytest.mark.parametrize("edit,message", [
    (_set(0, quantity="end_minus_thetaa"), r"claim 'armor_ends_above_theta': quantity: 'end_minus_thetaa' is "
                                           r"not a quantity \(known: end_minus_theta"),
    (_set(0, direction="up"), r"claim 'armor_ends_above_theta': direction: 'up' is not a direction"),
    (_set(0, split="test"), r"claim 'armor_ends_above_theta': split: 'test' is not the split of quantity "
                            r"end_minus_theta \(validation\)"),
    (_set(0, split="holdout"), r"split: 'holdout' is not a split"),
    (_set(0, arms=["ARMOR", "dapo"]), r"arms: \['ARMOR', 'dapo'\] must list 1 arm\(s\) for quantity "
                                      r"end_minus_theta"),
    (_set(0, arms=["ARMOUR"]), r"claim 'armor_ends_above_theta': arms: 'ARMOUR' is not an arm name"),
    (_set(6, arms=["ARMOR", "dapo_cnt"]), r"claim 'armor_above_dapo_cont': arms: 'dapo_cnt' is not an arm"),
    (_set(1, at="first"), r"claim 'armor_ends_above_theta_test': at: 'first' must be one of last, best"),
    (_set(0, at="last"), r"at: 'last' applies to the test-split quantities only, not end_minus_theta"),
    (_set(0, window=3), r"claim 'armor_ends_above_theta': window: 3 is not a field of an entry"),
    (_set(0, confirmatory="yes"), r"confirmatory: 'yes' must be true or false"),
    (_set(0, direction="no_drop"), r"direction: 'no_drop' of a confirmatory entry must be greater or less"),
    (_set(1, key="armor_ends_above_theta"), r"claim 'armor_ends_above_theta': key: .* is used by another"),
    (_set(0, key="has space"), r"claims\[0\]: key: 'has space' must be a name"),
    (lambda r: r["claims"][0].pop("quantity"), r"claim 'armor_ends_above_theta': quantity: None is required"),
    (lambda r: r["roles"].update(ARMOR={"before": "armor_reset_never"}), r"role 'ARMOR': arm: None is "
                                                                         r"required"),
    (lambda r: r["roles"].update(ARMOR={"arm": "armor_rstart"}), r"role 'ARMOR': arm: 'armor_rstart' is not"),
    (lambda r: r["roles"].update(armor={"arm": "armor_restart"}), r"role 'armor': name: 'armor' must be a "
                                                                  r"name that is not an arm's"),
    (lambda r: r["roles"].update(ARMOR={"arm": "armor_restart", "after": 3}), r"role 'ARMOR': after: 3 is "
                                                                             r"not a field of a role"),
    (_set(0, covariate="anchor_mode_shortcut"), r"claim 'armor_ends_above_theta': covariate: "
                                                r"'anchor_mode_shortcut' applies to the across-seeds"),
    (lambda r: r["claims"][-1].pop("covariate"), r"claim 'armor_fall_grows_with_exploit_at_theta': "
                                                 r"covariate: None must name a per-step column"),
    (_set(-1, covariate="anchor mode"), r"covariate: 'anchor mode' must name a per-step column"),
    (_set(-1, confirmatory=True), r"confirmatory: True must be false for quantity fall_vs_covariate"),
    (lambda r: r.update(extra=1), r"register: extra: 1 is not a section"),
    (lambda r: r.update(claims=[]), r"register: claims: \[\] must list the entries"),
])
def test_a_bad_register_is_refused_naming_the_entry_and_field(edit, message):
    with pytest.raises(ClaimsError, match=message):
        parse_register(_bad(edit))


def test_the_quantities_declare_arity_and_split():
    assert {q: (v.arity, v.split, v.needs_at) for q, v in QUANTITIES.items()} == {
        "end_minus_theta": (1, "validation", False), "end_minus_start": (1, "validation", False),
        "end_diff": (2, "validation", False), "stage1_fall": (1, "validation", False),
        "reward_rise": (1, "train", False), "peak_minus_theta": (1, "validation", False),
        "peak_minus_peak": (2, "validation", False), "peak_after_diff": (2, "validation", False),
        "mid_diff": (2, "validation", False), "kl_contrast": (2, "train", False),
        "eval_diff": (2, "test", True), "pass_diff": (2, "test", True),
        "fall_vs_covariate": (2, "validation", False)}


# ------------------------------------------------------------------------------------------ protocol keys
@pytest.mark.parametrize("kw,message", [
    ({"claims": "final"}, r"protocol.claims: 'final' must be design or confirm"),
    ({"claims": "confirm", "peak_step": 15}, r"protocol.claims_design_preset: None must name the design"),
    ({"claims": "confirm", "claims_design_preset": "tiny"}, r"protocol.peak_step: None must fix θ\*"),
    ({"claims": "confirm", "claims_design_preset": "tiny", "peak_step": 15, "reset_sweep": [20],
      "restart_within": 0.5}, r"protocol.restart_step: None must fix the restart point"),
    ({"claims_design_preset": "tiny"}, r"protocol.claims_design_preset: 'tiny' applies to a confirmation"),
    ({"restart_step": 10}, r"protocol.restart_step: 10 needs protocol.restart_within"),
    ({"reset_sweep": [20], "restart_within": 0.5, "restart_step": 0}, r"protocol.restart_step: 0 must be a "
                                                                      r"stage-2 step >= 1"),
])
def test_the_seeds_role_keys_are_validated(kw, message):
    with pytest.raises(ConfigError, match=message):
        validate_protocol(ProtocolConfig(**kw))


def _preset_file(tmp_path, name, protocol: str):
    f = tmp_path / f"{name}.yaml"
    f.write_text(f"base: {PRESETS_DIR / 'tiny.yaml'}\nprotocol:\n" + protocol)
    return f


CONFIRM = ("  claims: confirm\n  claims_design_preset: tiny\n  peak_step: 15\n  restart_step: 10\n"
           "  clean_anchor_modes: [shortcut]\n"
           "  seeds: [{seeds}]\n  selection_seeds: []\n  side_arms: []\n  single_seed_arms: []\n")


@pytest.mark.parametrize("edit,message", [
    ("  restart_step: 15\n", r"protocol.restart_step=15: not a validated stage-2 step \(validation every 10"),
    ("  restart_step: 50\n", r"protocol.restart_step=50: not within protocol.restart_within's window of "
                             r"stage-2 steps \(0, 40\]"),
])
def test_a_fixed_restart_point_lies_in_the_window_and_is_validated(tmp_path, edit, message):
    with pytest.raises(ExperimentError, match=message):
        load_preset(_preset_file(tmp_path, "r", edit))
    assert load_preset(_preset_file(tmp_path, "ok", "  restart_step: 20\n")).protocol.restart_step == 20


def test_a_fixed_restart_point_must_be_saved(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(f"base: {PRESETS_DIR / 'tiny.yaml'}\nschedule: {{save_every: 20}}\n"
                 "protocol:\n  restart_step: 10\n")
    with pytest.raises(ExperimentError, match=r"protocol.restart_step=10: armor_reset_never saves no "
                                              r"checkpoint there \(schedule.save_every=20\)"):
        load_preset(f)


def test_a_confirmation_preset_is_checked_against_the_register(tmp_path):
    reg = load_register().bound("armor_restart", True)
    seeds = ", ".join(str(s) for s in range(10, 10 + MIN_CONFIRM_SEEDS))
    p = load_preset(_preset_file(tmp_path, "conf", CONFIRM.format(seeds=seeds)))
    runs, evaluated = preset_runs(p)
    # the matrix evaluates every arm a test-split entry reads (the role ARMOR's armor_restart too)
    assert "armor_restart" in evaluated
    check_preset(reg, p, runs, evaluated)                           # nothing is missing
    with pytest.raises(ClaimsError, match=r"confirmatory entry 'armor_ends_above_theta_test' \(test split\): "
                                          r"arm armor_restart \(role ARMOR\) is not evaluated by "
                                          r"confirmation preset conf"):
        check_preset(reg, p, runs, evaluated - {"armor_restart"})
    lacking = {k: v for k, v in runs.items() if k != "anchor_only"}
    with pytest.raises(ClaimsError, match=r"confirmatory entry 'mixture_adds_over_anchors': arm anchor_only "
                                          r"is not run by confirmation preset conf"):
        check_preset(reg, p, lacking, evaluated | {"armor_restart"})
    # a confirmation without the oracle's arms cannot decide the positive control: refused, naming them
    p0 = load_preset(_preset_file(tmp_path, "conf0", CONFIRM.format(seeds=seeds).replace(
        "  clean_anchor_modes: [shortcut]\n", "")))
    with pytest.raises(ClaimsError, match=r"confirmatory entry 'clean_armor_holds_theta': arm "
                                          r"armor_restart_clean \(role CLEAN_ARMOR\) is not run by "
                                          r"confirmation preset conf0"):
        check_preset(reg, p0, *preset_runs(p0))
    few = {**runs, "armor_reset_never": [10, 11]}
    with pytest.raises(ClaimsError, match=r"confirmatory entry 'armor_ends_above_theta': arm "
                                          r"armor_reset_never \(role ARMOR\) runs 2 seed\(s\) \[10, 11\] in "
                                          r"conf; a confirmatory entry needs at least 10"):
        check_preset(reg, p, few, evaluated | {"armor_restart"})
    # seeds shared with the design preset's selection seeds (tiny: 0, 1, 2): both lists named
    p2 = load_preset(_preset_file(tmp_path, "conf2", CONFIRM.format(seeds="2, " + seeds)))
    with pytest.raises(ClaimsError, match=r"protocol.seeds: \[2, 10, .*\] of confirmation preset conf2 are "
                                          r"not disjoint from the selection seeds \[0, 1, 2\] of its design "
                                          r"preset tiny .*: \[2\] in both"):
        check_preset(reg, p2, *preset_runs(p2))
    # the design preset must be one
    p3 = load_preset(_preset_file(tmp_path, "conf3", CONFIRM.format(seeds=seeds).replace(
        "claims_design_preset: tiny", "claims_design_preset: no-such-preset")))
    with pytest.raises(ClaimsError, match=r"protocol.claims_design_preset: 'no-such-preset': preset "
                                          r"'no-such-preset' not found"):
        check_preset(reg, p3, runs, evaluated)
    # a design preset is never checked
    check_preset(reg, load_preset("tiny"), {}, set())


def test_the_drivers_form_of_the_register():
    from reproduce.matrix.arms import claims_register
    p = load_preset("tiny")
    reg = claims_register(p)               # ARMOR bound to tiny's protocol.headline_arm
    assert load_register().resolve("ARMOR").arm == "headline"
    runs, _ = preset_runs(p)
    meta = register_meta(reg, p, runs)
    assert meta["register"] == "reproduce/matrix/claims.yaml" and meta["role"] == "design"
    assert meta["digest"] == reg.digest() and meta["family"] == [] and meta["design_preset"] is None
    first = meta["entries"][0]
    assert first["arms"] == [{"name": "ARMOR", "arm": "armor_restart", "before": "armor_reset_never"}]
    assert first["in_preset"] and first["missing"] == []
    by_key = {e["key"]: e for e in meta["entries"]}
    assert by_key["qae_armor_above_qae"]["missing"] == ["qae_armor_reset_never", "qae_cont"]
    assert not by_key["qae_armor_above_qae"]["in_preset"]
    confirm = dataclasses.replace(p, protocol=dataclasses.replace(p.protocol, claims="confirm",
                                                                  claims_design_preset="tiny"))
    cm = register_meta(reg, confirm, runs)
    assert cm["role"] == "confirm" and cm["family"] == [c.key for c in reg.confirmatory]
    assert cm["design_preset"] == "tiny"


def test_a_register_that_cannot_be_read_or_parsed_is_a_clear_error(tmp_path):
    with pytest.raises(ClaimsError, match=r"claims register .*none.yaml: cannot be read"):
        load_register(tmp_path / "none.yaml")
    (tmp_path / "bad.yaml").write_text("claims: [\n")
    with pytest.raises(ClaimsError, match=r"claims register .*bad.yaml: not YAML"):
        load_register(tmp_path / "bad.yaml")
