"""The whole config of one run: the preset, then the run's location and start, the stage-2 protocol, the
retention the driver plans, and the arm's own overrides, as `python -m armor.train` override strings.

    train_overrides(preset, root, arms["armor"], seed=0, start={"step": 140, "checkpoint": ".../step_000140"})
    continuation_overrides(preset, root, arms["dapo_cont"], arms["dapo"], seed=0, end=380)
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from reproduce import hub
from reproduce.matrix.arms import RESTART_START, Arm, _val, arm_definitions
from reproduce.matrix.branching import monitor_reset
from reproduce.matrix.presets import ExperimentError, Preset, run_dir, stage_steps
from reproduce.matrix.retention import retention_overrides


def train_overrides(preset: Preset, root: Path, arm: Arm, seed: int, start: Optional[dict] = None,
                    fetch_dir: Optional[Path] = None, steps: Optional[int] = None,
                    keep: Sequence[int] = ()) -> list[str]:
    """The full override list of `python -m armor.train --config <preset> ...` for one arm and seed. With a
    fetch folder (reproduce/hub.py), the hub models and datasets the preset names read their fetched
    copies. `steps`: the run's schedule.total_steps as the plan needs it (default: its stage's length, the
    rest of stage 2 for a restart); `keep`: further steps it saves and keeps (branch points of other runs)."""
    p = preset.protocol
    s1, s2 = stage_steps(preset)
    out = [f"name={_val(f'{preset.name}/{arm.run_arm}/seed{seed}')}", f"seed={seed}",
           f"output_dir={_val(str(run_dir(root, preset, arm.run_arm, seed)))}"]
    if fetch_dir is not None:
        fetched = hub.fetched_overrides(preset.cfg, hub.items(preset, fetch_dir), models=arm.stage == 1)
        out += [f"{k}={_val(v)}" for k, v in fetched.items()]
    if arm.stage == 1:
        default = p.headroom_steps if arm.name == 'dapo_natural' else s1
        out += [f"schedule.total_steps={steps or default}"]
        out += retention_overrides(preset, arm, extra=keep)
        # its continued controls measure their KLs against their start (reproduce/matrix/branching.py)
        k = monitor_reset(p, arm_definitions(p), arm.name)
        if k is not None:
            out += [f"algo.reference.reset.every={k}", f"algo.reference.reset.until_step={k}"]
    else:
        if start is None:
            raise ExperimentError(f"{arm.name}: its start checkpoint is not known yet (θ* of {arm.baseline} "
                                  f"seed {seed} not selected)")
        ck = _val(str(start["checkpoint"]))
        # a restart from stage-2 step r (start["stage2_step"]) of armor_reset_never runs the rest of stage 2
        rest = s2 - int(start.get("stage2_step", 0)) if arm.start == RESTART_START else s2
        if rest < 1:
            raise ExperimentError(f"{arm.name} seed {seed}: its start {start} leaves no stage-2 step "
                                  f"(stage2_steps {s2})")
        out += [f"model.path={ck}", f"algo.reference.path={ck}", f"step_offset={int(start['step'])}",
                f"schedule.total_steps={min(rest, steps) if steps else rest}"]
        if p.stage2_validate_every:
            out += [f"schedule.validate_every={p.stage2_validate_every}"]
        if p.stage2_warmup_steps is not None:     # one warm-up rule for every stage-2 run
            out += [f"optim.warmup_steps={int(p.stage2_warmup_steps)}"]
        out += list(p.stage2_overrides)
        out += retention_overrides(preset, arm, start, extra=keep)
    return out + arm.overrides


def continuation_overrides(preset: Preset, root: Path, arm: Arm, base: Arm, seed: int, end: int,
                           fetch_dir: Optional[Path] = None) -> list[str]:
    """A continued control's config (reproduce/matrix/branching.py): its baseline's, trained to total step
    `end`, in the control's own run folder under its own name."""
    ov = train_overrides(preset, root, base, seed, None, fetch_dir, steps=end)
    own = {"name": _val(f"{preset.name}/{arm.name}/seed{seed}"),
           "output_dir": _val(str(run_dir(root, preset, arm.name, seed)))}
    return [f"{k}={own[k]}" if (k := o.split("=", 1)[0]) in own else o for o in ov]
