"""The memory of timed-out answers (project issue 36, item 3): an answer that timed out once is not graded
again against another gold in the same run (one Grader), its verdict says so, and every other answer gets the
verdict it gets without the memory. In-process only (no process start here): the timeout is a fake
``_grade_guarded`` that answers "timeout" for one answer, and the calls are counted, not timed. The worker
pool's side is tests/integration/test_grading_pool.py."""
from __future__ import annotations

from collections import Counter

import pytest

import common.grading.verify as V
from bench.grading import UNSETTLED, aime_pathological_set
from common.grading import REASONS, TIMEOUT_SEEN, Grader, TimeoutMemory, Verdict, grade_one

SLOW = UNSETTLED  # the answer the fake times out on


def _fake_timeouts(monkeypatch, slow=(SLOW,)) -> Counter:
    """Replace the guarded math-verify call: "timeout" for the answers in ``slow``, the real call otherwise;
    return the (answer, gold) calls it gets."""
    calls: Counter = Counter()
    real = V._grade_guarded

    def fake(extracted, gold, answer_type, timeout_s):
        calls[(extracted, gold)] += 1
        if extracted in slow:
            return False, "timeout"
        return real(extracted, gold, answer_type, timeout_s)

    monkeypatch.setattr(V, "_grade_guarded", fake)
    return calls


def test_timeout_seen_is_a_reason():
    assert TIMEOUT_SEEN == "timeout_seen" and TIMEOUT_SEEN in REASONS


def test_memory_keys_by_the_parsed_answer():
    m = TimeoutMemory()
    assert len(m) == 0 and "x + 1" not in m
    m.add("x  +\t1")
    assert "x + 1" in m and " x + 1 " in m and len(m) == 1
    assert "x+1" not in m and "x + 2" not in m  # only whitespace runs are merged, nothing else


def test_answer_timed_out_against_one_gold_is_not_tried_against_another(monkeypatch):
    calls = _fake_timeouts(monkeypatch)
    rs = [rf"so \boxed{{{SLOW}}}", r"\boxed{2\sqrt{3}}", rf"then \boxed{{{SLOW}}}", r"\boxed{2\sqrt{3}}",
          rf"\boxed{{$ {SLOW} $}}", r"\boxed{x^2}"]
    gs = ["204", r"\sqrt{12}", "113", r"\sqrt{13}", "371", "x^3"]
    with Grader(num_workers=0, timeout_s=5.0) as g:
        v = g.grade(rs, gs)
        assert g.stats["timeouts"] == 1 and g.stats["timeouts_seen"] == 2 and g.stats["pool"] == 4
        assert SLOW in g.timed_out and len(g.timed_out) == 1
        # the same run, a later call, another gold: still not tried
        assert g.grade([rf"\boxed{{{SLOW}}}"], ["385"]) == [Verdict(False, SLOW, TIMEOUT_SEEN)]
        assert g.stats["timeouts_seen"] == 3 and g.stats["pool"] == 4
    # math-verify saw the slow answer once (against the first gold); the others each once per gold
    assert calls == Counter({(SLOW, "204"): 1, (r"2\sqrt{3}", r"\sqrt{12}"): 1,
                             (r"2\sqrt{3}", r"\sqrt{13}"): 1, ("x^2", "x^3"): 1})
    assert v[0] == Verdict(False, SLOW, "timeout")
    assert v[2] == Verdict(False, SLOW, TIMEOUT_SEEN)
    assert v[4] == Verdict(False, f"$ {SLOW} $", TIMEOUT_SEEN)  # `$` and spaces: the same parsed answer
    # the answers that do not time out: the verdicts they get alone, without any memory
    for i in (1, 3, 5):
        assert v[i] == grade_one(rs[i], gs[i]), i
    assert [x.correct for x in v] == [False, True, False, False, False, False]


def test_memory_is_per_grader(monkeypatch):
    """One run, one memory: a new Grader tries the answer again (and remembers it in its own memory)."""
    calls = _fake_timeouts(monkeypatch)
    for gold in ("204", "113"):
        with Grader(num_workers=0, timeout_s=5.0) as g:
            assert g.grade([rf"\boxed{{{SLOW}}}"], [gold])[0].reason == "timeout"
    assert calls == Counter({(SLOW, "204"): 1, (SLOW, "113"): 1})


def test_only_timeouts_are_remembered(monkeypatch):
    """An answer graded "ok" or "error" is graded again against the next gold."""
    calls = _fake_timeouts(monkeypatch, slow=())
    monkeypatch.setattr(V, "_math_verify", lambda e, g: (False, "error") if e == "y" else (False, "ok"))
    with Grader(num_workers=0, timeout_s=5.0) as g:
        v = g.grade([r"\boxed{y}", r"\boxed{y}", r"\boxed{z}", r"\boxed{z}"], ["a", "b", "a", "b"])
        assert len(g.timed_out) == 0 and g.stats["timeouts_seen"] == 0
    assert [x.reason for x in v] == ["error", "error", "ok", "ok"]
    assert calls == Counter({("y", "a"): 1, ("y", "b"): 1, ("z", "a"): 1, ("z", "b"): 1})


def test_grade_one_with_and_without_a_memory(monkeypatch):
    calls = _fake_timeouts(monkeypatch)
    memory = TimeoutMemory()
    r = rf"\boxed{{{SLOW}}}"
    assert grade_one(r, "204", timed_out=memory) == Verdict(False, SLOW, "timeout")
    assert SLOW in memory
    assert grade_one(r, "113", timed_out=memory) == Verdict(False, SLOW, TIMEOUT_SEEN)
    assert grade_one(r"\boxed{\frac{2}{4}}", r"\frac12", timed_out=memory) == Verdict(True, r"\frac{2}{4}")
    assert grade_one(r, "113") == Verdict(False, SLOW, "timeout")  # no memory given: nothing remembered
    assert calls[(SLOW, "204")] == 1 and calls[(SLOW, "113")] == 1


@pytest.mark.parametrize("order", [0, 1])
def test_first_gold_in_batch_order_is_the_one_tried(monkeypatch, order):
    """Which gold the answer is tried against is the first in the batch: the same batch, the same verdicts."""
    calls = _fake_timeouts(monkeypatch)
    golds = ["204", "113", "371"][order:] + ["204", "113", "371"][:order]
    with Grader(num_workers=0, timeout_s=5.0) as g:
        v = g.grade([rf"\boxed{{{SLOW}}}"] * 3, golds)
    assert [x.reason for x in v] == ["timeout", TIMEOUT_SEEN, TIMEOUT_SEEN]
    assert calls == Counter({(SLOW, golds[0]): 1})


def test_aime_pathological_set():
    cases = aime_pathological_set()
    assert len(cases) == 200 and len({(c.response, c.gold) for c in cases}) == 200
    assert cases == aime_pathological_set()  # deterministic
    unsettled = [c for c in cases if c.kind == "integral"]
    assert len(unsettled) == 12 and len({int(c.gold) for c in unsettled}) == 12
    assert all(UNSETTLED in c.response and not c.correct for c in unsettled)
    assert all(c.gold.isdigit() for c in cases if c.kind != "normal")  # AIME golds: integers
    normal = [c for c in cases if c.kind == "normal"]
    assert len(normal) == 16 and sum(c.correct for c in normal) == 12
