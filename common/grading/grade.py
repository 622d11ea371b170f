"""Grading one response: the ``Verdict``, the parent-side order of decisions (``_prepare``), ``grade_one``.

``_prepare`` extracts the final answer (its answer mode, common.grading.extract), normalises the gold, and
decides in the parent whatever needs no math-verify: no answer, an over-long answer, multiple choice, the
shortcuts (common.grading.normalize), the plausibility bounds (common.grading.shape). What is left is a task
for math-verify (common.grading.verify), run here by ``grade_one`` or in worker processes by ``Grader``.
"""
from __future__ import annotations

from dataclasses import dataclass

from common.grading.choice import mc_letter
from common.grading.extract import check_mode, extract_answer
from common.grading.normalize import _cheap_compare, _strip_dollars, normalize_gold
from common.grading.shape import MAX_ANSWER_CHARS, implausible_bound
from common.grading.verify import TimeoutMemory, _grade_extracted, _grade_inprocess

__all__ = ["ANSWER_TYPES", "REASONS", "Verdict", "grade_one"]

REASONS = ("ok", "no_answer", "timeout", "timeout_seen", "error", "implausible")
ANSWER_TYPES = ("math", "mc")


@dataclass(frozen=True)
class Verdict:
    """Result of grading one response.

    correct: the final answer matches the gold.
    extracted: the final answer as extracted from the response (None if there is none).
    reason: "ok" (graded normally, correct or not), "no_answer" (nothing extractable),
        "timeout" (grading exceeded its time budget; counted wrong), "timeout_seen" (the same answer timed
        out before in this run, against this or another gold; counted wrong, not graded again: see
        ``TimeoutMemory``), "error" (grading failed; counted wrong),
        "implausible" (beyond a plausibility bound, see ``BOUNDS``; counted wrong, never parsed).
    bound: for reason "implausible", the name of the bound exceeded (a key of ``BOUNDS``), else None.
    """

    correct: bool
    extracted: str | None
    reason: str = "ok"
    bound: str | None = None


def _prepare(response, gold, answer_type: str, mode: str, max_answer_chars: int):
    """Parent-side work: extraction and cheap comparisons.

    Returns (Verdict, None) when the item is decided here, else (extracted, (clean_answer, gold, type)).
    Order: over-long answers are rejected before anything else; the shortcuts of ``_cheap_compare`` come
    before the other plausibility bounds, so an answer equal to its gold is never rejected.
    """
    if answer_type not in ANSWER_TYPES:
        raise ValueError(f"unknown answer_type {answer_type!r}; expected one of {ANSWER_TYPES}")
    check_mode(mode)
    gold_n = normalize_gold(gold)
    if answer_type == "mc" and mc_letter(gold_n) is None:
        raise ValueError(f"multiple-choice gold must be an option letter A-J, got {gold!r}")
    if not isinstance(response, str):
        return Verdict(False, None, "error"), None
    try:
        extracted = extract_answer(response, mode)
    except Exception:  # pragma: no cover - extraction is total, but never crash the reward
        return Verdict(False, None, "error"), None
    if extracted is None:
        return Verdict(False, None, "no_answer"), None
    clean = _strip_dollars(extracted)
    if not clean:
        return Verdict(False, extracted, "no_answer"), None
    if len(clean) > max(max_answer_chars, len(gold_n)):
        return Verdict(False, extracted[:200] + "…", "implausible", "length"), None
    if answer_type == "mc":
        ok, reason = _grade_extracted(clean, gold_n, "mc")
        return Verdict(ok, extracted, reason), None
    fast = _cheap_compare(clean, gold_n)
    if fast is not None:
        return Verdict(fast, extracted, "ok"), None
    try:
        bound = implausible_bound(clean, gold_n, max_answer_chars)
    except Exception:  # pragma: no cover - the scan is total, but never crash the reward
        bound = None
    if bound is not None:
        return Verdict(False, extracted, "implausible", bound), None
    return None, (extracted, (clean, gold_n, answer_type))


def grade_one(response: str, gold, answer_type: str = "math", mode: str = "boxed", *,
              timeout_s: float | None = 5.0, max_answer_chars: int = MAX_ANSWER_CHARS,
              timed_out: TimeoutMemory | None = None) -> Verdict:
    """Grade one response in this process (the protocol: common.grading's docstring).

    The timeout uses SIGALRM and is therefore only enforced when called from the main thread; for untrusted
    input at scale use ``Grader`` (worker processes, a hard kill from the parent). ``timed_out``: the
    caller's memory of answers that timed out (one per run): an answer in it gets reason "timeout_seen"
    without math-verify, an answer that times out is added to it; None (default) remembers nothing.
    """
    verdict, work = _prepare(response, gold, answer_type, mode, max_answer_chars)
    if verdict is not None:
        return verdict
    extracted, task = work
    ok, reason = _grade_inprocess([task], timeout_s, timed_out)[0]
    return Verdict(ok, extracted, reason)
