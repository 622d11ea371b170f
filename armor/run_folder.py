"""The run folder as the trainer opens it: the config check against the run's config.yaml, the CPU numerics
record, leftovers of a killed save removed, the resume point found (damaged checkpoints moved aside), and the
JSONL rows logged after it dropped (they will be recomputed). Rank 0 alone calls `prepare`.

    check(cfg)                              # before any work: output_dir can be the run folder
    resume_from = prepare(run_dir, cfg, fast)     # None: a fresh start
The folder's layout is docs/CONTRACTS.md's; checkpoints are armor.checkpoint's.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

from armor import checkpoint as ckpt
from armor import faults
from armor.config import FOREIGN_SECTIONS, RunConfig, dump_config, load_config, to_dict
from common.jsonl import append_jsonl, read_jsonl, write_json_atomic, write_jsonl

# keys of config.yaml that a rerun may change without invalidating the checkpoints
RESUME_MUTABLE = {"threads", "device", "schedule.total_steps", "schedule.keep_last", "schedule.keep_steps",
                  "schedule.keep_best_window", "schedule.export_dtype", "schedule.stop_signals",
                  "schedule.state_every", "parallel.stall_steps", "parallel.stall_min_s",
                  "reward.grader_workers",
                  "validation.max_problems", "output_dir", "model.display_name", "rollout.enforce_eager",
                  "rollout.max_logprob_mismatch", "rollout.max_steps_without_kept"}
# prefixes of such keys: other tools' sections are not the trainer's (FOREIGN_SECTIONS), logging only says
# where the same rows also go
RESUME_MUTABLE_PREFIXES = tuple(f"{s}." for s in FOREIGN_SECTIONS) + ("logging.",)


def check(cfg: RunConfig) -> None:
    """A ValueError naming output_dir and its value when the run folder cannot be one: it is an existing file,
    or under one. Nothing is created."""
    rd = cfg.run_dir
    if rd.exists() and not rd.is_dir():
        raise ValueError(f"output_dir: {str(rd)!r} is an existing file, not a folder (the run folder)")
    above = next((p for p in rd.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise ValueError(f"output_dir: {str(rd)!r} cannot be a folder: {str(above)!r} is a file")


def prepare(rd: Path, cfg: RunConfig, fast=None) -> int | None:
    """Create the run folder, or find the checkpoint to resume from (None = fresh start). A config that
    differs from the run's config.yaml outside RESUME_MUTABLE is an error naming the first differing key.
    fast: the run's common.fast.FastPaths, recorded in numerics.json as `decode_kernel` (None: not
    recorded)."""
    rd.mkdir(parents=True, exist_ok=True)
    cfg_file = rd / "config.yaml"
    if cfg_file.is_file():
        old = _flatten(to_dict(load_config(cfg_file)))
        new = _flatten(to_dict(cfg))
        diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k) and k not in RESUME_MUTABLE
                      and not k.startswith(RESUME_MUTABLE_PREFIXES))
        if diff:
            k = diff[0]
            raise ValueError(f"{rd}: config differs from the run's config.yaml at {k}: "
                             f"{old.get(k)!r} (run) vs {new.get(k)!r} (now); use another output_dir")
    dump_config(cfg, cfg_file)
    _record_numerics(rd / NUMERICS_FILE, fast)
    ckpt.clean_partial(rd)
    last = ckpt.latest_complete(rd)
    for name in ("metrics.jsonl", "validation.jsonl"):
        if last is None:
            (rd / name).unlink(missing_ok=True)
        else:
            _truncate_jsonl(rd / name, last)
    return last


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        out.update(_flatten(v, key + ".") if isinstance(v, dict) else {key: v})
    return out


def _truncate_jsonl(path: Path, max_step: int) -> None:
    """Drop rows logged after the checkpoint we resume from (they will be recomputed), and a torn last
    line."""
    if path.is_file():
        write_jsonl(path, [r for r in read_jsonl(path) if r["step"] <= max_step])


NUMERICS_FILE = "numerics.json"   # what the run computes with (common.cpu_numerics.describe)


def _record_numerics(path: Path, fast=None) -> None:
    """Write this process's CPU numerics and what the HF engine's decode steps compute with (`decode_kernel`:
    native, torch or off, from compute.fast); warn when a resume computes with other ones than the run so far
    (its results will not be byte-identical to an uninterrupted run's)."""
    from common import cpu_numerics
    now = cpu_numerics.describe()
    if fast is not None:
        now["decode_kernel"] = fast.describe()
    if cpu_numerics.unpinned(now):
        warnings.warn(f"torch computes with {now['cpu_capability']} CPU kernels, not the pinned AVX2 (torch "
                      "was imported before the suite's packages?): results will not match other machines' "
                      "byte for byte", stacklevel=2)
    if path.is_file():
        before = json.loads(path.read_text())
        diff = {k: (before.get(k), v) for k, v in now.items() if before.get(k) != v}
        if diff:
            warnings.warn(f"{path}: this resume computes with other CPU numerics than the run so far {diff}; "
                          "its results will not be byte-identical to an uninterrupted run's", stacklevel=2)
    write_json_atomic(path, now, indent=1, sort_keys=True)


class RunWriter:
    """The run's files and live metrics as the trainer appends them: metrics.jsonl and validation.jsonl (and
    TensorBoard / W&B: armor.logging_backends), DONE at the end. Rank 0 writes; on the other ranks (`enabled`
    False) every call does nothing, so the trainer calls it the same on every rank."""

    def __init__(self, cfg, run_dir: Path, enabled: bool):
        from armor import logging_backends
        self.run_dir = run_dir
        self.backends = logging_backends.Backends(cfg, run_dir) if enabled else None

    def metrics(self, row: dict) -> None:
        """The step's row, to metrics.jsonl (durable: the fault point `metrics` follows), then live."""
        if self.backends is not None:
            append_jsonl(self.run_dir / "metrics.jsonl", row)
        faults.point("metrics", row["step"])
        if self.backends is not None:
            self.backends.metrics(row)

    def validation(self, row: dict) -> None:
        if self.backends is not None:
            append_jsonl(self.run_dir / "validation.jsonl", row)
            self.backends.validation(row)

    def done(self, info: dict) -> None:
        if self.backends is not None:
            write_json_atomic(self.run_dir / "DONE", info)

    def close(self) -> None:
        if self.backends is not None:
            self.backends.close()
