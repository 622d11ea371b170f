"""Agreement of the two scorers, math_dapo (the authors') and math_verify, measured without a GPU.

    python -m bench.scorer_agreement [--workers 2]

The corpus: every gold of every shipped math benchmark file (common/data/benchmarks, through the registry's
gold extraction and normalisation), written as a response in each FORM below, with the verdict each form
should get (``right``: the gold's value; ``wrong``: another value). Both scorers grade every response
against its gold: math_dapo, and math_verify in ``boxed_or_answer_line`` mode (a box if there is one, else
the answer line). Printed: the corpus size, each scorer's accuracy against the intended verdict, the
agreement of the two, and each kind of disagreement (form, which scorer said correct) with a count and one
example.
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import Counter

from bench.grading import shipped_golds
from common.grading import Grader

__all__ = ["FORMS", "corpus", "main"]

_INT = re.compile(r"-?\d+")


def _wrong(g: str) -> str:
    """A realistic wrong value: an integer off by one, else the gold with a sign flipped."""
    if _INT.fullmatch(g):
        return str(int(g) + 1)
    return g[1:] if g.startswith("-") else "-" + g


def _int_or_none(g: str):
    return int(g) if _INT.fullmatch(g) else None


#: form -> (response writer gold -> text or None where the form does not apply, intended verdict)
FORMS = {
    "answer_line": (lambda g: f"We compute.\nAnswer: {g}", True),
    "answer_line_dollars": (lambda g: f"We compute.\nAnswer: ${g}$", True),
    "answer_line_boxed": (lambda g: f"We compute.\nAnswer: \\boxed{{{g}}}", True),
    "boxed_only": (lambda g: f"We compute, so the answer is \\boxed{{{g}}}.", True),
    "box_then_line": (lambda g: f"So \\boxed{{{g}}}.\nAnswer: {g}", True),
    "bold_answer_line": (lambda g: f"We compute.\n**Answer:** {g}", True),
    "answer_line_period": (lambda g: f"We compute.\nAnswer: {g}.", True),
    "answer_line_leading_zero": (lambda g: f"Answer: 0{g}" if _int_or_none(g) is not None and
                                 int(g) > 0 else None, True),
    "answer_line_decimal": (lambda g: f"Answer: {g}.0" if _int_or_none(g) is not None else None, True),
    "answer_line_early": (lambda g: f"Answer: {g}\n" + "Let me double-check each step. " * 12, True),
    "wrong_answer_line": (lambda g: f"We compute.\nAnswer: {_wrong(g)}", False),
    "wrong_boxed": (lambda g: f"So the answer is \\boxed{{{_wrong(g)}}}.", False),
    "wrong_last_line": (lambda g: f"Answer: {g}\nHmm, no.\nAnswer: {_wrong(g)}", False),
    "no_answer": (lambda g: "I could not finish the computation.", False),
}


def corpus() -> list[tuple[str, str, str, str, bool]]:
    """(benchmark, form, response, gold, intended verdict) for every math gold shipped and every form."""
    out = []
    for bench, gold, answer_type in shipped_golds():
        if answer_type != "math":
            continue
        for form, (write, intended) in FORMS.items():
            text = write(gold)
            if text is not None:
                out.append((bench, form, text, gold, intended))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scorer_agreement",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2, help="math-verify worker processes (0 = in-process)")
    a = ap.parse_args(argv)
    items = corpus()
    texts, golds = [it[2] for it in items], [it[3] for it in items]
    with Grader(num_workers=0, scorer="math_dapo", mode="answer_line") as g:
        dapo = [v.correct for v in g.grade(texts, golds)]
    with Grader(num_workers=a.workers, mode="boxed_or_answer_line") as g:
        mv = [v.correct for v in g.grade(texts, golds)]
    n = len(items)
    benches = Counter(it[0] for it in items)
    print(f"corpus: {n} responses, {len(FORMS)} forms of the math golds of "
          + ", ".join(f"{b} ({c})" for b, c in sorted(benches.items())) + " (responses per file)")
    for name, vs in (("math_dapo", dapo), ("math_verify", mv)):
        ok = sum(v == it[4] for v, it in zip(vs, items))
        print(f"{name}: {ok}/{n} = {ok / n:.4f} as intended, {sum(vs)} graded correct")
    agree = sum(x == y for x, y in zip(dapo, mv))
    print(f"agreement: {agree}/{n} = {agree / n:.4f}")
    kinds: Counter = Counter()
    example: dict = {}
    for it, x, y in zip(items, dapo, mv):
        if x != y:
            key = (it[1], "math_dapo" if x else "math_verify")
            kinds[key] += 1
            example.setdefault(key, it)
    print("disagreements (form: which scorer said correct, count, intended, example gold -> response):")
    for (form, who), c in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])):
        it = example[(form, who)]
        resp = it[2].replace("\n", "\\n")
        resp = resp if len(resp) <= 60 else resp[:28] + " ... " + resp[-27:]
        print(f"  {form}: only {who} correct, {c}, intended {'right' if it[4] else 'wrong'}, "
              f"e.g. {it[0]} {it[3]!r} -> {resp!r}")
    by_form = Counter(it[1] for it in items)
    print("per form (math_dapo correct / math_verify correct / responses):")
    for form in FORMS:
        if by_form[form]:
            d = sum(x for x, it in zip(dapo, items) if it[1] == form)
            m = sum(y for y, it in zip(mv, items) if it[1] == form)
            print(f"  {form}: {d} / {m} / {by_form[form]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
