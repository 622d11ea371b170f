"""The arm matrix: paper figure/table -> arms -> the trainer's config overrides, derived from a protocol.

    figure_arms(p.protocol)          # {"fig1": ["dapo", "anchor_only", "armor"], "fig2": [...], ...}
    figure_panels(p.protocol)        # {"fig1": {"reward": ["dapo"], ...}, ...}: what each panel draws
    build_arms(p)                    # name -> Arm (stage, baseline, start, overrides, alias_of)
    train_overrides(p, root, arm, seed, start)   # the full `python -m armor.train` override list

The protocol (reproduce/matrix/protocol.py) decides which figures a preset runs: a figure whose sweep is empty
in the protocol is not run (qwen3-8b-base has no kl_betas, so no Fig. 2/5). Rules:
  fig1   dapo, armor (+ anchor_only where the anchor ablations run: alpha_sweep or a late start)
  fig2   dapo_cont + kl_k3_b<β> for β in kl_betas                      (needs kl_betas)
  fig3   mix_a<α> for α in alpha_sweep; anchor_only, anchor_static_clip, anchor_offpolicy, armor;
         armor_late, dapo_late from the late start  (needs alpha_sweep or late_start_step/_fraction);
         armor_any_anchor (§4: a wrong reference sample may anchor; needs wrong_anchor_arm)
  control  the positive control and the mechanism (docs/claims.md): anchor_only_clean,
         armor_reset_never_clean (+ armor_restart_clean, the authors' restart from armor_reset_never_clean's
         run, with restart_within): anchor_only, armor_reset_never and armor_restart whose anchors pass the
         oracle filter (algo.anchor.filter=exclude_modes, protocol.clean_anchor_modes; needs it), beside
         dapo_cont and the paper's-rule arms; drawn in the steps figure and the claims' forest plot
  fig4   armor_reset_never + armor_reset_<τ> for τ in reset_sweep       (needs reset_sweep)
         + armor_restart, the authors' reset: a new run from armor_reset_never's best checkpoint (needs
           restart_within; reproduce/jobs/peaks.py choose_restart)
         + armor_restart_<τ> for τ in restart_sweep: the authors' reset at a fixed point, a new run from
           armor_reset_never's checkpoint at stage-2 step τ
  fig4_restarts  Fig. 4 without the in-run reset arms (armor_reset_<τ>): dapo, armor, armor_reset_never and
         the authors' restarts only, drawn as Fig. 4 (needs reset_sweep and a restart arm)
  fig5   dapo_cont + kl_k2_b<β>                                 (needs kl_betas and kl_k2_sweep)
  fig6   qae (stage 1), qae_cont, qae_armor_reset_never, qae_armor_reset_<τ> (needs qae_reset_sweep)
  fig7   dapo_cont, armor_tau1, armor_tau1_until<S>, clip_expand        (needs qwen3_tau1_until)
  headline  dapo (θ*) and protocol.headline_arm (armor, or the authors' armor_restart_<τ>): Table 1's
         headline pair, the item a budget takes first (reproduce/dag/budget.py); evaluated
  table1/table2  dapo (θ*), armor (and headline_arm); with QAE in the preset also qae (θ*) and the
         qae_armor_* arms; evaluated
  table3 opd, mopd, armor (evaluated)
  world  dapo, dapo_cont, dapo_natural (the headroom control: DAPO on protocol.headroom_data for
         headroom_steps; needs headroom_steps) -- figures/world_checks.py
An arm whose configuration equals an earlier arm's (e.g. armor_reset_160 = armor on the 7B preset) is an
alias: it is trained once, and its folder is a symlink to the canonical one (reproduce/jobs/collect.py).
With protocol.branch, a control whose configuration is its stage-1 baseline's (dapo_cont, dapo_late,
qae_cont: `continues`) is that baseline's run continued, and arms identical to another up to a step start
from its checkpoint there (reproduce/matrix/branching.py).

Stage 1 (from the base model): `dapo`, `qae` with schedule.total_steps = stage1_steps. Stage 2: model.path =
algo.reference.path = θ*'s checkpoint (reproduce/jobs/peaks.py), step_offset = θ*'s step,
schedule.total_steps = stage2_steps, output_dir = runs/<preset>/<arm>/seed<s>; armor_late/dapo_late start
from the DAPO checkpoint at late_start_step, or the one chosen by late_start_fraction (peak.json), instead
(same length).
armor_restart (start "restart") starts from the checkpoint of armor_reset_never chosen by
protocol.restart_within (restart.json, same stage-2 step r on every seed): model.path = algo.reference.path =
it (πref = the restart point), a new run folder (fresh optimizer, its learning rate warmed up over
protocol.stage2_warmup_steps, as every stage-2 run), step_offset = θ* + r, and stage2_steps − r steps, so
it ends at the same total step as every stage-2 arm; no in-run reset. armor_restart_<τ> (start "restart",
restart_step τ) is the same from armor_reset_never's checkpoint at the fixed stage-2 step τ. A restart arm's
source run is its `restart_from` (armor_reset_never; armor_restart_clean's: armor_reset_never_clean), whose
folder holds its restart.json.
protocol.single_seed_arms run on the first seed only, protocol.side_arms on the first side_arm_seeds
(`arm_seeds`); every other arm runs every seed.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from reproduce.matrix.presets import ExperimentError, Preset
from reproduce.matrix.protocol import ProtocolConfig

FIGURES = ("fig1", "fig2", "fig3", "fig4", "fig5", "fig6", "fig7")
TABLES = ("table1", "table2", "table3")
# the tiny world's own checks (headroom control, DAPO's dynamics, clipping)
WORLD = "world"
# Table 1's headline pair: DAPO to θ*, then +ARMOR (protocol.headline_arm)
HEADLINE = "headline"
# Fig. 4's authors' restarts without its in-run reset sweep: an item a plan or budget can take alone
RESTARTS_ITEM = "fig4_restarts"
# the positive control and the mechanism (issue 44): the oracle-clean anchors' arms beside the paper's rule
CONTROL = "control"
ITEMS = (HEADLINE,) + FIGURES + (RESTARTS_ITEM,) + TABLES + (WORLD, CONTROL)
BASELINES = ("dapo", "qae")
RESTART_ARM, RESTART_FROM, RESTART_START = "armor_restart", "armor_reset_never", "restart"


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


# ------------------------------------------------------------------------------------------ arm names
def fmt_beta(b: float) -> str:
    """KL β as written in arm names: 1e-3, 1e-2, 1e-1, 1 (docs/CONTRACTS.md)."""
    b = float(b)
    if b.is_integer():
        return str(int(b))
    mant, exp = f"{b:e}".split("e")
    mant = mant.rstrip("0").rstrip(".")
    return f"{mant}e{int(exp)}"


def fmt_alpha(a: float) -> str:
    """The mixed ratio's α as written in arm names: 0.8, 0.875."""
    return f"{float(a):g}"


# a sweep's arms: (family, value); value None marks the family's reference arm (armor_reset_never)
SWEEPS = ("kl_k3", "kl_k2", "mix", "reset", "qae_armor", "tau1_until", "restart")


@dataclass
class Arm:
    name: str
    stage: int                       # 1: from the base model; 2: continual from a baseline's checkpoint
    baseline: str                    # dapo | qae (the stage-1 run it belongs to / starts from)
    overrides: list[str]             # the arm's own config overrides (without run location / start point)
    start: str = "base"              # base | peak | late | restart
    figures: list[str] = field(default_factory=list)
    evaluate: bool = False
    alias_of: Optional[str] = None
    sweep: Optional[tuple[str, Optional[float]]] = None   # (family in SWEEPS, its value) of a sweep's arm
    restart_step: Optional[int] = None   # start "restart" at this fixed stage-2 step (armor_restart_<τ>)
    continues: Optional[str] = None      # the stage-1 baseline whose run this control continues (branching)
    restart_from: Optional[str] = None   # start "restart": the stage-2 run it restarts from (RESTART_FROM)
    oracle: bool = False                 # its anchors pass the world's mode classifier: an oracle the paper's
                                         # ARMOR does not have (protocol.clean_anchor_modes)

    @property
    def run_arm(self) -> str:
        return self.alias_of or self.name

    def facts(self) -> dict:
        """What the figures read of this arm (results.meta.json `arms`): no arm name is parsed there."""
        sweep = None if self.sweep is None else {"family": self.sweep[0], "value": self.sweep[1]}
        return {"stage": self.stage, "baseline": self.baseline, "start": self.start,
                "figures": list(self.figures), "alias_of": self.alias_of, "sweep": sweep,
                "restart_step": self.restart_step, "continues": self.continues,
                **({"oracle": True} if self.oracle else {})}


def _anchors(p: ProtocolConfig) -> list[str]:
    return ["algo.anchor.enabled=true", f"algo.anchor.ref_n={p.armor_ref_n}"]


def _mixed(alpha: float) -> list[str]:
    return ["algo.mix.variant=mixed", f"algo.mix.alpha={_val(float(alpha))}"]


def _clean(p: ProtocolConfig) -> list[str]:
    """The oracle's anchor filter: no anchor of the modes protocol.clean_anchor_modes names."""
    return ["algo.anchor.filter=exclude_modes",
            f"algo.anchor.exclude_modes={_val(list(p.clean_anchor_modes))}"]


def _reset(every: Optional[int], until: Optional[int] = None) -> list[str]:
    return [f"algo.reference.reset.every={_val(every)}", f"algo.reference.reset.until_step={_val(until)}"]


def arm_definitions(p: ProtocolConfig) -> dict[str, Arm]:
    """Every arm the protocol has numbers for, in canonical order, with its own overrides."""
    a: dict[str, Arm] = {}

    def add(name, stage, baseline, overrides, start, sweep=None, restart_step=None,
            restart_from=RESTART_FROM, oracle=False):
        a[name] = Arm(name, stage, baseline, list(overrides), start, sweep=sweep, restart_step=restart_step,
                      restart_from=restart_from if start == RESTART_START else None, oracle=oracle)

    armor = _anchors(p) + _mixed(p.armor_alpha) + _reset(p.armor_reset_every, p.armor_reset_until)
    add("dapo", 1, "dapo", [], "base")
    if p.headroom_steps:
        add("dapo_natural", 1, "dapo_natural", [f"data.train={_val(p.headroom_data)}"], "base")
    if p.qae_reset_sweep or p.qae_peak_step is not None:
        add("qae", 1, "qae", ["algo.advantage=qae"], "base")
    add("dapo_cont", 2, "dapo", [], "peak")
    add("armor", 2, "dapo", armor, "peak")
    add("anchor_only", 2, "dapo", _anchors(p), "peak")
    for b in p.kl_betas:
        add(f"kl_k3_b{fmt_beta(b)}", 2, "dapo", [f"algo.kl.coef={_val(float(b))}", "algo.kl.estimator=k3"],
            "peak", ("kl_k3", float(b)))
    for b in (p.kl_betas if p.kl_k2_sweep else []):
        add(f"kl_k2_b{fmt_beta(b)}", 2, "dapo", [f"algo.kl.coef={_val(float(b))}", "algo.kl.estimator=k2"],
            "peak", ("kl_k2", float(b)))
    for al in p.alpha_sweep:
        add(f"mix_a{fmt_alpha(al)}", 2, "dapo", _mixed(al), "peak", ("mix", float(al)))
    if p.alpha_sweep or p.has_late_start:
        add("anchor_static_clip", 2, "dapo",
            _anchors(p) + ["algo.mix.variant=static_clip", f"algo.mix.alpha={_val(float(p.armor_alpha))}"],
            "peak")
        add("anchor_offpolicy", 2, "dapo", _anchors(p) + ["algo.mix.variant=offpolicy_anchor"], "peak")
    if p.wrong_anchor_arm:
        add("armor_any_anchor", 2, "dapo", _anchors(p) + ["algo.anchor.correct_only=false"]
            + _mixed(p.armor_alpha) + _reset(None), "peak")
    if p.clean_anchor_modes:        # the oracle-clean anchors (issue 44's positive control and mechanism)
        add("anchor_only_clean", 2, "dapo", _anchors(p) + _clean(p), "peak", oracle=True)
        add("armor_reset_never_clean", 2, "dapo",
            _anchors(p) + _clean(p) + _mixed(p.armor_alpha) + _reset(None), "peak", oracle=True)
        if p.restart_within is not None:     # the authors' restart, from armor_reset_never_clean's run
            add(f"{RESTART_ARM}_clean", 2, "dapo",
                _anchors(p) + _clean(p) + _mixed(p.armor_alpha) + _reset(None), RESTART_START,
                restart_from="armor_reset_never_clean", oracle=True)
    if p.has_late_start:
        add("armor_late", 2, "dapo", armor, "late")
        add("dapo_late", 2, "dapo", [], "late")
    if p.reset_sweep:
        add("armor_reset_never", 2, "dapo", _anchors(p) + _mixed(p.armor_alpha) + _reset(None), "peak",
            ("reset", None))
        for t in p.reset_sweep:
            add(f"armor_reset_{int(t)}", 2, "dapo", _anchors(p) + _mixed(p.armor_alpha) + _reset(int(t)),
                "peak", ("reset", float(t)))
        if p.restart_within is not None:
            add(RESTART_ARM, 2, "dapo", _anchors(p) + _mixed(p.armor_alpha) + _reset(None), RESTART_START)
        for t in p.restart_sweep:       # the authors' restarts from fixed steps (warm-up: every stage 2's)
            add(f"{RESTART_ARM}_{int(t)}", 2, "dapo", _anchors(p) + _mixed(p.armor_alpha) + _reset(None),
                RESTART_START, ("restart", float(t)), restart_step=int(t))
    if "qae" in a:
        q = ["algo.advantage=qae"]
        add("qae_cont", 2, "qae", q, "peak")
        add("qae_armor_reset_never", 2, "qae", q + _anchors(p) + _mixed(p.armor_alpha) + _reset(None), "peak",
            ("qae_armor", None))
        for t in p.qae_reset_sweep:
            add(f"qae_armor_reset_{int(t)}", 2, "qae",
                q + _anchors(p) + _mixed(p.armor_alpha) + _reset(int(t)), "peak", ("qae_armor", float(t)))
    if p.qwen3_tau1_until:
        add("armor_tau1", 2, "dapo", _anchors(p) + _mixed(p.armor_alpha) + _reset(1), "peak")
        for s in p.qwen3_tau1_until:
            add(f"armor_tau1_until{int(s)}", 2, "dapo",
                _anchors(p) + _mixed(p.armor_alpha) + _reset(1, int(s)), "peak", ("tau1_until", float(s)))
        add("clip_expand", 2, "dapo",
            ["algo.mix.variant=static_clip", f"algo.mix.alpha={_val(float(p.armor_alpha))}"], "peak")
    add("opd", 2, "dapo", ["algo.distill.mode=opd"], "peak")
    add("mopd", 2, "dapo", ["algo.distill.mode=mopd"], "peak")
    # aliases: same start and same effective settings as an earlier arm
    seen: dict[tuple, str] = {}
    for arm in a.values():
        sig = (arm.stage, arm.baseline, arm.start, arm.restart_step, _normalized(arm.overrides))
        if sig in seen:
            arm.alias_of = seen[sig]
        else:
            seen[sig] = arm.name
    # controls that continue their stage-1 baseline: the baseline's own configuration (its run, continued)
    if p.branch and not p.stage2_overrides:
        for arm in a.values():
            base = a.get(arm.baseline)
            if (arm.stage == 2 and arm.start in ("peak", "late") and not arm.alias_of and base is not None
                    and base.stage == 1 and _normalized(arm.overrides) == _normalized(base.overrides)):
                arm.continues = base.name
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
    ablations = bool(p.alpha_sweep) or p.has_late_start
    f: dict[str, list[str]] = {}
    f["fig1"] = ["dapo", "armor"] + (["anchor_only"] if ablations else [])
    if p.kl_betas:
        f["fig2"] = ["dapo", "dapo_cont"] + [f"kl_k3_b{fmt_beta(b)}" for b in p.kl_betas]
    if ablations:
        f["fig3"] = (["dapo", "armor"] + [f"mix_a{fmt_alpha(x)}" for x in p.alpha_sweep]
                     + ["anchor_only", "anchor_static_clip", "anchor_offpolicy"]
                     + (["armor_late", "dapo_late"] if p.has_late_start else []))
    if p.wrong_anchor_arm:
        f["fig3"] = f.get("fig3", ["dapo", "armor"]) + ["armor_any_anchor"]
    if p.reset_sweep:
        f["fig4"] = (["dapo", "armor", "armor_reset_never"] + [f"armor_reset_{int(t)}" for t in p.reset_sweep]
                     + ([RESTART_ARM] if RESTART_ARM in arms else [])
                     + [f"{RESTART_ARM}_{int(t)}" for t in p.restart_sweep])
        restarts = [x for x in f["fig4"] if x == RESTART_ARM or x.startswith(RESTART_ARM + "_")]
        if restarts:
            f[RESTARTS_ITEM] = ["dapo", "armor", "armor_reset_never"] + restarts
    if p.kl_betas and p.kl_k2_sweep:
        f["fig5"] = ["dapo", "dapo_cont"] + [f"kl_k2_b{fmt_beta(b)}" for b in p.kl_betas]
    if p.qae_reset_sweep:
        f["fig6"] = (["qae", "qae_cont", "qae_armor_reset_never"]
                     + [f"qae_armor_reset_{int(t)}" for t in p.qae_reset_sweep])
    if p.qwen3_tau1_until:
        f["fig7"] = (["dapo", "dapo_cont", "armor_tau1"]
                     + [f"armor_tau1_until{int(s)}" for s in p.qwen3_tau1_until] + ["clip_expand"])
    if p.headroom_steps:
        f[WORLD] = ["dapo", "dapo_cont", "dapo_natural"]
    if p.clean_anchor_modes:
        f[CONTROL] = [x for x in ("dapo", "dapo_cont", "anchor_only", "anchor_only_clean",
                                  "armor_reset_never", "armor_reset_never_clean", RESTART_ARM,
                                  f"{RESTART_ARM}_clean") if x in arms]
    head = ["dapo", p.headline_arm]
    f = {HEADLINE: head, **f}
    t1 = ["dapo", "armor"] + ([p.headline_arm] if p.headline_arm != "armor" else [])
    if "qae" in arms:
        t1 += ["qae", "qae_armor_reset_never"] + [f"qae_armor_reset_{int(t)}" for t in p.qae_reset_sweep]
    f["table1"] = list(t1)
    f["table2"] = list(t1)
    f["table3"] = ["dapo", "opd", "mopd", "armor"]
    if p.headline_arm not in arms:
        raise ExperimentError(f"protocol.headline_arm: {p.headline_arm!r} is not an arm of this protocol "
                              f"(known: {', '.join(arms)})")
    for name, lst in f.items():
        missing = [x for x in lst if x not in arms]
        assert not missing, (name, missing)
    return f


def figure_panels(p: ProtocolConfig) -> dict[str, dict[str, list[str]]]:
    """The arms each panel of Figs. 1-7 draws, {figure: {panel: [arms]}}, in plot order (a sweep in the
    protocol's order, its reference arm first); results.meta.json `figure_panels`, which figures/plots.py
    draws. Every figure is listed, whether or not the protocol runs it: a panel's arm the results lack is
    drawn as "not run". In Fig. 1's validation the claims register's ARMOR (results.meta.json `claims`)
    draws in place of `armor` where it has a curve; the authors' restarts (start "restart") are drawn where
    run."""
    arms = arm_definitions(p)

    def sweep(family: str) -> list[str]:
        return [a.name for a in arms.values() if a.sweep is not None and a.sweep[0] == family]

    restarts = ([RESTART_ARM] if RESTART_ARM in arms else []) + sweep("restart")
    return {"fig1": {"reward": ["dapo"], "length": ["dapo"],
                     "validation": ["dapo", "dapo_cont", "anchor_only", "armor"]},
            "fig2": {"a": ["dapo_cont"] + sweep("kl_k3"), "b": ["dapo_cont"] + sweep("kl_k3")},
            "fig3": {"a": ["dapo_cont"] + sweep("mix"),
                     "b": ["anchor_only", "anchor_static_clip", "anchor_offpolicy"],
                     "c": ["armor", "dapo_cont", "armor_late", "dapo_late"]},
            "fig4": {"a": sweep("reset") + restarts},
            "fig5": {"a": ["dapo_cont"] + sweep("kl_k2")},
            "fig6": {"a": ["qae", "qae_cont"] + sweep("qae_armor")},
            "fig7": {"a": ["dapo_cont", "armor_tau1"] + sweep("tau1_until") + ["clip_expand"]}}


def table_step(p: ProtocolConfig, name: str) -> Optional[int]:
    """The total step of the paper's table row an arm stands in (protocol.table_steps; the headline arm
    stands in the +ARMOR row), or None."""
    row = "qae_armor" if name.startswith("qae_armor") else "armor" if name == p.headline_arm else name
    return getattr(p.table_steps, row, None)


def arm_seeds(p: ProtocolConfig, arm: Arm, seeds: list[int]) -> list[int]:
    """The seeds an arm runs: the first of `seeds` for protocol.single_seed_arms, the first side_arm_seeds for
    protocol.side_arms (an alias follows its canonical arm), else all of them."""
    names = {arm.name, arm.run_arm}
    if names & set(p.single_seed_arms):
        return list(seeds[:1])
    if names & set(p.side_arms):
        return list(seeds[:p.side_arm_seeds])
    return list(seeds)


def selection_seeds(p: ProtocolConfig, seeds: list[int]) -> list[int]:
    """The seeds whose mean curve makes a choice (θ*, late start, restart point) among the `seeds` a run has:
    protocol.selection_seeds among them, else all of them."""
    return [s for s in seeds if s in p.selection_seeds] or list(seeds)


def _check_single_seed_arms(p: ProtocolConfig, defs: dict[str, Arm], chosen: dict[str, Arm]) -> None:
    """protocol.single_seed_arms and side_arms name arms of this protocol, and no arm runs a seed that the run
    it starts from (its stage-1 baseline; armor_reset_never for armor_restart) does not."""
    for key in ("single_seed_arms", "side_arms"):
        unknown = [n for n in getattr(p, key) if n not in defs]
        if unknown:
            raise ExperimentError(f"protocol.{key}: {unknown} are not arms of this protocol "
                                  f"(known: {', '.join(defs)})")
    for arm in chosen.values():
        if arm.stage != 2:
            continue
        base = defs[arm.restart_from if arm.start == RESTART_START else arm.baseline]
        lacking = sorted(set(arm_seeds(p, arm, p.seeds)) - set(arm_seeds(p, base, p.seeds)))
        if lacking:
            raise ExperimentError(f"protocol.single_seed_arms/side_arms: {arm.name!r} runs seed(s) "
                                  f"{lacking}, which {base.name!r}, the run it starts from, does not run: "
                                  f"give {arm.name!r} as few seeds or {base.name!r} as many")


def parse_only(only: str | list[str] | None) -> Optional[list[str]]:
    if not only:
        return None
    items = [x.strip() for x in (only.split(",") if isinstance(only, str) else only) if x.strip()]
    bad = [x for x in items if x not in ITEMS]
    if bad:
        raise ExperimentError(f"--only: unknown item(s) {bad} (known: {', '.join(ITEMS)})")
    return items


def parse_seeds(text: Optional[str], flag: str = "--seeds") -> Optional[list[int]]:
    """`0,1,2` -> [0, 1, 2] (None for none given); anything else names the flag and the value."""
    if not text:
        return None
    try:
        seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ExperimentError(f"{flag}: {text!r} is not a comma-separated list of integer seeds "
                              "(e.g. 0,1,2)") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise ExperimentError(f"{flag}: {text!r} must list at least one seed, none twice")
    return seeds


def build_arms(preset: Preset, only: Optional[list[str]] = None) -> dict[str, Arm]:
    """The arms to run for these figures/tables (default: all the preset has numbers for), canonical
    order, with `figures` and `evaluate` filled in. Raises if --only names an item the preset lacks, or when
    a confirmation preset (protocol.claims: confirm) cannot decide the claims register's confirmatory
    entries (reproduce/matrix/claims.py check_preset, on the whole matrix)."""
    if preset.protocol.claims != "design":
        from reproduce.matrix import claims
        runs, evaluated = preset_runs(preset)
        claims.check_preset(claims_register(preset), preset, runs, evaluated)
    return _chosen_arms(preset, only)


def claims_register(preset: Preset):
    """The claims register bound to this preset: its role ARMOR is protocol.headline_arm (continuing
    armor_reset_never's run when that arm is a restart)."""
    from reproduce.matrix import claims
    p = preset.protocol
    arm = arm_definitions(p).get(p.headline_arm)
    return claims.load_register().bound(p.headline_arm, arm is not None and arm.start == RESTART_START)


def preset_runs(preset: Preset) -> tuple[dict[str, list[int]], set[str]]:
    """The preset's whole matrix as the claims register reads it: arm -> the seeds it runs, and the arms it
    evaluates."""
    arms = _chosen_arms(preset, None)
    p = preset.protocol
    return ({n: arm_seeds(p, a, p.seeds) for n, a in arms.items()},
            {n for n, a in arms.items() if a.evaluate})


def _chosen_arms(preset: Preset, only: Optional[list[str]]) -> dict[str, Arm]:
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
            if (fig.startswith("table") or fig == HEADLINE) and evaluate and n not in ("dapo_cont",):
                arm.evaluate = True
            chosen[n] = arm
    out = {n: defs[n] for n in defs if n in chosen}
    if preset.protocol.claims == "confirm":     # a confirmation runs the confirmatory entries' arms only
        reg = claims_register(preset)
        needed = {a for c in reg.confirmatory for a in reg.arms_of(c)}
        out = {n: a for n, a in out.items()
               if n in needed or any(defs[x].alias_of == n for x in needed if x in defs)}
    for arm in list(out.values()):  # the canonical run of an alias must run too
        if arm.alias_of and arm.alias_of not in out:
            canon = defs[arm.alias_of]
            out[canon.name] = canon
    # a restart starts from a checkpoint of its source run
    for arm in list(out.values()):
        if arm.start == RESTART_START and arm.restart_from not in out:
            out[arm.restart_from] = defs[arm.restart_from]
    # stage-1 baselines of everything chosen
    for arm in list(out.values()):
        if arm.baseline not in out:
            out[arm.baseline] = defs[arm.baseline]
    if evaluate:        # the arms of each test-split entry of the claims register that runs whole are
        reg = claims_register(preset)   # evaluated too (one arm alone decides nothing: --only fig2's dapo)
        for c in reg.claims:
            read = {reg.resolve(name).arm for name in c.arms}
            if c.split == "test" and read <= out.keys():
                for a in read - {"dapo_cont"}:
                    out[a].evaluate = True
    _check_single_seed_arms(preset.protocol, defs, out)
    return {n: defs[n] for n in defs if n in out}
