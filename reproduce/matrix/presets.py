"""Presets: a preset file as the driver reads it (the trainer's config + its protocol) and where its runs
live.

    p = load_preset("qwen25-math-7b")      # or a YAML path; reproduce/presets/<name>.yaml
    p.cfg                                  # armor.config.RunConfig (what armor.train reads)
    p.protocol                             # reproduce.matrix.protocol.ProtocolConfig (`protocol:`)
    run_dir(root, p, "armor", 0)           # <root>/<preset>/armor/seed0

A preset is validated whole before any job is planned: the trainer's keys by armor.config, the `protocol:`
section by reproduce/matrix/protocol.py, and protocol.eval_samples against the pass@k its evaluation protocol
reports.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from armor.config import RunConfig, load_config
from common.jsonl import read_json
from reproduce.matrix.protocol import SECTION, ProtocolConfig, load_protocol

REPO_ROOT = Path(__file__).resolve().parents[2]
PRESETS_DIR = REPO_ROOT / "reproduce" / "presets"
STATE_JSON = dict(indent=1, sort_keys=True, default=str)   # how the driver writes its state files


class ExperimentError(RuntimeError):
    """The plan cannot be made or a step of it cannot run (the subcommands exit 2 with its message)."""


@dataclass
class Preset:
    name: str                 # file stem: runs/<name>, the `preset` column of results
    path: Path
    cfg: RunConfig
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)

    @property
    def model_name(self) -> str:
        """The model column of results and tables: model.display_name, else the last part of model.path."""
        if self.cfg.model.display_name:
            return self.cfg.model.display_name
        p = Path(self.cfg.model.path)
        return p.parent.name if p.name == "base_model" else p.name

    @property
    def cli_arg(self) -> str:
        """What `run_all.py --preset` takes to load this preset again: the name of a shipped preset, else the
        YAML's path (relative to the repository where it lies inside it)."""
        if self.path.parent == PRESETS_DIR.resolve():
            return self.name
        try:
            return str(self.path.relative_to(REPO_ROOT.resolve()))
        except ValueError:
            return str(self.path)

    def world(self) -> Optional[tuple[Path, bool]]:
        """(world dir, quick) when the preset trains the toy world's base model (tiny / smoke)."""
        mp = Path(self.cfg.model.path)
        if mp.name != "base_model":
            return None
        world = mp.parent
        data = Path(self.cfg.data.train)
        if world not in data.parents:
            return None
        # quick: the smoke preset's world, and a paper family's layout (a rehearsal's; no shipped copy)
        quick = self.name == "smoke" or self.cfg.name == "smoke" or self.protocol.world_arch is not None
        return world, quick

    def world_build_args(self) -> Optional[list[str]]:
        """The arguments of `python -m reproduce.toy.build` that build this preset's world (the `world` job's;
        a toy preset's `#hint:` lines print the same command), or None without a toy world."""
        w = self.world()
        if w is None:
            return None
        world, quick = w
        version = self.protocol.world_version
        return (["--out", str(world)] + (["--quick"] if quick else [])
                + (["--version", str(version)] if version != 1 else [])
                + (["--arch", self.protocol.world_arch] if self.protocol.world_arch else []))


def load_preset(name_or_path: str | Path) -> Preset:
    p = Path(name_or_path)
    if not p.suffix:
        p = PRESETS_DIR / f"{name_or_path}.yaml"
    if not p.is_file():
        known = sorted(x.stem for x in PRESETS_DIR.glob("*.yaml"))
        raise ExperimentError(f"preset {str(name_or_path)!r} not found (known: {', '.join(known)}; or a YAML "
                              f"path)")
    cfg = load_config(p)
    preset = Preset(name=p.stem, path=p.resolve(), cfg=cfg,
                    protocol=load_protocol(cfg.foreign.get(SECTION, {})))
    _check_eval_samples(preset.protocol)
    if preset.protocol.late_start_fraction is not None and cfg.schedule.keep_last is not None:
        raise ExperimentError(f"protocol.late_start_fraction={preset.protocol.late_start_fraction}: the late "
                              f"start is chosen among stage-1 DAPO's checkpoints after it ends, but "
                              f"schedule.keep_last="
                              f"{cfg.schedule.keep_last} deletes them; set schedule.keep_last: null")
    stage2_cfg = cfg
    if preset.protocol.stage2_overrides:      # every stage-2 run's config validates before any job is planned
        stage2_cfg = load_config(p, list(preset.protocol.stage2_overrides))
    _check_restart(preset, stage2_cfg)
    return preset


def _check_restart(preset: Preset, stage2_cfg: Optional[RunConfig] = None) -> None:
    """protocol.restart_within leaves armor_restart a validated checkpoint of armor_reset_never to start from
    (with schedule.keep_last, reproduce/matrix/retention.py keeps every candidate); a fixed
    protocol.restart_step is one of them: within the window, validated and saved (stage2_cfg: the stage-2
    runs' config, protocol.stage2_overrides applied)."""
    p, cfg = preset.protocol, preset.cfg
    s2 = p.stage2_steps or cfg.schedule.total_steps
    late = [t for t in p.restart_sweep if t >= s2]
    if late:
        raise ExperimentError(f"protocol.restart_sweep: {late} leave no stage-2 step after the restart "
                              f"(stage2_steps {s2})")
    if p.restart_within is None:
        return
    every = p.stage2_validate_every or cfg.schedule.validate_every
    last = int(p.restart_within * s2)
    if not every or last < every:
        raise ExperimentError(f"protocol.restart_within={p.restart_within}: the first "
                              f"{last} of {s2} stage-2 steps hold no validation (every "
                              f"{every}) to choose a restart point")
    r = p.restart_step
    if r is None:
        return
    sched = (stage2_cfg or cfg).schedule
    if not 0 < r <= last:
        raise ExperimentError(f"protocol.restart_step={r}: not within protocol.restart_within's window of "
                              f"stage-2 steps (0, {last}] ({p.restart_within} of {s2})")
    if r % every:
        raise ExperimentError(f"protocol.restart_step={r}: not a validated stage-2 step (validation every "
                              f"{every}: protocol.stage2_validate_every / schedule.validate_every)")
    if r % sched.save_every and sched.keep_last is None:
        raise ExperimentError(f"protocol.restart_step={r}: armor_reset_never saves no checkpoint there "
                              f"(schedule.save_every={sched.save_every})")


def _check_eval_samples(proto: ProtocolConfig) -> None:
    """protocol.eval_samples must leave room for the pass@k the evaluation protocol reports (fail at plan
    time, not in the evaluation jobs after the training is spent)."""
    from eval.protocols import get_protocol
    if not proto.eval_samples or not proto.eval_benchmarks:
        return
    ev = get_protocol(proto.eval_protocol)
    for spec in proto.eval_benchmarks:
        bench = spec.split("=", 1)[0]
        need = max(ev.setting(bench).pass_ks, default=0)
        if need > proto.eval_samples:
            raise ExperimentError(f"protocol.eval_samples={proto.eval_samples}: the {ev.name!r} protocol "
                                  f"reports pass@{need} on {bench}, which needs at least {need} samples")


def repo_path(path: str | Path) -> Path:
    """Paths in presets are relative to the repository root (where jobs run)."""
    p = Path(path)
    return p if p.is_absolute() else REPO_ROOT / p


# ------------------------------------------------------------------------------------------ locations
def preset_root(root: str | Path, preset: Preset) -> Path:
    return Path(root) / preset.name


def run_dir(root: Path, preset: Preset, arm: str, seed: int) -> Path:
    return preset_root(root, preset) / arm / f"seed{seed}"


def ckpt_dir(run: Path, step: int) -> Path:
    return Path(run) / "checkpoints" / f"step_{step:06d}"


def done_steps(run: Path) -> Optional[int]:
    """The steps a finished run (DONE) ran, or None (not finished; a DONE without the count: unknown, -1)."""
    d = read_json(Path(run) / "DONE")
    if d is None:
        return None
    try:
        return int(d["steps"])
    except (TypeError, KeyError, ValueError):
        return -1


def run_done(run: Path, steps: Optional[int] = None) -> bool:
    """A run is done when it finished at least `steps` steps (or finished at all, without `steps`)."""
    n = done_steps(run)
    return n is not None and (steps is None or n < 0 or n >= steps)


def stage_steps(preset: Preset) -> tuple[int, int]:
    p = preset.protocol
    return (p.stage1_steps or preset.cfg.schedule.total_steps,
            p.stage2_steps or preset.cfg.schedule.total_steps)


def fixed_peak(preset: Preset, baseline: str) -> Optional[int]:
    p = preset.protocol
    return {"dapo": p.peak_step, "qae": p.qae_peak_step}.get(baseline)
