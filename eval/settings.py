"""One evaluation's settings: the frozen `EvalSettings`,
validated where it is made (EvalError names the field).

Everything `evaluate_checkpoint` / `evaluate_run` take besides what to evaluate (which checkpoint, run, steps)
lives in it, so the harness passes one object instead of long keyword lists. Construction normalizes
(``"a,b"`` -> a tuple, a protocol name -> the Protocol, a preset's path -> its YAML) and checks every field
before a benchmark file or a model is read; ``dataclasses.replace`` checks again. Also here: EvalError, the
YAML / preset readers and the comma-list parsers the harness shares.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from common.benchmarks import TEMPLATES
from common.grading.scorers import SCORERS
from eval.protocols import Protocol, get_protocol

__all__ = ["EvalError", "EvalSettings", "REPO_ROOT", "split_list", "int_list", "read_yaml_file",
           "read_preset", "stderr_log"]

REPO_ROOT = Path(__file__).resolve().parents[1]


class EvalError(ValueError):
    """Bad input for an evaluation (raised before generation); the message names the culprit."""


def stderr_log(msg: str) -> None:
    print(f"[eval] {msg}", file=sys.stderr, flush=True)


def split_list(value) -> list[str]:
    """"a, b" or a list -> the non-empty stripped items; None -> []."""
    if value is None:
        return []
    if isinstance(value, str):
        value = value.split(",")
    return [str(v).strip() for v in value if str(v).strip()]


def int_list(value, what: str) -> list[int] | None:
    """"1,2" or a list -> integers (EvalError naming `what` and the item); None stays None."""
    if value is None:
        return None
    out = []
    for v in split_list(value) if not isinstance(value, (list, tuple)) else value:
        try:
            out.append(int(v))
        except (TypeError, ValueError):
            raise EvalError(f"{what}: {v!r} is not an integer") from None
    return out


def read_yaml_file(path: Path) -> dict:
    from common.yaml_config import ConfigError, read_yaml
    try:
        return read_yaml(path)
    except ConfigError as e:
        raise EvalError(str(e)) from None


def read_preset(preset: str | os.PathLike) -> dict:
    """A preset YAML by path, with ``base:`` resolved. The harness knows no folder of presets: whoever names a
    preset passes its file (the driver passes its presets' paths)."""
    p = Path(preset).expanduser()
    if not p.is_file():
        raise EvalError(f"preset {str(preset)!r}: no such file (the preset's YAML path is expected)")
    return read_yaml_file(p)


def _is_int(v, lo: int) -> bool:
    return not isinstance(v, bool) and isinstance(v, int) and v >= lo


@dataclass(frozen=True)
class EvalSettings:
    """How to evaluate (see eval/evaluate.py's docstring for what each setting does to the outputs)."""
    # registry names or NAME=path; () for a run: its protocol.eval_benchmarks
    benchmarks: tuple[str, ...] = ()
    protocol: Protocol | None = None        # a name or a Protocol; None: the run config's, else paper
    samples: int | None = None              # k (None: the protocol's)
    pass_ks: tuple[int, ...] | None = None  # the j of pass@j ("1,2" or a list; None: the protocol's)
    limit: int | None = None                # the first N problems of each benchmark
    template: str | None = None             # None: the protocol's, else the benchmark's
    scorers: tuple[str, ...] | None = None  # math verdicts, primary first ("a,b"; None: the protocol's)
    engine: str = "hf"                      # hf | vllm
    seed: int = 0                           # chunk seeds derive from it (eval.units.chunk_seed)
    chunk_size: int = 32                    # problems per generation chunk (the unit of resume)
    # ranks the chunks are sized for: a benchmark's chunks hold min(chunk_size, ceil(problems / chunk_ranks))
    # problems, so a small benchmark (AIME's 30) still gives every rank a chunk (eval.units.chunk_problems)
    chunk_ranks: int = 1
    max_batch: int = 256                    # hf engine: sequences per forward batch
    max_new_tokens: int | None = None       # None: preset > protocol > run config > default
    preset: dict | None = None              # a preset's path or dict: lengths.max_response is the budget
    out: str | os.PathLike | None = None    # output root (None: CHECKPOINT/eval, RUN/eval)
    results: str | os.PathLike | None = None  # results parquet to append rows to
    meta: dict | None = None                # {preset, model, arm, seed} overrides for the table rows
    device: str | None = "auto"             # auto | cpu | cuda | cuda:N
    dtype: str | None = None                # None: bfloat16 on GPU, float32 on CPU
    fast: str | None = None                 # hf engine: auto | off | native; None: the preset's compute.fast
    grader_workers: int = 2                 # math-verify worker processes (0: in-process)
    grader_timeout_s: float = 5.0
    overwrite: bool = False                 # redo outputs drawn with other settings
    progress: bool | None = None            # None: on unless ARMOR_PROGRESS=0
    engine_kwargs: dict | None = None       # vllm engine: tensor_parallel_size, gpu_memory_utilization, ...
    after_chunk: Callable | None = field(default=None, compare=False, repr=False)   # (unit, chunk number)
    log: Callable[[str], None] = field(default=stderr_log, compare=False, repr=False)

    def __post_init__(self):
        self._set("benchmarks", tuple(split_list(self.benchmarks)))
        if self.protocol is not None and not isinstance(self.protocol, Protocol):
            try:
                self._set("protocol", get_protocol(self.protocol))
            except ValueError as e:
                raise EvalError(str(e)) from None
        self._check_engine_and_counts()
        pks = int_list(self.pass_ks, "pass_ks")
        self._set("pass_ks", None if pks is None else tuple(pks))
        if self.template is not None and self.template not in TEMPLATES:
            raise EvalError(f"unknown prompt template {self.template!r}; known: "
                            f"{', '.join(sorted(TEMPLATES))}")
        if self.scorers is not None:
            names = tuple(split_list(self.scorers))
            bad = [n for n in names if n not in SCORERS]
            if bad or not names or len(set(names)) != len(names):
                raise EvalError(f"scorers {self.scorers!r}: give distinct names of "
                                f"{', '.join(SCORERS.names())}")
            self._set("scorers", names)
        if self.limit is not None and not _is_int(self.limit, 1):
            raise EvalError(f"limit must be a positive integer, got {self.limit!r}")
        if self.max_new_tokens is not None and not _is_int(self.max_new_tokens, 1):
            raise EvalError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")
        d = self.device
        if d not in (None, "auto", "cpu", "cuda") and not str(d).startswith("cuda:"):
            raise EvalError(f"device must be auto, cpu or cuda, got {d!r}")
        if self.preset is not None and not isinstance(self.preset, dict):
            self._set("preset", read_preset(self.preset))
        if self.fast is None:       # the preset's choice (compute.fast), else the trainer's default
            mode = ((self.preset or {}).get("compute") or {}).get("fast", "auto")
            self._set("fast", "off" if mode is False else mode)      # YAML reads a bare off as false
        from common.fast import MODES
        if self.fast not in MODES:
            raise EvalError(f"compute.fast (--fast): {self.fast!r} is not one of {list(MODES)}")

    def _set(self, name: str, value) -> None:
        object.__setattr__(self, name, value)      # frozen: normalized once, here

    def _check_engine_and_counts(self) -> None:
        if self.engine not in ("hf", "vllm"):
            raise EvalError(f"unknown engine {self.engine!r} (known: hf, vllm)")
        for name, lo in (("seed", 0), ("chunk_size", 1), ("chunk_ranks", 1), ("max_batch", 1)):
            v = getattr(self, name)
            if not _is_int(v, lo):
                raise EvalError(f"{name} must be an integer >= {lo}, got {v!r}")
        if self.samples is not None and not _is_int(self.samples, 1):
            raise EvalError(f"samples (k) must be an integer >= 1, got {self.samples!r}")
