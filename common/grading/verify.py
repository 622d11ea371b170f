"""The math-verify call, under a SIGALRM timeout: how one extracted answer is graded against its gold.

``$gold$`` and ``$answer$`` are parsed by math-verify and compared with ``math_verify.verify(gold, pred)``
(after the shortcuts of common.grading.normalize; multiple choice compares letters). math-verify's own
timeouts are disabled: ``_grade_guarded`` arms a repeating SIGALRM per item (reason ``"timeout"``), which only
works in a main thread -- worker processes (common.grading.worker) or ``grade_one`` called from one. Any other
failure is reason ``"error"``; nothing here raises on an answer's content.

``TimeoutMemory`` holds the answers that timed out in one run (one ``Grader``): such an answer is not graded
again against any gold (reason ``"timeout_seen"``). The cost of a timeout lies in the answer: parsing
``$answer$`` takes milliseconds (0.03-0.2 s for the slowest answers of bench.grading, and ``_parse_pred``
caches it per process), while math-verify's ``simplify(gold - answer)`` is what runs past the timeout,
evaluating the answer (a divergent integral, a huge sum) whatever the gold.
"""
from __future__ import annotations

import logging
import signal
import threading
from functools import lru_cache
from typing import Sequence

from common.grading.choice import mc_letter
from common.grading.normalize import _cheap_compare

__all__ = ["ALARM_REPEAT_S", "TIMEOUT_SEEN", "TimeoutMemory"]

#: the reason of an answer that timed out before in the same run (``TimeoutMemory``): wrong, not graded again
TIMEOUT_SEEN = "timeout_seen"


class TimeoutMemory:
    """The answers that timed out in one run: ``answer in memory`` after ``memory.add(answer)``.

    Keyed by the answer as math-verify parses it (the cleaned extracted answer, runs of whitespace made one
    space: ``$`` delimiters and spacing do not change the parse), not by (answer, gold): the cost is in
    settling the answer. Kept in the parent process, so a worker that was killed for the timeout still adds
    its answer; ``Grader`` holds one for its lifetime, ``grade_one`` takes one as an argument.
    """

    __slots__ = ("_keys",)

    def __init__(self) -> None:
        self._keys: set[str] = set()

    @staticmethod
    def key(answer: str) -> str:
        return " ".join(answer.split())

    def add(self, answer: str) -> None:
        self._keys.add(self.key(answer))

    def __contains__(self, answer: str) -> bool:
        return self.key(answer) in self._keys

    def __len__(self) -> int:
        return len(self._keys)

_MV = None


def _mv():
    """Lazily import math_verify (keeps `import common.grading` light for the parent)."""
    global _MV
    if _MV is None:
        import math_verify
        from math_verify import ExprExtractionConfig, LatexExtractionConfig

        # Timeouts are disabled inside math-verify (we enforce our own); silence its one-off warning.
        logging.getLogger("math_verify").setLevel(logging.ERROR)
        cfg = (LatexExtractionConfig(), ExprExtractionConfig())
        _MV = (math_verify.parse, math_verify.verify, cfg)
    return _MV


@lru_cache(maxsize=8192)
def _parse_gold(gold: str):
    parse, _, cfg = _mv()
    return parse(f"${gold}$", extraction_config=cfg, parsing_timeout=None)


@lru_cache(maxsize=8192)
def _parse_pred(answer: str):
    parse, _, cfg = _mv()
    return parse(f"${answer}$", extraction_config=cfg, parsing_timeout=None)


def _grade_extracted(extracted: str, gold: str, answer_type: str) -> tuple[bool, str]:
    """(correct, reason) for an already-extracted, already-cleaned answer and a normalized gold."""
    if answer_type == "mc":
        g = mc_letter(gold)
        p = mc_letter(extracted)
        return (g is not None and p == g), "ok"
    fast = _cheap_compare(extracted, gold)
    if fast is not None:
        return fast, "ok"
    return _math_verify(extracted, gold)


def _math_verify(extracted: str, gold: str) -> tuple[bool, str]:
    """math-verify alone (no shortcuts): parse ``$gold$`` and ``$extracted$``, then verify(gold, pred)."""
    _, verify, _ = _mv()
    g = _parse_gold(gold)
    if not g:
        return False, "error"
    p = _parse_pred(extracted)
    if not p:
        return False, "ok"
    return bool(verify(g, p, timeout_seconds=None)), "ok"


class _GradingTimeout(BaseException):
    """Raised by SIGALRM inside a grading call (BaseException: math-verify's `except Exception` can't eat
    it)."""


#: after the first alarm the timer repeats at this interval: code that swallows the raise (a bare `except:`
#: deep in sympy) gets it again, so a timed-out grading call always ends
ALARM_REPEAT_S = 0.05
_alarm_armed = False   # the handler raises only while a guarded call runs


def _on_alarm(signum, frame):
    if _alarm_armed:
        raise _GradingTimeout()


def _disarm() -> None:
    """Stop the repeating timer; an alarm that lands while doing so is absorbed and the stop retried."""
    global _alarm_armed
    while True:
        try:
            _alarm_armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            return
        except _GradingTimeout:
            continue


def _grade_unguarded(extracted: str, gold: str, answer_type: str) -> tuple[bool, str]:
    try:
        return _grade_extracted(extracted, gold, answer_type)
    except (_GradingTimeout, KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # MemoryError, RecursionError, sympy/antlr errors, math-verify's TimeoutException
        return False, "error"


def _grade_guarded(extracted: str, gold: str, answer_type: str, timeout_s: float | None) -> tuple[bool, str]:
    """_grade_extracted with a SIGALRM timeout (only when called from the main thread and timeout_s > 0).

    The caller must have installed `_on_alarm` as the SIGALRM handler. The alarm repeats every
    ALARM_REPEAT_S after the first, until the call has ended: a raise that grading code swallows is raised
    again (seen in the suite: a sympy summation kept running for 20 minutes after a one-shot alarm).
    """
    global _alarm_armed
    if not (timeout_s and timeout_s > 0 and hasattr(signal, "setitimer")):
        return _grade_unguarded(extracted, gold, answer_type)
    try:
        try:
            _alarm_armed = True
            signal.setitimer(signal.ITIMER_REAL, float(timeout_s), ALARM_REPEAT_S)
            return _grade_unguarded(extracted, gold, answer_type)
        finally:
            _disarm()
    except _GradingTimeout:
        _disarm()
        return False, "timeout"


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _grade_inprocess(tasks: Sequence[tuple[str, str, str]], timeout_s: float | None,
                     timed_out: TimeoutMemory | None = None) -> list[tuple[bool, str]]:
    """Grade (extracted, gold, answer_type) tasks here, in order. Timeouts only when in the main thread
    (SIGALRM). With ``timed_out``: an answer in it is (False, "timeout_seen") without math-verify, and an
    answer that times out is added to it (so its later tasks, other golds, are not tried)."""
    guarded = bool(timeout_s and _in_main_thread() and hasattr(signal, "SIGALRM"))

    def one(e: str, g: str, t: str) -> tuple[bool, str]:
        if timed_out is not None and e in timed_out:
            return False, TIMEOUT_SEEN
        ok, reason = _grade_guarded(e, g, t, timeout_s if guarded else None)
        if timed_out is not None and reason == "timeout":
            timed_out.add(e)
        return ok, reason

    if guarded:
        old = signal.signal(signal.SIGALRM, _on_alarm)
        try:
            return [one(e, g, t) for e, g, t in tasks]
        finally:
            signal.signal(signal.SIGALRM, old)
    return [one(e, g, t) for e, g, t in tasks]
