"""Grade a file of responses against a benchmark.

    python -m eval.grade --benchmark math500 --responses out.jsonl [--mode boxed] [--scorer math_dapo]
        [--workers 2] [--timeout 5]

Each input row is ``{"index": i, "response": "..."}`` where ``i`` is the 0-based row of the benchmark
(several rows may share an index, e.g. k samples per problem); other fields are kept. Per-row verdicts are
written beside the input as ``<name>.graded.jsonl`` (fields added: gold, correct, extracted, reason, and bound
for answers rejected as implausible) and the last line printed is the accuracy over rows, e.g.
``accuracy: 0.9960``; before it, the verdict counts by reason (and, if any answer was rejected as implausible,
by the bound it exceeded). Exit status 2 on bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from common.benchmarks import BenchmarkError, load_benchmark
from common.grading import ANSWER_MODES, SCORERS, Grader
from common.jsonl import numbered_objects


def graded_path(responses: Path) -> Path:
    """``x.jsonl`` -> ``x.graded.jsonl`` (same folder)."""
    name = responses.name
    stem = name[: -len(".jsonl")] if name.endswith(".jsonl") else name
    return responses.with_name(stem + ".graded.jsonl")


def read_responses(path: Path, n_problems: int) -> list[dict]:
    """Rows of the responses file, validated (ValueError naming the line and field)."""
    if not path.exists():
        raise ValueError(f"responses file not found: {path}")
    rows = []
    for lineno, row in numbered_objects(path):
        for key in ("index", "response"):
            if key not in row:
                raise ValueError(f"{path} line {lineno}: missing field {key!r}")
        idx = row["index"]
        if isinstance(idx, bool) or not isinstance(idx, int) or not 0 <= idx < n_problems:
            raise ValueError(f"{path} line {lineno}: index {idx!r} is not a row of the benchmark "
                             f"(0..{n_problems - 1})")
        if not isinstance(row["response"], str):
            raise ValueError(f"{path} line {lineno}: response must be a string")
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no responses")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.grade", description=__doc__.split("\n\n")[0])
    ap.add_argument("--benchmark", required=True, help="registered benchmark name (common.benchmarks)")
    ap.add_argument("--responses", required=True, type=Path, help="JSON-lines file of {index, response}")
    ap.add_argument("--source", default="auto", help="benchmark source: auto | local | hub | <path>")
    ap.add_argument("--mode", default="boxed", choices=ANSWER_MODES.names(), help="answer extraction mode")
    ap.add_argument("--scorer", default="math_verify", choices=SCORERS.names(),
                    help="math_verify (the --mode answer, math-verify) or math_dapo (the authors': last "
                         "'Answer:' line of the last 300 characters, Minerva-normalised string equality)")
    ap.add_argument("--workers", type=int, default=2, help="grading worker processes (0 = in-process)")
    ap.add_argument("--timeout", type=float, default=5.0, help="per-answer grading timeout, seconds")
    ap.add_argument("--out", type=Path, default=None, help="output path (default: <responses>.graded.jsonl)")
    args = ap.parse_args(argv)

    try:
        problems = load_benchmark(args.benchmark, args.source)
        rows = read_responses(args.responses, len(problems))
    except (BenchmarkError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    golds = [problems[r["index"]].gold for r in rows]
    types = [problems[r["index"]].answer_type for r in rows]
    with Grader(num_workers=args.workers, timeout_s=args.timeout, mode=args.mode,
                scorer=args.scorer) as grader:
        verdicts = grader.grade([r["response"] for r in rows], golds, types)

    out = args.out or graded_path(args.responses)
    with open(out, "w", encoding="utf-8") as f:
        for r, g, v in zip(rows, golds, verdicts):
            rec = dict(r)
            rec.update(gold=g, correct=v.correct, extracted=v.extracted, reason=v.reason)
            if v.bound is not None:
                rec["bound"] = v.bound
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")

    n = len(verdicts)
    acc = sum(v.correct for v in verdicts) / n
    reasons = Counter(v.reason for v in verdicts)
    print(f"benchmark: {problems.report_name} ({problems.source}), {len(problems)} problems")
    print(f"responses: {n} rows, {len({r['index'] for r in rows})} problems answered")
    print("reasons: " + ", ".join(f"{k}={reasons[k]}" for k in sorted(reasons)))
    # which plausibility bound (common.grading.BOUNDS) each rejected answer exceeded
    if reasons["implausible"]:
        bounds = Counter(v.bound for v in verdicts if v.reason == "implausible")
        print("implausible by bound: " + ", ".join(f"{k}={bounds[k]}" for k in sorted(bounds)))
    print(f"graded: {out}")
    print(f"accuracy: {acc:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
