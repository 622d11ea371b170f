"""Every job's hours, GPUs, nodes and checkpoint bytes under a `Throughput` (`estimate_jobs`): a train job's
steps after its branch point, validations and saves; an evaluation's benchmarks chunk by chunk over its GPUs;
a `wait_checkpoint` job as the fraction of the job it watches; CPU jobs at CPU_JOB_H."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from eval.settings import EvalSettings
from reproduce.sizing.footprint import checkpoint_volume
from reproduce.sizing.step_model import (benchmark_problems, model_config, step_parts, step_tokens,
                                         validation_seconds)
from reproduce.sizing.throughput import Throughput, model_params

CPU_JOB_H = {"fetch": 1.0, "world": 0.1, "select_peak": 0.05, "collect": 0.1, "figures": 0.1}
EVAL_CHUNK_PROBLEMS = EvalSettings.chunk_size   # problems of a chunk: one rank's generation call


def fmt_h(h: float) -> str:
    """Hours as printed: `1,234.5 h`, with days from two days on."""
    return f"{h:,.1f} h" + (f" ({h / 24:.1f} d)" if h >= 48 else "")


def fmt_bytes(b: float) -> str:
    """Bytes as printed: GB (1e9), TB from 1e12."""
    return f"{b / 1e12:,.2f} TB" if b >= 1e12 else f"{b / 1e9:,.1f} GB"


@dataclass
class Estimate:
    hours: float
    gpus: int = 0
    nodes: int = 0                 # whole nodes the job holds (0: a CPU job beside the others)
    ckpt_bytes: int = 0
    detail: str = ""
    watch: Optional[tuple[str, float]] = None   # (job, fraction): ends when that job is this far through
    scratch_hours: Optional[float] = None       # a branch: its hours had it run from its start

    @property
    def gpu_hours(self) -> float:
        return self.hours * self.gpus

    @property
    def saved_gpu_hours(self) -> float:
        return 0.0 if self.scratch_hours is None else (self.scratch_hours - self.hours) * self.gpus


def _job_config(preset, job):
    """A job's run config: the preset under its arm's overrides (and stage 2's)."""
    ov = tuple(job.info.get("arm_overrides", []))
    p = preset.protocol
    if int(job.info.get("stage", 1)) == 2:
        ov = tuple(p.stage2_overrides) + ((f"schedule.validate_every={p.stage2_validate_every}",)
                                          if p.stage2_validate_every else ()) + ov
    return model_config(str(preset.path), ov)


def train_estimate(preset, job, t: Throughput, n_params: Optional[int]) -> Estimate:
    """A train job's hours: the steps it trains (after its branch point), their validations and saves."""
    res = job.resources
    gpus = res.nodes * res.gpus_per_node
    cfg = _job_config(preset, job)
    steps = int(job.info.get("steps") or cfg.schedule.total_steps)
    first = int(job.info.get("trained_from") or 0)
    s = cfg.schedule
    per_step = sum(step_parts(cfg, t, gpus, n_params).values())
    val_s = validation_seconds(cfg, t, gpus)
    save_s = t.measured.save_s if t.measured else t.save_s

    def hours(a: int, b: int) -> tuple[float, int, int]:     # steps a+1..b: seconds, validations, saves
        vals = (b // s.validate_every - a // s.validate_every) if s.validate_every else 0
        vals += 1 if a == 0 and s.validate_every and cfg.validation.at_start else 0
        saves = math.ceil(b / s.save_every) - math.ceil(a / s.save_every) if b > a else 0
        return ((b - a) * per_step + vals * val_s + saves * save_s) / 3600, vals, saves

    h, vals, saves = hours(first, steps)
    vol = 0
    if n_params:
        vol = checkpoint_volume(n_params, math.ceil(steps / s.save_every), s.keep_last,
                                _n_protected(cfg, job), reference_bytes=_reference_bytes(cfg))["bytes"]
    on, ref, trained = step_tokens(cfg, t)
    what = (f"{steps - first} of {steps} steps (from {job.info['branch']['source']}'s step {first})"
            if first else f"{steps} steps")
    tokens = "" if t.measured else (f" x ({(on + ref) / 1e6:.0f}M generated + {trained / 1e6:.0f}M trained "
                                    f"tokens)")
    detail = (f"{what}{tokens}, {vals} validations, {saves} saves (kept: "
              f"{_kept(cfg, math.ceil(steps / s.save_every), job)})")
    scratch = hours(0, steps if job.info.get("branch", {}).get("kind") != "continuation" else
                    steps - int(job.info.get("start_step") or 0))[0] if job.info.get("branch") else None
    return Estimate(h, gpus, res.nodes if gpus else 0, vol, detail, scratch_hours=scratch)


def _resets(cfg) -> bool:
    return cfg.algo.reference.reset.every is not None


def _reference_bytes(cfg) -> int:
    """Bytes per parameter of πref's shards in a save of a run that resets it (its compute dtype)."""
    from armor import memory
    return memory.BYTES[cfg.parallel.compute_dtype] if _resets(cfg) else 0


def _n_protected(cfg, job) -> int:
    """Checkpoints kept besides the last keep_last: θ* / late start (stage 1), the keep_steps the driver
    sets (the steps evaluation reads), the best validation, and the step whose policy πref holds."""
    steps = set(job.info.get("protected_steps", [])) | set(_overridden(job, "schedule.keep_steps") or [])
    return len(steps) + 1 + int(_resets(cfg))


def _overridden(job, key: str):
    """The value of `key=...` in the train job's resolved overrides (info["overrides"]), or None."""
    import yaml
    for tok in str(job.info.get("overrides", "")).split():
        if tok.startswith(key + "="):
            return yaml.safe_load(tok.split("=", 1)[1])
    return None


def _kept(cfg, saves: int, job) -> str:
    k = cfg.schedule.keep_last
    return f"all {saves}" if k is None else f"last {k} + {_n_protected(cfg, job)} protected"


def eval_checkpoints(preset, stage: int, steps: int) -> int:
    """Checkpoints an arm's evaluation reads (reproduce/jobs/evaluate.py eval_steps): θ* for a baseline; the
    best by validation, every eval_every-th, the table step and the last for a stage-2 arm."""
    if stage == 1:
        return 1
    saves = math.ceil(steps / preset.cfg.schedule.save_every)
    n = preset.protocol.eval_every
    return min(saves, 3 + (math.ceil(saves / n) if n else 0))


def eval_estimate(preset, job, t: Throughput) -> Estimate:
    """One arm's evaluation: each benchmark's chunks (EVAL_CHUNK_PROBLEMS problems, fewer where the
    benchmark has fewer than that per GPU: eval.units.chunk_problems; one rank's generation call each;
    eval.evaluate: rank r draws chunks r, r + N, ...) go round the GPUs, so a benchmark takes
    ceil(chunks / GPUs) chunk times, each its tokens / R and a tail, and one of fewer chunks than GPUs
    leaves the others idle. Measured, a chunk time is its samples x the pilot's seconds per sample (its
    slice, EVAL_PROBLEMS problems a benchmark, is one chunk each: one rank's). A job past its time limit is
    requeued and resumes (eval.evaluate keeps finished chunks): the detail names its attempts."""
    from eval.protocols import get_protocol
    from eval.units import chunk_problems
    res = job.resources
    gpus = res.nodes * res.gpus_per_node
    g = max(1, gpus)
    proto = get_protocol(preset.protocol.eval_protocol)
    max_new = proto.max_new_tokens or preset.cfg.lengths.max_response
    tokens, samples, wall_samples, rounds = 0.0, 0, 0, 0
    few = []
    for b in preset.protocol.eval_benchmarks:
        name = b.split("=", 1)[0]
        k = preset.protocol.eval_samples or proto.setting(name).samples
        n = benchmark_problems(b)
        if preset.protocol.eval_limit:
            n = min(n, preset.protocol.eval_limit)
        per = chunk_problems(n, EVAL_CHUNK_PROBLEMS, g)        # the job passes --chunk-ranks: its GPUs
        chunks = math.ceil(n / per)
        tokens += n * k * t.fill * max_new
        samples += n * k
        wall_samples += math.ceil(chunks / g) * per * k
        rounds += math.ceil(chunks / g)
        if chunks < g:
            few.append(f"{name} {chunks}")
    ck = eval_checkpoints(preset, int(job.info.get("stage", 2)), int(job.info.get("steps") or 0))
    if t.measured is not None and t.measured.eval_sample_s:
        sec = ck * wall_samples * t.measured.eval_sample_s
        detail = f"{ck} checkpoint(s) x {samples:,} samples at the pilot's seconds per sample"
    else:
        tail = max(0.0, max_new - t.fill * max_new) / t.decode_tokens_per_s
        sec = ck * (wall_samples * t.fill * max_new / t.rollout_tokens_per_s + rounds * tail)
        detail = f"{ck} checkpoint(s) x {tokens / 1e6:.0f}M generated tokens"
    if few and gpus > 1:
        detail += f"; GPUs busy of {gpus} (chunks of <= {EVAL_CHUNK_PROBLEMS} problems): {', '.join(few)}"
    limit_h = res.time_min / 60
    if sec / 3600 > limit_h:
        attempts = math.ceil(sec / 3600 / limit_h)
        detail += (f"; over the {fmt_h(limit_h)} limit (evaluate.time_min): {attempts} attempts, requeued at "
                   f"the limit, finished chunks kept")
    return Estimate(sec / 3600, gpus, res.nodes if gpus else 0, 0, detail)


def estimate_jobs(preset, jobs, t: Throughput) -> dict[str, Estimate]:
    """key -> Estimate of every job of a plan (GPU presets, or any preset the pilot measured)."""
    n = model_params(preset)
    out: dict[str, Estimate] = {}
    for j in jobs:
        if j.kind == "train":
            out[j.key] = train_estimate(preset, j, t, n)
        elif j.kind == "evaluate":
            out[j.key] = eval_estimate(preset, j, t)
        elif j.kind == "wait_checkpoint":
            out[j.key] = Estimate(0.0, watch=(j.info["watch"], float(j.info["fraction"])),
                                  detail=f"ends when {j.info['watch']} has saved step {j.info['step']}")
        else:
            out[j.key] = Estimate(CPU_JOB_H.get(j.kind, 0.1))
    return out


# an evaluate job's time limit over its expected hours: the driver fits the limit so one attempt finishes
EVAL_TIME_MARGIN = 1.5


def fit_eval_limits(preset, jobs, t: Throughput, default_min: int) -> list[str]:
    """Raise each GPU evaluate job's time limit that is still `default_min` (none set by a resources file)
    to its estimate at `t` x EVAL_TIME_MARGIN, in whole hours, so that it finishes in one attempt instead of
    being requeued at the limit; returns the keys changed."""
    import dataclasses
    changed = []
    for j in jobs:
        res = j.resources
        if j.kind != "evaluate" or res is None or not res.gpus_per_node or res.time_min != default_min:
            continue
        need = 60 * math.ceil(eval_estimate(preset, j, t).hours * EVAL_TIME_MARGIN)
        if need > res.time_min:
            j.resources = dataclasses.replace(res, time_min=need)
            changed.append(j.key)
    return changed
