"""Grader de-duplication: each distinct (answer, gold, answer type) of a call reaches math-verify once,
timeouts included, and every item gets the verdict it would get alone (project issue 28, item 3)."""
from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

import common.grading.verify as V
from bench.grading import REPEATED_SLOW as SLOW
from common.grading import Grader, Verdict, grade_one

ROOT = Path(__file__).resolve().parents[2]

#: per mode: (response, gold, answer_type) -- right and wrong via math-verify, one answer in two spellings
#: (one task, two extracted strings), the same answer against another gold, no answer, the integer fast path,
#: multiple choice, an implausible answer
CASES = {
    "boxed": [
        (r"so $\boxed{2\sqrt{3}}$.", r"\sqrt{12}", "math"),
        (r"hence \boxed{$2\sqrt{3}$}", r"\sqrt{12}", "math"),
        (r"\boxed{2\sqrt{3}}", r"\sqrt{13}", "math"),
        (r"\boxed{x^2}", "x^3", "math"),
        ("the answer is 7", "7", "math"),
        (r"\boxed{7}", "7", "math"),
        (r"\boxed{(B)}", "B", "mc"),
        (r"\boxed{A}", "B", "mc"),
        (r"\boxed{x^{x^{x^{x^{x}}}}}", "x", "math"),
    ],
    "answer_line": [
        ("work\nAnswer: 2\\sqrt{3}", r"\sqrt{12}", "math"),
        ("work\nAnswer: $2\\sqrt{3}$.", r"\sqrt{12}", "math"),
        ("work\nAnswer: x^2", "x^3", "math"),
        (r"\boxed{7}", "7", "math"),          # no answer line
        ("Answer: 7", "7", "math"),
        ("Answer: (B)", "B", "mc"),
    ],
    "boxed_or_answer_line": [
        (r"\boxed{2\sqrt{3}}", r"\sqrt{12}", "math"),
        ("work\nAnswer: 2\\sqrt{3}", r"\sqrt{12}", "math"),
        ("work\nAnswer: x^2", "x^3", "math"),
        ("nothing here", "7", "math"),
        (r"\boxed{C}", "B", "mc"),
    ],
}
#: distinct (answer, gold) pairs of each mode's cases that reach math-verify
MV_KEYS = {"boxed": 3, "answer_line": 2, "boxed_or_answer_line": 2}


def _count_math_verify(monkeypatch, fake=None) -> Counter:
    """Count the calls of math-verify (``verify._math_verify``, what in-process grading runs per task)."""
    calls: Counter = Counter()
    real = V._math_verify

    def counted(extracted, gold):
        calls[(extracted, gold)] += 1
        return (fake or real)(extracted, gold)

    monkeypatch.setattr(V, "_math_verify", counted)
    return calls


@pytest.mark.parametrize("mode", sorted(CASES))
def test_repeated_pairs_get_the_verdicts_they_get_alone(monkeypatch, mode):
    cases = CASES[mode]
    batch = cases * 3
    random.Random(0).shuffle(batch)
    rs, gs, ts = map(list, zip(*batch))
    with Grader(num_workers=0, timeout_s=5.0, mode=mode) as g:
        alone = [g.grade([r], [gold], [t])[0] for r, gold, t in batch]
        assert alone == [grade_one(r, gold, t, mode) for r, gold, t in batch]
        calls = _count_math_verify(monkeypatch)
        s0 = dict(g.stats)
        assert g.grade(rs, gs, ts) == alone
        assert g.stats["pool"] - s0["pool"] == MV_KEYS[mode]
    assert len(calls) == MV_KEYS[mode] and set(calls.values()) == {1}, calls
    assert len(set(alone)) > 3 and any(v.correct for v in alone) and not all(v.correct for v in alone)


def test_repeated_slow_answer_reaches_math_verify_once(monkeypatch):
    """An RL group of 16 whose samples repeat one answer 12 times (various texts, `$` or not): one call."""
    gold = r"\frac{3}{7}"
    rs = [f"Attempt {k}: ... so the answer is $\\boxed{{{SLOW}}}$." for k in range(10)]
    rs += [f"\\boxed{{${SLOW}$}}", f"\\boxed{{ {SLOW} }}", r"\boxed{x^2+1}", r"\boxed{x^2+1}", "no idea",
           r"\boxed{3/7}"]
    calls = _count_math_verify(monkeypatch, fake=lambda extracted, gold: (False, "ok"))
    with Grader(num_workers=0, timeout_s=5.0) as g:
        v = g.grade(rs, [gold] * len(rs))
        assert g.stats["pool"] == 2 and g.stats["items"] == 16
    assert calls == Counter({(SLOW, gold): 1, ("x^2+1", gold): 1})
    assert v[:10] + v[11:12] == [Verdict(False, SLOW, "ok")] * 11
    assert v[10] == Verdict(False, f"${SLOW}$", "ok")  # the same task, its own extracted string
    assert [x.reason for x in v[12:]] == ["ok", "ok", "no_answer", "ok"] and v[15].correct


