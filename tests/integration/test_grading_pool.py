"""The worker pool's memory of timed-out answers (project issue 36, item 3), with real worker processes and
a real slow answer: an answer that timed out (the worker's alarm, or the parent's kill) is sent to a worker
once (or, several of its tasks in one chunk, graded once by that worker), whatever the number of golds it
meets; its other tasks are "timeout_seen"; the other answers get the verdicts they get in-process. The tasks
sent are counted from the pipes, the math-verify runs from the timeouts (the slow answer always times out),
nothing is timed."""
from __future__ import annotations

from collections import Counter

import pytest

import common.grading.pool as P
from bench.grading import SLOW_IN_BOUNDS, UNSETTLED, aime_pathological_set
from common.grading import TIMEOUT_SEEN, Grader, Verdict, extract_boxed

SLOW = extract_boxed(SLOW_IN_BOUNDS)


class _Recorder:
    """Wraps a worker's send connection: records (worker pid, answer, gold) of every task sent."""

    def __init__(self, conn, pid: int, sent: Counter):
        self._conn, self._pid, self._sent = conn, pid, sent

    def send(self, msg):
        if msg is not None:
            self._sent.update((self._pid, ans, gold) for _, ans, gold, _ in msg)
        return self._conn.send(msg)

    def close(self):
        return self._conn.close()


@pytest.fixture
def sent(monkeypatch) -> Counter:
    """Every task any worker of the test's graders is sent (respawned workers included)."""
    out: Counter = Counter()
    real = P._spawn_worker

    def spawn(*a, **k):
        w = real(*a, **k)
        w.send_conn = _Recorder(w.send_conn, w.proc.pid, out)
        return w

    monkeypatch.setattr(P, "_spawn_worker", spawn)
    return out


def _batch():
    """A slow answer against four golds, spread among answers that need math-verify."""
    rs, gs = [], []
    for k, gold in enumerate(["5", "7", "9", "11"]):
        rs += [f"attempt {k}: {SLOW_IN_BOUNDS}", rf"\boxed{{\sqrt{{{(k + 2) ** 2}}} + x}}",
               rf"\boxed{{{k}x^2}}"]
        gs += [gold, f"{k + 2} + x", f"{k + 1}x^2"]
    return rs, gs


def _sent_of(sent: Counter, answer: str) -> int:
    return sum(n for (_, a, _), n in sent.items() if a == answer)


@pytest.mark.parametrize("workers,soft", [(2, True), (2, False), (1, True)],
                         ids=["worker-alarm", "parent-kill", "one-worker"])
def test_pool_sends_a_timed_out_answer_once(sent, workers, soft):
    """Two workers: the slow answer's other tasks wait in the parent while it is in flight on one of them,
    then are settled when it times out. One worker: they are met in the queue after the timeout."""
    rs, gs = _batch()
    with Grader(num_workers=workers, timeout_s=1.0, soft_timeout=soft, kill_grace_s=0.5, chunk_size=1) as g:
        v = g.grade(rs, gs)
        assert g.stats["timeouts"] == 1 and g.stats["timeouts_seen"] == 3
        assert g.stats["kills"] == (0 if soft else 1)
        assert SLOW in g.timed_out
        # a later call of the same run, another gold: answered in the parent
        before = sum(sent.values())
        assert g.grade([SLOW_IN_BOUNDS], ["13"]) == [Verdict(False, SLOW, TIMEOUT_SEEN)]
        assert sum(sent.values()) == before
    assert _sent_of(sent, SLOW) == 1 and sum(n for (_, a, x), n in sent.items() if (a, x) == (SLOW, "5")) == 1
    assert [x.reason for x in v[0::3]] == ["timeout", TIMEOUT_SEEN, TIMEOUT_SEEN, TIMEOUT_SEEN]
    assert not any(x.correct for x in v[0::3])
    with Grader(num_workers=0) as g0:  # the other answers: the verdicts they get in-process
        local = g0.grade([r for k, r in enumerate(rs) if k % 3], [x for k, x in enumerate(gs) if k % 3])
    assert [x for k, x in enumerate(v) if k % 3] == local
    assert [x.correct for x in local] == [True, False] * 4


def test_worker_skips_the_rest_of_its_chunk(sent):
    """The slow answer's tasks side by side land in one chunk (12 tasks, one worker: chunks of 3): the worker
    runs math-verify on the first (one timeout) and answers the other two "timeout_seen"; its fourth task,
    queued after the timeout, is settled in the parent and never sent."""
    normal = [(rf"\boxed{{\sqrt{{{k * k}}} + x}}", f"{k} + x") for k in range(2, 6)]
    normal += [(rf"\boxed{{{k}x^3}}", f"{k}x^2") for k in range(2, 6)]
    rs = [SLOW_IN_BOUNDS] * 3 + [r for r, _ in normal] + [SLOW_IN_BOUNDS]
    gs = ["5", "7", "9"] + [x for _, x in normal] + ["11"]
    with Grader(num_workers=1, timeout_s=1.0, chunk_size=32) as g:
        v = g.grade(rs, gs)
        assert g.stats["timeouts"] == 1 and g.stats["timeouts_seen"] == 3
    assert [x.reason for x in v] == ["timeout", TIMEOUT_SEEN, TIMEOUT_SEEN] + ["ok"] * 8 + [TIMEOUT_SEEN]
    assert [x.correct for x in v] == [False] * 3 + [True] * 4 + [False] * 5
    assert _sent_of(sent, SLOW) == 3


def test_aime_pathological_set_unsettled_answer_times_out_once(sent):
    """The benchmark's AIME set: the unsettled answer, in 12 responses against 12 golds, is sent once; every
    verdict is as labelled."""
    cases = aime_pathological_set()
    with Grader(num_workers=2, timeout_s=3.0) as g:
        v = g.grade([c.response for c in cases], [c.gold for c in cases])
    assert [x.correct for x in v] == [c.correct for c in cases]
    reasons = [x.reason for c, x in zip(cases, v) if c.kind == "integral"]
    assert reasons == ["timeout"] + [TIMEOUT_SEEN] * 11
    assert len({pid for (pid, a, _) in sent if a == UNSETTLED}) == 1  # one worker had the slow answer
    assert all(n == 1 for n in sent.values())  # no task sent twice
