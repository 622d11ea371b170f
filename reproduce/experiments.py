"""The experiment driver's subcommands: each job of the plan (reproduce/jobs.py) is one of them.

    python -m reproduce.experiments stage       --preset P --root R [--stage-dir D]    (hub -> stage folder)
    python -m reproduce.experiments train       --preset P --root R --arm A --seed S   (execs armor.train)
    python -m reproduce.experiments select-peak --preset P --root R --arm dapo --seed S
    python -m reproduce.experiments select-restart --preset P --root R --seed S   (armor_restart's start)
    python -m reproduce.experiments evaluate    --preset P --root R --arm A --seed S   (runs eval.evaluate)
    python -m reproduce.experiments noise-floor --preset P --root R --seed S           (θ* validated k times)
    python -m reproduce.experiments collect     --preset P --root R                    (results.parquet)
    python -m reproduce.experiments figures     --preset P --root R [--only ...]       (python -m figures)
    python -m reproduce.experiments show        --preset P                             (the matrix)

Job commands resolve late-bound inputs (θ*, checkpoints to evaluate) when they run. The parts:
    reproduce/protocol.py   the `protocol:` section of a preset (ProtocolConfig), validated
    reproduce/presets.py    load_preset: the trainer's config + the protocol; run folder locations
    reproduce/arms.py       the matrix: figure/table -> arms -> config overrides, aliases
    reproduce/peaks.py      θ*: validation curve -> smoothed argmax (or the protocol's step) -> peak.json
    reproduce/evalplan.py   which checkpoints are evaluated, the eval.evaluate command, its stamp
    reproduce/collect.py    the runs -> results.parquet + results.meta.json; alias folders -> symlinks
    reproduce/jobs.py       the DAG for slurm/launcher.py (build_jobs)
    reproduce/entrypoints.py  the commands jobs run; ARMOR_REPRO_ENTRYPOINTS='{"armor.train": ["python",
                            "x.py"]}' replaces them (tests, containers)
Presets that name hub ids (the paper's models, GPQA-Diamond, the full MMLU-Pro) get a first job that stages
them into a shared folder (reproduce/stage.py); their train and evaluate jobs read the staged copies
(--stage-dir).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Optional

from common.jsonl import append_jsonl, read_jsonl, write_json_atomic
from reproduce import stage
from reproduce.arms import (arm_definitions, arm_seeds, build_arms, figure_arms, parse_only, selection_seeds,
                            train_overrides)
from reproduce.collect import collect, link_aliases, write_figures_stamp
from reproduce.entrypoints import entry
from reproduce.evalplan import eval_command, eval_steps, write_eval_stamp
from reproduce.peaks import late_error, peak_file, restart_file, select_peak, select_restart, start_point
from common.yaml_config import ConfigError
from reproduce.presets import (REPO_ROOT, STATE_JSON, ExperimentError, Preset, ckpt_dir, load_preset,
                               preset_root, run_dir)
from slurm import warm


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
        why = late_error(preset, root, seed) if start is None and arm.start == "late" else None
        if why:
            raise ExperimentError(f"{arm.name} seed {seed}: no late start: {why}")
        if start is None and arm.start == "restart":
            raise ExperimentError(f"{arm.name} seed {seed}: {restart_file(root, preset, seed)} is missing "
                                  f"(run select-restart first)")
        if start is None:
            raise ExperimentError(f"{arm.name} seed {seed}: {peak_file(root, preset, arm.baseline, seed)} is "
                                  f"missing (run select-peak first)")
        if not Path(start["checkpoint"]).is_dir():
            raise ExperimentError(f"{arm.name} seed {seed}: start checkpoint {start['checkpoint']} does not "
                                  f"exist")
    overrides = train_overrides(preset, root, arm, seed, start, stage_dir)
    run.mkdir(parents=True, exist_ok=True)
    # every torchrun rank runs this; one writes the run's files
    if int(os.environ.get("RANK", "0")) == 0:
        write_json_atomic(run / "arm.json", {"arm": arm.name, "preset": preset.name, "seed": seed,
                                             "start": start, "overrides": overrides,
                                             "config": str(preset.path)}, **STATE_JSON)
    argv = entry("armor.train") + ["--config", str(preset.path)] + overrides
    print("exec:", " ".join(shlex.quote(a) for a in argv), flush=True)
    return _exec(argv)


def cmd_select_peak(preset: Preset, root: Path, arm: str, seed: int,
                    seeds: Optional[list[int]] = None) -> int:
    """peak.json of `arm` seed `seed`; θ* from the mean curve over `seeds` (default: the arm's seeds in the
    protocol)."""
    arms = arm_definitions(preset.protocol)
    if arm not in arms or arms[arm].stage != 1:
        raise ExperimentError(f"select-peak --arm {arm!r}: not a stage-1 baseline of preset {preset.name} "
                              f"(those: {', '.join(a for a in arms if arms[a].stage == 1)})")
    seeds = seeds if seeds is not None else selection_seeds(
        preset.protocol, arm_seeds(preset.protocol, arms[arm], preset.protocol.seeds))
    info = select_peak(preset, root, arm, seed, seeds)
    write_json_atomic(peak_file(root, preset, arm, seed), info, **STATE_JSON)
    over = f" (mean of seeds {info['seeds']})" if "seeds" in info else ""
    print(f"θ* of {arm} seed {seed}: step {info['step']} ({info['method']}{over}) -> {info['checkpoint']}")
    late = info.get("late")
    if late:
        print(f"late start of {arm} seed {seed}: " + (f"step {late['step']} -> {late['checkpoint']}"
                                                      if "step" in late
                                                       else f"none ({late['error']})"))
    return 0


def cmd_select_restart(preset: Preset, root: Path, seed: int, seeds: Optional[list[int]] = None) -> int:
    """restart.json of armor_reset_never seed `seed` (armor_restart's start), from the mean curve over
    `seeds`."""
    arms = arm_definitions(preset.protocol)
    if "armor_restart" not in arms:
        raise ExperimentError(f"select-restart: preset {preset.name} has no armor_restart "
                              f"(protocol.restart_within)")
    src = arms["armor_reset_never"]
    seeds = seeds if seeds is not None else selection_seeds(
        preset.protocol, arm_seeds(preset.protocol, src, preset.protocol.seeds))
    info = select_restart(preset, root, seed, seeds)
    write_json_atomic(restart_file(root, preset, seed), info, **STATE_JSON)
    print(f"restart point of {src.name} seed {seed}: stage-2 step {info['stage2_step']} "
          f"(total {info['step']}, "
          f"mean of seeds {info['seeds']}) -> {info['checkpoint']}; {info['remaining']} steps left")
    return 0


def cmd_evaluate(preset: Preset, root: Path, arm_name: str, seed: int,
                 stage_dir: Optional[Path] = None) -> int:
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
    write_eval_stamp(preset, root, arm, seed, steps)
    return 0


def cmd_noise_floor(preset: Preset, root: Path, seed: int, stage_dir: Optional[Path] = None) -> int:
    """The verdicts' noise floor (reproduce/noise.py)."""
    from reproduce.noise import measure
    r = measure(preset, root, seed, stage_dir)
    print(f"noise floor: {r['arm']} seed {seed} step {r['step']} validated {r['repeats']} times: "
          f"{r['benchmark']} {r['metric']} sd {r['sd']:.4f}, range {r['range']:.4f}, values "
          + ", ".join(f"{v:.3f}" for v in r["values"]))
    return 0


def cmd_collect(preset: Preset, root: Path, seeds: list[int]) -> int:
    """Link the alias arms' folders to their canonical runs, then write the results table."""
    link_aliases(preset, root, seeds)
    print(f"wrote {collect(preset, root, seeds)}")
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
                               "--command", f"python reproduce/run_all.py --preset {preset.cli_arg}"
                               + (f" --only {','.join(only)}" if only else "")]
    if only:
        argv += ["--only", ",".join(only)]
    wall = driver_wall_time(out)
    if wall is not None:
        argv += ["--wall-time-s", f"{wall:.0f}"]
    print("run:", " ".join(shlex.quote(a) for a in argv), flush=True)
    rc = warm.run(argv)
    if rc == 0:
        write_figures_stamp(preset, root, only)
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
    common(sub.add_parser("select-peak", help="write peak.json of a stage-1 baseline (θ* from the mean curve "
                                              "over --seeds; default: the arm's seeds)"), arm=True,
           seeds=True)
    sr = sub.add_parser("select-restart", help="write restart.json of armor_reset_never (armor_restart's "
                                               "start, from the mean curve over --seeds; default: the arm's "
                                               "selection seeds)")
    common(sr, seeds=True)
    sr.add_argument("--seed", type=int, default=0)
    common(sub.add_parser("evaluate", help="evaluate the selected checkpoints of one run"), arm=True,
           staged=True)
    common(sub.add_parser("noise-floor", help="validate θ* of dapo k times (the verdicts' noise floor)"),
           arm=False, staged=True)
    sub.choices["noise-floor"].add_argument("--seed", type=int, default=0)
    common(sub.add_parser("collect", help="write results.parquet"), seeds=True)
    common(sub.add_parser("figures", help="draw figures and the report"), seeds=True, only=True)
    common(sub.add_parser("show", help="print the matrix"), only=True)
    a = ap.parse_args(argv)
    try:
        preset = load_preset(a.preset)
        if a.cmd == "show":
            return cmd_show(preset, parse_only(a.only))
        root = Path(a.root).resolve()
        seeds = [int(x)
                 for x in a.seeds.split(",")] if getattr(a, "seeds", None) else list(preset.protocol.seeds)
        sd = Path(a.stage_dir).resolve() if getattr(a, "stage_dir", None) else None
        if a.cmd == "stage":
            sd = sd or stage.default_stage_dir(root)
            stage.stage_all(stage.plan(preset, sd), sd)
            return 0
        if a.cmd == "train":
            return cmd_train(preset, root, a.arm, a.seed, sd)
        if a.cmd == "select-peak":
            return cmd_select_peak(preset, root, a.arm, a.seed,
                                   [int(x) for x in a.seeds.split(",")] if a.seeds else None)
        if a.cmd == "select-restart":
            return cmd_select_restart(preset, root, a.seed,
                                      [int(x) for x in a.seeds.split(",")] if a.seeds else None)
        if a.cmd == "evaluate":
            return cmd_evaluate(preset, root, a.arm, a.seed, sd)
        if a.cmd == "noise-floor":
            return cmd_noise_floor(preset, root, a.seed, sd)
        if a.cmd == "collect":
            return cmd_collect(preset, root, seeds)
        if a.cmd == "figures":
            return cmd_figures(preset, root, seeds, parse_only(a.only))
    except (ExperimentError, ConfigError, stage.StageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
