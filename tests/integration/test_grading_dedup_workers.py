"""Duplicates of a slow answer with a real timeout: in a child process and on the worker pool (the parts of
tests/unit/test_grading_dedup.py that start a process)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


from bench.grading import REPEATED_SLOW as SLOW, SLOW_IN_BOUNDS
from common.grading import Grader, Verdict, extract_boxed

ROOT = Path(__file__).resolve().parents[2]


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
