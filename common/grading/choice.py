"""Multiple-choice answers: the option letter (A-J) an answer or a gold names (``mc_letter``).

``\\text{}``, ``$``, parentheses and an "Option"/"The answer is" prefix are stripped: ``"C"``, ``"(C)"``,
``"C. 42"``, ``"\\text{(C)}"`` all read as C. A multiple-choice answer is correct iff its letter is the
gold's.
"""
from __future__ import annotations

import re

from common.grading.normalize import _strip_dollars

__all__ = ["mc_letter"]

_MC_WRAP_RE = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mathit|textit|bf|rm)\s*\{([^{}]*)\}")
_MC_RE = re.compile(r"[\(\[\{\s]*([A-J])(?:[\)\]\}\.:,\s]|$)")
_MC_PREFIX_RE = re.compile(r"(?i)^\s*(?:the\s+)?(?:correct\s+)?(?:answer|option|choice)\s*"
                           r"(?:is)?\s*[:\-]?\s*")


def mc_letter(s: str | None) -> str | None:
    """The option letter (A-J) of a multiple-choice answer, or None.

    Accepts "C", "(C)", "[C]", "C.", "C) text", "C. text", "\\text{(C)}", "\\textbf{C}", "$C$", "Option C".
    A lowercase letter counts only when it is the whole answer ("c").
    """
    if not isinstance(s, str):
        return None
    t = s
    for _ in range(3):
        t2 = _MC_WRAP_RE.sub(r"\1", t)
        if t2 == t:
            break
        t = t2
    t = _strip_dollars(t).strip()
    t = _MC_PREFIX_RE.sub("", t)
    if len(t) == 1 and t.lower() in "abcdefghij":
        return t.upper()
    inner = t.strip("()[]{} ")
    if len(inner) == 1 and inner.lower() in "abcdefghij":
        return inner.upper()
    m = _MC_RE.match(t)
    return m.group(1) if m else None
