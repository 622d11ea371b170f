"""Branch, don't repeat: which runs start from another run's checkpoint instead of repeating its steps (the
authors' way with their checkpoints), and at which step.

    choose_branches(preset, arms)     # {arm: Branch(arm, source, step, kind)} for the arms of a plan
    shared_steps(preset, a, b)      # stage-2 steps through which the runs of arms a and b are the same
    monitor_reset(protocol, base)   # the step at which a stage-1 baseline's πref becomes its policy

Siblings (kind "sibling"): two stage-2 arms with the same start whose overrides differ only in the
reference reset (algo.reference.reset.every / until_step) run the same steps up to the first step d after
which one resets θref ← θ and the other does not. Their states after step d − 1 are equal, so one starts
from the other's checkpoint at k = d − 1 (its full state: weights, πref, optimizer, RNG, data position;
the trainer's resume, armor/run_folder.py) and applies its own schedule from step d on. The trainer's
sampling seeds are keyed by the step (armor.step_state.step_seed), so the branch equals the run from its
start (tests/integration/test_branch.py). In a group of such arms one runs from its start (the trunk:
the arm sharing the most steps with the others, then the one with the fewest resets, then the first); every
other starts from the arm it shares the most steps with (a maximum spanning tree: a branch point always lies
after its source's own branch point, so the source saves it itself).

Continuations (kind "continuation"): a control whose configuration is its stage-1 baseline's (dapo_cont,
dapo_late, qae_cont; Arm.continues) is that baseline's run past θ* or the late start: its run folder takes
the baseline's rows up to the baseline's last step, and trains from the baseline's last checkpoint the steps
it needs beyond (none when the baseline ran that far). Several controls of one baseline form a chain by their
end step: each continues the run of the one ending before it (dapo_late, ending at 440, from dapo_cont's 380,
which continues dapo's 360), the same run, so no step is trained twice; collect reads it from its start on.
DAPO's update does not read πref, but its KL monitor does: the baseline therefore resets πref to its policy
once, at the earliest fixed start of its controls (`monitor_reset`, θ*), so the control's KLs are measured
against its start as a stage-2 run's are. A control is continued only when its start is a fixed step
(protocol.peak_step, qae_peak_step, late_start_step): a start chosen from the curve (the tiny world's θ*) is
not known when stage 1 begins. A continued control whose start is not the monitor's reset step (dapo_late,
from step 200 while πref = θ*) reports no KLs (reproduce/jobs/collect.py drops them).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

from reproduce.matrix.arms import Arm, _normalized
from reproduce.matrix.presets import Preset, stage_steps
from reproduce.matrix.protocol import ProtocolConfig

RESET_KEYS = ("algo.reference.reset.every", "algo.reference.reset.until_step")
SIBLING, CONTINUATION = "sibling", "continuation"


@dataclass(frozen=True)
class Branch:
    arm: str                  # the arm whose run starts from another run's checkpoint
    source: str               # the run it starts from (an arm)
    step: Optional[int]       # the source's run-local step it resumes; None: the source's last step
    kind: str                 # SIBLING | CONTINUATION


def reset_steps(every: Optional[int], until: Optional[int], horizon: int) -> set[int]:
    """The steps t in [1, horizon] after which θref <- θ (armor.trainer.maybe_reset_reference):
    t mod every = 0 and (until is null or t <= until). reset_steps(80, None, 240) = {80, 160, 240}."""
    if every is None:
        return set()
    return {t for t in range(every, horizon + 1, every) if until is None or t <= until}


@functools.lru_cache(maxsize=None)
def _reset_of(path: str, overrides: tuple) -> tuple[Optional[int], Optional[int]]:
    from armor.config import load_config
    r = load_config(path, list(overrides)).algo.reference.reset
    return r.every, r.until_step


def arm_resets(preset: Preset, arm: Arm, horizon: Optional[int] = None) -> set[int]:
    """The stage-2 steps after which this arm's run resets πref (its effective config: the preset's, the
    stage-2 overrides, the arm's own)."""
    every, until = _reset_of(str(preset.path), tuple(preset.protocol.stage2_overrides) + tuple(arm.overrides))
    return reset_steps(every, until, horizon or stage_steps(preset)[1])


def _sibling_key(arm: Arm) -> tuple:
    """What two siblings share: the stage, baseline, start and every override but the reset's."""
    rest = tuple((k, v) for k, v in _normalized(arm.overrides) if k not in RESET_KEYS)
    return arm.stage, arm.baseline, arm.start, arm.restart_step, rest


def shared_steps(preset: Preset, a: Arm, b: Arm) -> int:
    """The stage-2 steps through which the runs of a and b are identical: d − 1 for the first step d at which
    exactly one of them resets πref; 0 for arms that differ in more than the reset (or are stage 1); the
    whole stage 2 for arms with the same resets (aliases)."""
    if a.stage != 2 or _sibling_key(a) != _sibling_key(b):
        return 0
    horizon = stage_steps(preset)[1]
    diff = arm_resets(preset, a, horizon) ^ arm_resets(preset, b, horizon)
    return min(diff) - 1 if diff else horizon


def continued(p: ProtocolConfig, arm: Arm) -> bool:
    """Whether the control `arm` continues its baseline's run: it has the baseline's configuration
    (Arm.continues) and its start is a fixed step."""
    return arm.continues is not None and start_step(p, arm) is not None


def start_step(p: ProtocolConfig, arm: Arm) -> Optional[int]:
    """The fixed total step a stage-2 arm starts from (θ*, the late start), or None when it is chosen at run
    time."""
    if arm.start == "late":
        return p.late_start_step
    if arm.start == "peak":
        return {"dapo": p.peak_step, "qae": p.qae_peak_step}.get(arm.baseline)
    return None


def monitor_reset(p: ProtocolConfig, arms: dict[str, Arm], base: str) -> Optional[int]:
    """The step at which the stage-1 baseline `base` resets πref to its policy (once), so that its continued
    controls measure their KLs against their start: the earliest fixed start among them (None: no control
    continues it). Taken over every arm of the protocol, not a plan's: the baseline's config must not change
    with --only."""
    if not p.branch:
        return None
    steps = [start_step(p, a) for a in arms.values() if a.continues == base and continued(p, a)]
    return min(steps) if steps else None


def choose_branches(preset: Preset, arms: dict[str, Arm]) -> dict[str, Branch]:
    """{arm: Branch} for the canonical arms of a plan (`arms`, build_arms' output) that start from another
    run of the plan; none without protocol.branch. Per seed the graph applies a branch only where the
    source runs that seed."""
    p = preset.protocol
    if not p.branch:
        return {}
    canon = [a for a in arms.values() if not a.alias_of]
    out: dict[str, Branch] = {}
    # the controls continuing one baseline, by their end: each continues the last one before it that trains
    # (ends past its own source: dapo_late from dapo_cont's step 380, not dapo's 360), so no step is trained
    # twice; a control ending within its source's run is a slice of it (no checkpoint to continue from)
    chains: dict[str, list[Arm]] = {}
    for a in canon:
        if a.continues in arms and continued(p, a):
            chains.setdefault(a.continues, []).append(a)
    s1, s2 = stage_steps(preset)
    for base, ctl in chains.items():
        prev, prev_end = base, s1
        for a in sorted(ctl, key=lambda a: (start_step(p, a) + s2, canon.index(a))):
            out[a.name] = Branch(a.name, prev, None, CONTINUATION)
            if start_step(p, a) + s2 > prev_end:
                prev, prev_end = a.name, start_step(p, a) + s2
    groups: dict[tuple, list[Arm]] = {}
    for a in canon:
        if a.stage == 2 and a.name not in out:
            groups.setdefault(_sibling_key(a), []).append(a)
    for members in groups.values():
        if len(members) > 1:
            out.update(_spanning_tree(preset, members))
    return out


def _spanning_tree(preset: Preset, members: list[Arm]) -> dict[str, Branch]:
    names = [a.name for a in members]
    by = {a.name: a for a in members}
    shared = {(x, y): shared_steps(preset, by[x], by[y]) for x in names for y in names if x != y}
    horizon = stage_steps(preset)[1]
    resets = {n: len(arm_resets(preset, by[n], horizon)) for n in names}
    root = max(names, key=lambda n: (sum(shared[n, m] for m in names if m != n), -resets[n],
                                     -names.index(n)))
    placed, rest, out = [root], [n for n in names if n != root], {}
    while rest:
        best = max(((shared[m, s], -names.index(m), -placed.index(s)), m, s) for m in rest for s in placed)
        (k, _, _), m, src = best
        if k < 1 or k >= horizon:
            break
        out[m] = Branch(m, src, k, SIBLING)
        placed.append(m)
        rest.remove(m)
    return out
