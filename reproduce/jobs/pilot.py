"""The pilot's jobs (`python reproduce/run_all.py --preset P --pilot`; the graph:
reproduce/dag/pilot_graph.py): one node, the preset's real model, a few steps of stage-1 DAPO and of ARMOR, a
stop by the time-limit signal and its resume, saves, and an evaluation slice on every GPU of the node; what
they measure goes into
runs/<preset>/pilot/pilot.json, which the dry run's sizing reads (reproduce/sizing/throughput.py
`read_pilot`).

    python -m reproduce.jobs pilot-train  --preset P --root R --phase dapo|armor [--fetch-dir D]
    python -m reproduce.jobs pilot-eval   --preset P --root R [--fetch-dir D]
    python -m reproduce.jobs pilot-report --preset P --root R

Each GPU does a full-scale step's work: the pilot's prompts per step, prompts drawn per round and mini-batch
are the preset's divided by protocol.nodes (`scaled_batch`), so a pilot step's seconds are the plan's. The
trainer runs in this process (armor.trainer.Trainer, unchanged), its push, save and validation timed from
outside (`_Timers`). The DAPO phase's first attempt asks for the time-limit stop after step STOP_AT the way
SLURM's warning does (`scancel --signal=USR2` on its own job: the job wrapper's stop file, armor/stop.py), so
the trainer saves and leaves and SLURM requeues the job; the second attempt resumes from that checkpoint. On
the local backend (no requeue) a one-rank pilot stops through the same stop file and resumes in a new
process (exec); several local ranks record the stop and resume as not exercised.
"""
from __future__ import annotations

import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from common.jsonl import append_jsonl, read_json, read_jsonl, write_json_atomic
from common.layout import list_checkpoints
from reproduce import hub, preflight
from reproduce.jobs.evaluate import eval_command
from reproduce.jobs.netprobe import NET_FILE
from reproduce.matrix.arms import _val, arm_definitions
from reproduce.matrix.presets import STATE_JSON, ExperimentError, Preset, preset_root
from reproduce.sizing.step_model import benchmark_problems
from reproduce.sizing.throughput import PILOT_DIR, PILOT_FILE
from slurm import warm

DAPO_STEPS, STOP_AT, ARMOR_STEPS = 3, 1, 2
VAL_PROBLEMS = 8          # validation problems the pilot times (of each set)
EVAL_PROBLEMS = 8         # problems of each benchmark in the evaluation slice
TIMES = "pilot_times.jsonl"
STOP_WAIT_S = 900.0       # how long the first attempt waits for the time-limit signal's stop file


def pilot_dir(root: Path, preset: Preset) -> Path:
    return preset_root(root, preset) / PILOT_DIR


def scaled_batch(preset: Preset) -> dict[str, int]:
    """The pilot's batch on one node: prompts_per_step, gen_batch_prompts and mini_batch_prompts divided by
    protocol.nodes, so each of its GPUs samples and trains what one of the full run's does. Raises when the
    division leaves a mini-batch that the node's ranks cannot share or a batch mini-batches do not divide."""
    b, r, n = preset.cfg.batch, preset.cfg.rollout, max(1, preset.protocol.nodes)
    B = max(1, round(b.prompts_per_step / n))
    mini = max(1, round(b.mini_batch_prompts / n))
    out = {"batch.prompts_per_step": B, "batch.mini_batch_prompts": mini}
    if r.gen_batch_prompts:
        out["rollout.gen_batch_prompts"] = max(B, round(r.gen_batch_prompts / n))
    ranks = preset.protocol.procs_per_node or preset.protocol.gpus_per_node or 1
    if B % mini or (mini * b.group_size) % ranks:
        raise ExperimentError(f"the pilot's batch ({b.prompts_per_step} / {n} nodes = {B} prompts, "
                              f"mini-batches of {mini}) does not split over {ranks} ranks: set "
                              f"protocol.nodes so that batch.prompts_per_step and batch.mini_batch_prompts "
                              f"divide by it")
    return out


def pilot_overrides(preset: Preset, root: Path, phase: str, fetch_dir: Optional[Path] = None) -> list[str]:
    """The pilot's armor.train overrides of one phase: the preset's stage-1 DAPO (or ARMOR from the DAPO
    pilot's last checkpoint, with a reset every step: anchors, swaps, the mixed ratio and the reset), the
    scaled batch, a save and a validation of VAL_PROBLEMS problems at its last step only, and no background
    state saves (schedule.state_every: what the pilot does not measure, nor its one-node memory holds)."""
    d = pilot_dir(root, preset)
    steps = DAPO_STEPS if phase == "dapo" else ARMOR_STEPS
    cfg = preset.cfg
    out = [f"name={_val(f'{preset.name}/pilot/{phase}')}", "seed=0", f"output_dir={_val(str(d / phase))}"]
    if fetch_dir is not None and phase == "dapo":
        fetched = hub.fetched_overrides(cfg, hub.items(preset, fetch_dir), models=True)
        out += [f"{k}={_val(v)}" for k, v in fetched.items()]
    elif fetch_dir is not None:
        fetched = hub.fetched_overrides(cfg, hub.items(preset, fetch_dir), models=False)
        out += [f"{k}={_val(v)}" for k, v in fetched.items()]
    out += [f"{k}={v}" for k, v in scaled_batch(preset).items()]
    out += [f"schedule.total_steps={steps}", f"schedule.save_every={steps}",
            f"schedule.validate_every={steps}", "schedule.keep_last=null", "schedule.keep_steps=[]",
            "validation.at_start=false", f"validation.max_problems={VAL_PROBLEMS}",
            "schedule.state_every=null"]      # background state saves: not measured (and not in its memory)
    if phase == "armor":
        last = list_checkpoints(d / "dapo")
        if not last:
            raise ExperimentError(f"the ARMOR pilot starts from the DAPO pilot's last checkpoint: "
                                  f"{d / 'dapo'} has none (run the dapo phase first)")
        ck = _val(str(d / "dapo" / "checkpoints" / f"step_{last[-1]:06d}"))
        out += [f"model.path={ck}", f"algo.reference.path={ck}"]
        out += [o for o in arm_definitions(preset.protocol)["armor"].overrides
                if not o.startswith("algo.reference.reset.")]
        out += ["algo.reference.reset.every=1", "algo.reference.reset.until_step=null"]
    return out


class _Timers:
    """Seconds of the trainer's pushes (a `serve` that changes the weights the engine holds), saves,
    validations and its start, recorded from outside the trainer."""

    def __init__(self, trainer):
        self.t = trainer
        self.pushes: list[float] = []
        self.saves: list[float] = []
        self.validations: list[tuple[float, int]] = []
        self._held = None
        models = trainer.models
        serve, save, validate = models.serve, trainer.save, trainer.validate

        def timed_serve(which, *a, **k):
            key = (which, models.versions.get(which))
            t0 = time.perf_counter()
            out = serve(which, *a, **k)
            if key != self._held:
                self.pushes.append(time.perf_counter() - t0)
                self._held = key
            return out

        def timed_save(*a, **k):
            t0 = time.perf_counter()
            out = save(*a, **k)
            self.saves.append(time.perf_counter() - t0)
            return out

        def timed_validate(*a, **k):
            t0 = time.perf_counter()
            out = validate(*a, **k)
            n = sum(len(p) for p in trainer.val_sets.values()) * trainer.cfg.validation.samples
            self.validations.append((time.perf_counter() - t0, n))
            return out
        models.serve, trainer.save, trainer.validate = timed_serve, timed_save, timed_validate


def _request_stop(main: bool) -> str:
    """Ask for the time-limit stop the way SLURM's warning does, and wait until the job wrapper has written
    its stop file (armor/stop.py reads it at the step boundary that follows). Returns how it was asked."""
    stop_file = os.environ.get("ARMOR_STOP_FILE")
    job = os.environ.get("SLURM_JOB_ID")
    if not stop_file:
        raise ExperimentError("the pilot's stop needs the job wrapper's ARMOR_STOP_FILE (run it through "
                              "reproduce/run_all.py --pilot)")
    how = "the wrapper's stop file"
    if main and job:
        subprocess.run(["scancel", "--signal=USR2", job], check=True)
        how = f"scancel --signal=USR2 {job} (SLURM's time-limit warning)"
    elif main:
        Path(stop_file).touch()          # the local backend: the file the wrapper writes on the warning
    t0 = time.time()
    while not Path(stop_file).exists():
        if time.time() - t0 > STOP_WAIT_S:
            raise ExperimentError(f"the time-limit signal did not reach the job within "
                                  f"{STOP_WAIT_S:.0f} s ({stop_file} not written)")
        time.sleep(0.2)
    return how


def cmd_pilot_train(preset: Preset, root: Path, phase: str, fetch_dir: Optional[Path] = None) -> int:
    """One pilot phase in this process: the node's checks, the trainer timed, the stop and its resume
    (dapo)."""
    from armor.config import load_config, needs_reference_logprobs
    from armor.trainer import Trainer
    if phase not in ("dapo", "armor"):
        raise ExperimentError(f"--phase: {phase!r} is not dapo or armor")
    t_process = time.time()
    cfg = load_config(preset.path, pilot_overrides(preset, root, phase, fetch_dir))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    checks = preflight.node_checks(cfg, world)
    bad = preflight.failures(checks)
    if bad:
        raise ExperimentError("; ".join(f"{c.name}: {c.detail}" for c in bad))
    run = cfg.run_dir
    main = int(os.environ.get("RANK", "0")) == 0
    first = not list_checkpoints(run) and not (run / "DONE").exists()
    stop = phase == "dapo" and first
    local_many = stop and not os.environ.get("SLURM_JOB_ID") and world > 1
    t0 = time.perf_counter()
    trainer = Trainer(cfg).start()
    load_s = time.perf_counter() - t0
    timers = _Timers(trainer)
    asked = {}
    if stop and not local_many:
        step = trainer.train_step

        def train_step():
            row = step()
            if trainer.step == STOP_AT and not asked:
                asked["at_step"] = trainer.step
                asked["how"] = _request_stop(main)
                asked["time"] = time.time()
            return row
        trainer.train_step = train_step
    resumed_from = trainer.step
    trainer.fit()
    rec = {"phase": phase, "attempt_start": t_process, "resumed_from": resumed_from or None,
           "load_s": load_s, "pushes": timers.pushes, "saves": timers.saves,
           "validations": timers.validations, "steps_done": trainer.step, "world_size": world,
           "reference_logprobs": needs_reference_logprobs(cfg),      # its steps' time holds πref's forward
           "stopped": trainer.stopped, "stop": asked or None, "end": time.time(),
           "node_checks": [c.__dict__ for c in checks],
           "local_stop_not_exercised": bool(local_many)}
    if main:
        append_jsonl(run / TIMES, rec)
    if trainer.stopped is not None:
        if os.environ.get("SLURM_JOB_ID"):
            return 128 + trainer.stopped         # the wrapper counts it interrupted; SLURM requeues it
        if world == 1:                           # the local backend: resume in a new process, as a requeue
            # a requeued attempt starts without the stop file (slurm/jobwrap.py removes it)
            Path(os.environ["ARMOR_STOP_FILE"]).unlink(missing_ok=True)
            argv = [sys.executable, "-m", "reproduce.jobs", *sys.argv[1:]]
            print("resume:", " ".join(shlex.quote(a) for a in argv), flush=True)
            os.execv(sys.executable, argv)
    return 0


def cmd_pilot_eval(preset: Preset, root: Path, fetch_dir: Optional[Path] = None) -> int:
    """The evaluation slice: EVAL_PROBLEMS problems of each benchmark, the protocol's samples, on the ARMOR
    pilot's last checkpoint, over every GPU of the node (eval.evaluate under torchrun, as an evaluate job)."""
    d = pilot_dir(root, preset)
    last = list_checkpoints(d / "armor")
    if not last:
        raise ExperimentError(f"{d / 'armor'}: no checkpoint to evaluate (run the armor phase first)")
    ck = d / "armor" / "checkpoints" / f"step_{last[-1]:06d}"
    argv = eval_command(preset, ck, d / "eval" / "out", fetch_dir)
    if "--limit" in argv:
        argv[argv.index("--limit") + 1] = str(min(EVAL_PROBLEMS, int(argv[argv.index("--limit") + 1])))
    else:
        argv += ["--limit", str(EVAL_PROBLEMS)]
    print("run:", " ".join(shlex.quote(a) for a in argv), flush=True)
    t0 = time.perf_counter()
    rc = warm.run(argv)
    sec = time.perf_counter() - t0
    if rc != 0:
        print(f"the evaluation slice failed (exit {rc})", file=sys.stderr)
        return rc
    write_json_atomic(d / "eval" / "times.json", {"seconds": sec, "samples": eval_samples(preset),
                                                  "checkpoint": str(ck), "time": time.time()}, **STATE_JSON)
    return 0


def eval_samples(preset: Preset) -> int:
    """Samples of the evaluation slice: per benchmark min(EVAL_PROBLEMS, its problems) x its samples."""
    from eval.protocols import get_protocol
    proto = get_protocol(preset.protocol.eval_protocol)
    n = 0
    for b in preset.protocol.eval_benchmarks:
        name = b.split("=", 1)[0]
        k = preset.protocol.eval_samples or proto.setting(name).samples
        lim = min(EVAL_PROBLEMS, preset.protocol.eval_limit or EVAL_PROBLEMS)
        n += min(lim, benchmark_problems(b)) * k
    return n


def _median(xs: list[float]) -> Optional[float]:
    return statistics.median(xs) if xs else None


def _phase(d: Path) -> dict:
    rows = read_jsonl(d / "metrics.jsonl")
    times = read_jsonl(d / TIMES)
    if not rows or not times:
        raise ExperimentError(f"{d}: the pilot phase has not run (no metrics.jsonl / {TIMES})")
    out = {"steps": len(rows)}
    for k, name in (("time_step", "step_s"), ("time_generate", "generate_s"), ("time_logprob", "logprob_s"),
                    ("time_update", "update_s"), ("time_score", "score_s")):
        out[name] = _median([float(r[k]) for r in rows if r.get(k) is not None])
    out["response_tokens"] = _median([float(r["response_length"]) for r in rows
                                      if r.get("response_length") is not None])
    out["tokens_generated"] = _median([float(r["tokens_generated"]) for r in rows
                                       if r.get("tokens_generated")])
    drawn = sum(int(r.get("prompts_drawn") or 0) for r in rows)
    ref = sum(int(r.get("ref_samples") or 0) for r in rows)
    out["ref_samples"], out["prompts_drawn"] = ref, drawn
    out["reference_logprobs"] = any(bool(t.get("reference_logprobs")) for t in times)
    out["pushes"] = [x for t in times for x in t["pushes"]]
    out["saves"] = [x for t in times for x in t["saves"]]
    out["validations"] = [x for t in times for x in t["validations"]]
    out["attempts"] = times
    return out


def pilot_report(preset: Preset, root: Path) -> dict:
    """pilot.json from the phases' rows and timings (reproduce/sizing/throughput.py Measured reads it)."""
    d = pilot_dir(root, preset)
    dapo, armor = _phase(d / "dapo"), _phase(d / "armor")
    ref_n = preset.protocol.armor_ref_n
    armor["anchor_share"] = (armor["ref_samples"] / (armor["prompts_drawn"] * ref_n)
                             if armor["prompts_drawn"] else None)
    vals = dapo["validations"] + armor["validations"]
    ev = read_json(d / "eval" / "times.json") or {}
    stops = [a for a in dapo["attempts"] if a.get("stop")]
    resumes = [a for a in dapo["attempts"] if a.get("resumed_from")]
    p = preset.protocol
    rep = {"complete": True, "preset": preset.name, "when": time.strftime("%Y-%m-%d %H:%M"),
           "nodes": 1, "gpus": p.gpus_per_node, "of_nodes": p.nodes, "batch": scaled_batch(preset),
           "dapo": {k: v for k, v in dapo.items() if k != "attempts"},
           "armor": {k: v for k, v in armor.items() if k != "attempts"},
           "push_s": _median(dapo["pushes"] + armor["pushes"]),
           "save_s": _median(dapo["saves"] + armor["saves"]),
           "load_s": _median([a["load_s"] for a in dapo["attempts"] + armor["attempts"]]),
           "validation_sample_s": ((sum(s for s, _ in vals) / max(1, sum(n for _, n in vals)))
                                   if vals else None),
           "eval": {"seconds": ev.get("seconds"), "samples": ev.get("samples"),
                    "sample_s": (ev["seconds"] / ev["samples"]) if ev.get("samples") else None},
           "stop": {"asked": stops[0]["stop"] if stops else None,
                    "saved_step": stops[0]["steps_done"] if stops else None,
                    "resumed_from": resumes[0]["resumed_from"] if resumes else None,
                    "resume_load_s": resumes[0]["load_s"] if resumes else None,
                    "exercised": bool(stops and resumes and stops[0]["stopped"] is not None)},
           "node_checks": dapo["attempts"][0].get("node_checks", []),
           "network": read_json(d / NET_FILE)}          # the two-node probe's (None: one-node plan)
    for key in ("push_s", "save_s", "validation_sample_s"):
        if rep[key] is None:
            raise ExperimentError(f"{d}: the pilot measured no {key} (its phases saved, pushed and "
                                  f"validated nothing?)")
    return rep


def cmd_pilot_report(preset: Preset, root: Path) -> int:
    rep = pilot_report(preset, root)
    path = pilot_dir(root, preset) / PILOT_FILE
    write_json_atomic(path, rep, **STATE_JSON)
    print("\n".join(report_lines(rep, path)))
    return 0


def report_lines(rep: dict, path: Path) -> list[str]:
    """What the pilot measured, for the driver's output."""
    st = rep["stop"]
    ev = rep["eval"]
    out = [f"pilot of {rep['preset']} on 1 node ({rep['gpus']} GPUs; batch {rep['batch']}): {path}",
            f"  DAPO step {rep['dapo']['step_s']:.2f} s (generate {rep['dapo']['generate_s']:.2f}, update "
            f"{rep['dapo']['update_s']:.2f}), ARMOR step {rep['armor']['step_s']:.2f} s, anchor share "
            + (f"{rep['armor']['anchor_share']:.2f}" if rep['armor']['anchor_share'] is not None else "-"),
            f"  push {rep['push_s']:.3f} s, save {rep['save_s']:.2f} s, load {rep['load_s']:.2f} s, "
            f"validation {rep['validation_sample_s']:.4f} s a sample, evaluation slice "
            + (f"{ev['seconds']:.1f} s for {ev['samples']} samples" if ev.get("seconds") else "not run"),
            "  stop by the time-limit signal: " + (
                f"asked after step {st['asked']['at_step']} by {st['asked']['how']}, saved step "
                f"{st['saved_step']}, resumed from step {st['resumed_from']} ({st['resume_load_s']:.1f} s to "
                f"load)" if st["exercised"] else "not exercised (the local backend cannot requeue several "
                                                 "ranks: run --pilot under SLURM)")]
    net = rep.get("network")
    if net:
        out.append(f"  network across {len(net['hosts'])} nodes ({'; '.join(net['transport'])}): "
                   f"{net['verdict']}")
    return out
