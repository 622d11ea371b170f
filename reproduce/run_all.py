"""The driver: plan -> submit/run -> wait -> collect -> figures + report, idempotent.

    python reproduce/run_all.py                                  # the main job (MAIN_PRESET below)
    python reproduce/run_all.py --preset smoke --cluster local   # the seconds-long smoke protocol
    python reproduce/run_all.py --preset qwen25-math-7b --cluster slurm --partition gpu --account X
    python reproduce/run_all.py --preset qwen3-8b-base --dry-run # the plan, without GPUs or weights
    python reproduce/run_all.py --preset qwen25-math-7b --dry-run --cluster-nodes 32 --budget-gpu-hours 50000
    python reproduce/run_all.py --preset tiny --only fig4,table1 # only these items (and what they need)
    python reproduce/run_all.py --preset tiny --status           # what is done / queued / running
    python reproduce/run_all.py --preset qwen25-math-7b --fetch-dir /shared/armor_hub   # hub copies there
    python reproduce/run_all.py --preset qwen25-math-7b --cluster slurm --pilot   # one node measures the step
    python reproduce/run_all.py --preset qwen25-math-7b --dry-run --budget-gpu-hours 10000   # by importance
    python reproduce/run_all.py --preset qwen25-math-7b --rehearse   # the whole DAG on CPU, toy model

The DAG (reproduce/dag/graph.py): fetching of the hub models and datasets (presets that name hub ids;
reproduce/hub.py) or the world build (toy presets) -> stage-1 baselines -> select θ* -> stage-2 arms ->
evaluate (one job per arm) -> runs/<preset>/results.parquet -> figures + REPRODUCTION.md. Runs identical up to
a step branch from each other's checkpoints (reproduce/matrix/branching.py). Before any submission (and in the
dry run) the pre-flight checks run (reproduce/preflight.py); a failure stops the submission. --pilot runs the
pilot instead (reproduce/dag/pilot_graph.py): one node measures the step, push, save and evaluation times into
runs/<preset>/pilot/pilot.json, from which the dry run then prints its hours (marked measured).
Reruns skip finished units (DONE markers, outputs) and never resubmit a queued or running job, so after an
interruption (Ctrl-C, SIGKILL, a lost SSH session) rerunning the same command resumes. Bookkeeping and
per-job logs: runs/<preset>/_jobs/<job key>/ (log.out, log.err); `python -m slurm.launcher status
runs/<preset>` lists the recorded jobs, `python -m slurm.launcher cancel runs/<preset>` cancels them.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
MAIN_PRESET = "tiny-paper-confirm"   # the main job (README): tiny-paper's world, the confirmatory entries
if str(REPO_ROOT) not in sys.path:  # `python reproduce/run_all.py` from anywhere
    sys.path.insert(0, str(REPO_ROOT))

from common import cpu_numerics  # noqa: E402

cpu_numerics.pin()   # a process starts here: its CPU numerics, before torch loads; its jobs inherit them

from common.yaml_config import ConfigError  # noqa: E402
from figures.checklist import read_verdicts, verdict_lines  # noqa: E402
from common.jsonl import read_json  # noqa: E402
from reproduce import hub, preflight  # noqa: E402
from reproduce.sizing.checks import check_plan  # noqa: E402
from reproduce.sizing.estimates import estimate_jobs, fit_eval_limits, fmt_bytes, fmt_h  # noqa: E402
from reproduce.sizing.report import branch_lines, total_lines  # noqa: E402
from reproduce.sizing.throughput import (PILOT_DIR, PILOT_FILE, SizingError, Throughput,  # noqa: E402
                                         read_pilot, scenarios, throughput)
from reproduce.dag.pilot_graph import pilot_disk_bytes, pilot_jobs, pilot_train  # noqa: E402
from reproduce.jobs.pilot import report_lines as pilot_report_lines  # noqa: E402
from reproduce.dag.budget import budget_lines, item_costs  # noqa: E402
from reproduce.dag.graph import WARM_PRELOAD, build_jobs  # noqa: E402
from reproduce.dag.resources import EVAL_TIME_MIN, preset_resources  # noqa: E402
from reproduce.entrypoints import missing_entry_points  # noqa: E402
from reproduce.jobs.collect import protocol_card_text  # noqa: E402
from reproduce.jobs.figures import DRIVER_START_ENV, driver_wall_time, record_driver_run  # noqa: E402
from reproduce.jobs.peaks import read_peak  # noqa: E402
from reproduce.matrix.arms import (arm_seeds, build_arms, figure_arms, parse_only, parse_seeds,  # noqa: E402
                                   selection_seeds)
from reproduce.matrix.presets import ExperimentError, fixed_peak, load_preset, preset_root  # noqa: E402
from reproduce.matrix import rehearsal  # noqa: E402
from slurm.launcher import ACTIVE, DONE, Launcher, LauncherError, topo_order  # noqa: E402
from slurm.resources import ResourceError  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python reproduce/run_all.py", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[2:]))
    ap.add_argument("--preset", default=MAIN_PRESET,
                    help=f"name in reproduce/presets/ or a YAML path (default: {MAIN_PRESET}, the main job: "
                         "the claims register's confirmatory entries on fresh seeds)")
    ap.add_argument("--cluster", default="auto", choices=["local", "slurm", "auto"],
                    help="auto: slurm when sbatch is on PATH and the scheduler answers, else local")
    ap.add_argument("--only", help="comma-separated figures/tables, e.g. fig1,fig4,table1 (default: all the "
                                   "preset has numbers for)")
    ap.add_argument("--seeds", help="comma-separated seeds (default: protocol.seeds)")
    ap.add_argument("--root", default=None, help="runs folder (default: <repo>/runs)")
    ap.add_argument("--fetch-dir", default=None,
                    help="shared folder for the hub models and datasets the plan "
                         f"fetches (default: ${hub.FETCH_ENV}, else <root>/_fetch)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    ap.add_argument("--pilot", action="store_true",
                    help="run the pilot instead of the matrix: one node, the real model, a few DAPO and "
                         "ARMOR steps, a stop by the time-limit signal and its resume, saves, an evaluation "
                         "slice; it writes runs/<preset>/pilot/pilot.json, which later dry runs size the "
                         "plan from")
    ap.add_argument("--without-pilot", action="store_true",
                    help="submit a GPU preset's matrix to SLURM before its pilot measured it "
                         "(runs/<preset>/pilot/pilot.json): the plan's hours and resources stay assumed")
    ap.add_argument("--net-floor-gbps", type=float, default=None,
                    help="--pilot: the two-node network probe fails below this all-gather bus bandwidth "
                         "(GB/s; default reproduce/jobs/netprobe.py FLOOR_GBPS)")
    ap.add_argument("--rehearse", action="store_true",
                    help="a paper preset's CPU rehearsal (reproduce/matrix/rehearsal.py): every job of its "
                         "DAG on a toy-width model of its family and the toy world, steps / 10, the real "
                         "benchmark files (a few problems), every substitution printed and in the report, "
                         "runs/<preset>-rehearsal/; plumbing only, the numbers are meaningless")
    ap.add_argument("--rehearse-engine", default="hf", choices=["hf", "vllm"],
                    help="--rehearse: the rollout engine (vllm: vLLM's CPU build, scripts/vllm_tier.sh)")
    ap.add_argument("--status", action="store_true", help="print each job's state and exit")
    ap.add_argument("--no-wait", action="store_true", help="slurm: submit and exit (rerun later to follow)")
    ap.add_argument("--workers", type=int, default=None, help="local: jobs at once (default: CPU cores)")
    ap.add_argument("--poll", type=float, default=None, help="seconds between state checks")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    g = ap.add_argument_group("resources (override the preset's protocol; see reproduce/dag/resources.py)")
    g.add_argument("--resources", help="YAML file with per-kind resources and cluster options")
    g.add_argument("--partition")
    g.add_argument("--account")
    g.add_argument("--qos")
    g.add_argument("--constraint")
    g.add_argument("--nodes", type=int, help="training nodes per run (default: protocol.nodes)")
    g.add_argument("--gpus-per-node", type=int,
                   help="training GPUs per node (default: protocol.gpus_per_node)")
    g.add_argument("--time-min", type=int,
                   help="training time limit per job, minutes (jobs requeue and resume)")
    g.add_argument("--mem-gb", type=float,
                   help="training host memory per node, GB (default: reproduce/sizing/footprint.py's "
                        "estimate on GPU presets)")
    g.add_argument("--cpus-per-node", type=int,
                   help="training CPU cores per node (default: protocol.cpus_per_node "
                        "or 8 per GPU); each rank runs cores / ranks threads")
    s = ap.add_argument_group("sizing (GPU presets; reproduce/sizing/): the dry run's hours, GPU-hours "
                              "and disk")
    s.add_argument("--cluster-nodes", type=int,
                   help="nodes the plan may use at once (default: one train job's)")
    s.add_argument("--rollout-tokens-per-s", type=float,
                   help="generated tokens/s per GPU (throughput assumption)")
    s.add_argument("--update-tokens-per-s", type=float,
                   help="trained tokens/s per GPU (throughput assumption)")
    s.add_argument("--response-fill", type=float,
                   help="mean response length / lengths.max_response (default: from the paper's reported "
                        "lengths, protocol.paper_response_tokens, else an assumed range)")
    s.add_argument("--save-s", type=float, help="seconds per checkpoint save")
    s.add_argument("--decode-tokens-per-s", type=float,
                   help="tokens/s of one sequence decoded alone: a generation call's tail (its longest "
                        "response)")
    s.add_argument("--push-s", type=float, help="seconds per weight push into the engine")
    s.add_argument("--anchor-share", type=float,
                   help="fraction of a round's drawn prompts the reference samples for anchors (default: "
                        "the lazy anchors' 1.5 B; 1 = every prompt, the paper's ~125 %%)")
    s.add_argument("--gpu-check", help="a GPU check report (gpu_check.json) to take the throughput from")
    s.add_argument("--gpu-mem-gb", type=float,
                   help="memory of one GPU, GB, for the pre-flight's vLLM-share check (default: "
                        "nvidia-smi's where it answers)")
    s.add_argument("--budget-gpu-hours", type=float,
                   help="list which --only items this many GPU-hours cover, in order of the paper's "
                        "importance (each model's headline first)")
    return ap.parse_args(argv)


def _check_fraction(flag: str, v) -> None:
    if v is not None and not 0 < v <= 1:
        raise SizingError(f"{flag}: {v!r} must be in (0, 1]")


def _short_deps(deps: list[str]) -> str:
    if not deps:
        return "-"
    if len(deps) <= 3:
        return ",".join(deps)
    return f"{','.join(deps[:2])},... (+{len(deps) - 2})"


def print_fetching(items, fetch_dir, show_sizes: bool) -> None:
    """The hub models and datasets the first job fetches, with their sizes where known (dry-run)."""
    if not items:
        return
    sizes = hub.sizes(items, fetch_dir, ask_hub=True) if show_sizes else {}
    src = f"mirror {hub.mirror()}" if hub.mirror() else "the hub"
    print(f"  fetching (job `fetch`, from {src}) into {fetch_dir}; train and eval jobs read these copies:")
    for it in items:
        size = hub.human(sizes.get(str(it.dest))) if show_sizes else ""
        note = "fetched" if it.done() else ("gated: needs " + hub.TOKEN_ENV + (" (set)" if hub.token() else
                                                                                 " (not set)")
                                             if it.gated and not hub.mirror() else "")
        print(f"    {it.kind:<7} {it.label():<40} -> {it.dest.relative_to(fetch_dir)}   {size}"
              + (f"   [{note}]" if note else "") + f"   (for {', '.join(it.keys)})")


def print_plan(preset, jobs, states, cluster, root, seeds, only, show_commands=True, fetch_dir=None,
               launcher=None, est=None, totals=(), est_measured=False, pilot=False) -> None:
    figs = figure_arms(preset.protocol)
    chosen = [f for f in figs if not only or f in only]
    arms = build_arms(preset, only)
    print(f"preset {preset.name} ({preset.path})")
    print(f"  runs: {preset_root(root, preset)}   cluster: {cluster}   seeds: {','.join(map(str, seeds))}")
    if pilot:
        model = preset.cfg.model.display_name or preset.cfg.model.path
        print(f"  the pilot: one node, {model}, a few steps of stage-1 DAPO and of ARMOR, a stop by the "
              f"time-limit signal and its resume, saves, an evaluation slice -> "
              f"{preset_root(root, preset) / PILOT_DIR / PILOT_FILE}")
    print(f"  items: {', '.join(chosen)}"
          + (f"   (preset also has: {', '.join(f for f in figs if f not in chosen)})"
             if only and len(chosen) < len(figs) else ""))
    for b in ("dapo", "qae"):
        if b in arms:
            fixed = fixed_peak(preset, b)
            got = [read_peak(root, preset, b, s) for s in seeds]
            if fixed is not None:
                how = f"step {fixed} (protocol)"
            else:
                how = f"argmax of validation smoothed over {preset.protocol.peak_selection_window} point(s)"
                over = selection_seeds(preset.protocol, arm_seeds(preset.protocol, arms[b], seeds))
                if len(over) > 1:
                    how += f", mean curve of seeds {','.join(map(str, over))}"
            have = ", ".join(f"seed{s}: {g['step']}" for s, g in zip(seeds, got) if g)
            print(f"  θ* of {b}: {how}" + (f"; chosen: {have}" if have else ""))
            if b == "dapo" and preset.protocol.late_start_fraction is not None:
                print(f"  late start of dapo: first checkpoint after θ* "
                      f"{preset.protocol.late_start_fraction} of the way from the peak down to the floor "
                      f"(smoothed validation)")
    aliases = [f"{a.name} = {a.alias_of}" for a in arms.values() if a.alias_of]
    if aliases:
        print(f"  aliases (same configuration, trained once): {'; '.join(aliases)}")
    missing = missing_entry_points(preset)
    if missing:
        print(f"  warning: entry points not found yet: {', '.join(missing)} "
              "(their jobs will fail until they exist)")
    if fetch_dir is not None:
        print_fetching(hub.items(preset, fetch_dir), fetch_dir, show_sizes=show_commands)
    order = topo_order(jobs)
    w = max(len(j.key) for j in order)
    rw = max(len(j.resources.short()) if j.resources else 1 for j in order)
    print()
    print(f"{'JOB':<{w}}  {'KIND':<11} {'RESOURCES':<{rw}} {'STATE':<8} DEPENDS ON")
    for j in order:
        st, detail = states[j.key]
        print(f"{j.key:<{w}}  {j.kind:<11} {j.resources.short() if j.resources else '-':<{rw}} {st:<8} "
              f"{_short_deps(j.deps)}" + (f"   [{detail}]" if detail and st not in (DONE, "todo") else ""))
        if show_commands:
            if j.kind == "train" and j.info.get("branch_note"):
                print(f"{'':<{w}}    branch: {j.info['branch_note']}")
            if j.kind == "train" and j.info.get("overrides"):
                print(f"{'':<{w}}    armor.train {j.info['overrides']}")
            if j.kind == "train" and j.info.get("memory"):
                print(f"{'':<{w}}    {j.info['memory']}")
            elif j.kind == "evaluate":
                ranks = j.info.get("ranks", 1)
                run = ("torchrun --nproc-per-node %d -m eval.evaluate" % ranks if ranks > 1
                       else "eval.evaluate")
                print(f"{'':<{w}}    {run} --benchmarks {j.info.get('benchmarks')} "
                      f"--protocol {j.info.get('protocol')} (checkpoints chosen at run time)")
            e = (est or {}).get(j.key)
            if e is not None and (e.gpus or e.watch or j.kind in ("train", "evaluate")):
                on = f"{e.gpu_hours:,.0f} GPU-hours on {e.gpus} GPUs" if e.gpus else "on CPU"
                print(f"{'':<{w}}    estimate: " + (e.detail if e.watch else
                      f"{fmt_h(e.hours)}, {on} ({e.detail})"
                      + (f"; checkpoints {fmt_bytes(e.ckpt_bytes)}" if e.ckpt_bytes else "")
                      + (" [measured]" if est_measured else "")))
            if launcher is not None and j.resources is not None and j.resources.gpus_per_node:
                for name, line in launcher.command_lines(j).items():
                    print(f"{'':<{w}}    {name}: {line}")
    counts: dict[str, int] = {}
    for s, _ in states.values():
        counts[s] = counts.get(s, 0) + 1
    n_todo = len(order) - counts.get(DONE, 0) - sum(counts.get(s, 0) for s in ACTIVE)
    print()
    print(f"{len(order)} jobs: {counts.get(DONE, 0)} done, {counts.get('queued', 0)} queued, "
          f"{counts.get('running', 0)} running, {n_todo} to run"
          + (f" ({counts.get('failed')} failed before)" if counts.get("failed") else ""))
    for line in totals:
        print(line)


def print_verdicts(figures_dir: Path) -> None:
    """The world's acceptance checks and every entry of the claims register, one line each (an entry's raw p
    and, in the confirmatory family of a confirmation preset, its Holm-adjusted p), when the figures job wrote
    them (figures/world_checks.py, figures/claims.py); the numbers are in REPRODUCTION.md."""
    for stem, title in (("world_checks", "the world's acceptance checks"),
                        ("checklist", "the paper's claims on this preset (the claims register)")):
        path = figures_dir / f"{stem}.json"
        if path.is_file():
            print(f"{title} ({path}):")
            print("\n".join(verdict_lines(read_verdicts(path))))


def _hms(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h {s % 3600 // 60:02d}m {s % 60:02d}s ({s} s)"


def wall_time_line(out: Path, t0: float, t1: float) -> str:
    """This invocation's wall time, and (after interrupted ones) the total of every run_all invocation on the
    preset's runs folder (its driver log, as the report's wall time)."""
    line = f"wall time of this command: {_hms(t1 - t0)}"
    total = driver_wall_time(out)
    if total is not None and total - (t1 - t0) > 1:
        line += f"; all run_all invocations on {out}: {_hms(total)}"
    return line


def _cpu_seconds() -> tuple[float, float]:
    """(user, system) CPU seconds of this process and its reaped children (the jobs: warm forks and
    subprocesses alike are waited for, so their time adds up here)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + kids.ru_utime, me.ru_stime + kids.ru_stime


def cores_line(la, cpu0: tuple[float, float]) -> str:
    """This invocation's CPU time (user, system) and, on the local backend, the core-seconds its workers left
    idle while jobs remained (the schedule's loss: the critical path, jobs that wait for others)."""
    user, system = (b - a for a, b in zip(cpu0, _cpu_seconds()))
    line = f"CPU time of this command: user {user:,.0f} s, system {system:,.0f} s"
    st = getattr(la, "last_local", None)
    if st:
        line += (f"; {st['workers'] * st['threads']} core(s) x {st['wall_s']:,.0f} s = {st['core_s']:,.0f} "
                 f"core-s, {st['idle_core_s']:,.0f} idle ({st['idle_core_s'] / max(st['core_s'], 1e-9):.1%})")
    return line


def local_priorities(preset, jobs) -> None:
    """Local starts go longest remaining path first (slurm.launcher.critical_path_order): each train and
    evaluate job's cost is sizing's token model of its work (only its ratio to the others' matters)."""
    est = estimate_jobs(preset, jobs, Throughput())
    for j in jobs:
        j.cost = est[j.key].hours if j.kind in ("train", "evaluate") else 0.0


def _rehearsal(a, paper, root: Path):
    """--rehearse: the paper preset's rehearsal preset (reproduce/matrix/rehearsal.py), its substitutions
    printed; a flag that sizes or places a GPU plan is an error."""
    rehearsal.check_paper(paper.name)
    given = [f"--{f.replace('_', '-')}" for f in rehearsal.GPU_FLAGS if getattr(a, f) not in (None, False)]
    if given:
        raise ExperimentError(f"--rehearse: {', '.join(given)} size or place the GPU plan; a rehearsal runs "
                              f"on this machine's CPUs (local workers or the local SLURM)")
    preset, subs = rehearsal.rehearsal_preset(paper, root, a.rehearse_engine)
    print(f"{rehearsal.LABEL}\n{preset.name}: the DAG of {paper.name} ({preset.path}), with these "
          f"substitutions:")
    print("\n".join(rehearsal.substitution_lines(subs)) + "\n")
    return preset


def main(argv=None) -> int:
    a = parse_args(argv)
    try:
        preset = load_preset(a.preset)
        root = Path(a.root).resolve() if a.root else REPO_ROOT / "runs"
        if a.rehearse:
            preset = _rehearsal(a, preset, root)
        elif a.rehearse_engine != "hf":
            raise ExperimentError(f"--rehearse-engine {a.rehearse_engine}: goes with --rehearse")
        only = parse_only(a.only)
        seeds = parse_seeds(a.seeds) or list(preset.protocol.seeds)
        flags = {"partition": a.partition, "account": a.account, "qos": a.qos, "constraint": a.constraint,
                 "nodes": a.nodes, "gpus_per_node": a.gpus_per_node, "time_min": a.time_min,
                 "mem_gb": a.mem_gb, "cpus_per_task": a.cpus_per_node}
        res = preset_resources(preset, a.resources, flags)
        gpu = bool(res["train"].gpus_per_node)
        out = preset_root(root, preset)
        measured = read_pilot(out / PILOT_DIR / PILOT_FILE)
        sized = gpu or measured is not None          # a CPU preset is sized once its pilot measured it
        _check_fraction("--anchor-share", a.anchor_share)
        tp = (throughput(preset, a.rollout_tokens_per_s, a.update_tokens_per_s, a.response_fill,
                                a.save_s, a.gpu_check, a.decode_tokens_per_s, a.push_s, a.anchor_share,
                                pilot=measured) if sized else None)
        if gpu and a.pilot:             # the pilot's own shape: one node, its one-node host memory
            check_plan(preset, {**res, "train": pilot_train(preset, res["train"], a.mem_gb)}, tp,
                       "--mem-gb" if a.mem_gb is not None else "the pilot's train.mem_gb", pilot=True)
        elif gpu:
            check_plan(preset, res, tp, "--mem-gb" if a.mem_gb is not None else
                              f"train.mem_gb ({a.resources})" if a.resources else "train.mem_gb")
        for flag, v in (("--gpu-mem-gb", a.gpu_mem_gb), ("--budget-gpu-hours", a.budget_gpu_hours)):
            if v is not None and not v > 0:
                raise SizingError(f"{flag}: {v!r} must be > 0")
        if a.pilot and (a.only or a.seeds or a.status):
            raise ExperimentError("--pilot: runs the pilot of the whole preset (no --only, --seeds or "
                                  "--status)")
        fetch_dir = Path(a.fetch_dir).resolve() if a.fetch_dir else hub.default_fetch_dir(root)
        if a.net_floor_gbps is not None and (not a.pilot or not a.net_floor_gbps >= 0):
            raise ExperimentError(f"--net-floor-gbps: {a.net_floor_gbps!r} goes with --pilot and must be "
                                  ">= 0")
        floor = {} if a.net_floor_gbps is None else {"net_floor_gbps": a.net_floor_gbps}
        jobs = (pilot_jobs(preset, root, res, fetch_dir, mem_gb=a.mem_gb, **floor) if a.pilot else
                build_jobs(preset, root, seeds, only, res, fetch_dir=fetch_dir))
        if gpu and not a.pilot:     # each evaluation's limit fits its estimate: one attempt, no requeue
            fit_eval_limits(preset, jobs, tp, EVAL_TIME_MIN)
        la = Launcher(out, cluster=a.cluster, workers=a.workers, poll_s=a.poll,
                      progress=False if a.no_progress else None, preload=WARM_PRELOAD)
        facts = preflight.gather_facts(out, {**os.environ, **(res["train"].env or {})}, a.gpu_mem_gb)
        if a.dry_run or a.status:
            states = la.states(jobs)
            est, totals = None, []
            if sized and a.dry_run and not a.pilot:
                est = estimate_jobs(preset, jobs, tp)
                nodes = a.cluster_nodes or res["train"].nodes
                ranges = [(x, est if x is tp else estimate_jobs(preset, jobs, x))
                          for x in scenarios(preset, tp)]
                totals = [""] + total_lines(preset, jobs, est, tp, nodes, ranges)
                if a.budget_gpu_hours is not None:
                    rows = item_costs(preset, root, seeds, res, fetch_dir, tp)
                    totals += budget_lines(rows, a.budget_gpu_hours)
            if a.dry_run and not sized and not a.pilot:     # what sharing saves, in steps
                branched = branch_lines(jobs)
                totals += [""] + branched if branched else []
            if a.dry_run and (sized or a.pilot):
                checks = preflight.run_checks(preset, res, jobs, est, facts, out,
                                              hub.items(preset, fetch_dir),
                                              pilot_disk_bytes(preset) if a.pilot else None)
                totals += [""] + preflight.check_lines(checks, facts)
            print_plan(preset, jobs, states, la.cluster, root, seeds, only, show_commands=a.dry_run,
                       fetch_dir=fetch_dir, launcher=la if a.dry_run and gpu else None, est=est,
                       totals=totals, est_measured=measured is not None, pilot=a.pilot)
            card = protocol_card_text(preset) if a.dry_run and not a.pilot else None
            if card:
                print("\nProtocol card (training reward and validation: reward.scorer "
                      f"{preset.cfg.reward.scorer}, reward.answer_mode {preset.cfg.reward.answer_mode}, "
                      f"prompt template {preset.cfg.data.prompt_template}; final evaluation below):\n")
                print(card)
            return 0
        if gpu and la.cluster == "slurm" and not a.pilot and measured is None and not a.without_pilot:
            raise ExperimentError(
                f"{preset.name}: no pilot has measured this plan ({out / PILOT_DIR / PILOT_FILE} is "
                f"missing): "
                f"run it first, one node, a few steps: python reproduce/run_all.py --preset {preset.cli_arg} "
                f"--pilot; or submit on the assumed figures with --without-pilot")
        if a.without_pilot and a.pilot:
            raise ExperimentError("--without-pilot: not with --pilot")
        hub.check_ready(hub.items(preset, fetch_dir))   # a gated dataset without a token fails here
        # the pre-flight stops a submission that would fail on the cluster (a GPU preset, or a sized one)
        if sized:
            est = estimate_jobs(preset, jobs, tp) if not a.pilot else None
            checks = preflight.run_checks(preset, res, jobs, est, facts, out, hub.items(preset, fetch_dir),
                                          pilot_disk_bytes(preset) if a.pilot else None)
            bad = preflight.failures(checks)
            if bad:
                print("\n".join(preflight.check_lines(checks, facts)), file=sys.stderr)
                print(f"error: the pre-flight failed ({', '.join(c.name for c in bad)}): nothing submitted",
                      file=sys.stderr)
                return 2
        missing = missing_entry_points(preset)
        if missing:
            print(f"warning: entry points not found: {', '.join(missing)}; their jobs will fail",
                  file=sys.stderr)
        t0 = time.time()
        # jobs see it: the report's wall time includes this invocation
        os.environ[DRIVER_START_ENV] = repr(t0)
        cpu0 = _cpu_seconds()
        if la.cluster == "local":
            local_priorities(preset, jobs)
        try:
            states = la.run(jobs, wait=not a.no_wait)
        except KeyboardInterrupt:
            print("\ninterrupted: rerun the same command to resume (finished units are kept)",
                  file=sys.stderr)
            return 130
        finally:
            t1 = time.time()
            record_driver_run(out, t0, t1)
            os.environ.pop(DRIVER_START_ENV, None)   # recorded: the driver log now holds this invocation
        bad = {k: v for k, v in states.items() if v[0] not in (DONE, *ACTIVE)}
        if bad:
            print(f"\n{len(bad)} job(s) did not finish:")
            for k, (s, d) in bad.items():
                print(f"  {k}: {s} {d}  (log: {la.job_dir(k) / 'log.err'})")
            print(wall_time_line(out, t0, t1))
            print(cores_line(la, cpu0))
            return 1
        if a.pilot and all(s == DONE for s, _ in states.values()):
            rep = read_json(out / PILOT_DIR / PILOT_FILE)
            print()
            print("\n".join(pilot_report_lines(rep, out / PILOT_DIR / PILOT_FILE)))
            print(f"the dry run sizes the plan from it now: python reproduce/run_all.py --preset "
                  f"{preset.cli_arg} --dry-run")
            print(wall_time_line(out, t0, t1))
        elif all(s == DONE for s, _ in states.values()):
            if preset.protocol.rehearsal_of:
                print(f"\n{rehearsal.LABEL} ({preset.protocol.rehearsal_of}'s DAG on the CPU)")
            print(f"\nall {len(states)} jobs done ({time.time() - t0:.0f}s): "
                  f"results {out / 'results.parquet'}, "
                  f"figures {out / 'figures'}, report {out / 'REPRODUCTION.md'}")
            print_verdicts(out / "figures")
            if any(out.glob("*/seed*/tensorboard")):
                print(f"live logs: tensorboard --logdir {out}")
            print(wall_time_line(out, t0, t1))
            print(cores_line(la, cpu0))
        else:
            n = sum(1 for s, _ in states.values() if s in ACTIVE)
            print(f"\n{n} job(s) queued or running on {la.cluster}; "
                  "rerun this command (or add --status) to follow")
        return 0
    except (ExperimentError, ConfigError, LauncherError, ResourceError, hub.FetchError,
            SizingError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
