"""The experiment matrix as data: paper figure/table -> arms -> config overrides, derived from a preset.

    from reproduce.experiments import load_preset, figure_arms, build_arms, build_jobs
    p = load_preset("qwen25-math-7b")
    figure_arms(p.protocol)      # {"fig1": ["dapo", "anchor_only", "armor"], "fig2": [...], ...}
    build_arms(p)                # name -> Arm (stage, baseline, start, overrides, alias_of)
    build_jobs(p, root, seeds)   # the DAG for slurm/launcher.py

The protocol (armor/config.py ProtocolConfig) decides which figures a preset runs: a figure whose sweep is
empty in the protocol is not run (qwen3-8b-base has no kl_betas, so no Fig. 2/5). Rules:
  fig1   dapo, armor (+ anchor_only where the anchor ablations run: alpha_sweep or late_start_step)
  fig2   dapo_cont + kl_k3_b<β> for β in kl_betas                      (needs kl_betas)
  fig3   mix_a<α> for α in alpha_sweep; anchor_only, anchor_static_clip, anchor_offpolicy, armor;
         armor_late, dapo_late from late_start_step                    (needs alpha_sweep or late_start_step)
  fig4   armor_reset_never + armor_reset_<τ> for τ in reset_sweep       (needs reset_sweep)
  fig5   dapo_cont + kl_k2_b<β>                                         (needs kl_betas)
  fig6   qae (stage 1), qae_cont, qae_armor_reset_never, qae_armor_reset_<τ> (needs qae_reset_sweep)
  fig7   dapo_cont, armor_tau1, armor_tau1_until<S>, clip_expand        (needs qwen3_tau1_until)
  table1/table2  dapo (θ*), armor; with QAE in the preset also qae (θ*) and the qae_armor_* arms; evaluated
  table3 opd, mopd, armor (evaluated)
An arm whose configuration equals an earlier arm's (e.g. armor_reset_160 = armor on the 7B preset) is an
alias: it is trained once, and its folder is a symlink to the canonical one.

Stage 1 (from the base model): `dapo`, `qae` with schedule.total_steps = stage1_steps. θ* = protocol.peak_step
(qae_peak_step for QAE) if set, else the argmax of the validation curve smoothed over peak_selection_window
points, among steps that have a checkpoint; written to runs/<preset>/<baseline>/seed<s>/peak.json.
Stage 2: model.path = algo.reference.path = θ*'s checkpoint, step_offset = θ*'s step, schedule.total_steps =
stage2_steps, output_dir = runs/<preset>/<arm>/seed<s>; armor_late/dapo_late start from the DAPO checkpoint
at late_start_step instead (same length).

Presets that name hub ids (the paper's models, GPQA-Diamond, the full MMLU-Pro) get a first job that stages them
into a shared folder (reproduce/stage.py); their train and evaluate jobs read the staged copies (--stage-dir).

Job commands resolve late-bound inputs (θ*, checkpoints to evaluate) when they run:
    python -m reproduce.experiments stage       --preset P --root R [--stage-dir D]    (hub -> stage folder)
    python -m reproduce.experiments train       --preset P --root R --arm A --seed S   (execs armor.train)
    python -m reproduce.experiments select-peak --preset P --root R --arm dapo --seed S
    python -m reproduce.experiments evaluate    --preset P --root R --arm A --seed S   (runs eval.evaluate)
    python -m reproduce.experiments collect     --preset P --root R                    (results.parquet)
    python -m reproduce.experiments figures     --preset P --root R [--only ...]       (python -m figures)
    python -m reproduce.experiments show        --preset P                             (the matrix)
Entry points can be replaced (tests, containers): ARMOR_REPRO_ENTRYPOINTS='{"armor.train": ["python", "x.py"]}'.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from common.layout import STEP_RE, list_checkpoints
from armor.config import ProtocolConfig, RunConfig, load_config, read_yaml
from figures.data import fmt_alpha, fmt_beta  # arm names are shared with the figures
from common.jsonl import append_jsonl, read_json, read_jsonl, write_json_atomic
from common.results import frame, summary_rows, write_results
from reproduce import stage
from slurm import warm

REPO_ROOT = Path(__file__).resolve().parent.parent
PRESETS_DIR = Path(__file__).resolve().parent / "presets"
FIGURES = ("fig1", "fig2", "fig3", "fig4", "fig5", "fig6", "fig7")
TABLES = ("table1", "table2", "table3")
ITEMS = FIGURES + TABLES
BASELINES = ("dapo", "qae")
_JSON = dict(indent=1, sort_keys=True, default=str)   # the driver's state files
EVAL_STAMP = ".armor_evaluated.json"
FIG_STAMP = ".armor_figures.json"
META_NAME = "results.meta.json"


class ExperimentError(RuntimeError):
    pass


# ------------------------------------------------------------------------------------------- names
def _val(x: Any) -> str:
    """An override value as YAML text."""
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, (list, tuple)):
        return "[" + ",".join(_val(v) for v in x) + "]"
    if isinstance(x, str):
        return json.dumps(x) if (not x or re.search(r"[:#{}\[\],&*!|>'\"%@`]|^\s|\s$", x)) else x
    return repr(x)


# ------------------------------------------------------------------------------------------ presets
@dataclass
class Preset:
    name: str                 # file stem: runs/<name>, the `preset` column of results
    path: Path
    cfg: RunConfig

    @property
    def protocol(self) -> ProtocolConfig:
        return self.cfg.protocol

    @property
    def model_name(self) -> str:
        """The model column of results and tables: model.display_name, else the last part of model.path."""
        if self.cfg.model.display_name:
            return self.cfg.model.display_name
        p = Path(self.cfg.model.path)
        return p.parent.name if p.name == "base_model" else p.name

    def world(self) -> Optional[tuple[Path, bool]]:
        """(world dir, quick) when the preset trains the toy world's base model (tiny / smoke)."""
        mp = Path(self.cfg.model.path)
        if mp.name != "base_model":
            return None
        world = mp.parent
        data = Path(self.cfg.data.train)
        if world not in data.parents:
            return None
        return world, (self.name == "smoke" or self.cfg.name == "smoke")


def load_preset(name_or_path: str | Path) -> Preset:
    p = Path(name_or_path)
    if not p.suffix:
        p = PRESETS_DIR / f"{name_or_path}.yaml"
    if not p.is_file():
        known = sorted(x.stem for x in PRESETS_DIR.glob("*.yaml"))
        raise ExperimentError(f"preset {str(name_or_path)!r} not found (known: {', '.join(known)}; or a YAML path)")
    preset = Preset(name=p.stem, path=p.resolve(), cfg=load_config(p))
    _check_eval_samples(preset.cfg.protocol)
    return preset


def _check_eval_samples(proto: ProtocolConfig) -> None:
    """protocol.eval_samples must leave room for the pass@k the evaluation protocol reports (fail at plan time,
    not in the evaluation jobs after the training is spent)."""
    from eval.protocols import get_protocol
    if not proto.eval_samples or not proto.eval_benchmarks:
        return
    ev = get_protocol(proto.eval_protocol)
    for spec in proto.eval_benchmarks:
        bench = spec.split("=", 1)[0]
        need = max(ev.setting(bench).pass_ks, default=0)
        if need > proto.eval_samples:
            raise ExperimentError(f"protocol.eval_samples={proto.eval_samples}: the {ev.name!r} protocol reports "
                                  f"pass@{need} on {bench}, which needs at least {need} samples")


def _abs(path: str | Path) -> Path:
    """Paths in presets are relative to the repository root (where jobs run)."""
    p = Path(path)
    return p if p.is_absolute() else REPO_ROOT / p


# -------------------------------------------------------------------------------------------- arms
@dataclass
class Arm:
    name: str
    stage: int                       # 1: from the base model; 2: continual from a baseline's checkpoint
    baseline: str                    # dapo | qae (the stage-1 run it belongs to / starts from)
    overrides: list[str]             # the arm's own config overrides (without run location / start point)
    start: str = "base"              # base | peak | late
    figures: list[str] = field(default_factory=list)
    evaluate: bool = False
    alias_of: Optional[str] = None

    @property
    def run_arm(self) -> str:
        return self.alias_of or self.name


def _anchors(p: ProtocolConfig) -> list[str]:
    return ["algo.anchor.enabled=true", f"algo.anchor.ref_n={p.armor_ref_n}"]


def _mixed(alpha: float) -> list[str]:
    return ["algo.mix.variant=mixed", f"algo.mix.alpha={_val(float(alpha))}"]


def _reset(every: Optional[int], until: Optional[int] = None) -> list[str]:
    return [f"algo.reference.reset.every={_val(every)}", f"algo.reference.reset.until_step={_val(until)}"]


def arm_definitions(p: ProtocolConfig) -> dict[str, Arm]:
    """Every arm the protocol has numbers for, in canonical order, with its own overrides."""
    a: dict[str, Arm] = {}

    def add(name, stage, baseline, overrides, start):
        a[name] = Arm(name, stage, baseline, list(overrides), start)

    armor = _anchors(p) + _mixed(p.armor_alpha) + _reset(p.armor_reset_every, p.armor_reset_until)
    add("dapo", 1, "dapo", [], "base")
    if p.qae_reset_sweep or p.qae_peak_step is not None:
        add("qae", 1, "qae", ["algo.advantage=qae"], "base")
    add("dapo_cont", 2, "dapo", [], "peak")
    add("armor", 2, "dapo", armor, "peak")
    add("anchor_only", 2, "dapo", _anchors(p), "peak")
    for b in p.kl_betas:
        add(f"kl_k3_b{fmt_beta(b)}", 2, "dapo", [f"algo.kl.coef={_val(float(b))}", "algo.kl.estimator=k3"], "peak")
    for b in p.kl_betas:
        add(f"kl_k2_b{fmt_beta(b)}", 2, "dapo", [f"algo.kl.coef={_val(float(b))}", "algo.kl.estimator=k2"], "peak")
    for al in p.alpha_sweep:
        add(f"mix_a{fmt_alpha(al)}", 2, "dapo", _mixed(al), "peak")
    if p.alpha_sweep or p.late_start_step is not None:
        add("anchor_static_clip", 2, "dapo",
            _anchors(p) + ["algo.mix.variant=static_clip", f"algo.mix.alpha={_val(float(p.armor_alpha))}"], "peak")
        add("anchor_offpolicy", 2, "dapo", _anchors(p) + ["algo.mix.variant=offpolicy_anchor"], "peak")
    if p.late_start_step is not None:
        add("armor_late", 2, "dapo", armor, "late")
        add("dapo_late", 2, "dapo", [], "late")
    if p.reset_sweep:
        add("armor_reset_never", 2, "dapo", _anchors(p) + _mixed(p.armor_alpha) + _reset(None), "peak")
        for t in p.reset_sweep:
            add(f"armor_reset_{int(t)}", 2, "dapo", _anchors(p) + _mixed(p.armor_alpha) + _reset(int(t)), "peak")
    if "qae" in a:
        q = ["algo.advantage=qae"]
        add("qae_cont", 2, "qae", q, "peak")
        add("qae_armor_reset_never", 2, "qae", q + _anchors(p) + _mixed(p.armor_alpha) + _reset(None), "peak")
        for t in p.qae_reset_sweep:
            add(f"qae_armor_reset_{int(t)}", 2, "qae", q + _anchors(p) + _mixed(p.armor_alpha) + _reset(int(t)),
                "peak")
    if p.qwen3_tau1_until:
        add("armor_tau1", 2, "dapo", _anchors(p) + _mixed(p.armor_alpha) + _reset(1), "peak")
        for s in p.qwen3_tau1_until:
            add(f"armor_tau1_until{int(s)}", 2, "dapo", _anchors(p) + _mixed(p.armor_alpha) + _reset(1, int(s)),
                "peak")
        add("clip_expand", 2, "dapo",
            ["algo.mix.variant=static_clip", f"algo.mix.alpha={_val(float(p.armor_alpha))}"], "peak")
    add("opd", 2, "dapo", ["algo.distill.mode=opd"], "peak")
    add("mopd", 2, "dapo", ["algo.distill.mode=mopd"], "peak")
    # aliases: same start and same effective settings as an earlier arm
    seen: dict[tuple, str] = {}
    for arm in a.values():
        sig = (arm.stage, arm.baseline, arm.start, _normalized(arm.overrides))
        if sig in seen:
            arm.alias_of = seen[sig]
        else:
            seen[sig] = arm.name
    return a


def _normalized(overrides: list[str]) -> tuple:
    """Overrides as a comparable set, dropping values equal to the defaults (reset.every=null etc.)."""
    defaults = {"algo.reference.reset.every": "null", "algo.reference.reset.until_step": "null"}
    kv = {}
    for o in overrides:
        k, v = o.split("=", 1)
        kv[k] = v
    return tuple(sorted((k, v) for k, v in kv.items() if defaults.get(k) != v))


def figure_arms(p: ProtocolConfig) -> dict[str, list[str]]:
    """The figures/tables this protocol runs, and the arms each needs (stage-1 baselines included)."""
    arms = arm_definitions(p)
    ablations = bool(p.alpha_sweep) or p.late_start_step is not None
    f: dict[str, list[str]] = {}
    f["fig1"] = ["dapo", "armor"] + (["anchor_only"] if ablations else [])
    if p.kl_betas:
        f["fig2"] = ["dapo", "dapo_cont"] + [f"kl_k3_b{fmt_beta(b)}" for b in p.kl_betas]
    if ablations:
        f["fig3"] = (["dapo", "armor"] + [f"mix_a{fmt_alpha(x)}" for x in p.alpha_sweep]
                     + ["anchor_only", "anchor_static_clip", "anchor_offpolicy"]
                     + (["armor_late", "dapo_late"] if p.late_start_step is not None else []))
    if p.reset_sweep:
        f["fig4"] = ["dapo", "armor", "armor_reset_never"] + [f"armor_reset_{int(t)}" for t in p.reset_sweep]
    if p.kl_betas:
        f["fig5"] = ["dapo", "dapo_cont"] + [f"kl_k2_b{fmt_beta(b)}" for b in p.kl_betas]
    if p.qae_reset_sweep:
        f["fig6"] = (["qae", "qae_cont", "qae_armor_reset_never"]
                     + [f"qae_armor_reset_{int(t)}" for t in p.qae_reset_sweep])
    if p.qwen3_tau1_until:
        f["fig7"] = (["dapo", "dapo_cont", "armor_tau1"] + [f"armor_tau1_until{int(s)}" for s in p.qwen3_tau1_until]
                     + ["clip_expand"])
    t1 = ["dapo", "armor"]
    if "qae" in arms:
        t1 += ["qae", "qae_armor_reset_never"] + [f"qae_armor_reset_{int(t)}" for t in p.qae_reset_sweep]
    f["table1"] = list(t1)
    f["table2"] = list(t1)
    f["table3"] = ["dapo", "opd", "mopd", "armor"]
    for name, lst in f.items():
        missing = [x for x in lst if x not in arms]
        assert not missing, (name, missing)
    return f


def parse_only(only: str | list[str] | None) -> Optional[list[str]]:
    if not only:
        return None
    items = [x.strip() for x in (only.split(",") if isinstance(only, str) else only) if x.strip()]
    bad = [x for x in items if x not in ITEMS]
    if bad:
        raise ExperimentError(f"--only: unknown item(s) {bad} (known: {', '.join(ITEMS)})")
    return items


def build_arms(preset: Preset, only: Optional[list[str]] = None) -> dict[str, Arm]:
    """The arms to run for these figures/tables (default: all the preset has numbers for), canonical
    order, with `figures` and `evaluate` filled in. Raises if --only names an item the preset lacks."""
    defs = arm_definitions(preset.protocol)
    figs = figure_arms(preset.protocol)
    if only is not None:
        lacking = [x for x in only if x not in figs]
        if lacking:
            raise ExperimentError(f"preset {preset.name} does not run {lacking}: its protocol has no numbers "
                                  f"for them (it runs {', '.join(figs)})")
        figs = {k: v for k, v in figs.items() if k in only}
    evaluate = bool(preset.protocol.eval_benchmarks)
    chosen: dict[str, Arm] = {}
    for fig, names in figs.items():
        for n in names:
            arm = defs[n]
            arm.figures.append(fig)
            if fig.startswith("table") and evaluate and n not in ("dapo_cont",):
                arm.evaluate = True
            chosen[n] = arm
    out = {n: defs[n] for n in defs if n in chosen}
    for arm in list(out.values()):  # the canonical run of an alias must run too
        if arm.alias_of and arm.alias_of not in out:
            canon = defs[arm.alias_of]
            out[canon.name] = canon
    # stage-1 baselines of everything chosen
    for arm in list(out.values()):
        if arm.baseline not in out:
            out[arm.baseline] = defs[arm.baseline]
    return {n: defs[n] for n in defs if n in out}


# ------------------------------------------------------------------------------------------ locations
def preset_root(root: str | Path, preset: Preset) -> Path:
    return Path(root) / preset.name


def run_dir(root: Path, preset: Preset, arm: str, seed: int) -> Path:
    return preset_root(root, preset) / arm / f"seed{seed}"


def ckpt_dir(run: Path, step: int) -> Path:
    return Path(run) / "checkpoints" / f"step_{step:06d}"


def stage_steps(preset: Preset) -> tuple[int, int]:
    p = preset.protocol
    return (p.stage1_steps or preset.cfg.schedule.total_steps, p.stage2_steps or preset.cfg.schedule.total_steps)


def fixed_peak(preset: Preset, baseline: str) -> Optional[int]:
    p = preset.protocol
    return p.qae_peak_step if baseline == "qae" else p.peak_step


# ---------------------------------------------------------------------------------------- peak choice
def validation_benchmark(preset: Preset) -> Optional[str]:
    b = preset.cfg.validation.benchmarks
    return b[0].split("=", 1)[0] if b else None


def read_validation(run: Path, benchmark: Optional[str] = None) -> list[tuple[int, float]]:
    """(run-local step, value) of one benchmark (default: the first in the file), last row per step wins."""
    rows = read_jsonl(Path(run) / "validation.jsonl")
    if not rows:
        return []
    bench = benchmark if benchmark and any(r.get("benchmark") == benchmark for r in rows) else rows[0].get("benchmark")
    curve: dict[int, float] = {}
    for r in rows:
        if r.get("benchmark") == bench and r.get("value") is not None:
            curve[int(r["step"])] = float(r["value"])
    return sorted(curve.items())


def smooth(curve: list[tuple[int, float]], window: int) -> list[tuple[int, float]]:
    """Centered moving average over `window` points (fewer at the ends)."""
    if window <= 1:
        return list(curve)
    vals = [v for _, v in curve]
    lo, hi = (window - 1) // 2, window // 2
    out = []
    for i, (s, _) in enumerate(curve):
        seg = vals[max(0, i - lo): i + hi + 1]
        out.append((s, sum(seg) / len(seg)))
    return out


def choose_peak(curve: list[tuple[int, float]], checkpoints: list[int], window: int = 1,
                fixed: Optional[int] = None) -> dict:
    """θ*: the fixed step (must have a checkpoint), else the argmax of the smoothed curve among steps with a
    checkpoint (ties: earliest)."""
    if fixed is not None:
        if fixed not in checkpoints:
            raise ExperimentError(f"fixed peak step {fixed} has no checkpoint (have {checkpoints[:20]})")
        return {"step": int(fixed), "method": "fixed"}
    if not curve:
        raise ExperimentError("no validation curve to choose the peak from")
    sm = dict(smooth(curve, window))
    raw = dict(curve)
    cands = [s for s in sorted(sm) if s in set(checkpoints)]
    if not cands:
        raise ExperimentError(f"no validated step has a checkpoint (validated {sorted(sm)[:20]}, "
                              f"checkpoints {checkpoints[:20]})")
    best = max(cands, key=lambda s: (sm[s], -s))
    return {"step": int(best), "method": "argmax", "window": window, "value": raw[best], "smoothed": sm[best],
            "candidates": len(cands)}


def select_peak(preset: Preset, root: Path, baseline: str, seed: int) -> dict:
    run = run_dir(root, preset, baseline, seed)
    fixed = fixed_peak(preset, baseline)
    bench = validation_benchmark(preset)
    info = choose_peak(read_validation(run, bench), list_checkpoints(run), preset.protocol.peak_selection_window,
                       fixed)
    info.update(baseline=baseline, seed=seed, benchmark=bench, checkpoint=str(ckpt_dir(run, info["step"])),
                time=time.time())
    return info


def peak_file(root: Path, preset: Preset, baseline: str, seed: int) -> Path:
    return run_dir(root, preset, baseline, seed) / "peak.json"


def read_peak(root: Path, preset: Preset, baseline: str, seed: int) -> Optional[dict]:
    try:
        return json.loads(peak_file(root, preset, baseline, seed).read_text())
    except (OSError, ValueError):
        return None


def start_point(preset: Preset, root: Path, arm: Arm, seed: int) -> Optional[dict]:
    """{step, checkpoint} a stage-2 arm starts from, or None while θ* is not chosen yet."""
    if arm.start == "late":
        step = preset.protocol.late_start_step
        return {"step": step, "checkpoint": str(ckpt_dir(run_dir(root, preset, "dapo", seed), step))}
    pk = read_peak(root, preset, arm.baseline, seed)
    if pk is None:
        return None
    return {"step": int(pk["step"]), "checkpoint": pk["checkpoint"]}


def train_memory(preset: Preset, arm: Arm, res) -> str:
    """The dry run's line for a GPU train job: its ranks and the per-rank memory estimate (armor.memory)."""
    from armor import memory
    shape = memory.model_shape(preset.cfg.model.path)
    ranks = f"{res.world_size} ranks ({res.nodes} node(s) x {res.ranks_per_node})"
    if shape is None:
        return f"{ranks}; memory: model shape unknown (stage the model, or add it to armor.memory.KNOWN)"
    cfg = load_config(preset.path, arm.overrides)
    return f"{ranks}; " + memory.describe(memory.estimate(cfg, res.world_size, shape), cfg)


def train_overrides(preset: Preset, root: Path, arm: Arm, seed: int, start: Optional[dict] = None,
                    stage_dir: Optional[Path] = None) -> list[str]:
    """The full override list of `python -m armor.train --config <preset> ...` for one arm and seed. With a
    stage folder (reproduce/stage.py), the hub models and datasets the preset names read their staged copies."""
    p = preset.protocol
    s1, s2 = stage_steps(preset)
    out = [f"name={_val(f'{preset.name}/{arm.run_arm}/seed{seed}')}", f"seed={seed}",
           f"output_dir={_val(str(run_dir(root, preset, arm.run_arm, seed)))}"]
    if stage_dir is not None:
        staged = stage.staged_overrides(preset.cfg, stage.plan(preset.cfg, stage_dir), models=arm.stage == 1)
        out += [f"{k}={_val(v)}" for k, v in staged.items()]
    if arm.stage == 1:
        keep = sorted({x for x in (fixed_peak(preset, arm.name), p.late_start_step if arm.name == "dapo" else None)
                       if x is not None} | set(preset.cfg.schedule.keep_steps))
        out += [f"schedule.total_steps={s1}"]
        if keep:
            out += [f"schedule.keep_steps={_val(keep)}"]
    else:
        if start is None:
            raise ExperimentError(f"{arm.name}: its start checkpoint is not known yet (θ* of {arm.baseline} "
                                  f"seed {seed} not selected)")
        ck = _val(str(start["checkpoint"]))
        out += [f"model.path={ck}", f"algo.reference.path={ck}", f"step_offset={int(start['step'])}",
                f"schedule.total_steps={s2}"]
    return out + arm.overrides


# ------------------------------------------------------------------------------------------ evaluation
def eval_steps(preset: Preset, root: Path, arm: Arm, seed: int) -> list[int]:
    """Run-local steps whose checkpoints are evaluated: θ* for a baseline; for a stage-2 arm the best by
    validation (smoothed, among checkpoints), every eval_every-th checkpoint, and the paper's table step."""
    run = run_dir(root, preset, arm.run_arm, seed)
    if arm.stage == 1:
        pk = read_peak(root, preset, arm.name, seed)
        if pk is None:
            raise ExperimentError(f"{arm.name} seed {seed}: no peak.json yet")
        return [int(pk["step"])]
    ckpts = list_checkpoints(run)
    if not ckpts:
        raise ExperimentError(f"{run}: no checkpoints to evaluate")
    steps = set()
    curve = read_validation(run, validation_benchmark(preset))
    try:
        steps.add(choose_peak(curve, ckpts, preset.protocol.peak_selection_window)["step"])
    except ExperimentError:
        steps.add(ckpts[-1])
    n = preset.protocol.eval_every
    if n and n > 0:
        steps |= set(ckpts[::n])
    table_step = _paper_table_step(preset, arm)
    if table_step is not None:
        start = start_point(preset, root, arm, seed)
        local = table_step - (start["step"] if start else 0)
        if local in ckpts:
            steps.add(local)
    return sorted(steps)


def _paper_table_step(preset: Preset, arm: Arm) -> Optional[int]:
    """Total step of the paper's table row for this arm (paper presets only), from figures/paper_numbers.yaml."""
    f = REPO_ROOT / "figures" / "paper_numbers.yaml"
    if not f.is_file():
        return None
    try:
        import yaml
        data = yaml.safe_load(f.read_text()) or {}
    except Exception:
        return None
    steps = ((data.get("presets") or {}).get(preset.name) or {}).get("table_steps") or {}
    key = {"armor": "dapo_armor"}.get(arm.name, arm.name)
    if arm.name.startswith("qae_armor"):
        key = "qae_armor"
    v = steps.get(key)
    return int(v) if isinstance(v, (int, float)) else None


def eval_benchmarks(preset: Preset) -> list[str]:
    return list(preset.protocol.eval_benchmarks)


def eval_command(preset: Preset, ckpt: Path, out: Path, stage_dir: Optional[Path] = None) -> list[str]:
    """`--out .../eval/step_NNNNNN`: eval.evaluate writes <bench>__<protocol>__k<k>.json straight into it.
    With a stage folder, the benchmarks staged from the hub are read from it (NAME=path)."""
    benchmarks = eval_benchmarks(preset)
    if stage_dir is not None:
        benchmarks = stage.staged_benchmarks(benchmarks, stage.plan(preset.cfg, stage_dir))
    argv = entry("eval.evaluate") + ["--checkpoint", str(ckpt), "--benchmarks", ",".join(benchmarks),
                                     "--protocol", preset.protocol.eval_protocol, "--out", str(out),
                                     "--preset", str(preset.path), "--engine", preset.cfg.rollout.engine,
                                     "--no-progress"]
    if preset.protocol.eval_samples:
        argv += ["--samples", str(preset.protocol.eval_samples)]
    if preset.protocol.eval_limit:
        argv += ["--limit", str(preset.protocol.eval_limit)]
    # the preset's thread count, when it fixes one, holds under every backend (local, SLURM, any core count):
    # the CPU sampler's results depend on it
    threads = preset.cfg.threads or os.environ.get("ARMOR_THREADS")
    if threads:
        argv += ["--threads", str(threads)]
    return argv


def eval_done(preset: Preset, root: Path, arm: Arm, seed: int) -> bool:
    st = read_json(run_dir(root, preset, arm.run_arm, seed) / "eval" / EVAL_STAMP)
    return bool(st) and st.get("benchmarks") == eval_benchmarks(preset) and \
        st.get("protocol") == preset.protocol.eval_protocol


# --------------------------------------------------------------------------------------------- collect
def _run_offset(run: Path) -> Optional[int]:
    f = run / "config.yaml"
    if f.is_file():
        try:
            return int((read_yaml(f) or {}).get("step_offset") or 0)
        except Exception:
            return None
    return None


def collect_inputs(preset: Preset, root: Path, seeds: list[int]) -> list[Path]:
    arms = arm_definitions(preset.protocol)
    files = []
    for arm in arms.values():
        if arm.alias_of:
            continue
        for s in seeds:
            run = run_dir(root, preset, arm.name, s)
            for name in ("validation.jsonl", "config.yaml", "peak.json"):
                if (run / name).is_file():
                    files.append(run / name)
            if (run / "eval").is_dir():
                files += sorted(x for x in (run / "eval").rglob("*.json") if not x.name.startswith("."))
    return files


def fingerprint(preset: Preset, root: Path, seeds: list[int]) -> str:
    h = hashlib.sha1()
    h.update(json.dumps([preset.name, sorted(arm_definitions(preset.protocol)), sorted(seeds)]).encode())
    for f in collect_inputs(preset, root, seeds):
        st = f.stat()
        h.update(f"{f}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


_EVAL_NAME = re.compile(r"^(?P<bench>.+?)__(?P<proto>.+?)__k(?P<k>\d+)\.json$")


def eval_file_rows(path: Path, meta: dict, step_offset: int) -> list[dict]:
    """Table rows of one eval summary JSON (eval.evaluate's layout); its step is the summary's total_step, else
    step_offset + its step (or the nearest step_NNNNNN folder's). A file that is not a summary gives no rows."""
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict) or not data.get("samples"):
        return []
    step = data.get("total_step")
    if step is None:
        local = data.get("step")
        if local is None:
            local = next((int(m.group(1)) for m in map(STEP_RE.match, (q.name for q in path.parents)) if m), None)
        if local is None:
            return []
        step = step_offset + int(local)
    m = _EVAL_NAME.match(path.name)
    summary = {**data, "benchmark": data.get("benchmark") or (m.group("bench") if m else path.stem)}
    return summary_rows(summary, meta, step=int(step))


def collect(preset: Preset, root: Path, seeds: list[int]) -> Path:
    """Write runs/<preset>/results.parquet (docs/CONTRACTS.md columns) and results.meta.json."""
    fp = fingerprint(preset, root, seeds)
    arms = arm_definitions(preset.protocol)
    rows = []
    peaks: dict = {}
    numerics: set[str] = set()   # the distinct CPU numerics the runs computed with (armor.trainer NUMERICS_FILE)
    for arm in arms.values():
        for s in seeds:
            run = run_dir(root, preset, arm.run_arm, s)
            if not run.is_dir():
                continue
            if arm.alias_of:  # the alias's folder points at the canonical run
                link = run_dir(root, preset, arm.name, s)
                if not link.exists() and not link.is_symlink():
                    link.parent.mkdir(parents=True, exist_ok=True)
                    link.symlink_to(os.path.relpath(run, link.parent))
            offset = _run_offset(run)
            if offset is None:
                st = start_point(preset, root, arm, s) if arm.stage == 2 else None
                offset = int(st["step"]) if st else 0
            base = {"preset": preset.name, "model": preset.model_name, "arm": arm.name, "seed": int(s)}
            numerics.add(json.dumps(read_json(run / "numerics.json"), sort_keys=True))
            for r in read_jsonl(run / "validation.jsonl"):
                k = int(r.get("k") or 0)
                rows.append({**base, "step": int(r.get("total_step", offset + int(r["step"]))),
                             "benchmark": r["benchmark"], "metric": r.get("metric") or f"avg@{k}", "k": k,
                             "value": float(r["value"]), "n": k, "source": "validation"})
            if (run / "eval").is_dir():
                for jf in sorted((run / "eval").rglob("*.json")):
                    if jf.name.startswith("."):
                        continue
                    rows += eval_file_rows(jf, base, offset)
            if arm.stage == 1:
                pk = read_peak(root, preset, arm.name, s)
                if pk:
                    peaks.setdefault(arm.name, {})[str(s)] = pk["step"]
    df = frame(rows)
    if len(df):
        df = df.drop_duplicates(subset=["arm", "seed", "step", "benchmark", "metric", "source"], keep="last")
        df = df.sort_values(["arm", "seed", "source", "benchmark", "metric", "step"]).reset_index(drop=True)
    out = preset_root(root, preset)
    out.mkdir(parents=True, exist_ok=True)
    protocol = json.loads(json.dumps(__import__("dataclasses").asdict(preset.protocol)))
    meta = {"preset": preset.name, "model": preset.model_name, "protocol": protocol, "peaks": peaks,
            "aliases": {a.name: a.alias_of for a in arms.values() if a.alias_of}, "seeds": seeds,
            "validation_benchmark": validation_benchmark(preset), "inputs": fp, "rows": len(df),
            "cpu_numerics": [json.loads(n) for n in sorted(numerics) if n != "null"], "time": time.time()}
    write_results(out / "results.parquet", df, metadata={"protocol": protocol})
    write_json_atomic(out / META_NAME, meta, **_JSON)
    return out / "results.parquet"


def collect_done(preset: Preset, root: Path, seeds: list[int]) -> bool:
    out = preset_root(root, preset)
    meta = read_json(out / META_NAME)
    return bool(meta) and (out / "results.parquet").is_file() and meta.get("inputs") == fingerprint(preset, root, seeds)


def _sha(path: Path) -> Optional[str]:
    try:
        return hashlib.sha1(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def figures_done(preset: Preset, root: Path, only: Optional[list[str]]) -> bool:
    out = preset_root(root, preset)
    st = read_json(out / "figures" / FIG_STAMP)
    return bool(st) and st.get("results") == _sha(out / "results.parquet") and st.get("only") == (only or None)


# ------------------------------------------------------------------------------------------ entry points
def entry(module: str) -> list[str]:
    """argv prefix that runs a module: `python -m module`, unless ARMOR_REPRO_ENTRYPOINTS replaces it."""
    raw = os.environ.get("ARMOR_REPRO_ENTRYPOINTS")
    if raw:
        try:
            table = json.loads(raw)
        except ValueError as e:
            raise ExperimentError(f"ARMOR_REPRO_ENTRYPOINTS is not JSON: {e}") from e
        if module in table:
            v = table[module]
            return shlex.split(v) if isinstance(v, str) else list(v)
    return [sys.executable, "-m", module]


def _module_exists(module: str) -> bool:
    if os.environ.get("ARMOR_REPRO_ENTRYPOINTS") and module in json.loads(os.environ["ARMOR_REPRO_ENTRYPOINTS"]):
        return True
    parts = module.split(".")
    base = REPO_ROOT.joinpath(*parts)
    return base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()


# ------------------------------------------------------------------------------------------------ jobs
def build_jobs(preset: Preset, root: str | Path, seeds: Optional[list[int]] = None,
               only: Optional[list[str]] = None, resources: Optional[dict] = None,
               stage_dir: Optional[str | Path] = None) -> list:
    """The DAG: stage (hub models/datasets, presets that name hub ids) | world (toy presets) -> stage 1 ->
    select peak -> stage 2 -> evaluate (array) -> collect -> figures."""
    from slurm.launcher import Job
    from slurm.resources import load_resources
    root = Path(root).resolve()
    seeds = list(seeds if seeds is not None else preset.protocol.seeds)
    res = resources or load_resources(preset.protocol.nodes, preset.protocol.gpus_per_node,
                                      procs_per_node=preset.protocol.procs_per_node)
    arms = build_arms(preset, only)
    me = [sys.executable, "-m", "reproduce.experiments"]
    common = ["--preset", str(preset.path), "--root", str(root)]
    env = {"ARMOR_PROGRESS": "0", "TOKENIZERS_PARALLELISM": "false"}
    jobs = []
    first_key = None   # the job stage-1 training waits for: staging or the world build
    sd = Path(stage_dir).resolve() if stage_dir else stage.default_stage_dir(root)
    items = stage.plan(preset.cfg, sd)
    stage_args = ["--stage-dir", str(sd)] if items else []
    if items:
        first_key = "stage"
        jobs.append(Job("stage", me + ["stage"] + common + stage_args, kind="stage", resources=res["stage"], env=env,
                        done=lambda items=items: all(it.done() for it in items),
                        info={"items": [f"{it.kind} {it.label()} -> {it.dest}" for it in items]},
                        description=f"stage {len(items)} hub model(s)/dataset(s) into {sd}"))
    world_key = None
    w = preset.world()
    if w is not None:
        world, quick = w
        world_key = "world"
        argv = entry("reproduce.toy.build") + ["--out", str(world)] + (["--quick"] if quick else [])
        jobs.append(Job(world_key, argv, kind="world", resources=res["world"], env=env,
                        done=lambda world=world: (_abs(world) / "world.json").is_file(),
                        description=f"build the toy world in {world}"))
    train_keys, eval_keys = [], []
    for s in seeds:
        for arm in arms.values():
            if arm.alias_of:
                continue
            run = run_dir(root, preset, arm.name, s)
            key = f"stage{arm.stage}/{arm.name}/seed{s}"
            if arm.stage == 1:
                deps = [k for k in (first_key, world_key) if k]
            elif arm.start == "late":
                deps = [f"stage1/dapo/seed{s}"]
            else:
                deps = [f"peak/{arm.baseline}/seed{s}"]
            start = start_point(preset, root, arm, s) if arm.stage == 2 else None
            if arm.stage == 2 and start is None and fixed_peak(preset, arm.baseline) is not None:
                f = fixed_peak(preset, arm.baseline)
                start = {"step": f, "checkpoint": str(ckpt_dir(run_dir(root, preset, arm.baseline, s), f))}
            info = {"arm": arm.name, "figures": ",".join(arm.figures)}
            if res["train"].gpus_per_node:
                info["memory"] = train_memory(preset, arm, res["train"])
            if arm.stage == 1 or start is not None:
                info["overrides"] = " ".join(train_overrides(preset, root, arm, s, start, sd if items else None))
            else:
                info["overrides"] = "θ* of %s seed %d chosen at run time (argmax of validation); " % (
                    arm.baseline, s) + " ".join(arm.overrides)
            jobs.append(Job(key, me + ["train"] + common + ["--arm", arm.name, "--seed", str(s)] + stage_args,
                            kind="train",
                            deps=deps, resources=res["train"], launch="torchrun", env=env,
                            done=lambda run=run: (run / "DONE").is_file(), info=info,
                            description=f"train {arm.name} seed {s}"))
            train_keys.append(key)
            if arm.stage == 1 and any(a.baseline == arm.name and a.stage == 2 and a.start == "peak"
                                      for a in arms.values()) or (arm.stage == 1 and arm.evaluate):
                fixed = fixed_peak(preset, arm.name)
                pf = peak_file(root, preset, arm.name, s)
                jobs.append(Job(f"peak/{arm.name}/seed{s}", me + ["select-peak"] + common +
                                ["--arm", arm.name, "--seed", str(s)], kind="select_peak", deps=[key],
                                resources=res["select_peak"], env=env,
                                done=lambda pf=pf, fixed=fixed: _peak_ok(pf, fixed),
                                info={"peak": f"step {fixed} (protocol)" if fixed is not None else
                                      f"argmax of validation (window {preset.protocol.peak_selection_window})"},
                                description=f"choose θ* of {arm.name} seed {s}"))
    for s in seeds:
        for arm in arms.values():
            if not arm.evaluate or arm.alias_of:
                continue
            dep = f"peak/{arm.name}/seed{s}" if arm.stage == 1 else f"stage2/{arm.name}/seed{s}"
            key = f"eval/{arm.name}/seed{s}"
            jobs.append(Job(key, me + ["evaluate"] + common + ["--arm", arm.name, "--seed", str(s)] + stage_args,
                            kind="evaluate", deps=[dep] + ([first_key] if first_key else []),
                            resources=res["evaluate"], array="evaluate", env=env,
                            done=lambda arm=arm, s=s: eval_done(preset, root, arm, s),
                            info={"benchmarks": ",".join(stage.staged_benchmarks(eval_benchmarks(preset), items)),
                                  "protocol": preset.protocol.eval_protocol},
                            description=f"evaluate {arm.name} seed {s}"))
            eval_keys.append(key)
    seeds_arg = ["--seeds", ",".join(map(str, seeds))]
    jobs.append(Job("collect", me + ["collect"] + common + seeds_arg, kind="collect",
                    deps=[j.key for j in jobs if j.kind in ("train", "evaluate", "select_peak")],
                    resources=res["collect"], env=env, done=lambda: collect_done(preset, root, seeds),
                    description=f"results table {preset_root(root, preset) / 'results.parquet'}"))
    only_arg = ["--only", ",".join(only)] if only else []
    jobs.append(Job("figures", me + ["figures"] + common + seeds_arg + only_arg, kind="figures", deps=["collect"],
                    resources=res["figures"], env=env,
                    done=lambda: collect_done(preset, root, seeds) and figures_done(preset, root, only),
                    description=f"figures + report in {preset_root(root, preset)}"))
    return jobs


def _peak_ok(pf: Path, fixed: Optional[int]) -> bool:
    d = read_json(pf)
    return bool(d) and (fixed is None or int(d.get("step", -1)) == fixed) and Path(d.get("checkpoint", "")).exists()


def missing_entry_points(preset: Preset) -> list[str]:
    mods = ["armor.train", "eval.evaluate", "figures"]
    if preset.world() is not None:
        mods.append("reproduce.toy.build")
    if not preset.protocol.eval_benchmarks:
        mods.remove("eval.evaluate")
    return [m for m in mods if not _module_exists(m)]


# ------------------------------------------------------------------------------------------------- CLI
def _exec(argv: list[str]) -> int:
    """exec argv (in a warm local job: run a `python -m` command in this process; slurm/warm.py)."""
    return warm.exec_or_run(argv)


def cmd_train(preset: Preset, root: Path, arm_name: str, seed: int, stage_dir: Optional[Path] = None) -> int:
    arms = arm_definitions(preset.protocol)
    if arm_name not in arms:
        raise ExperimentError(f"unknown arm {arm_name!r} for preset {preset.name} (known: {', '.join(arms)})")
    arm = arms[arm_name]
    run = run_dir(root, preset, arm.run_arm, seed)
    if (run / "DONE").is_file():
        print(f"{run}: DONE; nothing to do")
        return 0
    start = None
    if arm.stage == 2:
        start = start_point(preset, root, arm, seed)
        if start is None:
            raise ExperimentError(f"{arm.name} seed {seed}: {peak_file(root, preset, arm.baseline, seed)} is missing "
                                  f"(run select-peak first)")
        if not Path(start["checkpoint"]).is_dir():
            raise ExperimentError(f"{arm.name} seed {seed}: start checkpoint {start['checkpoint']} does not exist")
    overrides = train_overrides(preset, root, arm, seed, start, stage_dir)
    run.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run / "arm.json", {"arm": arm.name, "preset": preset.name, "seed": seed, "start": start,
                                         "overrides": overrides, "config": str(preset.path)}, **_JSON)
    argv = entry("armor.train") + ["--config", str(preset.path)] + overrides
    print("exec:", " ".join(shlex.quote(a) for a in argv), flush=True)
    return _exec(argv)


def cmd_select_peak(preset: Preset, root: Path, arm: str, seed: int) -> int:
    info = select_peak(preset, root, arm, seed)
    write_json_atomic(peak_file(root, preset, arm, seed), info, **_JSON)
    print(f"θ* of {arm} seed {seed}: step {info['step']} ({info['method']}) -> {info['checkpoint']}")
    return 0


def cmd_evaluate(preset: Preset, root: Path, arm_name: str, seed: int, stage_dir: Optional[Path] = None) -> int:
    arm = arm_definitions(preset.protocol)[arm_name]
    run = run_dir(root, preset, arm.run_arm, seed)
    steps = eval_steps(preset, root, arm, seed)
    for step in steps:
        ck = ckpt_dir(run, step)
        argv = eval_command(preset, ck, run / "eval" / f"step_{step:06d}", stage_dir)
        print("run:", " ".join(shlex.quote(a) for a in argv), flush=True)
        rc = warm.run(argv)
        if rc != 0:
            print(f"evaluation of {ck} failed (exit {rc})", file=sys.stderr)
            return rc
    write_json_atomic(run / "eval" / EVAL_STAMP, {"steps": steps, "benchmarks": eval_benchmarks(preset),
                                                      "protocol": preset.protocol.eval_protocol, "time": time.time()}, **_JSON)
    return 0


DRIVER_RUNS = "driver_runs.jsonl"           # under <preset root>/_jobs: one line per run_all invocation
DRIVER_START_ENV = "ARMOR_DRIVER_START"    # the running invocation's start time, set for its jobs


def record_driver_run(out: Path, start: float, end: float) -> None:
    """Append one run_all invocation (start, end) to the preset root's driver log."""
    (out / "_jobs").mkdir(parents=True, exist_ok=True)
    append_jsonl(out / "_jobs" / DRIVER_RUNS, {"start": start, "end": end})


def driver_wall_time(out: Path, now: Optional[float] = None) -> Optional[float]:
    """Seconds spent by run_all on this preset root so far: the finished invocations in the driver log plus
    the running one (ARMOR_DRIVER_START). None when neither is known (figures made outside the driver)."""
    total, known = 0.0, False
    log = out / "_jobs" / DRIVER_RUNS
    for r in read_jsonl(log):
        with contextlib.suppress(ValueError, KeyError, TypeError):
            total += float(r["end"]) - float(r["start"])
            known = True
    start = os.environ.get(DRIVER_START_ENV)
    if start is not None:
        with contextlib.suppress(ValueError):
            total += (now or time.time()) - float(start)
            known = True
    return total if known else None


def cmd_figures(preset: Preset, root: Path, seeds: list[int], only: Optional[list[str]]) -> int:
    out = preset_root(root, preset)
    res = out / "results.parquet"
    argv = entry("figures") + ["--results", str(res), "--out", str(out / "figures"), "--preset", preset.name,
                               "--runs", str(out), "--report", str(out / "REPRODUCTION.md"),
                               "--seeds", ",".join(map(str, seeds)),
                               "--command", f"python reproduce/run_all.py --preset {preset.name}"
                               + (f" --only {','.join(only)}" if only else "")]
    if only:
        argv += ["--only", ",".join(only)]
    wall = driver_wall_time(out)
    if wall is not None:
        argv += ["--wall-time-s", f"{wall:.0f}"]
    print("run:", " ".join(shlex.quote(a) for a in argv), flush=True)
    rc = warm.run(argv)
    if rc == 0:
        write_json_atomic(out / "figures" / FIG_STAMP, {"results": _sha(res), "only": only or None,
                                                        "time": time.time()}, **_JSON)
    return rc


def cmd_show(preset: Preset, only: Optional[list[str]]) -> int:
    arms = build_arms(preset, only)
    figs = figure_arms(preset.protocol)
    print(f"preset {preset.name} ({preset.path}); figures/tables: {', '.join(figs)}")
    for a in arms.values():
        tag = f"= {a.alias_of}" if a.alias_of else " ".join(a.overrides) or "(preset as is)"
        print(f"  stage{a.stage} {a.name:<24} from {a.baseline + ':' + a.start:<10} "
              f"{'[eval] ' if a.evaluate else ''}{tag}   <- {','.join(a.figures)}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m reproduce.experiments", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p, arm=False, seeds=False, only=False, staged=False):
        p.add_argument("--preset", required=True, help="preset name (reproduce/presets) or YAML path")
        if p.prog.split()[-1] != "show":
            p.add_argument("--root", default=str(REPO_ROOT / "runs"))
        if staged:
            p.add_argument("--stage-dir", default=None, help="read the hub models/datasets staged here "
                                                             "(reproduce/stage.py)")
        if arm:
            p.add_argument("--arm", required=True)
            p.add_argument("--seed", type=int, default=0)
        if seeds:
            p.add_argument("--seeds", default=None)
        if only:
            p.add_argument("--only", default=None)

    common(sub.add_parser("stage", help="copy the hub models and datasets the preset needs into the stage "
                                        "folder (reproduce/stage.py)"), staged=True)
    common(sub.add_parser("train", help="train one arm (execs armor.train)"), arm=True, staged=True)
    common(sub.add_parser("select-peak", help="write peak.json of a stage-1 baseline"), arm=True)
    common(sub.add_parser("evaluate", help="evaluate the selected checkpoints of one run"), arm=True, staged=True)
    common(sub.add_parser("collect", help="write results.parquet"), seeds=True)
    common(sub.add_parser("figures", help="draw figures and the report"), seeds=True, only=True)
    common(sub.add_parser("show", help="print the matrix"), only=True)
    a = ap.parse_args(argv)
    try:
        preset = load_preset(a.preset)
        if a.cmd == "show":
            return cmd_show(preset, parse_only(a.only))
        root = Path(a.root).resolve()
        seeds = [int(x) for x in a.seeds.split(",")] if getattr(a, "seeds", None) else list(preset.protocol.seeds)
        sd = Path(a.stage_dir).resolve() if getattr(a, "stage_dir", None) else None
        if a.cmd == "stage":
            sd = sd or stage.default_stage_dir(root)
            stage.stage_all(stage.plan(preset.cfg, sd), sd)
            return 0
        if a.cmd == "train":
            return cmd_train(preset, root, a.arm, a.seed, sd)
        if a.cmd == "select-peak":
            return cmd_select_peak(preset, root, a.arm, a.seed)
        if a.cmd == "evaluate":
            return cmd_evaluate(preset, root, a.arm, a.seed, sd)
        if a.cmd == "collect":
            path = collect(preset, root, seeds)
            print(f"wrote {path}")
            return 0
        if a.cmd == "figures":
            return cmd_figures(preset, root, seeds, parse_only(a.only))
    except (ExperimentError, stage.StageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
