"""Evaluate checkpoints on benchmarks with a named sampling protocol; resumable, results keyed on disk.

    python -m eval.evaluate --checkpoint PATH --benchmarks aime24,amc [--protocol paper] [--samples K]
    python -m eval.evaluate --run runs/<preset>/<arm>/seed<s> [--benchmarks ...]
        [--results runs/<preset>/results.parquet]

``--checkpoint`` takes any Hugging Face model folder; ``--run DIR`` evaluates every checkpoint under
``DIR/checkpoints`` (``step_NNNNNN`` folders with ``trainer_state.pt``), skipping those already scored.
Benchmarks are registry names (``common.benchmarks``) or ``NAME=path.jsonl`` (fields problem/answer; a
registry name with ``=path`` loads that benchmark's format from the file). For ``--run`` the defaults of
``--benchmarks`` / ``--protocol`` are the run config's ``protocol.eval_benchmarks`` /
``protocol.eval_protocol``.

Output (``--out``, default ``DIR/eval`` for ``--run`` and ``CHECKPOINT/eval`` for ``--checkpoint``)::

    OUT/step_NNNNNN/<benchmark>__<protocol>__k<k>.json           summary (atomic, written last)
    OUT/step_NNNNNN/<benchmark>__<protocol>__k<k>.samples.jsonl  one row per (problem, sample)
    OUT/step_NNNNNN/.<benchmark>__<protocol>__k<k>.settings.json the settings the samples were drawn with

If ``OUT`` is itself named ``step_NNNNNN`` the files go directly into it (what ``reproduce.units``
passes). The summary holds ``metrics`` ({"avg@k", "pass@j" for the protocol's j, "maj@k"}), ``samples`` (k),
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

Several ranks: ``torchrun --nproc-per-node N -m eval.evaluate ...`` splits each benchmark's chunks over the N
ranks (rank r draws chunks r, r + N, ...; each rank its own engine on its own GPU(s),
``--tensor-parallel-size`` of them), appended to per-rank files that rank 0 merges into the samples file
before it writes the summary. Chunk seeds do not depend on the rank, so the samples are those of one process;
a stopped split evaluation resumes on any number of ranks.

Results table (``--results PATH``): tidy rows appended (deduplicated, under a file lock) with the columns of
docs/CONTRACTS.md; preset/arm/seed come from the run's layout ``runs/<preset>/<arm>/seed<s>`` (the config's
``output_dir``, else the run folder's path), else the config's ``name`` (``preset/arm``) and ``seed``;
``--preset-name/--arm/--run-seed/--model-name`` override them. ``step`` = step_offset + checkpoint step.

Bad input (unknown benchmark or protocol, a missing or malformed data file, a checkpoint without model files,
k < 1, pass@j with j > k, ...) fails with a message naming it before any model is loaded (exit status 2).

This module is the API (``evaluate_checkpoint``, ``evaluate_run``, both on one ``EvalSettings``) and the CLI;
the settings and their checks are eval/settings.py, planning (what is on disk) eval/units.py, generation and
summaries eval/execute.py, results-row metadata eval/metadata.py.
"""
from __future__ import annotations

if __name__ == "__main__":   # a process starts here (`python -m` / `torchrun -m`): pin before torch loads
    from common import cpu_numerics
    cpu_numerics.pin()

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Sequence

from common.benchmarks import TEMPLATES
from common.distributed import Dist
from common.layout import STEP_RE, list_checkpoints
from common.results import append_results, summary_rows
from eval.execute import execute
from eval.metadata import check_meta_for_results, run_dir_of
from eval.units import check_checkpoint, chunk_seed, bench_inputs, units_of
from eval.protocols import DEFAULT_MAX_NEW_TOKENS, Protocol, list_protocols
from eval.settings import EvalError, EvalSettings, int_list, read_yaml_file

__all__ = ["EvalError", "EvalSettings", "evaluate_checkpoint", "evaluate_run", "chunk_seed",
           "check_checkpoint", "main"]


# ------------------------------------------------------------------------------------------------ API
def _settings(base: EvalSettings | None, options: dict, **given) -> EvalSettings:
    """`base` (or the defaults) with `options` and the positional arguments that were given (not None)."""
    opts = {**{k: v for k, v in given.items() if v is not None}, **options}
    return replace(base, **opts) if base is not None else EvalSettings(**opts)


# an evaluation split over ranks waits at each unit's end for its slowest rank: a generous collective timeout
RANK_TIMEOUT_S = 6 * 3600


def ranks() -> Dist:
    """The ranks this evaluation is split over: torchrun's (a gloo group for the few object collectives; each
    rank keeps the GPU(s) narrowed to it by `one_gpu_per_rank`), else one process."""
    return Dist.from_env("cpu", timeout_s=RANK_TIMEOUT_S)


def one_gpu_per_rank(gpus_per_rank: int = 1) -> None:
    """Under torchrun, give rank LOCAL_RANK its own GPU(s) of the visible ones (before CUDA starts): every
    rank runs its own engine, data-parallel. A no-op without torchrun or without GPUs."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return
    local = int(os.environ.get("LOCAL_RANK", "0"))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = visible.split(",") if visible else [str(i) for i in range(_gpu_count())]
    if ids:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids[local * gpus_per_rank:(local + 1) * gpus_per_rank])


def _gpu_count() -> int:
    """GPUs on this node without starting CUDA in this process (nvidia-smi), 0 if none."""
    import shutil
    import subprocess
    if not shutil.which("nvidia-smi"):
        return 0
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(line.startswith("GPU ") for line in r.stdout.splitlines()) if r.returncode == 0 else 0


def _finish(summaries: list[dict], metas: list[dict], s: EvalSettings, dist: Dist) -> list[dict]:
    if s.results is not None and dist.is_main:
        rows = []
        for summ, m in zip(summaries, metas):
            rows += summary_rows(summ, m)
        append_results(s.results, rows)
        s.log(f"{len(rows)} rows -> {s.results}")
    return summaries


def evaluate_checkpoint(path, benchmarks=None, protocol: str | Protocol | None = None,
                        samples: int | None = None,
                        limit: int | None = None, *, step: int | None = None,
                        settings: EvalSettings | None = None, **options) -> list[dict]:
    """Evaluate one HF model folder; returns one summary dict per benchmark (see the module docstring).

    path: checkpoint folder. step: the step to file it under (default: from the folder name, else 0).
    settings: an EvalSettings; ``options`` are its fields by name (they replace the settings' values, as do
    the positional arguments that are not None): benchmarks ("a,b" or a list of registry names or NAME=path),
    protocol ("paper" (default) | "greedy" | "toy"), samples / pass_ks (override the protocol's k / pass@j),
    out (output root, default ``path/eval``), results (results parquet to append rows to), preset (a
    preset's path or dict whose lengths.max_response is the response budget), meta ({preset, model, arm, seed}
    overrides for table rows), ... All inputs are validated before the model is loaded (EvalError). Existing
    summaries with the same settings are reused; interrupted ones are resumed."""
    s = _settings(settings, options, benchmarks=benchmarks, protocol=protocol, samples=samples, limit=limit)
    if s.protocol is None:
        s = replace(s, protocol="paper")
    inputs = bench_inputs(s)
    ckpt = check_checkpoint(path)
    run_dir = run_dir_of(ckpt)
    run_cfg = read_yaml_file(run_dir / "config.yaml") if run_dir else None
    units, m = units_of(ckpt, inputs, s, out=s.out, step=step, run_dir=run_dir, run_cfg=run_cfg)
    if s.results is not None:
        check_meta_for_results(m)
    dist = ranks()
    return _finish(execute(ckpt, units, s, dist), [m] * len(units), s, dist)


def _with_run_defaults(s: EvalSettings, rd: Path, cfg: dict | None) -> EvalSettings:
    """Benchmarks / protocol not given: the run config's protocol.eval_benchmarks / eval_protocol (else
    paper)."""
    pcfg = (cfg or {}).get("protocol") or {}
    if not s.benchmarks:
        if not pcfg.get("eval_benchmarks"):
            raise EvalError(f"{rd}: no benchmarks given and the run config has no protocol.eval_benchmarks")
        s = replace(s, benchmarks=pcfg["eval_benchmarks"])
    if s.protocol is None:
        s = replace(s, protocol=pcfg.get("eval_protocol") or "paper")
    return s


def _run_steps(rd: Path, steps: Iterable[int] | None) -> list[int]:
    """The run's checkpoint steps, or the asked ones (EvalError naming those that have no checkpoint)."""
    all_steps = list_checkpoints(rd)
    if not all_steps:
        raise EvalError(f"{rd}: no checkpoints (expected {rd}/checkpoints/step_NNNNNN with trainer_state.pt)")
    if steps is None:
        return all_steps
    want = int_list(list(steps), "steps")
    absent = [st for st in want if st not in all_steps]
    if absent:
        raise EvalError(f"{rd}: no checkpoint for steps {absent} (have {all_steps})")
    return [st for st in all_steps if st in set(want)]


def evaluate_run(run_dir, benchmarks=None, protocol: str | Protocol | None = None, samples: int | None = None,
                 limit: int | None = None, *, steps: Iterable[int] | None = None,
                 settings: EvalSettings | None = None, **options) -> list[dict]:
    """Evaluate every checkpoint of a training run (``run_dir/checkpoints/step_NNNNNN``), skipping the
    already-scored ones; outputs go to ``out`` (default ``run_dir/eval``). benchmarks / protocol default to
    the run config's protocol.eval_benchmarks / eval_protocol; the other settings as in evaluate_checkpoint.
    Returns the summaries of all checkpoints (reused ones included), checkpoint-major."""
    rd = Path(run_dir).expanduser()
    if not rd.is_dir():
        raise EvalError(f"run folder {str(run_dir)!r} does not exist")
    cfg = read_yaml_file(rd / "config.yaml") if (rd / "config.yaml").is_file() else None
    s = _settings(settings, options, benchmarks=benchmarks, protocol=protocol, samples=samples, limit=limit)
    s = _with_run_defaults(s, rd, cfg)
    inputs = bench_inputs(s)
    all_steps = _run_steps(rd, steps)
    out_root = Path(s.out) if s.out is not None else rd / "eval"
    if STEP_RE.match(out_root.name):
        raise EvalError(f"--out {out_root} is a step folder; for --run give the eval root (e.g. {rd}/eval)")
    scheduled = []
    for st in all_steps:
        ck = rd / "checkpoints" / f"step_{st:06d}"
        scheduled.append((ck, *units_of(ck, inputs, s, out=out_root, step=st, run_dir=rd, run_cfg=cfg)))
    if s.results is not None:
        check_meta_for_results(scheduled[0][2])
    summaries, metas = [], []
    dist = ranks()
    for ck, units, m in scheduled:
        summaries += execute(ck, units, s, dist)
        metas += [m] * len(units)
    return _finish(summaries, metas, s, dist)


# ------------------------------------------------------------------------------------------------ CLI
OTHER_PROTOCOLS = """Reproducing another group's protocol (every summary's "card" records what was used):
  the authors' (ARMOR / DAPO validation): --protocol paper (DAPO prompt, math_dapo primary, math_verify
      beside; T=1.0, top_p=0.7, avg@32 and pass@16 / best@16 on AIME/AMC), --preset <model preset> for
      the response budget
  Qwen2.5-Math's own evaluation (boxed system prompt, math-verify): --template qwen_math --scorers math_verify
  greedy numbers: --protocol greedy;  another sampling: --samples K --pass-k J
  the prompt, scorer and flags of each published number: docs/gpu.md"""

def _fmt(summary: dict) -> str:
    ms = " ".join(f"{k}={v:.4f}" for k, v in summary["metrics"].items())
    return (f"step_{summary['step']:06d} {summary['benchmark']} [{summary['protocol']}, "
            f"k={summary['samples']}, {summary['n_problems']} problems]: {ms}")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m eval.evaluate", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=OTHER_PROTOCOLS)
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
    ap.add_argument("--scorers", help="math verdicts, primary first, e.g. math_dapo,math_verify (default: "
                                      "the protocol's; the others are graded beside from the same samples)")
    ap.add_argument("--engine", default="hf", help="hf | vllm (default hf)")
    ap.add_argument("--seed", type=int, default=0, help="sampling seed (chunk seeds derive from it)")
    ap.add_argument("--out",
                    help="output root (default: DIR/eval for --run, CHECKPOINT/eval for --checkpoint)")
    ap.add_argument("--results", help="append tidy rows to this results parquet")
    ap.add_argument("--max-new-tokens", type=int, help="response budget (default: --preset's "
                    "lengths.max_response, else the protocol's, else the run config's, else "
                    f"{DEFAULT_MAX_NEW_TOKENS})")
    ap.add_argument("--preset", help="model preset's YAML path (its lengths.max_response is the budget)")
    ap.add_argument("--steps", help="--run only: comma-separated checkpoint steps to evaluate")
    ap.add_argument("--step", type=int, help="--checkpoint only: the step to file it under (default: from "
                                             "the folder name step_NNNNNN, else 0)")
    ap.add_argument("--chunk-size", type=int, default=32, help="problems per generation chunk (default 32)")
    ap.add_argument("--chunk-ranks", type=int, default=1,
                    help="size each benchmark's chunks for this many ranks: min(--chunk-size, "
                         "ceil(problems / N)), so every rank of a split evaluation gets one (default 1)")
    ap.add_argument("--max-batch", type=int, default=256, help="hf engine: sequences per forward batch")
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda")
    ap.add_argument("--fast", choices=["auto", "off", "native"],
                    help="hf engine: the CPU fast paths, as the trainer's compute.fast (default: --preset's, "
                         "else auto)")
    ap.add_argument("--dtype", help="float32 | bfloat16 | float16 (default bfloat16 on GPU, float32 on CPU)")
    ap.add_argument("--threads", type=int, help="torch CPU threads")
    ap.add_argument("--tensor-parallel-size", type=int, help="vllm engine")
    ap.add_argument("--gpu-memory-utilization", type=float, help="vllm engine")
    ap.add_argument("--enforce-eager", action="store_true",
                    help="vllm engine: no CUDA graphs or torch.compile "
                         "(start-up in seconds, slower decoding)")
    ap.add_argument("--grader-workers", type=int, default=2,
                    help="math-verify worker processes (0: in-process)")
    ap.add_argument("--preset-name", help="results: preset column (default from the run)")
    ap.add_argument("--arm", help="results: arm column (default from the run)")
    ap.add_argument("--run-seed", type=int, help="results: seed column (default from the run)")
    ap.add_argument("--model-name", help="results: model column (default: the base model's name)")
    ap.add_argument("--overwrite", action="store_true", help="redo outputs drawn with other settings")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    return ap


def _cli_options(a: argparse.Namespace) -> dict:
    """The EvalSettings fields the flags set (benchmarks and protocol are passed positionally)."""
    ek = {}
    if a.tensor_parallel_size:
        ek["tensor_parallel_size"] = a.tensor_parallel_size
    if a.gpu_memory_utilization:
        ek["gpu_memory_utilization"] = a.gpu_memory_utilization
    if a.enforce_eager:
        ek["enforce_eager"] = True
    meta = {"preset": a.preset_name, "arm": a.arm, "seed": a.run_seed, "model": a.model_name}
    return dict(samples=a.samples, limit=a.limit, template=a.template, scorers=a.scorers, engine=a.engine,
                seed=a.seed,
                out=a.out, results=a.results, max_new_tokens=a.max_new_tokens, preset=a.preset,
                pass_ks=a.pass_k, chunk_size=a.chunk_size, chunk_ranks=a.chunk_ranks, max_batch=a.max_batch,
                meta=meta, device=a.device, dtype=a.dtype, fast=a.fast, grader_workers=a.grader_workers,
                overwrite=a.overwrite,
                progress=False if a.no_progress else None, engine_kwargs=ek)


def main(argv: Sequence[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    one_gpu_per_rank(a.tensor_parallel_size or 1)
    if a.threads:
        import torch
        torch.set_num_threads(a.threads)
    opts = _cli_options(a)
    try:
        if a.checkpoint:
            if a.steps:
                raise EvalError("--steps is for --run; use --step with --checkpoint")
            if not a.benchmarks:
                raise EvalError("--checkpoint needs --benchmarks")
            summaries = evaluate_checkpoint(a.checkpoint, a.benchmarks, a.protocol or "paper",
                                            step=a.step, **opts)
        else:
            if a.step is not None:
                raise EvalError("--step is for --checkpoint; use --steps with --run")
            summaries = evaluate_run(a.run, a.benchmarks, a.protocol,
                                     steps=int_list(a.steps, "--steps"), **opts)
    except EvalError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if int(os.environ.get("RANK", "0")) == 0:
        for s in summaries:
            print(_fmt(s), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
