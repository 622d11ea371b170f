"""The continual-training protocol: the `protocol:` section of a preset, typed and validated (the driver's
own).

    proto = load_protocol(read_yaml("reproduce/presets/qwen25-math-7b.yaml").get("protocol", {}))
    python -m reproduce.matrix.protocol                 # every key: type, default, help
    python -m reproduce.matrix.protocol --markdown > docs/protocol.md

Figure sweeps, the stage lengths, θ* selection, the final evaluation, SLURM sizes and seeds. The trainer does
not own this section (armor.config.FOREIGN_SECTIONS): it keeps it unread and copies it into each run's
config.yaml; reproduce/matrix/presets.py builds it from the preset. Every error names `protocol.<field>` and
the value (ConfigError), before any job is planned.
"""
from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from typing import Any, Optional

from armor import config_doc
from armor.config import ConfigError, from_mapping

SECTION = "protocol"


def _f(default: Any = dataclasses.MISSING, help: str = "", factory: Any = dataclasses.MISSING):
    """A field with its help text (metadata["help"], as armor/config.py's fields)."""
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class TableSteps:
    """The checkpoints the paper's tables report (total RL steps since the base model); null = the arm's
    checkpoint with the best validation. qae_armor: every qae_armor_* arm."""
    dapo: Optional[int] = _f(None, "the DAPO row (θ*)")
    armor: Optional[int] = _f(None, "the DAPO+ARMOR row")
    qae: Optional[int] = _f(None, "the QAE row (its θ*)")
    qae_armor: Optional[int] = _f(None, "the QAE+ARMOR row")
    opd: Optional[int] = _f(None, "the OPD row (Table 3)")
    mopd: Optional[int] = _f(None, "the MOPD row (Table 3)")


@dataclass
class ProtocolConfig:
    """Numbers of the continual-training protocol, read by reproduce/ (the trainer ignores them)."""
    stage1_steps: int = _f(0, "RL steps of the stage-1 baselines from the base model (0 = "
                              "schedule.total_steps)")
    stage2_steps: int = _f(0, "RL steps of every stage-2 arm from θ* (0 = schedule.total_steps)")
    stage2_overrides: list[str] = _f(factory=list,
                                     help="trainer overrides (key=value) of every stage-2 arm, e.g. a slower "
                                          "stage-2 clock (optim.lr=...); stage 1 as the preset")
    stage2_validate_every: int = _f(0, "validate every N steps in stage 2 (0 = schedule.validate_every); "
                                       "training is the same either way (validation samples with its own "
                                       "seeds)")
    world_version: int = _f(1, "the toy world's design the `world` job builds (reproduce/toy/build.py "
                               "WORLDS; docs/toy_world.md); toy presets only")
    world_arch: Optional[str] = _f(None, "the toy world's model: null = the toy Qwen2 of the world design; "
                                         "qwen2 / qwen3 = a paper family's layout at toy width "
                                         "(reproduce/toy/model.py ARCHS), quick SFT (a rehearsal's)")
    rehearsal_of: Optional[str] = _f(None, "a CPU rehearsal of this paper preset (reproduce/matrix/"
                                           "rehearsal.py writes it): every output labelled, numbers "
                                           "meaningless; null = a real run")
    headroom_steps: int = _f(0, "RL steps of the headroom control `dapo_natural`: stage-1 DAPO on "
                                "headroom_data, prompts without the training regularity (0 = not run)")
    headroom_data: Optional[str] = _f(None, "training prompts of the headroom control (the toy world's "
                                            "train_natural split)")
    peak_step: Optional[int] = _f(None, "fixed θ* step (paper); null = argmax of the validation curve")
    qae_peak_step: Optional[int] = _f(None, "fixed θ* step of the QAE baseline (paper: 230 for 7B)")
    late_start_step: Optional[int] = _f(None, "Fig. 3c: ARMOR from a degraded checkpoint, a fixed DAPO step")
    late_start_fraction: Optional[float] = _f(None, "Fig. 3c by rule (exclusive with late_start_step): the "
                                                    "first DAPO checkpoint after θ* whose smoothed "
                                                    "validation lies this fraction of the way from the peak "
                                                    "down to the floor (the lowest smoothed value after θ*); "
                                                    "written with θ* in peak.json")
    peak_selection_window: int = _f(1, "smooth validation over this many points before the argmax")
    armor_alpha: float = _f(0.9375, "α of the ARMOR arms' mixed ratio")
    armor_ref_n: int = _f(4, "reference samples per prompt of the anchor arms")
    armor_reset_every: Optional[int] = _f(None, "τ of the `armor` arm's reference reset (null = never)")
    armor_reset_until: Optional[int] = _f(None, "the `armor` arm stops resetting after this step")
    reset_sweep: list[int] = _f(factory=list, help="Fig. 4: reset periods τ")
    restart_within: Optional[float] = _f(
        None, "Fig. 4, the authors' reset (arm armor_restart; needs reset_sweep): a new run from the best "
              "checkpoint of armor_reset_never (argmax of its seed-mean validation smoothed over "
              "peak_selection_window, among its checkpoints after θ* up to this fraction of stage2_steps), "
              "with πref = that checkpoint, a fresh optimizer and warm-up, for the rest of stage 2 (it ends "
              "where every stage-2 arm ends); null = not run")
    restart_step: Optional[int] = _f(None, "the restart point's stage-2 step r, fixed (from the design "
                                           "seeds: a confirmation preset chooses nothing from its own "
                                           "seeds); "
                                           "select-restart then reads no curve. A validated and saved step "
                                           "of armor_reset_never within restart_within's window; null = "
                                           "chosen by restart_within's argmax")
    stage2_warmup_steps: Optional[int] = _f(None, "learning-rate warm-up of every stage-2 run, RL steps, "
                                                  "armor_restart's included (the authors give each "
                                                  "continual run the same 10; null = optim.warmup_steps)")
    restart_sweep: list[int] = _f(factory=list,
                                  help="Fig. 4, the authors' reset at fixed points (arms armor_restart_<τ>; "
                                       "needs reset_sweep): a new run from armor_reset_never's stage-2 "
                                       "checkpoint at step τ, with πref = it, a fresh optimizer and warm-up "
                                       "(stage2_warmup_steps), for the rest of stage 2, beside the in-run "
                                       "reset arms")
    headline_arm: str = _f("armor", "the arm of Table 1's +ARMOR row that the budget takes first with DAPO "
                                    "to θ* (the `headline` item): armor (in-run reset), or "
                                    "armor_restart_<τ> (the authors' restart)")
    branch: bool = _f(True, "share steps instead of repeating them: an arm identical to another up to step k "
                            "starts from that run's step-k checkpoint (reset arms from their never-reset "
                            "sibling), and a control that continues a stage-1 baseline from θ* or the late "
                            "start (dapo_cont, dapo_late, qae_cont) continues that run itself "
                            "(reproduce/matrix/branching.py); false: every arm runs from its start")
    alpha_sweep: list[float] = _f(factory=list, help="Fig. 3a: α of the mix-only arms")
    wrong_anchor_arm: bool = _f(False, "§4: run armor_any_anchor, ARMOR without resets whose anchor is the "
                                       "first reference sample, right or wrong (the paper: only correct "
                                       "anchors; wrong ones destabilise)")
    clean_anchor_modes: list[str] = _f(
        factory=list, help="the modes (of the world's classifier, logging.answer_modes) that the "
                           "oracle-clean anchor arms exclude from anchors (algo.anchor.filter="
                           "exclude_modes): defines anchor_only_clean, armor_reset_never_clean and, with "
                           "restart_within, armor_restart_clean (the authors' restart from "
                           "armor_reset_never_clean's run), which no figure runs yet (issue 44's design "
                           "names them); [] = no such arms. An oracle the paper's ARMOR does not have")
    kl_betas: list[float] = _f(factory=list, help="Fig. 2 / 5: β of the KL arms")
    kl_k2_sweep: bool = _f(True, "Fig. 5: the kl_betas sweep with the k2 estimator too (false: Fig. 2's k3 "
                                 "sweep only)")
    kl_after_steps: int = _f(100, "Fig. 2b: KLs read after this many steps")
    qae_reset_sweep: list[int] = _f(factory=list, help="Fig. 6: reset periods of ARMOR from the QAE peak")
    qwen3_tau1_until: list[int] = _f(factory=list,
                                     help="Fig. 7: τ = 1 until these stage-2 steps, then frozen")
    eval_benchmarks: list[str] = _f(factory=list, help="benchmarks of the final evaluation (registry names "
                                                       "or NAME=path.jsonl)")
    eval_protocol: str = _f("paper", "evaluation protocol (eval/protocols.py): samples, pass@k, lengths")
    table_steps: TableSteps = _f(factory=TableSteps, help="the paper's table checkpoints (paper presets)")
    eval_every: int = _f(0, "evaluate every N-th saved checkpoint (0 = only the selected ones)")
    eval_samples: Optional[int] = _f(None, "override the protocol's samples per problem (k)")
    eval_limit: Optional[int] = _f(None, "score only the first N problems of each benchmark")
    noise_floor_repeats: int = _f(0, "the verdicts' evaluation noise floor: θ* of dapo (first seed) "
                                     "validated this many times with different sampling seeds "
                                     "(docs/verdicts.md); 0 = not measured (every verdict is then "
                                     "inconclusive)")
    nodes: int = _f(1, "nodes per training job (SLURM)")
    gpus_per_node: int = _f(0, "GPUs per training node (0 = a CPU preset)")
    procs_per_node: int = _f(0, "trainer ranks per training node (torchrun); 0 = one per GPU, or 1 on a CPU "
                                "preset. A CPU preset with 2 runs 2-rank CPU jobs (gloo), e.g. on a test "
                                "SLURM")
    cpus_per_node: int = _f(0, "CPU cores of a GPU node the jobs ask for (0 = 8 per GPU); each rank runs "
                               "cpus_per_node / ranks threads")
    rollout_tokens_per_s: Optional[float] = _f(None, "plan's throughput assumption: generated tokens/s per "
                                                     "GPU (null = reproduce/sizing/throughput.py's default; "
                                                     "the dry run names it)")
    update_tokens_per_s: Optional[float] = _f(None, "plan's throughput assumption: trained tokens/s per GPU "
                                                    "of the update (null = from an assumed MFU)")
    response_fill: Optional[float] = _f(None,
                                        "plan's assumption: mean response length / lengths.max_response")
    save_s: Optional[float] = _f(None, "plan's assumption: seconds per checkpoint save")
    paper_response_tokens: list[float] = _f(factory=list,
                                            help="mean response lengths (tokens) the paper reports for "
                                                 "this model during training, low and high: the plan's "
                                                 "response fill (reproduce/sizing/throughput.py) when "
                                                 "response_fill is null; empty = not reported (an assumed "
                                                 "range)")
    paper_response_source: str = _f("", "where paper_response_tokens come from (figure, table), printed "
                                         "with the plan")
    seeds: list[int] = _f(factory=lambda: [0], help="seeds of every arm")
    single_seed_arms: list[str] = _f(factory=list, help="arms run on the first seed only (no figure claim "
                                                        "rests on them); the rest run every seed")
    selection_seeds: list[int] = _f(factory=list,
                                    help="seeds whose mean validation curve chooses θ*, the late start and "
                                         "the restart point, once for every seed (empty = every seed the run "
                                         "to choose from runs)")
    claims: str = _f("design", "the seeds' role for the claims register (reproduce/matrix/claims.yaml, "
                               "docs/claims.md): design (every entry exploratory, raw p: the design seeds' "
                               "estimates) or confirm (fresh seeds: the confirmatory entries one Holm "
                               "family; θ* and the restart point fixed, every confirmatory arm run)")
    claims_design_preset: Optional[str] = _f(None, "confirm only: the design preset (a preset name) whose "
                                                   "seeds designed the world and chose θ*; this preset's "
                                                   "seeds must be disjoint from its selection seeds, and the "
                                                   "exploratory entries are decided there")
    side_arms: list[str] = _f(factory=list, help="arms run on the first side_arm_seeds seeds (side arms a "
                                                 "report cites; no headline verdict rests on them)")
    side_arm_seeds: int = _f(3, "seeds of protocol.side_arms (the first N of protocol.seeds)")

    @property
    def has_late_start(self) -> bool:
        """armor_late / dapo_late run (Fig. 3c): a late start step or the rule that chooses one."""
        return self.late_start_step is not None or self.late_start_fraction is not None


def _check(cond: bool, key: str, value: Any, why: str) -> None:
    if not cond:
        raise ConfigError(f"{key}: {value!r} {why}")


def validate_protocol(p: ProtocolConfig) -> None:
    """Semantic checks that types cannot express; each failure names protocol.<field> and its value."""
    c = _check
    c(0 < p.armor_alpha <= 1, "protocol.armor_alpha", p.armor_alpha, "must be in (0, 1]")
    c(p.armor_ref_n >= 1, "protocol.armor_ref_n", p.armor_ref_n, "must be >= 1")
    for i, x in enumerate(p.alpha_sweep):
        c(0 < x <= 1, f"protocol.alpha_sweep[{i}]", x, "must be in (0, 1]")
    for i, x in enumerate(p.kl_betas):
        c(x > 0, f"protocol.kl_betas[{i}]", x, "must be > 0")
    c(p.peak_selection_window >= 1, "protocol.peak_selection_window", p.peak_selection_window, "must be >= 1")
    c(p.eval_samples is None or p.eval_samples >= 1, "protocol.eval_samples", p.eval_samples, "must be >= 1")
    c(p.eval_limit is None or p.eval_limit >= 1, "protocol.eval_limit", p.eval_limit, "must be >= 1")
    c(p.noise_floor_repeats == 0 or p.noise_floor_repeats >= 2, "protocol.noise_floor_repeats",
      p.noise_floor_repeats, "must be 0 (off) or >= 2 (a standard deviation needs two)")
    c(p.nodes >= 1, "protocol.nodes", p.nodes, "must be >= 1")
    c(p.gpus_per_node >= 0, "protocol.gpus_per_node", p.gpus_per_node, "must be >= 0")
    c(p.procs_per_node >= 0, "protocol.procs_per_node", p.procs_per_node, "must be >= 0")
    c(p.cpus_per_node >= 0, "protocol.cpus_per_node", p.cpus_per_node, "must be >= 0")
    for k in ("rollout_tokens_per_s", "update_tokens_per_s", "save_s"):
        c(getattr(p, k) is None or getattr(p, k) > 0, f"protocol.{k}", getattr(p, k), "must be > 0 (or null)")
    c(p.response_fill is None or 0 < p.response_fill <= 1, "protocol.response_fill", p.response_fill,
      "must be in (0, 1] (or null)")
    c(len(p.seeds) >= 1, "protocol.seeds", p.seeds, "must list at least one seed")
    c(len(set(p.seeds)) == len(p.seeds), "protocol.seeds", p.seeds, "must not repeat a seed")
    c(p.world_version in (1, 2), "protocol.world_version", p.world_version,
      "must be 1 or 2 (the world designs)")
    c(p.world_arch in (None, "qwen2", "qwen3"), "protocol.world_arch", p.world_arch,
      "must be null, qwen2 or qwen3")
    c(p.headroom_steps >= 0, "protocol.headroom_steps", p.headroom_steps, "must be >= 0")
    c(p.stage2_validate_every >= 0, "protocol.stage2_validate_every", p.stage2_validate_every, "must be >= 0")
    c(not p.headroom_steps or bool(p.headroom_data), "protocol.headroom_data", p.headroom_data,
      f"must name the control's training prompts (protocol.headroom_steps is {p.headroom_steps})")
    c(set(p.selection_seeds) <= set(p.seeds), "protocol.selection_seeds", p.selection_seeds,
      f"must be seeds of protocol.seeds {p.seeds}")
    for i, o in enumerate(p.stage2_overrides):
        c("=" in o and o.split("=", 1)[0].strip() != "", f"protocol.stage2_overrides[{i}]", o,
          "must be key=value")
    c(p.side_arm_seeds >= 1, "protocol.side_arm_seeds", p.side_arm_seeds, "must be >= 1")
    for i, m in enumerate(p.clean_anchor_modes):
        c(m.isidentifier(), f"protocol.clean_anchor_modes[{i}]", m, "must be a mode name of the world's "
                                                                     "classifier (logging.answer_modes)")
    both = sorted(set(p.side_arms) & set(p.single_seed_arms))
    c(not both, "protocol.side_arms", p.side_arms, f"names arms of protocol.single_seed_arms too: {both}")
    r = p.restart_within
    c(r is None or 0 < r < 1, "protocol.restart_within", r, "must be in (0, 1)")
    c(r is None or bool(p.reset_sweep), "protocol.restart_within", r,
      "needs protocol.reset_sweep (the restart starts from armor_reset_never, a Fig. 4 arm)")
    c(p.stage2_warmup_steps is None or p.stage2_warmup_steps >= 0, "protocol.stage2_warmup_steps",
      p.stage2_warmup_steps, "must be >= 0")
    c(p.restart_step is None or p.restart_within is not None, "protocol.restart_step", p.restart_step,
      "needs protocol.restart_within (the window it lies in; armor_restart runs only with it)")
    c(p.restart_step is None or p.restart_step >= 1, "protocol.restart_step", p.restart_step,
      "must be a stage-2 step >= 1 (step 0 is θ* itself)")
    c(p.claims in ("design", "confirm"), "protocol.claims", p.claims, "must be design or confirm")
    if p.claims == "confirm":
        c(bool(p.claims_design_preset), "protocol.claims_design_preset", p.claims_design_preset,
          "must name the design preset (protocol.claims: confirm)")
        c(p.peak_step is not None, "protocol.peak_step", p.peak_step,
          "must fix θ* in a confirmation preset (protocol.claims: confirm): its seeds choose nothing")
        c(p.restart_within is None or p.restart_step is not None, "protocol.restart_step", p.restart_step,
          "must fix the restart point in a confirmation preset (protocol.claims: confirm) that runs "
          "armor_restart (protocol.restart_within)")
    else:
        c(p.claims_design_preset is None, "protocol.claims_design_preset", p.claims_design_preset,
          "applies to a confirmation preset only (protocol.claims: confirm)")
    for i, t in enumerate(p.restart_sweep):
        c(t >= 1, f"protocol.restart_sweep[{i}]", t, "must be >= 1 (a stage-2 step)")
    c(not p.restart_sweep or bool(p.reset_sweep), "protocol.restart_sweep", p.restart_sweep,
      "needs protocol.reset_sweep (the restarts start from armor_reset_never, a Fig. 4 arm)")
    toks = p.paper_response_tokens
    c(len(toks) in (0, 2) and all(x > 0 for x in toks) and toks == sorted(toks),
      "protocol.paper_response_tokens", toks, "must be empty or [low, high] token counts, low <= high")
    f = p.late_start_fraction
    c(f is None or 0 < f < 1, "protocol.late_start_fraction", f, "must be in (0, 1)")
    c(f is None or p.late_start_step is None, "protocol.late_start_fraction", f,
      f"excludes protocol.late_start_step ({p.late_start_step}): set one of them")


def load_protocol(section: Any) -> ProtocolConfig:
    """The `protocol:` section of a preset (its mapping; {} for the defaults), typed and validated."""
    if section is None:
        raise ConfigError(f"{SECTION}: must not be null")
    if not isinstance(section, dict):
        raise ConfigError(f"{SECTION}: expected a mapping, got {section!r}")
    proto = from_mapping(ProtocolConfig, section, SECTION)
    validate_protocol(proto)
    return proto


def reference_fields() -> list[config_doc.FieldDoc]:
    """Every protocol key, as armor.config_doc documents the trainer's."""
    return list(config_doc.fields(ProtocolConfig, f"{SECTION}."))


def markdown() -> str:
    """docs/protocol.md: the protocol's keys (tests/unit/test_config_doc.py checks it is up to date)."""
    return "\n".join([
        "<!-- GENERATED FILE: python -m reproduce.matrix.protocol --markdown > docs/protocol.md (from "
        "ProtocolConfig in reproduce/matrix/protocol.py; tests/unit/test_config_doc.py checks it is up to "
        "date) "
        "-->", "",
        "# Protocol reference", "",
        "The `protocol:` section of a preset (`reproduce/presets/*.yaml`): the numbers of the "
        "continual-training protocol that the experiment driver (`python reproduce/run_all.py`, "
        "`python -m reproduce.jobs`) plans from. The trainer does not read it (see the end of "
        "[config.md](config.md)); it copies it into each run's `config.yaml`.", "",
        (ProtocolConfig.__doc__ or "").strip(), ""] + config_doc.table(reference_fields()) + [""])


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--markdown" in argv:
        sys.stdout.write(markdown())
    else:
        sys.stdout.write(f"{SECTION}:  {(ProtocolConfig.__doc__ or '').strip()}\n"
                         + config_doc.text(docs=reference_fields()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
