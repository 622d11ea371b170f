"""What an evaluation will compute, decided before any model loads: the benchmarks (BenchInput), one Unit per
(checkpoint, benchmark) with the settings its outputs record, and each Unit's state from what is already on
disk (new / resume / done / resummarize). Also the chunk seed rule that makes a resumed run draw what an
uninterrupted one would."""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from common.benchmarks import (ALIASES, BENCHMARKS, BenchmarkData, BenchmarkError, default_mode, get_spec,
                               load_benchmark, register_jsonl)
from common.jsonl import read_json
from common.layout import STEP_RE
from common.weight_files import ModelFileError, check_weights
from eval.metadata import run_metadata
from eval.protocols import DEFAULT_MAX_NEW_TOKENS, BenchSetting, Protocol, resolve_setting
from eval.settings import REPO_ROOT, EvalError, EvalSettings, split_list

__all__ = ["BenchInput", "Unit", "RESUME_KEYS", "SEED_RULE", "chunk_seed", "check_checkpoint",
           "load_benchmarks", "bench_inputs", "checkpoint_step", "resolve_max_new_tokens",
           "checkpoint_units", "units_of", "regrade_key", "REGRADE_KEYS"]

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
#: settings that must agree for existing samples / summaries to be reused
RESUME_KEYS = ("benchmark", "protocol", "template", "answer_mode", "samples", "temperature", "top_p",
               "max_new_tokens", "seed", "chunk_size", "engine", "max_batch", "n_problems", "data_sha")
SEED_RULE = "sha256('armor-eval:{seed}:{index of the chunk's first problem}')[:4] & 0x7fffffff"


def chunk_seed(seed: int, first_index: int) -> int:
    """Sampling seed of the chunk whose first problem is ``first_index`` (independent of what ran before)."""
    h = hashlib.sha256(f"armor-eval:{int(seed)}:{int(first_index)}".encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


def check_checkpoint(path: str | os.PathLike) -> Path:
    """The checkpoint folder, or EvalError if it is not a Hugging Face model folder with weights +
    tokenizer."""
    p = Path(path).expanduser()
    if not p.exists():
        raise EvalError(f"checkpoint {str(path)!r} does not exist")
    if not p.is_dir():
        raise EvalError(f"checkpoint {str(path)!r} is not a folder (expected a Hugging Face model folder)")
    if not (p / "config.json").is_file():
        raise EvalError(f"checkpoint {str(path)!r} has no config.json (not a Hugging Face model folder)")
    if not (any(p.glob("*.safetensors")) or any(p.glob("*.bin")) or any(p.glob("*.safetensors.index.json"))):
        raise EvalError(f"checkpoint {str(path)!r} has no model weights (*.safetensors / *.bin)")
    if not any((p / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        raise EvalError(f"checkpoint {str(path)!r} has no tokenizer files (tokenizer.json / "
                        f"tokenizer_config.json)")
    try:
        check_weights(p, "checkpoint")
    except ModelFileError as e:
        raise EvalError(str(e)) from None
    return p


# ------------------------------------------------------------------------------------------ benchmarks
def _load_file_spec(spec: str, name: str, path: str, limit: int | None) -> BenchmarkData:
    """NAME=path: a built-in's format read from another file,
    else a problem/answer JSONL registered as NAME."""
    if not NAME_RE.match(name):
        raise EvalError(f"benchmark {spec!r}: the name must be letters, digits, _ . + - "
                        f"(it names output files)")
    if not path:
        raise EvalError(f"benchmark {spec!r}: empty path after '='")
    if not Path(path).expanduser().is_file():
        if not Path(path).is_absolute() and (REPO_ROOT / path).is_file():
            path = str(REPO_ROOT / path)       # run configs hold repo-relative paths
        else:
            raise EvalError(f"benchmark {name}: data file not found: {path}")
    name = ALIASES.get(name, name)
    known = BENCHMARKS.get(name)
    if known is not None and (known.local_file is None or not Path(known.local_file).is_absolute()):
        return load_benchmark(name, source=path, limit=limit)
    register_jsonl(name, Path(path).expanduser())
    return load_benchmark(name, limit=limit)


def load_benchmarks(specs, limit: int | None = None) -> list[tuple[str, BenchmarkData]]:
    """[(report name, problems)] for registry names or NAME=path specs; EvalError naming the bad one."""
    names = split_list(specs)
    if not names:
        raise EvalError("no benchmarks given (--benchmarks a,b or NAME=path.jsonl)")
    out, seen = [], set()
    for spec in names:
        name, sep, path = spec.partition("=")
        name, path = name.strip(), path.strip()
        try:
            if sep:
                data = _load_file_spec(spec, name, path, limit)
            else:
                get_spec(name)
                data = load_benchmark(name, limit=limit)
        except BenchmarkError as e:
            raise EvalError(str(e)) from None
        rep = data.report_name
        if rep in seen:
            raise EvalError(f"benchmark {rep!r} given twice")
        seen.add(rep)
        out.append((rep, data))
    return out


@dataclass
class BenchInput:
    name: str                 # report name (file names, tables)
    data: BenchmarkData
    template: str
    mode: str
    setting: BenchSetting
    data_sha: str
    scorers: tuple[str, ...] = ("math_verify",)    # math: the protocol's (primary first); mc: letters only


def _data_sha(data: BenchmarkData) -> str:
    h = hashlib.sha256()
    for p in data:
        h.update(json.dumps([p.index, p.problem, p.gold, p.answer_type], ensure_ascii=False).encode())
    return h.hexdigest()[:16]


def bench_inputs(s: EvalSettings) -> list[BenchInput]:
    """The benchmarks of `s` loaded, each with its template, answer mode, (k, pass ks) and data hash."""
    inputs = []
    p = s.protocol
    for name, data in load_benchmarks(s.benchmarks, s.limit):
        math = data.spec.answer_type == "math"
        tmpl = s.template or p.template or (p.math_template if math else None) or data.spec.template
        try:
            setting = resolve_setting(p, name, s.samples, s.pass_ks, aliases=(data.name,))
        except ValueError as e:
            raise EvalError(str(e)) from None
        scorers = tuple(s.scorers or p.scorers) if math else ("math_verify",)
        inputs.append(BenchInput(name, data, tmpl, default_mode(tmpl), setting, _data_sha(data), scorers))
    return inputs


# ----------------------------------------------------------------------------------------------- units
@dataclass
class Unit:
    plan: BenchInput
    dir: Path
    stem: str
    settings: dict
    step: int
    total_step: int
    checkpoint: Path
    state: str = "new"        # new | resume | done | resummarize
    summary: dict | None = None

    @property
    def summary_path(self) -> Path:
        return self.dir / f"{self.stem}.json"

    @property
    def samples_path(self) -> Path:
        return self.dir / f"{self.stem}.samples.jsonl"

    @property
    def settings_path(self) -> Path:
        return self.dir / f".{self.stem}.settings.json"

    def rank_samples_path(self, rank: int) -> Path:
        """Where rank `rank` of an evaluation split over ranks appends its samples until rank 0 merges
        them."""
        return self.dir / f"{self.stem}.samples.rank{rank}.jsonl"

    def rank_sample_files(self) -> list[Path]:
        """The per-rank sample files present (a split evaluation that was stopped before rank 0 merged
        them)."""
        return sorted(self.dir.glob(f"{self.stem}.samples.rank*.jsonl"))


def _step_dir(out: Path, step: int) -> Path:
    m = STEP_RE.match(out.name)
    if m:
        if int(m.group(1)) != step:
            raise EvalError(f"--out {out} is the folder of step {int(m.group(1))} but the checkpoint is "
                            f"step {step} (pass --step, or an --out that is not named step_NNNNNN)")
        return out
    return out / f"step_{step:06d}"


def checkpoint_step(ckpt: Path, out: Path | None = None, step: int | None = None) -> int:
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise EvalError(f"step must be a non-negative integer, got {step!r}")
        return step
    m = STEP_RE.match(ckpt.name)
    if m:
        return int(m.group(1))
    if out is not None and STEP_RE.match(out.name):
        return int(STEP_RE.match(out.name).group(1))
    return 0


def _max_response(cfg: dict | None) -> int | None:
    v = ((cfg or {}).get("lengths") or {}).get("max_response")
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 1 else None


def resolve_max_new_tokens(explicit: int | None, preset: dict | None, protocol: Protocol,
                           run_cfg: dict | None) -> tuple[int, str]:
    """(budget, where it came from): flag > --preset's lengths.max_response > the protocol's own >
    the run config's lengths.max_response > DEFAULT_MAX_NEW_TOKENS. `explicit` is checked by EvalSettings."""
    if explicit is not None:
        return explicit, "flag"
    if preset is not None:
        v = _max_response(preset)
        if v is None:
            raise EvalError(f"preset {preset.get('name', '?')!r} has no lengths.max_response")
        return v, f"preset:{preset.get('name', '?')}"
    if protocol.max_new_tokens is not None:
        return protocol.max_new_tokens, f"protocol:{protocol.name}"
    v = _max_response(run_cfg)
    if v is not None:
        return v, "run_config"
    return DEFAULT_MAX_NEW_TOKENS, "default"


#: settings that change only what is computed from the samples (a summary without them is recomputed)
REGRADE_KEYS = ("pass_ks", "scorers", "best_of")
_REGRADE_DEFAULTS = {"pass_ks": [], "scorers": ["math_verify"], "best_of": False}


def regrade_key(old: dict, new: dict, key: str):
    """Whether `key` agrees (a summary from before the key existed holds its default)."""
    return list(old.get(key) or []) == list(new[key]) if key == "pass_ks" else \
        old.get(key, _REGRADE_DEFAULTS[key]) == new[key]


def _diff(a: dict, b: dict) -> list[str]:
    return [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in RESUME_KEYS if a.get(k) != b.get(k)]


def _remove_outputs(unit: Unit) -> None:
    for p in (unit.summary_path, unit.samples_path, unit.settings_path, *unit.rank_sample_files()):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def _classify(unit: Unit, overwrite: bool) -> None:
    """Set unit.state from what is on disk (EvalError on a settings mismatch unless overwrite)."""
    summ = read_json(unit.summary_path) if unit.summary_path.is_file() else None
    if summ is not None:
        old = summ.get("settings") or {}
        diff = _diff(old, unit.settings)
        if diff and not overwrite:
            raise EvalError(f"{unit.summary_path} was computed with other settings ({'; '.join(diff)}); "
                            "pass --overwrite to redo it or choose another --out")
        if not diff:
            if all(regrade_key(old, unit.settings, key) for key in REGRADE_KEYS):
                unit.state, unit.summary = "done", summ
            else:
                unit.state = "resummarize"
            return
        _remove_outputs(unit)
        return
    if unit.samples_path.exists() or unit.settings_path.exists() or unit.rank_sample_files():
        old = read_json(unit.settings_path) if unit.settings_path.is_file() else None
        diff = ["settings file missing or unreadable"] if old is None else _diff(old, unit.settings)
        if diff:
            if not overwrite:
                raise EvalError(f"{unit.samples_path} holds samples drawn with other settings "
                                f"({'; '.join(diff)}); pass --overwrite to discard them "
                                "or choose another --out")
            _remove_outputs(unit)
            return
        unit.state = "resume"


def chunk_problems(n_problems: int, chunk_size: int, ranks: int = 1) -> int:
    """Problems per chunk of a benchmark of `n_problems` evaluated on `ranks` ranks: chunk_size, or fewer
    where the benchmark has fewer than chunk_size x ranks problems, so every rank gets a chunk (rank r draws
    chunks r, r + N, ...: eval.execute). chunk_problems(30, 32, 8) = 4; (500, 32, 8) = 32."""
    return max(1, min(chunk_size, math.ceil(n_problems / max(1, ranks))))


def _unit_settings(bp: BenchInput, s: EvalSettings, budget: tuple[int, str]) -> dict:
    """What a unit's summary and settings file record (the key order is the files' byte order)."""
    p, k = s.protocol, bp.setting.samples
    return {
        "benchmark": bp.name, "benchmark_source": bp.data.source, "protocol": p.name,
        "template": bp.template, "answer_mode": bp.mode, "scorers": list(bp.scorers), "best_of": p.best_of,
        "samples": k, "pass_ks": list(bp.setting.pass_ks),
        "temperature": p.temperature, "top_p": p.top_p, "max_new_tokens": budget[0],
        "max_new_tokens_source": budget[1], "seed": s.seed, "seed_rule": SEED_RULE,
        "chunk_size": chunk_problems(len(bp.data), s.chunk_size, s.chunk_ranks), "engine": s.engine,
        "max_batch": s.max_batch if s.engine == "hf" else None,
        "limit": s.limit, "n_problems": len(bp.data), "data_sha": bp.data_sha,
    }


def checkpoint_units(ckpt: Path, inputs: list[BenchInput], s: EvalSettings, *, out: Path, step: int,
                    step_offset: int, budget: tuple[int, str]) -> list[Unit]:
    """One classified Unit per benchmark for `ckpt`, filed under `out`'s step folder."""
    d = _step_dir(out, step)
    units = []
    for bp in inputs:
        unit = Unit(bp, d, f"{bp.name}__{s.protocol.name}__k{bp.setting.samples}",
                    _unit_settings(bp, s, budget), step, step_offset + step, ckpt)
        _classify(unit, s.overwrite)
        units.append(unit)
    return units


def units_of(ckpt: Path, inputs: list[BenchInput], s: EvalSettings, *, out: Path | None, step: int | None,
             run_dir: Path | None, run_cfg: dict | None) -> tuple[list[Unit], dict]:
    """The units of one checkpoint (outputs default to CHECKPOINT/eval) and its results-row metadata."""
    ckpt = check_checkpoint(ckpt)
    out = Path(out) if out is not None else ckpt / "eval"
    st = checkpoint_step(ckpt, out, step)
    meta = run_metadata(run_dir, run_cfg, ckpt, s.preset, s.meta)
    budget = resolve_max_new_tokens(s.max_new_tokens, s.preset, s.protocol, run_cfg)
    units = checkpoint_units(ckpt, inputs, s, out=out, step=st, step_offset=meta["step_offset"],
                             budget=budget)
    return units, meta
