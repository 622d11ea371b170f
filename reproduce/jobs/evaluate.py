"""Evaluation planning: which checkpoints of a run are evaluated, the eval.evaluate command, and its stamp.

A baseline is evaluated at θ*; a stage-2 arm at its best checkpoint by validation, every eval_every-th
checkpoint and the paper's table step (figures/paper_numbers.yaml). `python -m reproduce.jobs evaluate`
runs eval.evaluate once per step into <run>/eval/step_NNNNNN/ and then writes
<run>/eval/.armor_evaluated.json; the evaluate job is done when that stamp names the preset's benchmarks and
evaluation protocol.
"""
from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path
from typing import Optional

from common.jsonl import read_json, write_json_atomic
from common.layout import list_checkpoints
from reproduce import hub
from reproduce.entrypoints import entry
from reproduce.jobs.peaks import choose_peak, read_peak, read_validation, start_point, validation_benchmark
from reproduce.matrix.arms import Arm, arm_definitions
from reproduce.matrix.presets import STATE_JSON, ExperimentError, Preset, ckpt_dir, run_dir
from reproduce.matrix.retention import paper_table_step
from slurm import warm

EVAL_STAMP = ".armor_evaluated.json"
# set by the driver on a several-GPU evaluate job: ranks of eval.evaluate
EVAL_RANKS_ENV = "ARMOR_EVAL_RANKS"


def eval_steps(preset: Preset, root: Path, arm: Arm, seed: int) -> list[int]:
    """Run-local steps whose checkpoints are evaluated: θ* for a baseline; for a stage-2 arm the best by
    validation (smoothed, among checkpoints), every eval_every-th checkpoint, the paper's table step and the
    last checkpoint (the claims register's `at: last`)."""
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
    steps.add(ckpts[-1])        # the run's last checkpoint: the claims read its end on the test split too
    table_step = paper_table_step(preset, arm)
    if table_step is not None:
        start = start_point(preset, root, arm, seed)
        local = table_step - (start["step"] if start else 0)
        if local in ckpts:
            steps.add(local)
    return sorted(steps)


def eval_benchmarks(preset: Preset) -> list[str]:
    return list(preset.protocol.eval_benchmarks)


def eval_command(preset: Preset, ckpt: Path, out: Path, fetch_dir: Optional[Path] = None) -> list[str]:
    """`--out .../eval/step_NNNNNN`: eval.evaluate writes <bench>__<protocol>__k<k>.json straight into it.
    With a fetch folder, the benchmarks fetched from the hub are read from it (NAME=path)."""
    benchmarks = eval_benchmarks(preset)
    if fetch_dir is not None:
        benchmarks = hub.fetched_benchmarks(benchmarks, hub.items(preset, fetch_dir))
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
    ranks = int(os.environ.get(EVAL_RANKS_ENV) or 1)
    # README "Evaluation at scale": one engine per GPU, the benchmarks' chunks split over ranks
    if ranks > 1:    # the chunks sized so that no rank idles on a small benchmark (eval.units.chunk_problems)
        argv = [argv[0], "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
                *argv[1:], "--chunk-ranks", str(ranks)]
    return argv


def write_eval_stamp(preset: Preset, root: Path, arm: Arm, seed: int, steps: list[int]) -> None:
    """Record that these steps were evaluated on the preset's benchmarks under its evaluation protocol."""
    write_json_atomic(run_dir(root, preset, arm.run_arm, seed) / "eval" / EVAL_STAMP,
                      {"steps": steps, "benchmarks": eval_benchmarks(preset),
                       "protocol": preset.protocol.eval_protocol, "time": time.time()}, **STATE_JSON)


def eval_done(preset: Preset, root: Path, arm: Arm, seed: int) -> bool:
    st = read_json(run_dir(root, preset, arm.run_arm, seed) / "eval" / EVAL_STAMP)
    return bool(st) and st.get("benchmarks") == eval_benchmarks(preset) and \
        st.get("protocol") == preset.protocol.eval_protocol


def cmd_evaluate(preset: Preset, root: Path, arm_name: str, seed: int,
                 fetch_dir: Optional[Path] = None) -> int:
    arm = arm_definitions(preset.protocol)[arm_name]
    run = run_dir(root, preset, arm.run_arm, seed)
    steps = eval_steps(preset, root, arm, seed)
    for step in steps:
        ck = ckpt_dir(run, step)
        argv = eval_command(preset, ck, run / "eval" / f"step_{step:06d}", fetch_dir)
        print("run:", " ".join(shlex.quote(a) for a in argv), flush=True)
        rc = warm.run(argv)
        if rc != 0:
            print(f"evaluation of {ck} failed (exit {rc})", file=sys.stderr)
            return rc
    write_eval_stamp(preset, root, arm, seed, steps)
    return 0
