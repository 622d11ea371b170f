"""Which runs branch from which (reproduce/matrix/branching.py): the reset schedule's steps, the steps two
siblings share, the spanning tree of a group, the continued controls and their monitor reset."""
import dataclasses

from reproduce.matrix.arms import build_arms
from reproduce.matrix.branching import (CONTINUATION, SIBLING, Branch, monitor_reset, choose_branches,
                                        reset_steps, shared_steps)
from reproduce.matrix.presets import load_preset


def test_reset_steps_follow_the_trainers_rule():
    assert reset_steps(80, None, 240) == {80, 160, 240}
    assert reset_steps(1, 3, 6) == {1, 2, 3}                # τ = 1 until step 3, then frozen
    assert reset_steps(160, 160, 240) == {160}
    assert reset_steps(None, None, 240) == set()


def test_shared_steps_end_before_the_first_differing_reset():
    p = load_preset("qwen25-math-7b")
    a = build_arms(p)
    never, r80, r120, armor = (a[n] for n in ("armor_reset_never", "armor_reset_80", "armor_reset_120",
                                              "armor"))
    assert shared_steps(p, never, r80) == 79 and shared_steps(p, r80, never) == 79
    assert shared_steps(p, r80, r120) == 79                # both reset at 80; 120 not at 160, 80 does
    assert shared_steps(p, never, armor) == 159
    assert shared_steps(p, never, a["anchor_only"]) == 0    # other overrides: nothing shared
    assert shared_steps(p, a["dapo"], a["qae"]) == 0        # stage 1 never branches


def test_7b_choose_branches_reset_arms_from_never_and_continues_the_controls():
    p = load_preset("qwen25-math-7b")
    got = choose_branches(p, build_arms(p))
    assert got["armor_reset_80"] == Branch("armor_reset_80", "armor_reset_never", 79, SIBLING)
    assert got["armor_reset_120"].step == 119 and got["armor"].step == 159
    assert got["qae_armor_reset_150"] == Branch("qae_armor_reset_150", "qae_armor_reset_never", 149, SIBLING)
    assert {k for k, b in got.items() if b.kind == CONTINUATION} == {"dapo_cont", "dapo_late", "qae_cont"}
    assert got["qae_cont"].source == "qae" and got["dapo_late"].step is None
    # dapo's two controls form a chain by their end (380, 440): dapo_late continues dapo_cont's run
    assert got["dapo_cont"].source == "dapo" and got["dapo_late"].source == "dapo_cont"
    only_late = {k: v for k, v in build_arms(p).items() if k != "dapo_cont"}
    assert choose_branches(p, only_late)["dapo_late"].source == "dapo"     # alone: from dapo itself
    # a control that ends within dapo's run is a slice (no checkpoint): the next continues dapo itself
    short = dataclasses.replace(p, protocol=dataclasses.replace(p.protocol, peak_step=100))   # ends at 340
    got = choose_branches(short, build_arms(short))
    assert got["dapo_cont"].source == "dapo" and got["dapo_late"].source == "dapo"
    # the restarts start from never's checkpoints with a fresh optimizer: no branch of their own
    assert not any(k.startswith("armor_restart") for k in got)
    assert "armor_reset_never" not in got and "dapo" not in got
    # stage-1 DAPO resets πref at θ* once: its continued controls measure KLs against θ*
    assert monitor_reset(p.protocol, build_arms(p), "dapo") == 140
    assert monitor_reset(p.protocol, build_arms(p), "qae") == 230
    off = dataclasses.replace(p, protocol=dataclasses.replace(p.protocol, branch=False))
    assert choose_branches(off, build_arms(off)) == {}


def test_8b_tau1_schedules_branch_from_the_headline_and_a_choose_branches_within_itself():
    p = load_preset("qwen3-8b-base")
    got = choose_branches(p, build_arms(p))
    # armor (τ = 1 until 180) shares 180 steps with τ = 1 throughout and 110 with until 110; it resets less
    assert got["armor_tau1"] == Branch("armor_tau1", "armor", 180, SIBLING)
    assert got["armor_tau1_until110"] == Branch("armor_tau1_until110", "armor", 110, SIBLING)
    assert got["dapo_cont"].kind == CONTINUATION
    assert choose_branches(p, build_arms(p, ["table1"])) == {}     # armor alone: nothing to share


def test_tiny_branches_its_reset_arms_but_continues_no_control():
    """The tiny world chooses θ* and the late start from the curves: unknown when stage 1 starts, so its
    stage-1 run cannot carry the controls' monitor reset, and no control is continued."""
    p = load_preset("tiny")
    got = choose_branches(p, build_arms(p))
    assert got == {"armor": Branch("armor", "armor_reset_never", 39, SIBLING),
                   "armor_reset_20": Branch("armor_reset_20", "armor_reset_never", 19, SIBLING)}
    assert monitor_reset(p.protocol, build_arms(p), "dapo") is None
