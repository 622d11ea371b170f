"""The job graph of a preset: fetch (hub models/datasets, presets that name hub ids) | world (toy presets) ->
stage 1 -> select peak -> stage 2 -> evaluate -> collect -> figures, as slurm.launcher Jobs. A fixed θ* (or
late start, a branch or restart point) before the end of its run is a `ckpt/<arm>/seed<s>/step<k>` job
gated on that checkpoint (slurm.launcher.Gate: held on SLURM, released when the checkpoint is saved;
reproduce/jobs/wait.py), so what starts there does not wait for the rest of the run, nor runs out of a time
limit while the run gets there.

    jobs = build_jobs(load_preset("tiny"), "runs")        # keys: world, stage1/dapo/seed0,
                                                         # peak/dapo/seed0, stage2/armor/seed0,
                                                         # eval/armor/seed0, collect, figures

Every job is a `python -m reproduce.jobs <subcommand>` command that resolves its late-bound inputs (θ*,
the checkpoints to evaluate) when it runs, and has a `done` check on its outputs, so reruns skip finished
units. Alias arms (reproduce/matrix/arms.py) get no job of their own.

Branching (reproduce/matrix/branching.py): a sibling's train job waits for a `ckpt/<source>/seed<s>/step<k>`
job and starts from that checkpoint (`--branch-from SOURCE --branch-step k`); the source saves and keeps k
(`--keep-steps`). A continuation's train job waits for its baseline's end (`--branch-step end`). Each run
trains the steps the plan needs of it (`--steps`): a stage-1 baseline only up to θ* when only tables are
chosen and θ* is fixed, a run needed only as a source up to its last branch or restart point; a rerun
with more items extends a finished run from its last checkpoint.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from armor import memory
from armor.config import load_config
from common.layout import list_checkpoints
from reproduce import hub
from reproduce.dag.resources import preset_resources
from reproduce.entrypoints import entry
from reproduce.jobs import noise
from reproduce.jobs.collect import collect_done, figures_done
from reproduce.jobs.evaluate import EVAL_RANKS_ENV, eval_benchmarks, eval_done
from reproduce.jobs.peaks import peak_done, peak_file, restart_done, restart_file, start_point
from reproduce.jobs.wait import gate_path
from reproduce.matrix.arms import (HEADLINE, RESTART_FROM, RESTART_START, TABLES, Arm, arm_seeds, build_arms,
                                   selection_seeds)
from reproduce.matrix.branching import CONTINUATION, SIBLING, Branch, choose_branches, start_step
from reproduce.matrix.overrides import continuation_overrides, train_overrides
from reproduce.matrix.presets import (Preset, ckpt_dir, fixed_peak, preset_root, repo_path, run_dir,
                                      run_done)
from reproduce.matrix.retention import check_retention
from slurm.launcher import Gate, Job

JOB_ENV = {"ARMOR_PROGRESS": "0", "TOKENIZERS_PARALLELISM": "false"}
# what the local launcher imports once before forking the jobs warm (slurm/warm.py): their heavy modules
WARM_PRELOAD = ("torch", "transformers", "transformers.models.qwen2.modeling_qwen2", "armor.trainer",
                "eval.evaluate", "reproduce.jobs.cli", "figures.plots")


@dataclass
class _Inputs:
    """What the jobs of one graph share: the preset, where its runs go, resources, the fetched hub items."""
    preset: Preset
    root: Path
    seeds: list[int]
    res: dict
    fetch_dir: Path
    items: list             # reproduce.hub Items the `fetch` job copies (none: no fetching)
    env: dict = field(default_factory=lambda: dict(JOB_ENV))
    arms: dict = field(default_factory=dict)          # the plan's arms (build_arms)
    only: Optional[list] = None                       # the chosen items (None: all)
    branches: dict = field(default_factory=dict)      # arm -> Branch (reproduce/matrix/branching.py)

    def command(self, sub: str, *extra: str) -> list[str]:
        """`python -m reproduce.jobs SUB --preset P --root R EXTRA...`."""
        return [sys.executable, "-m", "reproduce.jobs", sub, "--preset", str(self.preset.path),
                "--root", str(self.root), *extra]

    def arm_seeds(self, arm: Arm) -> list[int]:
        """The graph's seeds this arm runs (protocol.single_seed_arms: the first only)."""
        return arm_seeds(self.preset.protocol, arm, self.seeds)

    @property
    def fetch_args(self) -> list[str]:
        return ["--fetch-dir", str(self.fetch_dir)] if self.items else []


def build_jobs(preset: Preset, root: str | Path, seeds: Optional[list[int]] = None,
               only: Optional[list[str]] = None, resources: Optional[dict] = None,
               fetch_dir: Optional[str | Path] = None) -> list[Job]:
    """The DAG: fetch (hub models/datasets, presets that name hub ids) | world (toy presets) -> stage 1 ->
    select peak -> stage 2 -> evaluate (array) -> collect -> figures."""
    root = Path(root).resolve()
    p = preset.protocol
    sd = Path(fetch_dir).resolve() if fetch_dir else hub.default_fetch_dir(root)
    arms = build_arms(preset, only)
    g = _Inputs(preset, root, list(seeds if seeds is not None else p.seeds),
                resources or preset_resources(preset), sd, hub.items(preset, sd), arms=arms, only=only,
                branches=choose_branches(preset, arms))
    # schedule.keep_last deletes nothing θ* or an evaluation needs
    check_retention(preset, arms, g.seeds)
    jobs = _setup_jobs(g)
    first = [j.key for j in jobs]          # what stage-1 training waits for: the fetch and/or the world build
    for arm, s in _train_order(g, arms):
        jobs += _train_jobs(g, arms, arm, s, first)
    fetched = ["fetch"] if g.items else []
    for s in g.seeds:
        for arm in arms.values():
            if arm.evaluate and not arm.alias_of and s in g.arm_seeds(arm):
                jobs.append(_eval_job(g, arm, s, fetched))
    if noise.applies(preset, arms):
        jobs.append(_noise_job(g, arms[noise.BASE_ARM]))
    return jobs + _final_jobs(g, jobs, only)


def _noise_job(g: _Inputs, arm: Arm) -> Job:
    """The verdicts' noise floor (reproduce/jobs/noise.py): θ* of the first seed validated k times."""
    preset, root, s = g.preset, g.root, g.seeds[0]
    k = preset.protocol.noise_floor_repeats
    return Job("noise_floor", g.command("noise-floor", "--seed", str(s), *g.fetch_args),
               kind="noise_floor", deps=[f"peak/{arm.baseline}/seed{s}"], resources=g.res["evaluate"],
               env=g.env, done=lambda: noise.noise_done(preset, root, s),
               info={"benchmarks": "validation", "protocol": f"{k} re-validations of θ*"},
               description=f"noise floor: θ* of {arm.baseline} seed {s} validated {k} times")


def _train_order(g: _Inputs, arms: dict[str, Arm]) -> list[tuple[Arm, int]]:
    """(arm, seed) of every train job, in the order they start when ready (local workers take ready jobs in
    this order; SLURM's FIFO queue is submitted in it): first every seed of the stage-1 baselines that stage 2
    starts from (θ* waits for all of them), then the other stage-1 runs (the headroom control), then every
    seed of the stage-2 run armor_restart starts from (its restart point waits for them), then, seed by seed,
    the runs others branch from, then the rest of stage 2."""
    names = list(arms)
    gating = {a.baseline for a in arms.values() if a.stage == 2}
    gating2 = {a.restart_from for a in arms.values() if a.start == RESTART_START}
    sources = {b.source for b in g.branches.values() if b.kind == SIBLING}
    units = [(arm, s) for s in g.seeds for arm in arms.values()
             if not arm.alias_of and s in g.arm_seeds(arm)]

    def key(u: tuple[Arm, int]) -> tuple:
        arm, s = u
        if arm.stage == 1:
            return (0 if arm.name in gating else 1, names.index(arm.name), s)
        return (2, 0 if arm.name in gating2 else 1 if arm.name in sources else 2, s, names.index(arm.name))
    return sorted(units, key=key)


def _setup_jobs(g: _Inputs) -> list[Job]:
    """Fetching of the hub models and datasets the preset names; the toy world's build."""
    jobs = []
    if g.items:
        items = g.items
        jobs.append(Job("fetch", g.command("fetch", *g.fetch_args), kind="fetch",
                        resources=g.res["fetch"], env=g.env,
                        done=lambda items=items: all(it.done() for it in items),
                        info={"items": [f"{it.kind} {it.label()} -> {it.dest}" for it in items]},
                        description=f"fetch {len(items)} hub model(s)/dataset(s) into {g.fetch_dir}"))
    args = g.preset.world_build_args()
    if args is not None:
        world = g.preset.world()[0]
        argv = entry("reproduce.toy.build") + args
        jobs.append(Job("world", argv, kind="world", resources=g.res["world"], env=g.env,
                        done=lambda world=world: (repo_path(world) / "world.json").is_file(),
                        description=f"build the toy world in {world}"))
    return jobs


def branch_of(g: _Inputs, arm: Arm, s: int) -> Optional[Branch]:
    """The branch this arm's run of seed s starts from, or None (from its start): the plan's branch
    (reproduce/matrix/branching.py) where its source runs seed s, unless the source ran past the branch
    point without saving it (planned before this branch) while this run has not begun."""
    b = g.branches.get(arm.name)
    if b is None or b.source not in g.arms or s not in g.arm_seeds(g.arms[b.source]):
        return None
    if b.kind == SIBLING:
        src, own = (run_dir(g.root, g.preset, x, s) for x in (b.source, arm.name))
        if ((src / "DONE").is_file() and b.step not in list_checkpoints(src) and not list_checkpoints(own)
                and not (own / "DONE").is_file()):
            return None
    return b


def branch_points(g: _Inputs, arm: Arm, s: int) -> list[int]:
    """The steps of this arm's run of seed s that branches start from (it saves and keeps them), and under
    schedule.keep_last the saved steps before an evaluated branch's point (its best checkpoint by validation
    may lie there: the branch's folder links them)."""
    steps: set[int] = set()
    every, pruned = g.preset.cfg.schedule.save_every, g.preset.cfg.schedule.keep_last is not None
    for b in g.branches.values():
        if b.kind != SIBLING or b.source != arm.name or branch_of(g, g.arms[b.arm], s) is None:
            continue
        steps.add(b.step)
        if pruned and g.arms[b.arm].evaluate:
            steps |= set(range(every, b.step + 1, every))
    return sorted(steps)


def _restart_source(arms: dict[str, Arm], arm: Arm) -> bool:
    """Whether a chosen arm restarts from a point of this run chosen at run time (its select-restart job)."""
    return any(a.start == RESTART_START and not a.restart_step and a.restart_from == arm.name
               for a in arms.values())


def _restart_points(g: _Inputs, arm: Arm) -> list[int]:
    """The fixed stage-2 steps of armor_reset_never (a restart's source) that the plan's armor_restart_<τ>
    arms start from."""
    return sorted({a.restart_step for a in g.arms.values()
                   if a.start == RESTART_START and a.restart_step and a.restart_from == arm.name})


def _train_jobs(g: _Inputs, arms: dict[str, Arm], arm: Arm, s: int, first: list[str]) -> list[Job]:
    """The train job of one arm and seed, the checkpoint-ready jobs of the steps others start from, and for
    a baseline that others start from (or that is evaluated) the job that chooses its θ*."""
    preset, root = g.preset, g.root
    br = branch_of(g, arm, s)
    if arm.stage == 1:
        deps = list(first)
    elif br is not None and br.kind == CONTINUATION:     # the baseline's run, or an earlier control's
        deps = ([f"stage{arms[br.source].stage}/{br.source}/seed{s}"]
                + ([f"peak/{arm.baseline}/seed{s}"] if arm.start == "peak" else []))
    elif br is not None:
        deps = [_ready_key(g, arms[br.source], s, br.step)]
    elif arm.start == "late" and preset.protocol.late_start_step is not None:
        deps = [_ready_key(g, arms["dapo"], s, preset.protocol.late_start_step)]
    elif arm.start == RESTART_START and arm.restart_step:
        deps = [_ready_key(g, arms[arm.restart_from], s, arm.restart_step)]
    elif arm.start == RESTART_START:
        deps = [f"restart/{arm.restart_from}/seed{s}"]
    else:
        deps = [f"peak/{arm.baseline}/seed{s}"]
    run = run_dir(root, preset, arm.name, s)
    key = f"stage{arm.stage}/{arm.name}/seed{s}"
    keep = branch_points(g, arm, s)
    # a restart from a point chosen at run time trains the rest of stage 2 from there: its length is the job's
    steps = None if arm.start == RESTART_START and not arm.restart_step else _run_steps(g, arm)
    extra = ((["--steps", str(steps)] if steps else [])
             + (["--keep-steps", ",".join(map(str, keep))] if keep else []))
    if br is not None:
        extra += ["--branch-from", br.source, "--branch-step", "end" if br.step is None else str(br.step)]
    jobs = [Job(key, g.command("train", "--arm", arm.name, "--seed", str(s), *g.fetch_args, *extra),
                kind="train", deps=deps, resources=g.res["train"], launch="torchrun", env=g.env,
                done=lambda run=run, steps=steps: run_done(run, steps), info=_train_info(g, arm, s, br),
                description=f"train {arm.name} seed {s}" + (f" from {br.source}" if br else ""))]
    late_rule = arm.name == "dapo" and preset.protocol.late_start_fraction is not None
    # the late start by rule: only when the plan runs a late arm, from finished stage-1 runs (their ends)
    late = late_rule and any(a.start == "late" and a.stage == 2 and a.baseline == arm.name
                             for a in arms.values())
    starts_others = any(a.baseline == arm.name and a.stage == 2 and (a.start == "peak" or late_rule)
                        for a in arms.values())
    if arm.stage == 1 and (starts_others or arm.evaluate):
        fixed = fixed_peak(preset, arm.name)
        pf = peak_file(root, preset, arm.name, s)
        over = selection_seeds(preset.protocol, g.arm_seeds(arm))   # θ* from their mean curve: all trained
        how = (f"step {fixed} (protocol)" if fixed is not None else
               f"argmax of validation (window {preset.protocol.peak_selection_window}"
               + (f", mean of seeds {','.join(map(str, over))})" if len(over) > 1 else ")"))
        if late:
            how += (f"; late start at fraction {preset.protocol.late_start_fraction} of the fall, once "
                    f"stage 1 has finished")
        jobs.append(Job(f"peak/{arm.name}/seed{s}",
                        g.command("select-peak", "--arm", arm.name, "--seed", str(s),
                                  "--seeds", ",".join(map(str, over)), *(["--late"] if late else [])),
                        kind="select_peak",
                        deps=[f"stage1/{arm.name}/seed{x}" if late else _ready_key(g, arm, x, fixed)
                              for x in _with(over, s)],
                        resources=g.res["select_peak"], env=g.env,
                        done=lambda pf=pf, fixed=fixed: peak_done(pf, fixed, late),
                        info={"peak": how}, description=f"choose θ* of {arm.name} seed {s}"))
    if _restart_source(arms, arm):
        over = selection_seeds(preset.protocol, g.arm_seeds(arm))   # the restart point: their mean curve
        rf = restart_file(root, preset, s, arm.name)
        source = [] if arm.name == RESTART_FROM else ["--arm", arm.name]
        jobs.append(Job(f"restart/{arm.name}/seed{s}",
                        g.command("select-restart", "--seed", str(s), "--seeds", ",".join(map(str, over)),
                                  *source),
                        kind="select_peak", deps=[f"stage2/{arm.name}/seed{x}" for x in _with(over, s)],
                        resources=g.res["select_peak"], env=g.env, done=lambda rf=rf: restart_done(rf),
                        info={"restart": f"argmax of validation (window "
                                         f"{preset.protocol.peak_selection_window}, mean of seeds "
                                         f"{','.join(map(str, over))}) within the first "
                                         f"{preset.protocol.restart_within} of stage 2"},
                        description=f"choose the restart point of {arm.name} seed {s}"))
    if arm.stage == 1:
        marks = {fixed_peak(preset, arm.name)} | ({preset.protocol.late_start_step} if arm.name == "dapo"
                                                  and any(a.start == "late" and branch_of(g, a, s) is None
                                                          for a in arms.values()) else set())
    else:
        marks = set(_restart_points(g, arm)) | {b.step for b in g.branches.values()
                                                if b.source == arm.name and branch_of(g, arms[b.arm], s)}
    jobs += [_ready_job(g, arm, s, k, deps) for k in sorted(x for x in marks if x is not None)
             if _ready_key(g, arm, s, k) != key]
    return jobs


def _with(seeds: list[int], s: int) -> list[int]:
    """The runs a choice for seed s reads: the selection seeds' curves, and seed s's own checkpoints."""
    return list(seeds) + ([s] if s not in seeds else [])


def _stage1_steps(g: _Inputs) -> int:
    p = g.preset.protocol
    return p.stage1_steps or g.preset.cfg.schedule.total_steps


def _ready_key(g: _Inputs, arm: Arm, s: int, step: Optional[int]) -> str:
    """What waits for step `step` of `arm`'s run of seed `s` depends on: the checkpoint-ready job when the
    step comes before the run's end (a fixed θ*, a late start, a branch or restart point), else the train
    job itself."""
    if step is None or step >= _run_steps(g, arm):
        return f"stage{arm.stage}/{arm.name}/seed{s}"
    return f"ckpt/{arm.name}/seed{s}/step{step}"


def _ready_job(g: _Inputs, arm: Arm, s: int, step: int, deps: list[str]) -> Job:
    """A checkpoint-ready job beside the train job it watches (the same dependencies): gated on that run's
    checkpoint of `step` (slurm.launcher.Gate: held on SLURM until the watched job's wrapper or the driver
    sees it; locally started when it appears), so the runs that start there (stage 2 from a fixed θ*, a
    branch, a restart) do not wait for the rest of it, however long it takes to get there (no polling job,
    no time limit while it waits). Done (never started) once the checkpoint exists; it fails when the
    watched job fails, or ends, without it (reproduce/jobs/wait.py)."""
    run = run_dir(g.root, g.preset, arm.name, s)
    watch = f"stage{arm.stage}/{arm.name}/seed{s}"
    argv = [sys.executable, "-m", "reproduce.jobs", "wait-checkpoint", "--run", str(run), "--step", str(step)]
    br = branch_of(g, arm, s)
    first = br.step if br is not None and br.step is not None else 0   # what the watched job itself trains
    frac = (step - first) / max(1, _run_steps(g, arm) - first)
    return Job(_ready_key(g, arm, s, step), argv, kind="wait_checkpoint", deps=list(deps),
               resources=g.res["select_peak"], env=g.env, gate=Gate(str(gate_path(run, step)), watch),
               done=lambda run=run, step=step: step in list_checkpoints(run),
               info={"watch": watch, "step": step, "fraction": max(0.0, frac)},
               description=f"released when {watch} has saved step {step}")


def _display_start(g: _Inputs, arm: Arm, s: int) -> Optional[dict]:
    """{step, checkpoint[, stage2_step]} a stage-2 arm starts from: read from the run folders (θ*, the
    restart point), else from the protocol's fixed steps (for the plan's display), else None."""
    preset, root = g.preset, g.root
    start = start_point(preset, root, arm, s)
    fixed = fixed_peak(preset, arm.baseline)
    if start is None and fixed is not None and arm.start == RESTART_START and arm.restart_step:
        never = run_dir(root, preset, arm.restart_from, s)
        return {"step": fixed + arm.restart_step, "checkpoint": str(ckpt_dir(never, arm.restart_step)),
                "stage2_step": arm.restart_step}
    if start is None and fixed is not None and arm.start == "peak":
        start = {"step": fixed, "checkpoint": str(ckpt_dir(run_dir(root, preset, arm.baseline, s), fixed))}
    return start


def _train_info(g: _Inputs, arm: Arm, s: int, br: Optional[Branch]) -> dict:
    """What the dry run shows of a train job: its figures, memory (GPU presets), the resolved overrides, the
    steps it runs and where it branches (reproduce/sizing/estimates.py reads `steps` and `trained_from`)."""
    preset, root = g.preset, g.root
    start = _display_start(g, arm, s) if arm.stage == 2 else None
    steps, keep = _run_steps(g, arm), branch_points(g, arm, s)
    info = {"arm": arm.name, "figures": ",".join(arm.figures), "stage": arm.stage,
            "arm_overrides": list(arm.overrides), "steps": steps, "trained_from": 0,
            "protected_steps": _protected(g, arm) + keep}
    if g.res["train"].gpus_per_node:
        info["memory"] = train_memory(preset, arm, g.res["train"])
    if br is not None and br.kind == CONTINUATION:
        base = g.arms[br.source]
        src_end = _run_steps(g, base)
        info["trained_from"] = min(src_end, steps)
        info["start_step"] = start_step(preset.protocol, arm)
        info["steps_saved"] = max(0, min(src_end, steps) - info["start_step"])
        info["branch"] = {"kind": br.kind, "source": br.source, "step": src_end}
        ov = continuation_overrides(preset, root, arm, g.arms[arm.continues], s, steps,
                                    g.fetch_dir if g.items else None)
        info["branch_note"] = (f"continues {br.source} seed {s}: its rows to step {src_end}"
                               + (f", then from its step-{src_end} checkpoint (full state) to step {steps}"
                                  if steps > src_end else f" (no step to train: it ends at {steps})"))
        info["overrides"] = " ".join(ov)
        return info
    if br is not None:
        info["trained_from"] = info["steps_saved"] = br.step
        info["branch"] = {"kind": br.kind, "source": br.source, "step": br.step}
        info["branch_note"] = (f"starts from {br.source} seed {s} at step {br.step} (its checkpoint: "
                               f"weights, πref, optimizer, RNG, data position)")
    if arm.stage == 1 or start is not None:
        ov = train_overrides(preset, root, arm, s, start, g.fetch_dir if g.items else None, steps=steps,
                             keep=keep)
        info["overrides"] = " ".join(ov)
    elif arm.start == RESTART_START:
        info["overrides"] = (f"restart point of {arm.restart_from} seed {s} chosen at run time (argmax "
                                     f"of validation within the first {preset.protocol.restart_within} of "
                                     f"stage 2); " + " ".join(arm.overrides))
    else:
        info["overrides"] = "θ* of %s seed %d chosen at run time (argmax of validation); " % (
            arm.baseline, s) + " ".join(arm.overrides)
    return info


def _needed_itself(g: _Inputs, arm: Arm) -> bool:
    """Whether a chosen item draws this arm's run (or an alias of it), not only starts runs from it."""
    return bool(arm.figures) or any(a.alias_of == arm.name and a.figures for a in g.arms.values())


def _run_steps(g: _Inputs, arm: Arm) -> int:
    """RL steps of this arm's run as the plan needs it (its train command's schedule.total_steps; a
    continuation: the total step it ends at). A stage-1 baseline with a fixed θ* runs only to θ* when every
    chosen item is a table (or the headline); a stage-2 run that only starts others runs to its last branch
    or fixed restart point; a fixed restart runs the rest of stage 2."""
    p, cfg = g.preset.protocol, g.preset.cfg
    if arm.name == "dapo_natural" and p.headroom_steps:
        return p.headroom_steps
    if arm.stage == 1:
        s1 = _stage1_steps(g)
        fixed = fixed_peak(g.preset, arm.name)
        tables_only = g.only is not None and set(g.only) <= set(TABLES) | {HEADLINE}
        if tables_only and fixed is not None and not any(a.start == "late" and a.stage == 2 and
                                                         a.baseline == arm.name for a in g.arms.values()):
            return min(s1, fixed)
        return s1
    s2 = p.stage2_steps or cfg.schedule.total_steps
    br = g.branches.get(arm.name)
    if br is not None and br.kind == CONTINUATION:      # its start is a fixed step (branching.continued)
        return start_step(p, arm) + s2
    if arm.start == RESTART_START:
        return s2 - (arm.restart_step or 0)
    if _needed_itself(g, arm):
        return s2
    need = [b.step for b in g.branches.values() if b.source == arm.name and b.kind == SIBLING]
    need += _restart_points(g, arm)
    if _restart_source(g.arms, arm):
        need.append(s2)
    return max(need) if need else s2


def _protected(g: _Inputs, arm: Arm) -> list[int]:
    """Steps of the run that retention keeps besides the last resumable ones: θ* and the late start (stage
    1); the fixed restart points (armor_reset_never)."""
    p = g.preset.protocol
    if arm.stage != 1:
        return _restart_points(g, arm)
    steps = {fixed_peak(g.preset, arm.name)} | ({p.late_start_step} if arm.name == "dapo" else set())
    return sorted(x for x in steps if x is not None)


def train_memory(preset: Preset, arm: Arm, res) -> str:
    """The dry run's line for a GPU train job: its ranks and the per-rank memory estimate (armor.memory)."""
    shape = memory.model_shape(preset.cfg.model.path)
    ranks = f"{res.world_size} ranks ({res.nodes} node(s) x {res.ranks_per_node})"
    if shape is None:
        return f"{ranks}; memory: model shape unknown (fetch the model, or add it to armor.memory.KNOWN)"
    cfg = load_config(preset.path, arm.overrides)
    return f"{ranks}; " + memory.describe(memory.estimate(cfg, res.world_size, shape), cfg)


def _eval_job(g: _Inputs, arm: Arm, s: int, fetched: list[str]) -> Job:
    """Evaluating one arm and seed, after θ* (baselines) or the arm's training: its own job, so on SLURM it
    waits for that arm alone; on a GPU preset it takes a node and splits the benchmarks over its GPUs."""
    preset, root = g.preset, g.root
    dep = f"peak/{arm.name}/seed{s}" if arm.stage == 1 else f"stage2/{arm.name}/seed{s}"
    res = g.res["evaluate"]
    env = dict(g.env)
    if res.nodes * res.gpus_per_node > 1:   # several GPUs: torchrun ... -m eval.evaluate (jobs/evaluate.py)
        env[EVAL_RANKS_ENV] = str(res.nodes * res.gpus_per_node)
        env["ARMOR_THREADS"] = str(res.threads_per_rank)
    return Job(f"eval/{arm.name}/seed{s}", g.command("evaluate", "--arm", arm.name, "--seed", str(s),
                                                        *g.fetch_args),
               kind="evaluate", deps=[dep] + fetched, resources=res, env=env,
               done=lambda arm=arm, s=s: eval_done(preset, root, arm, s),
               info={"benchmarks": ",".join(hub.fetched_benchmarks(eval_benchmarks(preset), g.items)),
                     "protocol": preset.protocol.eval_protocol, "stage": arm.stage,
                     "steps": _run_steps(g, arm), "ranks": int(env.get(EVAL_RANKS_ENV, 1))},
               description=f"evaluate {arm.name} seed {s}")


def _final_jobs(g: _Inputs, jobs: list[Job], only: Optional[list[str]]) -> list[Job]:
    """The results table after every train / select-peak / evaluate job, then the figures and report."""
    preset, root, seeds = g.preset, g.root, g.seeds
    seeds_arg = ["--seeds", ",".join(map(str, seeds))]
    only_arg = ["--only", ",".join(only)] if only else []
    out = preset_root(root, preset)
    return [Job("collect", g.command("collect", *seeds_arg), kind="collect",
                deps=[j.key for j in jobs if j.kind in ("train", "evaluate", "select_peak", "noise_floor")],
                resources=g.res["collect"], env=g.env, done=lambda: collect_done(preset, root, seeds),
                description=f"results table {out / 'results.parquet'}"),
            Job("figures", g.command("figures", *seeds_arg, *only_arg), kind="figures", deps=["collect"],
                resources=g.res["figures"], env=g.env,
                done=lambda: collect_done(preset, root, seeds) and figures_done(preset, root, only),
                description=f"figures + report in {out}")]
