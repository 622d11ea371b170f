"""The jobs of the matrix, one subcommand each: what each job of the graph (reproduce/dag/) runs.

    python -m reproduce.jobs fetch          --preset P --root R [--fetch-dir D]    (hub -> fetch folder)
    python -m reproduce.jobs train          --preset P --root R --arm A --seed S   (jobs/train.py)
                                            [--steps N --keep-steps K,.. --branch-from ARM --branch-step K]
    python -m reproduce.jobs select-peak    --preset P --root R --arm dapo --seed S   (jobs/peaks.py)
    python -m reproduce.jobs select-restart --preset P --root R --seed S   (armor_restart's start; peaks.py)
                                            [--arm SOURCE: another restart's source run]
    python -m reproduce.jobs evaluate       --preset P --root R --arm A --seed S   (jobs/evaluate.py)
    python -m reproduce.jobs noise-floor    --preset P --root R --seed S   (θ* validated k times; noise.py)
    python -m reproduce.jobs collect        --preset P --root R            (results.parquet; collect.py)
    python -m reproduce.jobs figures        --preset P --root R [--only ...]   (python -m figures; figures.py)
    python -m reproduce.jobs wait-checkpoint --run DIR --step K            (a checkpoint-ready job; wait.py)
    python -m reproduce.jobs pilot-train    --preset P --root R --phase dapo|armor   (the pilot; pilot.py)
    python -m reproduce.jobs pilot-eval     --preset P --root R            (the pilot's evaluation slice)
    python -m reproduce.jobs pilot-report   --preset P --root R            (runs/<preset>/pilot/pilot.json)
    python -m reproduce.jobs net-probe      --preset P --root R [--floor-gbps X]  (two nodes; netprobe.py)
    python -m reproduce.jobs show           --preset P                     (the matrix)

Every job resolves its late-bound inputs (θ*, the checkpoints to evaluate) when it runs. Errors of the
plan or the inputs exit 2 with one line naming the cause.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

from common.yaml_config import ConfigError
from reproduce import hub
from reproduce.jobs import wait
from reproduce.jobs.collect import cmd_collect
from reproduce.jobs.evaluate import cmd_evaluate
from reproduce.jobs.netprobe import FLOOR_GBPS, cmd_net_probe
from reproduce.jobs.figures import cmd_figures
from reproduce.jobs.noise import cmd_noise_floor
from reproduce.jobs.peaks import cmd_select_peak, cmd_select_restart
from reproduce.jobs.pilot import cmd_pilot_eval, cmd_pilot_report, cmd_pilot_train
from reproduce.jobs.train import cmd_train
from reproduce.matrix.arms import RESTART_FROM, build_arms, figure_arms, parse_only, parse_seeds
from reproduce.matrix.presets import REPO_ROOT, ExperimentError, Preset, load_preset


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
    ap = argparse.ArgumentParser(prog="python -m reproduce.jobs", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p, arm=False, seeds=False, only=False, fetched=False):
        p.add_argument("--preset", required=True, help="preset name (reproduce/presets) or YAML path")
        if p.prog.split()[-1] != "show":
            p.add_argument("--root", default=str(REPO_ROOT / "runs"))
        if fetched:
            p.add_argument("--fetch-dir", default=None, help="read the hub models/datasets fetched here "
                                                             "(reproduce/hub.py)")
        if arm:
            p.add_argument("--arm", required=True)
            p.add_argument("--seed", type=int, default=0)
        if seeds:
            p.add_argument("--seeds", default=None)
        if only:
            p.add_argument("--only", default=None)

    common(sub.add_parser("fetch", help="copy the hub models and datasets the preset needs into the fetch "
                                        "folder (reproduce/hub.py)"), fetched=True)
    tr = sub.add_parser("train", help="train one arm (execs armor.train)")
    common(tr, arm=True, fetched=True)
    tr.add_argument("--steps", type=int, default=None,
                    help="steps the plan needs of the run (a finished shorter run is extended)")
    tr.add_argument("--keep-steps", default="", help="comma-separated steps other runs branch from: saved "
                                                     "and kept")
    tr.add_argument("--branch-from", default=None, help="the arm whose run this one starts from "
                                                       "(reproduce/matrix/branching.py)")
    tr.add_argument("--branch-step", default=None, help="the source's step (or `end`: its last, a "
                                                       "continuation)")
    sp = sub.add_parser("select-peak", help="write peak.json of a stage-1 baseline (θ* from the mean curve "
                                            "over --seeds; default: the arm's seeds)")
    common(sp, arm=True, seeds=True)
    sp.add_argument("--late", action="store_true", help="choose the late start by rule too "
                                                        "(protocol.late_start_fraction; finished runs only)")
    sr = sub.add_parser("select-restart", help="write restart.json of armor_reset_never (armor_restart's "
                                               "start, from the mean curve over --seeds; default: the arm's "
                                               "selection seeds), or of --arm")
    common(sr, seeds=True)
    sr.add_argument("--seed", type=int, default=0)
    sr.add_argument("--arm", default=RESTART_FROM, help="the restart's source run (default %(default)s; "
                                                         "armor_restart_clean's: armor_reset_never_clean)")
    common(sub.add_parser("evaluate", help="evaluate the selected checkpoints of one run"), arm=True,
           fetched=True)
    common(sub.add_parser("noise-floor", help="validate θ* of dapo k times (the verdicts' noise floor)"),
           arm=False, fetched=True)
    sub.choices["noise-floor"].add_argument("--seed", type=int, default=0)
    common(sub.add_parser("collect", help="write results.parquet"), seeds=True)
    common(sub.add_parser("figures", help="draw figures and the report"), seeds=True, only=True)
    common(sub.add_parser("show", help="print the matrix"), only=True)
    pt = sub.add_parser("pilot-train", help="one phase of the pilot (one node, the real model)")
    common(pt, fetched=True)
    pt.add_argument("--phase", required=True, help="dapo | armor")
    common(sub.add_parser("pilot-eval", help="the pilot's evaluation slice on every GPU of a node"),
           fetched=True)
    common(sub.add_parser("pilot-report",
                          help="write runs/<preset>/pilot/pilot.json from the pilot's phases"))
    npr = sub.add_parser("net-probe", help="the pilot's all-gather across two nodes (bandwidth, transport)")
    common(npr)
    npr.add_argument("--floor-gbps", type=float, default=FLOOR_GBPS,
                     help=f"fail below this busbw of the largest message (GB/s; default {FLOOR_GBPS:g})")
    npr.add_argument("--sizes-mb", default=None, help="comma-separated message sizes in MiB (default: a "
                                                      "decoder layer's and the embedding's)")
    wait.add_parser(sub)
    a = ap.parse_args(argv)
    if a.cmd == "wait-checkpoint":
        return wait.run(a)
    try:
        preset = load_preset(a.preset)
        if a.cmd == "show":
            return cmd_show(preset, parse_only(a.only))
        root = Path(a.root).resolve()
        seeds = parse_seeds(getattr(a, "seeds", None)) or list(preset.protocol.seeds)
        sd = Path(a.fetch_dir).resolve() if getattr(a, "fetch_dir", None) else None
        if a.cmd == "fetch":
            sd = sd or hub.default_fetch_dir(root)
            hub.fetch_all(hub.items(preset, sd), sd)
            return 0
        if a.cmd == "train":
            if (a.branch_from is None) != (a.branch_step is None):
                raise ExperimentError("--branch-from and --branch-step go together")
            if a.branch_step not in (None, "end") and not a.branch_step.isdigit():
                raise ExperimentError(f"--branch-step: {a.branch_step!r} is not a step number or `end`")
            keep = parse_seeds(a.keep_steps, "--keep-steps") or []
            return cmd_train(preset, root, a.arm, a.seed, sd, a.steps, keep, a.branch_from, a.branch_step)
        if a.cmd == "select-peak":
            return cmd_select_peak(preset, root, a.arm, a.seed, parse_seeds(a.seeds), a.late)
        if a.cmd == "select-restart":
            return cmd_select_restart(preset, root, a.seed, parse_seeds(a.seeds), a.arm)
        if a.cmd == "evaluate":
            return cmd_evaluate(preset, root, a.arm, a.seed, sd)
        if a.cmd == "noise-floor":
            return cmd_noise_floor(preset, root, a.seed, sd)
        if a.cmd == "collect":
            return cmd_collect(preset, root, seeds)
        if a.cmd == "figures":
            return cmd_figures(preset, root, seeds, parse_only(a.only))
        if a.cmd == "pilot-train":
            return cmd_pilot_train(preset, root, a.phase, sd)
        if a.cmd == "pilot-eval":
            return cmd_pilot_eval(preset, root, sd)
        if a.cmd == "pilot-report":
            return cmd_pilot_report(preset, root)
        if a.cmd == "net-probe":
            sizes = [int(float(x) * 2 ** 20) for x in a.sizes_mb.split(",")] if a.sizes_mb else None
            return cmd_net_probe(preset, root, a.floor_gbps, sizes)
    except (ExperimentError, ConfigError, hub.FetchError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
