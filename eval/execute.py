"""Running planned units: the engine and graders for a checkpoint, samples generated chunk by chunk and
appended (a restart keeps the complete problems), and each unit's summary (avg@k, pass@j, maj@k, stats,
settings)."""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Callable

from common.distributed import Dist
from common.jsonl import (TornLineWarning, append_text, read_json, read_jsonl, write_json_atomic,
                          write_text_atomic)
from eval.card import card_with_tokenizer, unit_card
from eval.units import Unit, regrade_key, chunk_seed
from eval.settings import EvalError, EvalSettings

__all__ = ["execute", "run_unit", "summarize"]

_JSON_KW = dict(indent=1, ensure_ascii=False, default=str)   # summaries and settings files


def _read_rows(path: Path) -> tuple[list[dict], bool]:
    """A samples file's rows, and whether its torn last line (a killed writer's) was dropped."""
    # a killed run's torn last line: dropped, chunk redone
    with warnings.catch_warnings(record=True) as torn:
        warnings.simplefilter("always", TornLineWarning)
        try:
            rows = read_jsonl(path)
        except ValueError as e:
            raise EvalError(f"{e}; pass --overwrite to discard the file") from None
    return rows, bool(torn)


def _load_samples(unit: Unit) -> dict[int, list[dict]]:
    """Complete problems already on disk: index -> k rows in sample order.

    Reads the samples file and the per-rank files a split evaluation left (merged into the samples file, then
    removed). A torn last line or a problem with fewer than k samples is dropped (the file is rewritten
    atomically)."""
    k = unit.settings["samples"]
    path = unit.samples_path
    parts = unit.rank_sample_files()
    if not path.exists() and not parts:
        return {}
    by_index: dict[int, dict[int, dict]] = {}
    valid = {p.index for p in unit.plan.data}
    rows, dirty = _read_rows(path) if path.exists() else ([], False)
    for part in parts:
        more, _ = _read_rows(part)
        rows, dirty = rows + more, True
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
                                        for p in unit.plan.data for row in complete.get(p.index, [])))
    for part in parts:
        part.unlink()
    return complete


def _verdict_of(row: dict, scorer: str | None) -> dict:
    """A sample row's verdict by `scorer` (None: the primary one, the row's own fields)."""
    return row if scorer is None else row["verdicts"][scorer]


def _metrics(unit: Unit, rows_by_index: dict[int, list[dict]], scorer: str | None) -> dict:
    """avg@k, pass@j (unbiased), best@j (verl's bootstrap, where the protocol asks) and maj@k of the verdicts
    of `scorer` (None: the primary one; another's names end in /<scorer>)."""
    from common.metrics import avg_at_k, best_at_k, maj_at_k, pass_at_k_matrix
    s, k = unit.settings, unit.settings["samples"]
    rows = [rows_by_index[p.index] for p in unit.plan.data]
    correct = [[bool(_verdict_of(r, scorer)["correct"]) for r in rr] for rr in rows]
    answers = [[(_verdict_of(r, scorer).get("extracted") or "").strip() or None for r in rr] for rr in rows]
    metrics = {f"avg@{k}": avg_at_k(correct)}
    for j in s["pass_ks"]:
        metrics[f"pass@{j}"] = pass_at_k_matrix(correct, j)
        if s.get("best_of"):
            metrics[f"best@{j}"] = best_at_k(correct, j)
    metrics[f"maj@{k}"] = maj_at_k(answers, correct, k)
    return metrics if scorer is None else {f"{m}/{scorer}": v for m, v in metrics.items()}


def summarize(unit: Unit, rows_by_index: dict[int, list[dict]], elapsed_s: float | None = None,
              generated: int = 0) -> dict:
    """The summary of a finished unit (avg@k, pass@j, maj@k under each scorer, stats, settings, card)."""
    k = unit.settings["samples"]
    problems = list(unit.plan.data)
    correct = [[bool(r["correct"]) for r in rows_by_index[p.index]] for p in problems]
    metrics = _metrics(unit, rows_by_index, None)
    for extra in unit.settings.get("scorers", ["math_verify"])[1:]:
        metrics.update(_metrics(unit, rows_by_index, extra))
    all_rows = [r for p in problems for r in rows_by_index[p.index]]
    reasons = Counter(r.get("reason", "ok") for r in all_rows)
    return {
        "benchmark": unit.plan.name, "protocol": unit.settings["protocol"], "samples": k, "k": k,
        "n_problems": len(problems), "metrics": metrics, "step": unit.step, "total_step": unit.total_step,
        "checkpoint": str(Path(unit.checkpoint).resolve()), "settings": unit.settings,
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


def grade_beside(unit: Unit, rows: list[dict], graders) -> None:
    """The verdicts of the unit's other scorers (settings["scorers"][1:]) on the same responses, added to each
    sample row as ``row["verdicts"][scorer] = {correct, extracted, reason}`` (nothing for one scorer)."""
    extras = unit.settings.get("scorers", ["math_verify"])[1:]
    if not extras or not rows:
        return
    golds = {p.index: p.gold for p in unit.plan.data}
    types = {p.index: p.answer_type for p in unit.plan.data}
    for name in extras:
        vs = graders(unit.plan.mode, name).grade([r["response"] for r in rows],
                                                 [golds[r["index"]] for r in rows],
                                                 [types[r["index"]] for r in rows])
        for r, v in zip(rows, vs):
            r.setdefault("verdicts", {})[name] = {"correct": bool(v.correct), "extracted": v.extracted,
                                                  "reason": v.reason}


def _regrade(unit: Unit, done: dict[int, list[dict]], graders) -> None:
    """Every scorer's verdicts recomputed from the stored responses (the scorers changed, not the samples);
    the samples file is rewritten."""
    rows = [r for p in unit.plan.data for r in done.get(p.index, [])]
    golds = {p.index: p.gold for p in unit.plan.data}
    types = {p.index: p.answer_type for p in unit.plan.data}
    primary = unit.settings.get("scorers", ["math_verify"])[0]
    vs = graders(unit.plan.mode, primary).grade([r["response"] for r in rows],
                                                [golds[r["index"]] for r in rows],
                                                [types[r["index"]] for r in rows])
    for r, v in zip(rows, vs):
        r.update(extracted=v.extracted, correct=bool(v.correct), reason=v.reason)
        r.pop("verdicts", None)
    grade_beside(unit, rows, graders)
    write_text_atomic(unit.samples_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def run_unit(unit: Unit, engine, tokenizer, grader, *, progress: bool | None = None,
            after_chunk: Callable[[Unit, int], None] | None = None, dist: Dist | None = None,
            graders=None) -> dict:
    """Generate the missing samples of ``unit`` chunk by chunk, then write and return its summary.

    Split over the ranks of `dist` (an evaluation launched by torchrun): rank 0 reads what is done, rank r
    generates the chunks r, r + W, ... of those still to do into its own file, and rank 0 merges them into the
    samples file and writes the summary, which every rank returns. A chunk's seed depends only on its first
    problem, so the samples are those of one process. A lock file (``.<stem>.lock``, flock; one per rank)
    keeps two evaluations from writing the same files. ``grader`` gives the primary verdicts; ``graders``
    ((mode, scorer) -> Grader) those of the protocol's other scorers (``grade_beside``)."""
    import fcntl

    dist = dist or Dist()
    t0 = time.time()
    unit.dir.mkdir(parents=True, exist_ok=True)
    name = f".{unit.stem}.lock" if dist.is_main else f".{unit.stem}.rank{dist.rank}.lock"
    with open(unit.dir / name, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EvalError(f"{unit.samples_path}: another evaluation is writing it") from None
        return _run_unit_locked(unit, engine, tokenizer, grader, t0, progress, after_chunk, dist, graders)


def _run_unit_locked(unit: Unit, engine, tokenizer, grader, t0: float, progress, after_chunk,
                    dist: Dist, graders) -> dict:
    from tqdm import tqdm

    from common.rollout import SamplingParams
    from common.sampling import encode_prompt, sample_and_grade

    s = unit.settings
    k, C = s["samples"], s["chunk_size"]
    done: dict[int, list[dict]] = {}
    if dist.is_main:
        old = read_json(unit.settings_path) if unit.settings_path.is_file() else None
        done = _load_samples(unit)
        if old is not None and not regrade_key(old, s, "scorers"):
            if done:                           # resumed under other scorers: the kept samples regraded first
                _regrade(unit, done, graders)
            old = None
        if old is None:
            write_json_atomic(unit.settings_path, s, **_JSON_KW)
    have = set(dist.all_gather_object(sorted(done) if dist.is_main else None)[0])
    problems = list(unit.plan.data)
    n = len(problems)
    chunks = [c0 for c0 in range(0, n, C) if any(p.index not in have for p in problems[c0:c0 + C])]
    mine = chunks[dist.rank::dist.world_size]
    out = unit.samples_path if not dist.distributed else unit.rank_samples_path(dist.rank)
    generated = 0
    bar = tqdm(total=n, initial=len(have), unit="problem", desc=f"step_{unit.step:06d} {unit.plan.name}",
               disable=not _progress_enabled(progress) or not dist.is_main, dynamic_ncols=True,
               file=sys.stderr)
    bar.set_postfix_str(f"samples {len(have) * k}/{n * k}")
    try:
        for c0 in mine:
            chunk = problems[c0:c0 + C]
            todo = {p.index for p in chunk if p.index not in have}
            params = SamplingParams(n=k, temperature=s["temperature"], top_p=s["top_p"],
                                    max_new_tokens=s["max_new_tokens"],
                                    seed=chunk_seed(s["seed"], chunk[0].index))
            prompt_ids = [encode_prompt(tokenizer, p.problem, unit.plan.template) for p in chunk]
            recs = sample_and_grade(engine, tokenizer, chunk, unit.plan.template, params, grader, prompt_ids)
            gold = {p.index: p.gold for p in chunk}
            new = {}
            for r in recs:
                if r.index in todo:
                    row = {**r.to_json(), "gold": gold[r.index]}
                    new.setdefault(r.index, []).append(row)
            if graders is not None:
                grade_beside(unit, [row for rows in new.values() for row in rows], graders)
            lines = [json.dumps(row, ensure_ascii=False) + "\n"
                     for p in chunk for row in new.get(p.index, [])]
            append_text(out, "".join(lines))
            done.update(new)
            generated += len(new)
            bar.set_postfix_str(f"samples {(len(have) + generated) * k}/{n * k}", refresh=False)
            bar.update(len(new))
            if after_chunk is not None:
                after_chunk(unit, c0 // C)
    finally:
        bar.close()
    generated = sum(dist.all_gather_object(generated))   # and, once every rank is here, its samples on disk
    summ = None
    if dist.is_main:
        if dist.distributed:
            done = _load_samples(unit)       # the ranks' files merged into the samples file, in problem order
        missing = [p.index for p in problems if p.index not in done]
        if missing:  # pragma: no cover - engine returned fewer samples than asked
            raise RuntimeError(f"{unit.samples_path}: problems {missing[:5]} have fewer than {k} samples")
        summ = summarize(unit, done, elapsed_s=round(time.time() - t0, 3), generated=generated)
        summ["card"] = card_with_tokenizer(unit, tokenizer)
        write_json_atomic(unit.summary_path, summ, **_JSON_KW)
    summ = dist.all_gather_object(summ)[0]
    unit.summary, unit.state = summ, "done"
    return summ


def _resummarize(unit: Unit, graders) -> dict:
    done = _load_samples(unit)
    if len(done) < len(unit.plan.data):
        unit.state = "resume"
        return {}
    _regrade(unit, done, graders)
    summ = summarize(unit, done)
    summ["card"] = unit_card(unit)
    write_json_atomic(unit.settings_path, unit.settings, **_JSON_KW)
    write_json_atomic(unit.summary_path, summ, **_JSON_KW)
    unit.summary, unit.state = summ, "done"
    return summ


def _pick_device(device: str | None) -> str:
    """"auto" / None -> cuda when available, else cpu (EvalSettings has checked the name)."""
    import torch
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def default_dtype(device: str) -> str:
    """The dtype an evaluation engine computes in when --dtype is not given: bfloat16 on a GPU, float32 on a
    CPU (where bf16 kernels are slow and round differently from the HF reference)."""
    return "bfloat16" if device.startswith("cuda") else "float32"


def _context_length(units: list[Unit], tokenizer) -> int:
    """The vLLM engine's context length for `units`: their longest encoded prompt plus their largest response
    budget. Without it vLLM takes the model's max_position_embeddings (4096 for Qwen2.5-Math-7B) and silently
    caps responses there."""
    from common.sampling import encode_prompt
    longest = max(len(encode_prompt(tokenizer, p.problem, j.plan.template))
                  for j in units for p in j.plan.data)
    return longest + max(int(j.settings["max_new_tokens"]) for j in units)


@contextlib.contextmanager
def _loaded_engine(ckpt: Path, engine: str, *, device: str, dtype: str | None, max_batch: int, seed: int,
                   engine_kwargs: dict | None = None, context_length: Callable[[object], int] | None = None,
                   fast: str = "off"):
    """The engine and tokenizer for `ckpt`. hf: the model in-process, decoding as `fast` (compute.fast's
    choices, common/fast/__init__.py) says. vllm: a standalone engine that loads the
    checkpoint folder's weights itself (nothing is pushed: a random-weight start followed by a push only pays
    off when weights change, as in training), with max_model_len = context_length(tokenizer)."""
    from common import fast as fast_paths
    from common.models import load_model, load_tokenizer
    from common.rollout import build_engine
    from common.yaml_config import ConfigError
    tok = load_tokenizer(str(ckpt))
    dt = dtype or default_dtype(device)          # one rule for both engines
    if engine == "hf":
        try:
            paths = fast_paths.choose(fast, device.split(":")[0], dt)
            model = load_model(str(ckpt), dt, device)
            eng = build_engine("hf", model, tok, max_batch=max_batch, fast=paths)
        except ConfigError as e:
            raise EvalError(str(e)) from None
        try:
            yield eng, tok
        finally:
            del eng, model
    else:
        kw = dict(engine_kwargs or {}, dtype=dt)
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
    """One grader per (answer mode, scorer), made on first use, all closed together."""

    def __init__(self, workers: int, timeout_s: float):
        self.workers, self.timeout_s, self._g = workers, timeout_s, {}

    def __call__(self, mode: str, scorer: str = "math_verify"):
        from common.grading import Grader
        if (mode, scorer) not in self._g:
            self._g[mode, scorer] = Grader(num_workers=self.workers, timeout_s=self.timeout_s, mode=mode,
                                           scorer=scorer)
        return self._g[mode, scorer]

    def close(self):
        for g in self._g.values():
            g.close()
        self._g.clear()


def execute(ckpt: Path, units: list[Unit], s: EvalSettings, dist: Dist | None = None) -> list[dict]:
    """Bring every unit of `ckpt` to done (the model loads only if one needs samples); their summaries. With
    several ranks each loads its own engine and the units' chunks are split over them (run_unit); rank 0 alone
    writes to the output folder, and what it finds there (done, to resume, to resummarize) holds for all."""
    dist = dist or Dist()
    dist.barrier()                          # every rank has read the folder (planned) before rank 0 writes
    graders = _Graders(s.grader_workers, s.grader_timeout_s)
    if dist.is_main:
        try:
            for j in units:
                if j.state == "resummarize":
                    _resummarize(j, graders)
        finally:
            graders.close()
    found = dist.all_gather_object([(j.state, j.summary) for j in units] if dist.is_main else None)[0]
    for j, (state, summary) in zip(units, found):
        j.state, j.summary = state, summary
    todo = [j for j in units if j.state != "done"]
    if not todo:
        if dist.is_main:
            s.log(f"{ckpt}: already scored ({', '.join(j.stem for j in units)})")
        return [j.summary for j in units]
    dev = _pick_device(s.device)
    graders = _Graders(s.grader_workers, s.grader_timeout_s)
    try:
        with _loaded_engine(ckpt, s.engine, device=dev, dtype=s.dtype, max_batch=s.max_batch, seed=s.seed,
                            engine_kwargs=s.engine_kwargs, fast=s.fast,
                            context_length=lambda tok: _context_length(todo, tok)) as (eng, tok):
            for j in todo:
                if j.state == "resume" and dist.is_main:
                    s.log(f"{j.samples_path}: resuming")
                run_unit(j, eng, tok, graders(j.plan.mode, j.settings["scorers"][0]), progress=s.progress,
                         after_chunk=s.after_chunk, dist=dist, graders=graders)
    finally:
        graders.close()
    return [j.summary for j in units]
