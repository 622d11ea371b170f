"""The scorers, by name (``SCORERS``): what decides a math response's verdict. Either grades any sample
file (``eval.grade --scorer``), the RL reward and in-run validation (``reward.scorer``) and an evaluation
protocol's verdict columns (eval.protocols).

* ``math_verify`` (default): the answer mode's final answer (common.grading.extract) compared with the gold by
  math-verify and the shortcuts of common.grading.normalize (the protocol of common.grading's docstring).
* ``math_dapo``: the authors' reward and validation scorer (common.grading.math_dapo): the last ``Answer:``
  line of the last 300 characters, Minerva's normalisation, string equality; it reads no answer mode and has
  no boxed fallback.

Multiple-choice items (``answer_type="mc"``) are graded by their letter under either scorer.
"""
from __future__ import annotations

from common.grading.grade import Verdict
from common.grading.math_dapo import math_dapo_score
from common.registry import Registry

__all__ = ["SCORERS", "DEFAULT_SCORER", "check_scorer", "dapo_verdict"]

#: scorer name -> its one-response function, or None for math_verify (graded by Grader's own path)
SCORERS = Registry("scorer", "reward.scorer")
DEFAULT_SCORER = "math_verify"


def dapo_verdict(response, gold) -> Verdict:
    """``math_dapo``'s verdict as a Verdict: extracted = the normalised answer (None when the window has no
    ``Answer:`` line, reason "no_answer")."""
    s = math_dapo_score(response, gold)
    return Verdict(s.acc, s.pred if s.found else None, "ok" if s.found else "no_answer")


SCORERS.register("math_verify")(None)
SCORERS.register("math_dapo")(dapo_verdict)


def check_scorer(name: str) -> str:
    """``name`` if it is a registered scorer, else ValueError naming it and the registered ones."""
    if not isinstance(name, str) or name not in SCORERS:
        raise ValueError(f"unknown scorer {name!r}; expected one of {SCORERS.names()}")
    return name
