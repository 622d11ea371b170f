"""Grader de-duplication: each distinct (answer, gold, answer type) of a call reaches math-verify once,
timeouts included, and every item gets the verdict it would get alone (project issue 28, item 3)."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import common.grading.verify as V
from bench.grading import REPEATED_SLOW as SLOW, SLOW_IN_BOUNDS
from common.grading import Grader, Verdict, extract_boxed, grade_one

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


# In-process timeouts use SIGALRM: run in a child process (as tests/unit/test_grading.py does), so a
# regression hangs the child, whose `timeout=` fails the test, not pytest. The fake math-verify never returns
# on the slow answer, so its timeout is certain.
_TIMEOUT_CHILD = r"""
import json
import common.grading.verify as V
from bench.grading import REPEATED_SLOW as SLOW
from common.grading import Grader
calls = []
def fake(extracted, gold):
    calls.append(extracted)
    while extracted == SLOW:
        sum(range(100))
    return True, "ok"
V._math_verify = fake
rs = [rf"\boxed{{{SLOW}}}", r"\boxed{y+1}", rf"so \boxed{{{SLOW}}}", "none", rf"\boxed{{${SLOW}$}}"] * 2
with Grader(num_workers=0, timeout_s=0.2) as g:
    v = g.grade(rs, ["5"] * len(rs))
print(json.dumps({"verdicts": [[x.correct, x.extracted, x.reason] for x in v], "calls": calls,
                  "stats": g.stats}))
"""


def test_timeout_applies_to_every_duplicate():
    r = subprocess.run([sys.executable, "-c", _TIMEOUT_CHILD], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert sorted(out["calls"]) == sorted([SLOW, "y+1"])
    slow = [False, SLOW, "timeout"]
    assert out["verdicts"] == [slow, [True, "y+1", "ok"], slow, [False, None, "no_answer"],
                               [False, f"${SLOW}$", "timeout"]] * 2
    assert out["stats"]["pool"] == 2 and out["stats"]["timeouts"] == 1


def test_pool_timeout_applies_to_every_duplicate():
    """The same with worker processes and a real slow answer: sent once, one timeout, every duplicate's."""
    rs = [SLOW_IN_BOUNDS, r"\boxed{2\sqrt{3}}"] * 3 + [SLOW_IN_BOUNDS]
    gs = ["5", r"\sqrt{12}"] * 3 + ["5"]
    with Grader(num_workers=1, timeout_s=1.0) as g:
        v = g.grade(rs, gs)
        assert g.stats["pool"] == 2 and g.stats["timeouts"] == 1
    timeout = Verdict(False, extract_boxed(SLOW_IN_BOUNDS), "timeout")
    assert v == [timeout, Verdict(True, r"2\sqrt{3}", "ok")] * 3 + [timeout]
