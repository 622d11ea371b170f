"""Evaluate checkpoints on benchmarks with a named sampling protocol; resumable, results keyed on disk.

    python -m eval.evaluate --checkpoint PATH --benchmarks aime24,amc [--protocol paper] [--samples K]
    python -m eval.evaluate --run runs/<preset>/<arm>/seed<s> [--benchmarks ...]
        [--results runs/<preset>/results.parquet]

``--checkpoint`` takes any Hugging Face model folder; ``--run DIR`` evaluates every checkpoint under
``DIR/checkpoints`` (``step_NNNNNN`` folders with ``trainer_state.pt``), skipping those already scored.
Benchmarks are registry names (``common.benchmarks``) or ``NAME=path.jsonl`` (fields problem/answer; a registry
name with ``=path`` loads that benchmark's format from the file). For ``--run`` the defaults of
``--benchmarks`` / ``--protocol`` are the run config's ``protocol.eval_benchmarks`` / ``protocol.eval_protocol``.

Output (``--out``, default ``DIR/eval`` for ``--run`` and ``CHECKPOINT/eval`` for ``--checkpoint``)::

    OUT/step_NNNNNN/<benchmark>__<protocol>__k<k>.json           summary (atomic, written last)
    OUT/step_NNNNNN/<benchmark>__<protocol>__k<k>.samples.jsonl  one row per (problem, sample)
    OUT/step_NNNNNN/.<benchmark>__<protocol>__k<k>.settings.json the settings the samples were drawn with

If ``OUT`` is itself named ``step_NNNNNN`` the files go directly into it (what ``reproduce.experiments`` passes).
The summary holds ``metrics`` ({"avg@k", "pass@j" for the protocol's j, "maj@k"}), ``samples`` (k),
``n_problems``, ``step`` (the checkpoint's step), ``total_step`` (+ the run's ``step_offset``) and
``settings`` (protocol, template, answer mode, temperature, top_p, max_new_tokens and where it came from,
seed, chunk size, engine, data hash, ...). A sample row: index (the problem's row), sample, response,
extracted, correct, reason, length, finished, gold.

Resume: samples are generated in chunks of ``--chunk-size`` problems and appended (one write + fsync per
chunk). A restarted evaluation keeps the problems whose k samples are all present and regenerates the rest.
The sampling seed of a chunk is derived from (``--seed``, index of the chunk's first problem) and chunk
boundaries are fixed, so a resumed evaluation draws exactly the samples an uninterrupted one would (with the
hf engine; vLLM is seeded the same way but is not bitwise batch-invariant). An existing summary whose
settings match is reused; different settings are an error unless ``--overwrite``.

Results table (``--results PATH``): tidy rows appended (deduplicated, under a file lock) with the columns of
docs/CONTRACTS.md; preset/arm/seed come from the run's layout ``runs/<preset>/<arm>/seed<s>`` (the config's
``output_dir``, else the run folder's path), else the config's ``name`` (``preset/arm``) and ``seed``;
``--preset-name/--arm/--run-seed/--model-name`` override them. ``step`` = step_offset + checkpoint step.

Bad input (unknown benchmark or protocol, a missing or malformed data file, a checkpoint without model files,
k < 1, pass@j with j > k, ...) fails with a message naming it before any model is loaded (exit status 2).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from common.benchmarks import (ALIASES, BENCHMARKS, TEMPLATES, BenchmarkData, BenchmarkError, default_mode, get_spec,
                               load_benchmark, register_jsonl)
from common.jsonl import (TornLineWarning, append_text, read_json, read_jsonl, write_json_atomic,
                          write_text_atomic)
from common.layout import STEP_RE, list_checkpoints
from common.results import append_results, summary_rows
from eval.protocols import (DEFAULT_MAX_NEW_TOKENS, BenchSetting, Protocol, get_protocol, list_protocols,
                            resolve_setting)

__all__ = ["EvalError", "evaluate_checkpoint", "evaluate_run", "chunk_seed", "check_checkpoint",
           "main", "RESUME_KEYS", "REPO_ROOT"]

REPO_ROOT = Path(__file__).resolve().parents[1]
PRESET_DIR = REPO_ROOT / "reproduce" / "presets"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
#: settings that must agree for existing samples / summaries to be reused
RESUME_KEYS = ("benchmark", "protocol", "template", "answer_mode", "samples", "temperature", "top_p",
               "max_new_tokens", "seed", "chunk_size", "engine", "max_batch", "n_problems", "data_sha")
_JSON_KW = dict(indent=1, ensure_ascii=False, default=str)   # summaries and settings files
SEED_RULE = "sha256('armor-eval:{seed}:{index of the chunk's first problem}')[:4] & 0x7fffffff"


class EvalError(ValueError):
    """Bad input for an evaluation (raised before generation); the message names the culprit."""


def _log(msg: str) -> None:
    print(f"[eval] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------- inputs
def chunk_seed(seed: int, first_index: int) -> int:
    """Sampling seed of the chunk whose first problem is ``first_index`` (independent of what ran before)."""
    h = hashlib.sha256(f"armor-eval:{int(seed)}:{int(first_index)}".encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


def check_checkpoint(path: str | os.PathLike) -> Path:
    """The checkpoint folder, or EvalError if it is not a Hugging Face model folder with weights + tokenizer."""
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
        raise EvalError(f"checkpoint {str(path)!r} has no tokenizer files (tokenizer.json / tokenizer_config.json)")
    return p


def _split_list(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = value.split(",")
    return [str(v).strip() for v in value if str(v).strip()]


def _int_list(value, what: str) -> list[int] | None:
    if value is None:
        return None
    out = []
    for v in _split_list(value) if not isinstance(value, (list, tuple)) else value:
        try:
            out.append(int(v))
        except (TypeError, ValueError):
            raise EvalError(f"{what}: {v!r} is not an integer") from None
    return out


def load_benchmarks(specs, limit: int | None = None) -> list[tuple[str, BenchmarkData]]:
    """[(report name, problems)] for registry names or NAME=path specs; EvalError naming the bad one."""
    names = _split_list(specs)
    if not names:
        raise EvalError("no benchmarks given (--benchmarks a,b or NAME=path.jsonl)")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise EvalError(f"limit must be a positive integer, got {limit!r}")
    out, seen = [], set()
    for spec in names:
        name, sep, path = spec.partition("=")
        name, path = name.strip(), path.strip()
        try:
            if sep:
                if not NAME_RE.match(name):
                    raise EvalError(f"benchmark {spec!r}: the name must be letters, digits, _ . + - "
                                    "(it names output files)")
                if not path:
                    raise EvalError(f"benchmark {spec!r}: empty path after '='")
                if not Path(path).expanduser().is_file():
                    if not Path(path).is_absolute() and (REPO_ROOT / path).is_file():
                        path = str(REPO_ROOT / path)       # run configs hold repo-relative paths
                    else:
                        raise EvalError(f"benchmark {name}: data file not found: {path}")
                name = ALIASES.get(name, name)
                spec = BENCHMARKS.get(name)
                if spec is not None and (spec.local_file is None or not Path(spec.local_file).is_absolute()):
                    data = load_benchmark(name, source=path, limit=limit)   # a built-in's format, another file
                else:
                    register_jsonl(name, Path(path).expanduser())          # fields problem / answer
                    data = load_benchmark(name, limit=limit)
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


def read_yaml_file(path: Path) -> dict:
    from common.yaml_config import ConfigError, read_yaml
    try:
        return read_yaml(path)
    except ConfigError as e:
        raise EvalError(str(e)) from None


def read_preset(preset: str | os.PathLike) -> dict:
    """A preset YAML by path or by name (reproduce/presets/<name>.yaml), with ``base:`` resolved."""
    p = Path(preset).expanduser()
    if not p.is_file():
        cand = PRESET_DIR / f"{preset}.yaml"
        if not cand.is_file():
            known = sorted(x.stem for x in PRESET_DIR.glob("*.yaml")) if PRESET_DIR.is_dir() else []
            raise EvalError(f"preset {str(preset)!r}: no such file, and not a preset name ({', '.join(known)})")
        p = cand
    return read_yaml_file(p)


def _run_dir_of(ckpt: Path) -> Path | None:
    """The run folder of DIR/checkpoints/step_NNNNNN (when it has a config.yaml)."""
    if ckpt.parent.name == "checkpoints" and (ckpt.parent.parent / "config.yaml").is_file():
        return ckpt.parent.parent
    return None


def _max_response(cfg: dict | None) -> int | None:
    v = ((cfg or {}).get("lengths") or {}).get("max_response")
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 1 else None


def resolve_max_new_tokens(explicit: int | None, preset: dict | None, protocol: Protocol,
                           run_cfg: dict | None) -> tuple[int, str]:
    """(budget, where it came from): flag > --preset's lengths.max_response > the protocol's own >
    the run config's lengths.max_response > DEFAULT_MAX_NEW_TOKENS."""
    if explicit is not None:
        if isinstance(explicit, bool) or not isinstance(explicit, int) or explicit < 1:
            raise EvalError(f"max_new_tokens must be a positive integer, got {explicit!r}")
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


# ------------------------------------------------------------------------------------------ metadata
def _hub_or_folder_name(path: str, depth: int = 0) -> str:
    p = Path(path)
    if depth < 8 and STEP_RE.match(p.name) and p.parent.name == "checkpoints" and \
            (p.parent.parent / "config.yaml").is_file():
        try:
            cfg = read_yaml_file(p.parent.parent / "config.yaml")
            parent_model = ((cfg.get("model") or {}).get("path"))
            if parent_model:
                return _hub_or_folder_name(str(parent_model), depth + 1)
        except EvalError:
            pass
    if not p.exists() and path.count("/") == 1:
        return path.split("/")[1]                       # hub id org/name -> name
    name = p.name or str(p)
    if name == "base_model" and p.parent.name:
        name = p.parent.name
    return name


def run_metadata(run_dir: Path | None, cfg: dict | None, ckpt: Path, preset: dict | None = None,
                 overrides: dict | None = None) -> dict:
    """preset / model / arm / seed / step_offset for results rows (overrides win when not None)."""
    meta = {"preset": None, "model": None, "arm": None, "seed": None, "step_offset": 0}
    cfg = cfg or {}
    layouts = []
    if cfg.get("output_dir"):
        layouts.append(Path(str(cfg["output_dir"])))
    if run_dir is not None:
        layouts.append(Path(os.path.abspath(run_dir)))
    for lay in layouts:
        m = re.match(r"^seed(\d+)$", lay.name)
        if m and lay.parent.name and lay.parent.parent.name:
            meta.update(preset=lay.parent.parent.name, arm=lay.parent.name, seed=int(m.group(1)))
            break
    if meta["preset"] is None and isinstance(cfg.get("name"), str) and "/" in cfg["name"]:
        pr, _, arm = cfg["name"].partition("/")
        meta.update(preset=pr, arm=arm.split("/")[0])
    if meta["seed"] is None and isinstance(cfg.get("seed"), int):
        meta["seed"] = cfg["seed"]
    if meta["preset"] is None and preset:
        meta["preset"] = preset.get("name")
    try:
        meta["step_offset"] = int(cfg.get("step_offset") or 0)
    except (TypeError, ValueError):
        meta["step_offset"] = 0
    model_path = (cfg.get("model") or {}).get("path") if cfg else None
    meta["model"] = _hub_or_folder_name(str(model_path)) if model_path else _hub_or_folder_name(str(ckpt))
    for k, v in (overrides or {}).items():
        if v is not None:
            meta[k] = v
    return meta


# ------------------------------------------------------------------------------------------- planning
@dataclass
class BenchPlan:
    name: str                 # report name (file names, tables)
    data: BenchmarkData
    template: str
    mode: str
    setting: BenchSetting
    data_sha: str


@dataclass
class Job:
    plan: BenchPlan
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


def _data_sha(data: BenchmarkData) -> str:
    h = hashlib.sha256()
    for p in data:
        h.update(json.dumps([p.index, p.problem, p.gold, p.answer_type], ensure_ascii=False).encode())
    return h.hexdigest()[:16]


def plan_benchmarks(benchmarks, protocol: Protocol, samples: int | None, pass_ks, limit: int | None,
                    template: str | None) -> list[BenchPlan]:
    if template is not None and template not in TEMPLATES:
        raise EvalError(f"unknown prompt template {template!r}; known: {', '.join(sorted(TEMPLATES))}")
    plans = []
    for name, data in load_benchmarks(benchmarks, limit):
        tmpl = template or protocol.template or data.spec.template
        try:
            setting = resolve_setting(protocol, name, samples, pass_ks, aliases=(data.name,))
        except ValueError as e:
            raise EvalError(str(e)) from None
        plans.append(BenchPlan(name, data, tmpl, default_mode(tmpl), setting, _data_sha(data)))
    return plans


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


def _diff(a: dict, b: dict) -> list[str]:
    return [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in RESUME_KEYS if a.get(k) != b.get(k)]


def _remove_outputs(job: Job) -> None:
    for p in (job.summary_path, job.samples_path, job.settings_path):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def _classify(job: Job, overwrite: bool) -> None:
    """Set job.state from what is on disk (EvalError on a settings mismatch unless overwrite)."""
    summ = read_json(job.summary_path) if job.summary_path.is_file() else None
    if summ is not None:
        old = summ.get("settings") or {}
        diff = _diff(old, job.settings)
        if diff and not overwrite:
            raise EvalError(f"{job.summary_path} was computed with other settings ({'; '.join(diff)}); "
                            "pass --overwrite to redo it or choose another --out")
        if not diff:
            if list(old.get("pass_ks") or []) == list(job.settings["pass_ks"]):
                job.state, job.summary = "done", summ
            else:
                job.state = "resummarize"
            return
        _remove_outputs(job)
        return
    if job.samples_path.exists() or job.settings_path.exists():
        old = read_json(job.settings_path) if job.settings_path.is_file() else None
        diff = ["settings file missing or unreadable"] if old is None else _diff(old, job.settings)
        if diff:
            if not overwrite:
                raise EvalError(f"{job.samples_path} holds samples drawn with other settings ({'; '.join(diff)}); "
                                "pass --overwrite to discard them or choose another --out")
            _remove_outputs(job)
            return
        job.state = "resume"


def plan_checkpoint(ckpt: Path, plans: list[BenchPlan], protocol: Protocol, *, out: Path, step: int,
                    step_offset: int, seed: int, engine: str, max_new_tokens: int, max_tokens_source: str,
                    chunk_size: int, max_batch: int, limit: int | None, overwrite: bool) -> list[Job]:
    d = _step_dir(out, step)
    jobs = []
    for bp in plans:
        k = bp.setting.samples
        settings = {
            "benchmark": bp.name, "benchmark_source": bp.data.source, "protocol": protocol.name,
            "template": bp.template, "answer_mode": bp.mode, "samples": k, "pass_ks": list(bp.setting.pass_ks),
            "temperature": protocol.temperature, "top_p": protocol.top_p, "max_new_tokens": max_new_tokens,
            "max_new_tokens_source": max_tokens_source, "seed": seed, "seed_rule": SEED_RULE,
            "chunk_size": chunk_size, "engine": engine, "max_batch": max_batch if engine == "hf" else None,
            "limit": limit, "n_problems": len(bp.data), "data_sha": bp.data_sha,
        }
        job = Job(bp, d, f"{bp.name}__{protocol.name}__k{k}", settings, step, step_offset + step, ckpt)
        _classify(job, overwrite)
        jobs.append(job)
    return jobs


# ----------------------------------------------------------------------------------------- execution
def _load_samples(job: Job) -> dict[int, list[dict]]:
    """Complete problems already in the samples file: index -> k rows in sample order.

    A torn last line or a problem with fewer than k samples is dropped (the file is rewritten atomically)."""
    k = job.settings["samples"]
    path = job.samples_path
    if not path.exists():
        return {}
    by_index: dict[int, dict[int, dict]] = {}
    valid = {p.index for p in job.plan.data}
    with warnings.catch_warnings(record=True) as torn:     # a killed run's torn last line: dropped, chunk redone
        warnings.simplefilter("always", TornLineWarning)
        try:
            rows = read_jsonl(path)
        except ValueError as e:
            raise EvalError(f"{e}; pass --overwrite to discard the file") from None
    dirty = bool(torn)
    for n, row in enumerate(rows, 1):
        try:
            i, s = int(row["index"]), int(row["sample"])
        except (KeyError, TypeError, ValueError):
            raise EvalError(f"{path}: row {n} has no integer index/sample; pass --overwrite to discard the "
                            "file") from None
        if i not in valid or not 0 <= s < k:
            raise EvalError(f"{path}: row {n}: sample (index {i}, sample {s}) does not belong to this "
                            "evaluation; pass --overwrite to discard the file")
        if s in by_index.setdefault(i, {}):
            dirty = True
        by_index[i][s] = row
    complete = {i: [rows[s] for s in range(k)] for i, rows in by_index.items() if len(rows) == k}
    if dirty or len(complete) != len(by_index):
        write_text_atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n"
                                        for p in job.plan.data for row in complete.get(p.index, [])))
    return complete


def summarize(job: Job, rows_by_index: dict[int, list[dict]], elapsed_s: float | None = None,
              generated: int = 0) -> dict:
    """The summary of a finished job (avg@k, pass@j, maj@k, stats, settings)."""
    from common.metrics import avg_at_k, maj_at_k, pass_at_k_matrix
    k = job.settings["samples"]
    problems = list(job.plan.data)
    correct = [[bool(r["correct"]) for r in rows_by_index[p.index]] for p in problems]
    answers = [[(r.get("extracted") or "").strip() or None for r in rows_by_index[p.index]] for p in problems]
    metrics = {f"avg@{k}": avg_at_k(correct)}
    for j in job.settings["pass_ks"]:
        metrics[f"pass@{j}"] = pass_at_k_matrix(correct, j)
    metrics[f"maj@{k}"] = maj_at_k(answers, correct, k)
    all_rows = [r for p in problems for r in rows_by_index[p.index]]
    reasons = Counter(r.get("reason", "ok") for r in all_rows)
    return {
        "benchmark": job.plan.name, "protocol": job.settings["protocol"], "samples": k, "k": k,
        "n_problems": len(problems), "metrics": metrics, "step": job.step, "total_step": job.total_step,
        "checkpoint": str(Path(job.checkpoint).resolve()), "settings": job.settings,
        "stats": {"mean_response_length": sum(r.get("length", 0) for r in all_rows) / len(all_rows),
                  "finished_rate": sum(bool(r.get("finished")) for r in all_rows) / len(all_rows),
                  "reasons": dict(reasons), "problems_generated_this_run": generated},
        "per_problem_correct": [sum(c) for c in correct],
        "elapsed_s": elapsed_s, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _progress_enabled(progress: bool | None) -> bool:
    if progress is not None:
        return progress
    return os.environ.get("ARMOR_PROGRESS", "1") != "0"


def run_job(job: Job, engine, tokenizer, grader, *, progress: bool | None = None,
            after_chunk: Callable[[Job, int], None] | None = None) -> dict:
    """Generate the missing samples of ``job`` chunk by chunk, then write and return its summary.

    A lock file (``.<stem>.lock``, flock) keeps two processes from writing the same samples file."""
    import fcntl

    t0 = time.time()
    job.dir.mkdir(parents=True, exist_ok=True)
    with open(job.dir / f".{job.stem}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EvalError(f"{job.samples_path}: another evaluation is writing it") from None
        return _run_job_locked(job, engine, tokenizer, grader, t0, progress, after_chunk)


def _run_job_locked(job: Job, engine, tokenizer, grader, t0: float, progress, after_chunk) -> dict:
    from tqdm import tqdm

    from common.rollout import SamplingParams
    from common.sampling import encode_prompt, sample_and_grade

    s = job.settings
    k, C = s["samples"], s["chunk_size"]
    if not job.settings_path.is_file():
        write_json_atomic(job.settings_path, s, **_JSON_KW)
    done = _load_samples(job)
    problems = list(job.plan.data)
    n = len(problems)
    generated = 0
    bar = tqdm(total=n, initial=len(done), unit="problem", desc=f"step_{job.step:06d} {job.plan.name}",
               disable=not _progress_enabled(progress), dynamic_ncols=True, file=sys.stderr)
    bar.set_postfix_str(f"samples {len(done) * k}/{n * k}")
    try:
        for c0 in range(0, n, C):
            chunk = problems[c0:c0 + C]
            todo = {p.index for p in chunk if p.index not in done}
            if not todo:
                continue
            params = SamplingParams(n=k, temperature=s["temperature"], top_p=s["top_p"],
                                    max_new_tokens=s["max_new_tokens"], seed=chunk_seed(s["seed"], chunk[0].index))
            prompt_ids = [encode_prompt(tokenizer, p.problem, job.plan.template) for p in chunk]
            recs = sample_and_grade(engine, tokenizer, chunk, job.plan.template, params, grader, prompt_ids)
            gold = {p.index: p.gold for p in chunk}
            lines, new = [], {}
            for r in recs:
                if r.index in todo:
                    row = {**r.to_json(), "gold": gold[r.index]}
                    new.setdefault(r.index, []).append(row)
                    lines.append(json.dumps(row, ensure_ascii=False) + "\n")
            append_text(job.samples_path, "".join(lines))
            done.update(new)
            generated += len(new)
            bar.set_postfix_str(f"samples {len(done) * k}/{n * k}", refresh=False)
            bar.update(len(new))
            if after_chunk is not None:
                after_chunk(job, c0 // C)
    finally:
        bar.close()
    missing = [p.index for p in problems if p.index not in done]
    if missing:  # pragma: no cover - engine returned fewer samples than asked
        raise RuntimeError(f"{job.samples_path}: problems {missing[:5]} have fewer than {k} samples")
    summ = summarize(job, done, elapsed_s=round(time.time() - t0, 3), generated=generated)
    write_json_atomic(job.summary_path, summ, **_JSON_KW)
    job.summary, job.state = summ, "done"
    return summ


def _resummarize(job: Job) -> dict:
    done = _load_samples(job)
    if len(done) < len(job.plan.data):
        job.state = "resume"
        return {}
    summ = summarize(job, done)
    write_json_atomic(job.settings_path, job.settings, **_JSON_KW)
    write_json_atomic(job.summary_path, summ, **_JSON_KW)
    job.summary, job.state = summ, "done"
    return summ


def _pick_device(device: str | None) -> str:
    import torch
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda") and not str(device).startswith("cuda:"):
        raise EvalError(f"device must be auto, cpu or cuda, got {device!r}")
    return device


def _context_length(jobs: list[Job], tokenizer) -> int:
    """The vLLM engine's context length for `jobs`: their longest encoded prompt plus their largest response
    budget. Without it vLLM takes the model's max_position_embeddings (4096 for Qwen2.5-Math-7B) and silently
    caps responses there."""
    from common.sampling import encode_prompt
    longest = max(len(encode_prompt(tokenizer, p.problem, j.plan.template)) for j in jobs for p in j.plan.data)
    return longest + max(int(j.settings["max_new_tokens"]) for j in jobs)


@contextlib.contextmanager
def _loaded_engine(ckpt: Path, engine: str, *, device: str, dtype: str | None, max_batch: int, seed: int,
                   engine_kwargs: dict | None = None, context_length: Callable[[object], int] | None = None):
    """The engine and tokenizer for `ckpt`. hf: the model in-process. vllm: a standalone engine that loads the
    checkpoint folder's weights itself (nothing is pushed: a random-weight start followed by a push only pays
    off when weights change, as in training), with max_model_len = context_length(tokenizer)."""
    from common.models import load_model, load_tokenizer
    from common.rollout import build_engine
    tok = load_tokenizer(str(ckpt))
    if engine == "hf":
        dt = dtype or ("bfloat16" if device.startswith("cuda") else "float32")
        model = load_model(str(ckpt), dt, device)
        eng = build_engine("hf", model, tok, max_batch=max_batch)
        try:
            yield eng, tok
        finally:
            del eng, model
    else:
        kw = dict(engine_kwargs or {})
        if dtype:
            kw["dtype"] = dtype
        if context_length is None:
            raise EvalError("engine vllm: the context length (longest prompt + max_new_tokens) is needed")
        eng = build_engine("vllm", None, tok, model_path=str(ckpt), seed=seed, colocate=False,
                           max_model_len=context_length(tok), **kw)
        try:
            yield eng, tok
        finally:  # best effort: vLLM does not always give its GPU memory back in-process
            import gc
            del eng
            gc.collect()
            with contextlib.suppress(Exception):
                import torch
                torch.cuda.empty_cache()


class _Graders:
    def __init__(self, workers: int, timeout_s: float):
        self.workers, self.timeout_s, self._g = workers, timeout_s, {}

    def __call__(self, mode: str):
        from common.grading import Grader
        if mode not in self._g:
            self._g[mode] = Grader(num_workers=self.workers, timeout_s=self.timeout_s, mode=mode)
        return self._g[mode]

    def close(self):
        for g in self._g.values():
            g.close()
        self._g.clear()


# --------------------------------------------------------------------------------------------- results
def _check_meta_for_results(meta: dict) -> None:
    missing = [k for k in ("preset", "arm", "seed") if meta.get(k) in (None, "")]
    if missing:
        flags = {"preset": "--preset-name", "arm": "--arm", "seed": "--run-seed"}
        raise EvalError(f"--results needs {', '.join(missing)} for the table rows: not found in a run config "
                        f"(runs/<preset>/<arm>/seed<s>); pass {', '.join(flags[m] for m in missing)}")


# ------------------------------------------------------------------------------------------------ API
@dataclass
class _Common:
    protocol: Protocol
    plans: list[BenchPlan]
    engine: str
    seed: int
    chunk_size: int
    max_batch: int
    limit: int | None
    overwrite: bool
    preset: dict | None
    max_new_tokens: int | None


def _common(benchmarks, protocol, samples, pass_ks, limit, template, engine, seed, chunk_size, max_batch,
            overwrite, preset, max_new_tokens) -> _Common:
    try:
        proto = protocol if isinstance(protocol, Protocol) else get_protocol(protocol)
    except ValueError as e:
        raise EvalError(str(e)) from None
    if engine not in ("hf", "vllm"):
        raise EvalError(f"unknown engine {engine!r} (known: hf, vllm)")
    for name, v, lo in (("seed", seed, 0), ("chunk_size", chunk_size, 1), ("max_batch", max_batch, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise EvalError(f"{name} must be an integer >= {lo}, got {v!r}")
    if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int) or samples < 1):
        raise EvalError(f"samples (k) must be an integer >= 1, got {samples!r}")
    pks = _int_list(pass_ks, "pass_ks")
    plans = plan_benchmarks(benchmarks, proto, samples, pks, limit, template)
    pre = read_preset(preset) if preset is not None and not isinstance(preset, dict) else preset
    return _Common(proto, plans, engine, seed, chunk_size, max_batch, limit, overwrite, pre, max_new_tokens)


def _plan_one(ckpt: Path, com: _Common, *, out: Path | None, step: int | None, run_dir: Path | None,
              run_cfg: dict | None, meta_overrides: dict | None) -> tuple[list[Job], dict]:
    ckpt = check_checkpoint(ckpt)
    out = Path(out) if out is not None else ckpt / "eval"
    st = checkpoint_step(ckpt, out, step)
    meta = run_metadata(run_dir, run_cfg, ckpt, com.preset, meta_overrides)
    mnt, src = resolve_max_new_tokens(com.max_new_tokens, com.preset, com.protocol, run_cfg)
    jobs = plan_checkpoint(ckpt, com.plans, com.protocol, out=out, step=st, step_offset=meta["step_offset"],
                           seed=com.seed, engine=com.engine, max_new_tokens=mnt, max_tokens_source=src,
                           chunk_size=com.chunk_size, max_batch=com.max_batch, limit=com.limit,
                           overwrite=com.overwrite)
    return jobs, meta


def _execute(ckpt: Path, jobs: list[Job], com: _Common, *, device, dtype, grader_workers, grader_timeout_s,
             progress, engine_kwargs, after_chunk, log) -> list[dict]:
    for j in jobs:
        if j.state == "resummarize":
            _resummarize(j)
    todo = [j for j in jobs if j.state != "done"]
    if not todo:
        log(f"{ckpt}: already scored ({', '.join(j.stem for j in jobs)})")
        return [j.summary for j in jobs]
    dev = _pick_device(device)
    graders = _Graders(grader_workers, grader_timeout_s)
    try:
        with _loaded_engine(ckpt, com.engine, device=dev, dtype=dtype, max_batch=com.max_batch, seed=com.seed,
                            engine_kwargs=engine_kwargs,
                            context_length=lambda tok: _context_length(todo, tok)) as (eng, tok):
            for j in todo:
                if j.state == "resume":
                    log(f"{j.samples_path}: resuming")
                run_job(j, eng, tok, graders(j.plan.mode), progress=progress, after_chunk=after_chunk)
    finally:
        graders.close()
    return [j.summary for j in jobs]


def _finish(summaries: list[dict], metas: list[dict], results, log) -> list[dict]:
    if results is not None:
        rows = []
        for s, m in zip(summaries, metas):
            rows += summary_rows(s, m)
        append_results(results, rows)
        log(f"{len(rows)} rows -> {results}")
    return summaries


def evaluate_checkpoint(path, benchmarks, protocol: str | Protocol = "paper", samples: int | None = None,
                        limit: int | None = None, *, template: str | None = None, engine: str = "hf",
                        seed: int = 0, out=None, results=None, max_new_tokens: int | None = None, preset=None,
                        pass_ks=None, chunk_size: int = 32, max_batch: int = 256, step: int | None = None,
                        meta: dict | None = None, device: str | None = "auto", dtype: str | None = None,
                        grader_workers: int = 2, grader_timeout_s: float = 5.0, overwrite: bool = False,
                        progress: bool | None = None, engine_kwargs: dict | None = None,
                        after_chunk: Callable | None = None, log: Callable[[str], None] = _log) -> list[dict]:
    """Evaluate one HF model folder; returns one summary dict per benchmark (see the module docstring).

    path: checkpoint folder. benchmarks: "a,b" or a list (registry names or NAME=path). protocol: "paper" |
    "greedy" | "toy". samples / pass_ks: override the protocol's k / pass@j. out: output root (default
    ``path/eval``). results: results parquet to append rows to. preset: a preset name / path / dict whose
    lengths.max_response is the response budget. meta: {preset, model, arm, seed} overrides for table rows.
    All inputs are validated before the model is loaded (EvalError). Existing summaries with the same
    settings are reused; interrupted ones are resumed."""
    com = _common(benchmarks, protocol, samples, pass_ks, limit, template, engine, seed, chunk_size, max_batch,
                  overwrite, preset, max_new_tokens)
    ckpt = check_checkpoint(path)
    run_dir = _run_dir_of(ckpt)
    run_cfg = read_yaml_file(run_dir / "config.yaml") if run_dir else None
    jobs, m = _plan_one(ckpt, com, out=out, step=step, run_dir=run_dir, run_cfg=run_cfg, meta_overrides=meta)
    if results is not None:
        _check_meta_for_results(m)
    summaries = _execute(ckpt, jobs, com, device=device, dtype=dtype, grader_workers=grader_workers,
                         grader_timeout_s=grader_timeout_s, progress=progress, engine_kwargs=engine_kwargs,
                         after_chunk=after_chunk, log=log)
    return _finish(summaries, [m] * len(summaries), results, log)


def evaluate_run(run_dir, benchmarks=None, protocol: str | Protocol | None = None, samples: int | None = None,
                 limit: int | None = None, *, steps: Iterable[int] | None = None, out=None, results=None,
                 template: str | None = None, engine: str = "hf", seed: int = 0,
                 max_new_tokens: int | None = None, preset=None, pass_ks=None, chunk_size: int = 32,
                 max_batch: int = 256, meta: dict | None = None, device: str | None = "auto",
                 dtype: str | None = None, grader_workers: int = 2, grader_timeout_s: float = 5.0,
                 overwrite: bool = False, progress: bool | None = None, engine_kwargs: dict | None = None,
                 after_chunk: Callable | None = None, log: Callable[[str], None] = _log) -> list[dict]:
    """Evaluate every checkpoint of a training run (``run_dir/checkpoints/step_NNNNNN``), skipping the
    already-scored ones; outputs go to ``out`` (default ``run_dir/eval``). benchmarks / protocol default to
    the run config's protocol.eval_benchmarks / eval_protocol. Returns the summaries of all checkpoints
    (reused ones included), checkpoint-major."""
    rd = Path(run_dir).expanduser()
    if not rd.is_dir():
        raise EvalError(f"run folder {str(run_dir)!r} does not exist")
    cfg = read_yaml_file(rd / "config.yaml") if (rd / "config.yaml").is_file() else None
    pcfg = (cfg or {}).get("protocol") or {}
    if benchmarks is None or not _split_list(benchmarks):
        benchmarks = pcfg.get("eval_benchmarks")
        if not benchmarks:
            raise EvalError(f"{rd}: no benchmarks given and the run config has no protocol.eval_benchmarks")
    if protocol is None:
        protocol = pcfg.get("eval_protocol") or "paper"
    com = _common(benchmarks, protocol, samples, pass_ks, limit, template, engine, seed, chunk_size, max_batch,
                  overwrite, preset, max_new_tokens)
    all_steps = list_checkpoints(rd)
    if not all_steps:
        raise EvalError(f"{rd}: no checkpoints (expected {rd}/checkpoints/step_NNNNNN with trainer_state.pt)")
    if steps is not None:
        want = _int_list(list(steps), "steps")
        absent = [s for s in want if s not in all_steps]
        if absent:
            raise EvalError(f"{rd}: no checkpoint for steps {absent} (have {all_steps})")
        all_steps = [s for s in all_steps if s in set(want)]
    out_root = Path(out) if out is not None else rd / "eval"
    if STEP_RE.match(out_root.name):
        raise EvalError(f"--out {out_root} is a step folder; for --run give the eval root (e.g. {rd}/eval)")
    planned = []
    for st in all_steps:
        ck = rd / "checkpoints" / f"step_{st:06d}"
        jobs, m = _plan_one(ck, com, out=out_root, step=st, run_dir=rd, run_cfg=cfg, meta_overrides=meta)
        planned.append((ck, jobs, m))
    if results is not None:
        _check_meta_for_results(planned[0][2])
    summaries, metas = [], []
    for ck, jobs, m in planned:
        s = _execute(ck, jobs, com, device=device, dtype=dtype, grader_workers=grader_workers,
                     grader_timeout_s=grader_timeout_s, progress=progress, engine_kwargs=engine_kwargs,
                     after_chunk=after_chunk, log=log)
        summaries += s
        metas += [m] * len(s)
    return _finish(summaries, metas, results, log)


# ------------------------------------------------------------------------------------------------ CLI
def _fmt(summary: dict) -> str:
    ms = " ".join(f"{k}={v:.4f}" for k, v in summary["metrics"].items())
    return (f"step_{summary['step']:06d} {summary['benchmark']} [{summary['protocol']}, k={summary['samples']}, "
            f"{summary['n_problems']} problems]: {ms}")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m eval.evaluate", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="a Hugging Face model folder")
    src.add_argument("--run", help="a training run folder: every DIR/checkpoints/step_NNNNNN")
    ap.add_argument("--benchmarks", help="comma-separated registry names or NAME=path.jsonl "
                                         "(default for --run: the run config's protocol.eval_benchmarks)")
    ap.add_argument("--protocol", help=f"{' | '.join(list_protocols())} (default: the run config's "
                                       "protocol.eval_protocol, else paper)")
    ap.add_argument("--samples", type=int, help="k samples per problem (overrides the protocol)")
    ap.add_argument("--pass-k", help="comma-separated j of pass@j (overrides the protocol; each <= k)")
    ap.add_argument("--limit", type=int, help="first N problems of each benchmark")
    ap.add_argument("--template", help=f"prompt template ({', '.join(sorted(TEMPLATES))}; default: the "
                                       "protocol's, else the benchmark's)")
    ap.add_argument("--engine", default="hf", help="hf | vllm (default hf)")
    ap.add_argument("--seed", type=int, default=0, help="sampling seed (chunk seeds derive from it)")
    ap.add_argument("--out", help="output root (default: DIR/eval for --run, CHECKPOINT/eval for --checkpoint)")
    ap.add_argument("--results", help="append tidy rows to this results parquet")
    ap.add_argument("--max-new-tokens", type=int, help="response budget (default: --preset's "
                    "lengths.max_response, else the protocol's, else the run config's, else "
                    f"{DEFAULT_MAX_NEW_TOKENS})")
    ap.add_argument("--preset", help="model preset name or YAML path (its lengths.max_response is the budget)")
    ap.add_argument("--steps", help="--run only: comma-separated checkpoint steps to evaluate")
    ap.add_argument("--step", type=int, help="--checkpoint only: the step to file it under (default: from "
                                             "the folder name step_NNNNNN, else 0)")
    ap.add_argument("--chunk-size", type=int, default=32, help="problems per generation chunk (default 32)")
    ap.add_argument("--max-batch", type=int, default=256, help="hf engine: sequences per forward batch")
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda")
    ap.add_argument("--dtype", help="float32 | bfloat16 | float16 (default bfloat16 on GPU, float32 on CPU)")
    ap.add_argument("--threads", type=int, help="torch CPU threads")
    ap.add_argument("--tensor-parallel-size", type=int, help="vllm engine")
    ap.add_argument("--gpu-memory-utilization", type=float, help="vllm engine")
    ap.add_argument("--grader-workers", type=int, default=2, help="math-verify worker processes (0: in-process)")
    ap.add_argument("--preset-name", help="results: preset column (default from the run)")
    ap.add_argument("--arm", help="results: arm column (default from the run)")
    ap.add_argument("--run-seed", type=int, help="results: seed column (default from the run)")
    ap.add_argument("--model-name", help="results: model column (default: the base model's name)")
    ap.add_argument("--overwrite", action="store_true", help="redo outputs drawn with other settings")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.threads:
        import torch
        torch.set_num_threads(a.threads)
    ek = {}
    if a.tensor_parallel_size:
        ek["tensor_parallel_size"] = a.tensor_parallel_size
    if a.gpu_memory_utilization:
        ek["gpu_memory_utilization"] = a.gpu_memory_utilization
    meta = {"preset": a.preset_name, "arm": a.arm, "seed": a.run_seed, "model": a.model_name}
    common = dict(samples=a.samples, limit=a.limit, template=a.template, engine=a.engine, seed=a.seed, out=a.out,
                  results=a.results, max_new_tokens=a.max_new_tokens, preset=a.preset,
                  pass_ks=a.pass_k, chunk_size=a.chunk_size, max_batch=a.max_batch, meta=meta, device=a.device,
                  dtype=a.dtype, grader_workers=a.grader_workers, overwrite=a.overwrite,
                  progress=False if a.no_progress else None, engine_kwargs=ek)
    try:
        if a.checkpoint:
            if a.steps:
                raise EvalError("--steps is for --run; use --step with --checkpoint")
            if not a.benchmarks:
                raise EvalError("--checkpoint needs --benchmarks")
            summaries = evaluate_checkpoint(a.checkpoint, a.benchmarks, a.protocol or "paper", step=a.step, **common)
        else:
            if a.step is not None:
                raise EvalError("--step is for --checkpoint; use --steps with --run")
            summaries = evaluate_run(a.run, a.benchmarks, a.protocol, steps=_int_list(a.steps, "--steps"),
                                     **common)
    except EvalError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for s in summaries:
        print(_fmt(s), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
