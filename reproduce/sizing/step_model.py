"""The step model: the tokens and seconds of one training step, one validation and one preemption of a
config under a `Throughput` (the formulas: reproduce/sizing/__init__.py), and the problems of a benchmark."""
from __future__ import annotations

import functools
from typing import Optional

from common.benchmarks import ALIASES, BENCHMARKS
from reproduce.sizing.throughput import Throughput

UNKNOWN_PROBLEMS = 500          # problems counted for a benchmark the registry does not size (a local file)


def benchmark_problems(bench: str) -> int:
    """Problems of a benchmark entry (`name` or `name=path`): the registry's full size (common.benchmarks
    expected_count, aliases resolved), else UNKNOWN_PROBLEMS."""
    name = bench.split("=", 1)[0]
    spec = BENCHMARKS.get(ALIASES.get(name, name))
    return spec.expected_count if spec is not None and spec.expected_count else UNKNOWN_PROBLEMS


@functools.lru_cache(maxsize=None)
def model_config(path: str, overrides: tuple):
    """The run config of a preset file under overrides (one load per distinct pair)."""
    from armor.config import load_config
    return load_config(path, list(overrides))


def export_bytes_per_param(cfg) -> int:
    """Bytes per parameter of a checkpoint's HF export (armor.config.export_dtype)."""
    from armor import memory
    from armor.config import export_dtype
    return memory.BYTES[export_dtype(cfg)]


def _needs_reference(cfg) -> int:
    """Extra forward passes of an update besides the old policy's: πref's (the trainer's rule,
    armor.config.needs_reference_logprobs) and a separate teacher's."""
    from armor.config import needs_reference_logprobs
    a = cfg.algo
    return int(needs_reference_logprobs(cfg)) + int(a.distill.mode != "none" and bool(a.distill.teacher_path))


def step_tokens(cfg, t: Throughput) -> tuple[float, float, float]:
    """(on-policy generated, reference generated, trained) tokens of one step (the package's formulas)."""
    b, L, r = cfg.batch, cfg.lengths, cfg.rollout
    resp = t.fill * L.max_response
    drawn = r.gen_batch_prompts or b.prompts_per_step
    anchors = cfg.algo.anchor.enabled
    on = drawn * (b.group_size - 1 if anchors else b.group_size) * resp
    ref = t.share(cfg) * drawn * cfg.algo.anchor.ref_n * resp if anchors else 0.0
    trained = b.prompts_per_step * b.group_size * t.fill * (L.max_prompt + L.max_response) * b.epochs
    return on, ref, trained * (1 + 0.25 * (1 + _needs_reference(cfg)))


def tail_seconds(cfg, t: Throughput) -> float:
    """One generation call's tail: its longest response (max_response) decoded alone after the mean one."""
    L = cfg.lengths.max_response
    return max(0.0, L - t.fill * L) / t.decode_tokens_per_s


def step_parts(cfg, t: Throughput, gpus: int, n_params: Optional[int]) -> dict[str, float]:
    """Seconds of one training step on `gpus` GPUs by part: generate (tokens and tails), update, push; a
    pilot's measurement gives the step whole (DAPO's, ARMOR's with anchors). An arm without anchors that
    reads πref: DAPO's step, which holds πref's forward when the pilot's DAPO phase computed it (the KL
    monitor, on by default), else DAPO's plus πref's forward (ARMOR's log-prob phase minus DAPO's). One that
    does not read πref: DAPO's step as measured (at most one forward high)."""
    m = t.measured
    if m is not None:
        if cfg.algo.anchor.enabled:
            return {"step": m.armor_step_s}
        from armor.config import needs_reference_logprobs
        extra = needs_reference_logprobs(cfg) and not m.dapo_reads_reference
        return {"step": m.dapo_step_s + (m.reference_logprob_s if extra else 0.0)}
    on, ref, trained = step_tokens(cfg, t)
    g = max(1, gpus)
    anchors = cfg.algo.anchor.enabled
    gen = (on + ref) / (t.rollout_tokens_per_s * g) + (2 if anchors else 1) * tail_seconds(cfg, t)
    return {"generate": gen, "update": trained / (t.update_tps(n_params) * g),
            "push": (2 if anchors else 1) * t.push_s}


def train_step_seconds(cfg, t: Throughput, gpus: int, n_params: Optional[int]) -> float:
    """Expected seconds of one training step and a save on `gpus` GPUs (train_estimate's per-step terms)."""
    return sum(step_parts(cfg, t, gpus, n_params).values()) + (t.measured.save_s if t.measured else t.save_s)


def validation_seconds(cfg, t: Throughput, gpus: int) -> float:
    """One validation: its samples' tokens and a tail per benchmark, or the pilot's seconds per sample."""
    v = cfg.validation
    samples = sum(min(benchmark_problems(x), v.max_problems or 10 ** 9)
                  for x in v.benchmarks) * v.samples
    if t.measured is not None:
        linear = samples * t.measured.validation_sample_s * max(1, t.measured.gpus) / max(1, gpus)
        # a GPU run's validation is tail-bound on many GPUs: no faster than each set's longest response
        # decoded alone (the pilot's mean fill, the throughput's decode speed); a CPU pilot's: linear
        return max(linear, len(v.benchmarks) * tail_seconds(cfg, t)) if t.measured.gpus else linear
    return (samples * t.fill * cfg.lengths.max_response / (t.rollout_tokens_per_s * max(1, gpus))
            + len(v.benchmarks) * tail_seconds(cfg, t))


def preemption_steps(schedule) -> int:
    """Completed steps a preemption can cost a train job at most: SLURM gives it its grace (KillWait +
    GraceTime, often 30 s) before SIGKILL, too short for a save, so it resumes from its last training state
    (schedule.state_every, written in the background) or, without them, its last checkpoint (save_every).
    The step in flight is lost besides. Holds while a state's write takes less than a step."""
    return min(schedule.state_every or schedule.save_every, schedule.save_every)
