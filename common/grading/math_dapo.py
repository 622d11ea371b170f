"""The authors' reward and validation scorer, ``math_dapo`` (verl's ``utils/reward_score/math_dapo.py`` in the
authors' fork, Hesse73/ARMOR at 3e393f7), written here from its specification:

1. only the last 300 characters of the response are read (``WINDOW_CHARS``);
2. the answer is the last match there of ``(?i)Answer\\s*:\\s*([^\\n]+)`` (none: the answer is wrong);
3. answer and gold both go through Minerva's final-answer normalisation (``normalize_final_answer``: the
   text after the last ``=``, unit words and ``\\text{}`` removed, ``$...$``, ``\\text{}``, ``\\boxed{}``
   unwrapped, ``\\fracab`` -> ``\\frac{a}{b}``, ``1,000`` -> ``1000``);
4. correct iff the two strings are equal: score +1, else -1; ``acc`` is the verdict.

There is no boxed fallback (the fork's version; later verl added one): a response whose only answer is
``\\boxed{540}`` is -1. The strict-box branch of the original (``strict_box_verify``) is off in the authors'
runs and not reproduced. Pure string functions; linear in the window (300 characters), so no timeouts.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["WINDOW_CHARS", "ANSWER_PATTERN", "DapoScore", "normalize_final_answer", "math_dapo_score"]

#: characters of the response's end that are read (the original: "the longest answer in MATH-500 has 159")
WINDOW_CHARS = 300
#: the answer line; the last match in the window is the answer
ANSWER_PATTERN = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")
#: what a response without an answer line is compared as (never equal to a normalised gold in practice)
INVALID = "[INVALID]"

# Minerva's normalisation tables (Lewkowycz et al. 2022, Appendix D.1), in the order they are applied:
# first these (before, after) replacements ...
_REPLACE = (("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), ("\\ ", ""), (" ", ""), ("mbox", "text"),
            (",\\text{and}", ","), ("\\text{and}", ","), ("\\text{m}", "\\text{}"))
# ... then these substrings deleted (units, spacing macros, quotes)
_DELETE = ("square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots", "sue",
           "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals",
           "edges", "students", "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}",
           "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}",
           "\\;",           ",\\!", "{,}", '"', "\\dots")
# ... then these rewrites (pattern, replacement), in order
_REWRITE = tuple((re.compile(p), r) for p, r in (
    (r"(.*?)(\$)(.*?)(\$)(.*)", r"$\3$"),          # keep the first $...$ span
    (r"(\\text\{)(.*?)(\})", r"\2"),               # \text{x} -> x
    (r"(\\textbf\{)(.*?)(\})", r"\2"),
    (r"(\\overline\{)(.*?)(\})", r"\2"),
    (r"(\\boxed\{)(.*)(\})", r"\2"),               # a box written inside the answer line is unwrapped
    (r"(frac)([^{])(.)", r"frac{\2}{\3}"),        # \frac12 -> \frac{1}{2}
    (r"(sqrt)([^{])", r"sqrt{\2}"),               # \sqrt2 -> \sqrt{2}
))


def normalize_final_answer(answer: str) -> str:
    """Minerva's normalisation of a final answer (string -> string), the steps of the module docstring."""
    s = answer.split("=")[-1]
    for before, after in _REPLACE:
        s = s.replace(before, after)
    for gone in _DELETE:
        s = s.replace(gone, "")
    for pattern, repl in _REWRITE:
        s = pattern.sub(repl, s)
    s = s.replace("$", "")
    if s.replace(",", "").isdigit():               # 1,000 -> 1000 (digits and commas only)
        s = s.replace(",", "")
    return s.strip()


@dataclass(frozen=True)
class DapoScore:
    """score: +1.0 / -1.0; acc: the verdict; pred: the normalised answer (``INVALID`` when none was found);
    found: whether the window held an answer line."""
    score: float
    acc: bool
    pred: str
    found: bool


def math_dapo_score(response: str, gold) -> DapoScore:
    """The authors' verdict on one response: the last ``Answer:`` line of the last 300 characters, both sides
    normalised (``normalize_final_answer``), string equality, +1 / -1. ``gold`` is read as ``str(gold)``."""
    window = response[-WINDOW_CHARS:] if isinstance(response, str) else ""
    matches = ANSWER_PATTERN.findall(window)
    pred = normalize_final_answer(matches[-1] if matches else INVALID)
    acc = pred == normalize_final_answer(str(gold))
    return DapoScore(1.0 if acc else -1.0, acc, pred, bool(matches))
