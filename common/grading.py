"""Answer extraction and grading: benchmark scoring and the RL outcome reward.

Protocol (recorded; changing it changes every number):

* Only the final answer counts. In ``mode="boxed"`` that is the content of the LAST ``\\boxed{...}``
  (or ``\\fbox{...}``) of the response; a correct number written anywhere else is ignored. math-verify is
  run on the extracted answer wrapped as ``$...$``, never on the raw response (its lenient fallback would
  accept an unboxed number anywhere in the text).
* ``mode="answer_line"`` is DAPO's format: the last match of ``(?i)Answer\\s*:\\s*([^\\n]+)`` (DAPO's regex;
  unlike DAPO we do not first cut the response to its last 300 characters, and we compare with math-verify
  where DAPO compares normalized strings -- the same verdicts for DAPO-Math-17k, whose answers are all
  integers). ``"boxed_or_answer_line"`` takes the last box if there is one, else the answer line.
* Math golds are parsed as ``$gold$`` and compared with ``math_verify.verify(gold, pred)``. Shortcuts decided
  in the parent without math-verify, with math-verify's verdict (see ``_cheap_compare``; a test checks the
  agreement): both plain integers (``-?\\d+``) -> integer comparison (~1000x faster; RL on integer answers
  never reaches math-verify); identical up to ``\\left``/``\\right``, spacing and ``\\dfrac`` -> correct;
  ``x = <rhs>`` against a gold without ``=`` -> the rhs is compared; both plain numbers (integers, decimals,
  integer fractions) -> exact, or after rounding to 6 decimals when a decimal is involved.
* Multi-answer golds (OlympiadBench lists, or a ``list[str]`` gold) are joined with ``", "`` after removing
  ``$`` delimiters: math-verify parses ``a, b`` as the set {a, b}, so a prediction is correct iff it
  verifies against the whole set (order-free); giving only one of several answers is wrong.
* Multiple choice (``answer_type="mc"``): the letter A-J of the extracted answer (``\\text{}``, ``$``,
  parentheses stripped; ``"C"``, ``"(C)"``, ``"C. 42"``, ``"\\text{(C)}"`` all read as C) must equal the gold
  letter.
* Implausible answers are wrong with reason ``"implausible"`` (``Verdict.bound`` names the bound), decided in
  the parent before math-verify: extracted answers longer than ``max_answer_chars`` (default 1000), and,
  among those the shortcuts above do not decide, answers beyond a nesting, exponent, digit-run, numeric-power
  or factorial-operand bound that no gold of the shipped benchmarks comes near (``BOUNDS``, ``GOLD_MAXIMA``;
  a bound the gold itself exceeds is raised to the gold's measure). This is a linear-time string scan
  (``answer_shape``); towers of exponents, deep nesting and huge factorials would otherwise cost math-verify
  seconds or its whole timeout each.

Robustness: math-verify's own timeouts use SIGALRM, which only works in a main thread. ``Grader`` runs
math-verify in worker processes (fresh interpreters started with subprocess, talking over pipes, so
the caller's ``__main__`` is never re-imported and needs no guard). Each worker arms its own SIGALRM per item
(reason ``"timeout"``, worker survives) and the parent additionally kills a worker whose current item
exceeds ``timeout_s + kill_grace_s`` (e.g. stuck inside one C call), respawns it and marks that item
``"timeout"``. Workers run under an address-space limit (``max_memory_mb``), so a huge allocation becomes a
``MemoryError`` (reason ``"error"``) instead of swapping the machine. Grading never raises on any response
string; it raises ``ValueError`` only for caller bugs (length mismatch, unknown mode / answer type, a gold
that is not a string/number/list, a multiple-choice gold that is not a letter).

Throughput (``python -m bench.grading``): see the report in that module's output; integers are graded in
the parent at tens of thousands per second, LaTeX answers cost math-verify ~5-50 ms each (antlr parsing).
"""
from __future__ import annotations

import atexit
import logging
import math
import os
import re
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

__all__ = [
    "Verdict", "REASONS", "MODES", "ANSWER_TYPES", "BOUNDS", "GOLD_MAXIMA", "MAX_ANSWER_CHARS",
    "AnswerShape", "answer_shape", "implausible_bound",
    "extract_boxed", "extract_answer_line", "extract_answer", "normalize_gold", "mc_letter",
    "grade_one", "Grader", "get_grader", "close_default_graders",
]

REASONS = ("ok", "no_answer", "timeout", "error", "implausible")
MODES = ("boxed", "answer_line", "boxed_or_answer_line")
ANSWER_TYPES = ("math", "mc")


@dataclass(frozen=True)
class Verdict:
    """Result of grading one response.

    correct: the final answer matches the gold.
    extracted: the final answer as extracted from the response (None if there is none).
    reason: "ok" (graded normally, correct or not), "no_answer" (nothing extractable),
        "timeout" (grading exceeded its time budget; counted wrong), "error" (grading failed; counted wrong),
        "implausible" (beyond a plausibility bound, see ``BOUNDS``; counted wrong, never parsed).
    bound: for reason "implausible", the name of the bound exceeded (a key of ``BOUNDS``), else None.
    """

    correct: bool
    extracted: str | None
    reason: str = "ok"
    bound: str | None = None


# --------------------------------------------------------------------------------------------------
# extraction
# --------------------------------------------------------------------------------------------------
_BOX_CMDS = ("\\boxed", "\\fbox")


def _last_box_start(text: str) -> tuple[int, int] | None:
    """(start, end-of-command) of the last \\boxed / \\fbox command (not a prefix of a longer name)."""
    end = len(text)
    while True:
        best = -1
        best_cmd = ""
        for cmd in _BOX_CMDS:
            i = text.rfind(cmd, 0, end)
            if i > best:
                best, best_cmd = i, cmd
        if best < 0:
            return None
        j = best + len(best_cmd)
        if j < len(text) and text[j].isalpha():  # e.g. \boxedness: not the command
            end = best
            continue
        return best, j


def extract_boxed(text: str) -> str | None:
    """Content of the LAST ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``; None if there is none.

    Braces are matched with nesting (``\\boxed{\\frac{1}{2}}`` -> ``\\frac{1}{2}``); escaped braces ``\\{``
    ``\\}`` do not count. ``\\boxed 5`` (no braces) gives ``5``. If the last box is unterminated (a truncated
    response) the result is None: the final answer is what counts, and it is missing. Runs in linear time.
    """
    if not isinstance(text, str):
        return None
    loc = _last_box_start(text)
    if loc is None:
        return None
    _, j = loc
    n = len(text)
    while j < n and text[j] in " \t":
        j += 1
    if j >= n:
        return None
    if text[j] != "{":
        m = re.match(r"[^\s$]+", text[j:j + 1000])
        return m.group(0) if m else None
    depth = 0
    k = j
    while k < n:
        c = text[k]
        if c == "\\":
            k += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[j + 1:k].strip()
        k += 1
    return None


_ANSWER_LINE_RE = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")


def extract_answer_line(text: str) -> str | None:
    """DAPO format: the last ``Answer: ...`` (regex ``(?i)Answer\\s*:\\s*([^\\n]+)``), or None.

    A box inside the line is unwrapped; a trailing period and surrounding ``$`` are stripped.
    """
    if not isinstance(text, str):
        return None
    last = None
    for last in _ANSWER_LINE_RE.finditer(text):
        pass
    if last is None:
        return None
    ans = last.group(1).strip()
    if _last_box_start(ans) is not None:
        boxed = extract_boxed(ans)
        if boxed is not None:
            ans = boxed
    ans = ans.strip().rstrip(" .")
    if len(ans) >= 2 and ans.startswith("$") and ans.endswith("$"):
        ans = ans.strip("$").strip()
    return ans or None


def extract_answer(text: str, mode: str = "boxed") -> str | None:
    """Final answer of a response. mode: "boxed" | "answer_line" | "boxed_or_answer_line"."""
    if mode == "boxed":
        return extract_boxed(text)
    if mode == "answer_line":
        return extract_answer_line(text)
    if mode == "boxed_or_answer_line":
        b = extract_boxed(text)
        return b if b is not None else extract_answer_line(text)
    raise ValueError(f"unknown extraction mode {mode!r}; expected one of {MODES}")


# --------------------------------------------------------------------------------------------------
# normalisation and the comparisons that need no math-verify
# --------------------------------------------------------------------------------------------------
_INT_RE = re.compile(r"-?\d+")
_FLOAT_INT_RE = re.compile(r"(-?\d+)\.0*")


def _strip_dollars(s: str) -> str:
    return s.replace("\\$", "").replace("$", "").strip()


def normalize_gold(gold) -> str:
    """Gold answer as one string: ``$`` delimiters removed, ``"27.0"`` -> ``"27"``, lists joined with ", ".

    A list/tuple gold (several answers, e.g. OlympiadBench) becomes ``"a, b"``, which math-verify reads as
    the set {a, b}. Numbers are accepted (``27.0`` -> ``"27"``).
    """
    if isinstance(gold, (list, tuple)):
        parts = [normalize_gold(g) for g in gold]
        return ", ".join(p for p in parts if p)
    if isinstance(gold, bool) or gold is None:
        raise ValueError(f"gold answer must be a string, number or list of them, got {gold!r}")
    if isinstance(gold, float):
        if math.isfinite(gold) and gold == int(gold):
            return str(int(gold))
        return repr(gold)
    if isinstance(gold, int):
        return str(gold)
    if not isinstance(gold, str):
        raise ValueError(f"gold answer must be a string, number or list of them, got {type(gold).__name__}")
    g = _strip_dollars(gold)
    m = _FLOAT_INT_RE.fullmatch(g)
    if m:
        g = m.group(1)
    return g


def _int_key(s: str) -> str:
    neg = s.startswith("-")
    digits = s[1:] if neg else s
    digits = digits.lstrip("0") or "0"
    return digits if digits == "0" or not neg else "-" + digits


def _int_fast_path(extracted: str, gold: str) -> bool | None:
    """Integer comparison when both are plain integers, else None (equivalent to int(a) == int(b))."""
    if _INT_RE.fullmatch(extracted) and _INT_RE.fullmatch(gold):
        return _int_key(extracted) == _int_key(gold)
    return None


_SPACING_RE = re.compile(r"\\[,;:! ]|\\displaystyle(?![A-Za-z])|\\(?:left|right)(?![A-Za-z])")
_DFRAC_RE = re.compile(r"\\[dt]frac(?![A-Za-z])")
_WS_RE = re.compile(r"\s+")
_LOOSE_SPACE_RE = re.compile(r"(?<![A-Za-z0-9]) | (?![A-Za-z0-9])")


def _canon(s: str) -> str:
    """Meaning-preserving LaTeX canonical form, used only to accept string-identical answers quickly:
    \\left/\\right, spacing commands and \\displaystyle removed, \\dfrac/\\tfrac -> \\frac, and spaces removed
    except between two letters/digits (so ``\\cdot x`` keeps its space)."""
    s = _DFRAC_RE.sub(r"\\frac", _SPACING_RE.sub("", s))
    return _LOOSE_SPACE_RE.sub("", _WS_RE.sub(" ", s)).strip()


_NUMBER_RE = re.compile(
    r"(?P<sign>-?)(?:(?P<int>\d{1,60})|(?P<dec>\d{0,60}\.\d{1,60})"
    r"|\\frac\{(?P<fn>-?\d{1,60})\}\{(?P<fd>\d{1,60})\}|\\frac(?P<sn>\d)(?P<sd>\d)|(?P<n>\d{1,60})/(?P<d>\d{1,60}))")


def _as_number(s: str):
    """(Fraction, is_decimal) for an integer, a plain decimal, or an integer fraction (``-\\frac{a}{b}``,
    ``\\frac12``, ``a/b``); None for anything else (including a zero denominator)."""
    from fractions import Fraction

    m = _NUMBER_RE.fullmatch(s)
    if not m:
        return None
    sign = -1 if m.group("sign") else 1
    if m.group("int") is not None:
        return sign * Fraction(int(m.group("int"))), False
    if m.group("dec") is not None:
        return sign * Fraction(m.group("dec")), True
    num, den = ((m.group("fn"), m.group("fd")) if m.group("fn") is not None else
                (m.group("sn"), m.group("sd")) if m.group("sn") is not None else (m.group("n"), m.group("d")))
    if int(den) == 0:
        return None
    return sign * Fraction(int(num), int(den)), False


def _numbers_equal(a, b, float_rounding: int = 6) -> bool:
    """math-verify's rule for two numbers: if either is a decimal, compare after rounding to 6 decimals,
    else compare exactly."""
    (x, xdec), (y, ydec) = a, b
    if xdec or ydec:
        return round(x, float_rounding) == round(y, float_rounding)
    return x == y


_ASSIGN_RE = re.compile(r"[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?=(?P<rhs>[^=<>]+)")


def _cheap_compare(extracted: str, gold: str) -> bool | None:
    """Decide without math-verify when that is safe, else None.

    * both plain integers: integer comparison (same result as math-verify);
    * identical after ``_canon``: correct (math-verify's string comparison / normalization accepts these);
    * an assignment ``x = <rhs>`` against a gold without ``=``: the rhs is compared (as math-verify does);
    * both plain numbers (integers, decimals, integer fractions): math-verify's numeric rule (exact for
      rationals, equality after rounding to 6 decimals when a decimal is involved).
    """
    fast = _int_fast_path(extracted, gold)
    if fast is not None:
        return fast
    if extracted == gold:
        return True
    ce, cg = _canon(extracted), _canon(gold)
    if ce == cg and ce:
        return True
    if "=" not in cg:  # "x = 5" against a gold that is not an equation: math-verify compares the rhs
        m = _ASSIGN_RE.fullmatch(ce)
        if m:
            ce = m.group("rhs")
            if ce == cg:
                return True
    ne, ng = _as_number(ce), _as_number(cg)
    if ne is not None and ng is not None:
        return _numbers_equal(ne, ng)
    return None


# --------------------------------------------------------------------------------------------------
# plausibility pre-check: answers no benchmark gold comes near are wrong without math-verify
# --------------------------------------------------------------------------------------------------
#: Maxima over the gold answers of every shipped benchmark (1,930 golds of eval/data/benchmarks, read through
#: the registry; ``bench.grading.shipped_gold_maxima()`` measures them and prints them, a test checks that
#: these still hold): length 210 characters (minerva_math), nesting 4 (minerva_math), exponents 7
#: (``x^8 + x^7 + ... + x^2 + x + 1``), exponent depth 1 (no gold has an exponent inside an exponent), digit
#: run 8 (``10112369``), numeric power 10^303.7 (``2^{1009}``), combinatorial operand 10^2 (``100!``).
GOLD_MAXIMA = {"length": 210, "nesting": 4, "exponents": 7, "exponent_depth": 1, "digit_run": 8,
               "power_log10": 303.74, "operand_log10": 2.0}
#: Plausibility bounds (an answer above one is wrong with reason "implausible"), each well above its gold maximum
#: (length 4.8x, nesting 2.5x, exponents 5.7x, exponent depth 3x, digit run 6x and above DAPO-Math-17k's 23,
#: numeric power 33x in digits, combinatorial operand 1000x in value) and at or below where math-verify gets slow
#: (10 nested braces cost it ~0.7 s, 26 parentheses ~1.9 s, 51 braces more than 2 s; ``(10^6)!`` ~4 s;
#: ``10^{10^{10^{10}}}`` never finishes). Measures:
#:   length: characters of the extracted answer (the Grader's ``max_answer_chars`` overrides this one);
#:   nesting: depth of (), [], {} (escaped or not) and \left ... \right pairs;
#:   exponents: number of ``^`` / ``**``;  exponent_depth: exponents inside exponents (``x^2`` is 1,
#:   ``a^{b^{c}}`` and the chain ``a^b^c`` are 2);  digit_run: the longest run of digits;
#:   power_log10: log10 of the largest power with a numeric base and exponent (towers and factorials evaluated
#:   in log space: ``10^{10^{10}}`` is 10^10, ``2^{100!}`` about 10^157);  operand_log10: log10 of the largest
#:   numeric operand of ``!``, ``\binom`` and of the limits of ``\sum`` / ``\prod`` (``(10^6)!`` is 6).
BOUNDS = {"length": 1000, "nesting": 10, "exponents": 40, "exponent_depth": 3, "digit_run": 50,
          "power_log10": 10_000.0, "operand_log10": 5.0}
MAX_ANSWER_CHARS = BOUNDS["length"]


@dataclass(frozen=True)
class AnswerShape:
    """Size measures of an answer string, one per key of ``BOUNDS`` (see there for their meaning)."""

    length: int
    nesting: int
    exponents: int
    exponent_depth: int
    digit_run: int
    power_log10: float
    operand_log10: float


_SHAPE_TOKEN_RE = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+|\\[A-Za-z]+|\\.|\*\*|\s+|.", re.S)  # ASCII digits
_SHAPE_OPEN = frozenset("([{") | {"\\{"}
_SHAPE_CLOSE = frozenset(")]}") | {"\\}"}
_BINOM_CMDS = frozenset({"\\binom", "\\dbinom", "\\tbinom"})
_BIGOP_CMDS = frozenset({"\\sum", "\\prod"})


class _Frame:
    """One bracket group of ``answer_shape``'s scan. ``last``: magnitude (log10, None if not a plain number)
    of the atom that ended just before, ``has_last`` whether one did (the base of a following ``^``);
    ``pending``: (base magnitude, level) of a ``^`` awaiting its exponent; ``items``/``item``/``plain``: the
    group's content is a single number (its magnitude, for towers and operands) while ``plain`` holds."""

    __slots__ = ("level", "pending", "last", "has_last", "last_exp_level", "last_was_exp", "items", "item",
                 "plain", "operands", "bigop", "neg")

    def __init__(self, level: int):
        self.level = level
        self.pending = None
        self.last = None
        self.has_last = False
        self.last_exp_level = 0
        self.last_was_exp = False
        self.items = 0
        self.item = None
        self.plain = True
        self.operands = 0
        self.bigop = False
        self.neg = False

    def magnitude(self):
        return self.item if self.plain and self.items == 1 and not self.neg else None


def _literal_log10(tok: str) -> float:
    """log10 of a non-negative decimal literal (from its digit count: no big-int conversion); -1 for < 1."""
    ip = tok.split(".", 1)[0].lstrip("0")
    if not ip:
        return -1.0
    return len(ip) - 1 + math.log10(float(ip[:15]) / 10 ** (min(len(ip), 15) - 1))


def _power_log10(base: float, exp: float) -> float:
    """log10(a^b) from log10 a and log10 b (b > 0); |a| <= 1 gives 0, overflow gives inf."""
    if base <= 0:
        return 0.0
    if exp > 300:
        return math.inf
    return base * 10.0 ** exp


def _factorial_log10(n: float) -> float:
    """log10(m!) for m = 10^n (Stirling via lgamma); overflow gives inf."""
    if n > 300:
        return math.inf
    return math.lgamma(10.0 ** n + 1) / math.log(10)


def answer_shape(s: str) -> AnswerShape:
    """Measure ``s`` for the plausibility bounds in one left-to-right pass over its tokens (linear time,
    pure Python; no parsing, no big numbers: magnitudes are tracked as log10 floats)."""
    frames = [_Frame(0)]
    nesting = exponents = exp_depth = digit_run = 0
    power = operand = -math.inf
    skip_delim = False

    def atom(f: _Frame, mag) -> None:  # an atom (number, letter, command or closed group) ends in f
        nonlocal power, operand
        if f.operands:
            f.operands -= 1
            if mag is not None:
                operand = max(operand, mag)
        if f.pending is not None:  # it is the exponent of a pending ^
            base, level = f.pending
            f.pending = None
            val = None
            if base is not None and mag is not None:
                val = _power_log10(base, mag)
                power = max(power, val)
            f.item = val
            f.last, f.has_last, f.last_exp_level, f.last_was_exp = val, True, level, True
            return
        f.items += 1
        f.item = mag
        f.last, f.has_last, f.last_was_exp = mag, True, False

    for m in _SHAPE_TOKEN_RE.finditer(s):
        tok = m.group(0)
        if tok.isspace():
            continue
        f = frames[-1]
        if skip_delim:  # the delimiter after \left / \right is part of that bracket
            skip_delim = False
            continue
        if f.bigop and not f.operands and tok not in ("_", "^", "**"):
            f.bigop = False
        c = tok[0]
        if "0" <= c <= "9" or (c == "." and len(tok) > 1):
            digit_run = max(digit_run, *(len(p) for p in tok.split(".")))
            atom(f, _literal_log10(tok))
        elif tok in ("^", "**"):
            exponents += 1
            level = (f.last_exp_level if f.last_was_exp else f.level) + 1
            exp_depth = max(exp_depth, level)
            f.pending = (f.last if f.has_last else None, level)
            f.has_last = f.last_was_exp = False
            if f.bigop:
                f.operands = 1
        elif tok in _SHAPE_OPEN or tok == "\\left":
            child = _Frame(f.pending[1] if f.pending is not None else f.level)
            frames.append(child)
            nesting = max(nesting, len(frames) - 1)
            skip_delim = tok == "\\left"
        elif tok in _SHAPE_CLOSE or tok == "\\right":
            skip_delim = tok == "\\right"
            if len(frames) > 1:  # an unmatched closer is ignored
                child = frames.pop()
                atom(frames[-1], child.magnitude())
        elif tok == "_":
            f.has_last = f.last_was_exp = False
            if f.bigop:
                f.operands = 1
        elif tok == "!":  # n! is a number again (for a power it is the base or exponent of), of log10(n!)
            if f.has_last and f.last is not None:
                operand = max(operand, f.last)
                f.last = f.item = _factorial_log10(f.last)
            else:
                f.last, f.plain = None, False
            f.last_was_exp = False
        elif tok in _BINOM_CMDS or tok in _BIGOP_CMDS:
            f.plain, f.has_last, f.last_was_exp = False, False, False
            if tok in _BINOM_CMDS:
                f.operands = 2
            else:
                f.bigop = True
        elif c.isalpha() or (c == "\\" and tok[1:].isalpha()):  # a letter or a command: a non-numeric atom
            f.plain = False
            atom(f, None)
        elif tok in ("-", "+") and f.items == 0 and f.pending is None:  # a sign before the content
            f.neg = f.neg or tok == "-"
            f.has_last = f.last_was_exp = False
        else:  # an operator or punctuation: breaks the current term
            f.plain = False
            f.pending = None
            f.has_last = f.last_was_exp = False
    # rounded: 10^{5} is exactly 5, not 5.000000000000001 (its exponent went through 10 ** log10(5))
    return AnswerShape(len(s), nesting, exponents, exp_depth, digit_run, round(max(power, 0.0), 9),
                       round(max(operand, 0.0), 9))


@lru_cache(maxsize=8192)
def _gold_shape(gold: str) -> AnswerShape:
    return answer_shape(gold)


def implausible_bound(answer: str, gold: str = "", max_chars: int | None = None) -> str | None:
    """The first bound of ``BOUNDS`` that ``answer`` exceeds (None if it exceeds none): such an answer cannot be
    a benchmark answer and is wrong without being parsed.

    Each bound is raised to the gold's own measure where the gold exceeds it, so an answer no more extreme
    than its gold is never rejected (golds outside the shipped benchmarks, e.g. a long toy-world answer).
    max_chars replaces the length bound (``Grader(max_answer_chars=...)``). The length is checked first, so
    a 100 kB answer is not scanned; the rest is one linear pass (``answer_shape``).
    """
    limit = BOUNDS["length"] if max_chars is None else max_chars
    if len(answer) > max(limit, len(gold)):
        return "length"
    a, g = answer_shape(answer), _gold_shape(gold)
    for name, limit in BOUNDS.items():
        if name != "length" and getattr(a, name) > max(limit, getattr(g, name)):
            return name
    return None


_MC_WRAP_RE = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mathit|textit|bf|rm)\s*\{([^{}]*)\}")
_MC_RE = re.compile(r"[\(\[\{\s]*([A-J])(?:[\)\]\}\.:,\s]|$)")
_MC_PREFIX_RE = re.compile(r"(?i)^\s*(?:the\s+)?(?:correct\s+)?(?:answer|option|choice)\s*(?:is)?\s*[:\-]?\s*")


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


# --------------------------------------------------------------------------------------------------
# math-verify core (runs in workers, or in-process with num_workers=0)
# --------------------------------------------------------------------------------------------------
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
    """Raised by SIGALRM inside a grading call (BaseException: math-verify's `except Exception` can't eat it)."""


#: after the first alarm the timer repeats at this interval: code that swallows the raise (a bare `except:` deep
#: in sympy) gets it again, so a timed-out grading call always ends
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


def _grade_inprocess(tasks: Sequence[tuple[str, str, str]], timeout_s: float | None) -> list[tuple[bool, str]]:
    """Grade (extracted, gold, answer_type) tasks here. Timeouts only when in the main thread (SIGALRM)."""
    if timeout_s and _in_main_thread() and hasattr(signal, "SIGALRM"):
        old = signal.signal(signal.SIGALRM, _on_alarm)
        try:
            return [_grade_guarded(e, g, t, timeout_s) for e, g, t in tasks]
        finally:
            signal.signal(signal.SIGALRM, old)
    return [_grade_guarded(e, g, t, None) for e, g, t in tasks]


def _prepare(response, gold, answer_type: str, mode: str, max_answer_chars: int):
    """Parent-side work: extraction and cheap comparisons.

    Returns (Verdict, None) when the item is decided here, else (extracted, (clean_answer, gold, type)).
    Order: over-long answers are rejected before anything else; the shortcuts of ``_cheap_compare`` come
    before the other plausibility bounds, so an answer equal to its gold is never rejected.
    """
    if answer_type not in ANSWER_TYPES:
        raise ValueError(f"unknown answer_type {answer_type!r}; expected one of {ANSWER_TYPES}")
    if mode not in MODES:
        raise ValueError(f"unknown extraction mode {mode!r}; expected one of {MODES}")
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
              timeout_s: float | None = 5.0, max_answer_chars: int = MAX_ANSWER_CHARS) -> Verdict:
    """Grade one response in this process (see the module docstring for the protocol).

    The timeout uses SIGALRM and is therefore only enforced when called from the main thread; for untrusted
    input at scale use ``Grader`` (worker processes, a hard kill from the parent).
    """
    verdict, work = _prepare(response, gold, answer_type, mode, max_answer_chars)
    if verdict is not None:
        return verdict
    extracted, task = work
    ok, reason = _grade_inprocess([task], timeout_s)[0]
    return Verdict(ok, extracted, reason)


# --------------------------------------------------------------------------------------------------
# worker processes
# --------------------------------------------------------------------------------------------------
def _set_pdeathsig() -> None:
    """Linux: have the kernel SIGKILL this worker when its parent dies (best effort)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _worker_main(read_fd: int, write_fd: int, timeout_s: float, max_memory_mb: int | None) -> None:
    """Worker loop: receive lists of (item_id, answer, gold, type), send (item_id, correct, reason) per item.

    Runs in a fresh interpreter started by ``Grader`` (``python -c ...``), so it never re-imports the
    caller's ``__main__`` (no ``if __name__ == "__main__"`` guard needed by users).
    """
    from multiprocessing.connection import Connection

    _set_pdeathsig()
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and kills us
    except Exception:
        pass
    if max_memory_mb:
        try:
            import resource

            lim = int(max_memory_mb) << 20
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            if hard != resource.RLIM_INFINITY:
                lim = min(lim, hard)
            resource.setrlimit(resource.RLIMIT_AS, (lim, hard))
        except Exception:
            pass
    rconn = Connection(read_fd, writable=False)
    wconn = Connection(write_fd, readable=False)
    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, _on_alarm)
    _grade_guarded("2\\sqrt{3}", "\\sqrt{12}", "math", 60.0)  # import math-verify, warm its caches
    try:
        wconn.send(("ready", os.getpid()))
        while True:
            msg = rconn.recv()
            if msg is None:
                return
            for iid, ans, gold, atype in msg:
                ok, reason = _grade_guarded(ans, gold, atype, timeout_s)
                wconn.send((iid, ok, reason))
    except (BrokenPipeError, EOFError, OSError):
        return


def _worker_entry() -> None:
    """``python -c 'from common.grading import _worker_entry; _worker_entry()' RFD WFD TIMEOUT MEM_MB``."""
    import sys

    rfd, wfd, t, mem = sys.argv[1:5]
    _worker_main(int(rfd), int(wfd), float(t) or None, int(mem) or None)


class _Worker:
    __slots__ = ("proc", "send_conn", "conn", "ready", "chunk", "pos", "t_last", "t_spawn")

    def __init__(self, proc, send_conn, recv_conn):
        self.proc = proc  # subprocess.Popen
        self.send_conn = send_conn
        self.conn = recv_conn
        self.ready = False
        self.chunk = None  # list of task ids in flight
        self.pos = 0  # index in chunk of the item being graded
        self.t_last = 0.0  # when the current item started (last progress)
        self.t_spawn = time.monotonic()


_PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _spawn_worker(timeout_s: float, max_memory_mb: int | None) -> _Worker:
    import subprocess
    import sys
    from multiprocessing.connection import Connection

    p2c_r, p2c_w = os.pipe()
    c2p_r, c2p_w = os.pipe()
    env = dict(os.environ)
    env["PYTHONPATH"] = _PKG_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    mod = __name__ if __name__ != "__main__" else "common.grading"
    cmd = [sys.executable, "-c", f"from {mod} import _worker_entry; _worker_entry()",
           str(p2c_r), str(c2p_w), repr(float(timeout_s)), str(int(max_memory_mb or 0))]
    try:
        proc = subprocess.Popen(cmd, pass_fds=(p2c_r, c2p_w), stdin=subprocess.DEVNULL, env=env,
                                cwd=_PKG_ROOT)
    finally:
        os.close(p2c_r)
        os.close(c2p_w)
    return _Worker(proc, Connection(p2c_w, readable=False), Connection(c2p_r, writable=False))


class Grader:
    """Batch grader with worker processes, per-item timeouts, and in-parent fast paths.

    >>> with Grader(num_workers=2, timeout_s=5.0) as g:
    ...     g.grade(["so \\\\boxed{\\\\frac12}"], ["0.5"])
    [Verdict(correct=True, extracted='\\\\frac12', reason='ok')]

    Args:
        num_workers: worker processes; 0 grades in-process (timeouts only in the main thread; tests/debug).
        timeout_s: per-item time budget. A worker's own SIGALRM stops the item at ``timeout_s``; the parent
            kills and replaces a worker whose item is still running at ``timeout_s + kill_grace_s``.
        mode: default extraction mode ("boxed" | "answer_line" | "boxed_or_answer_line").
        chunk_size: max items sent to a worker at once (throughput; smaller chunks balance better).
        max_answer_chars: longer extracted answers are wrong with reason "implausible" (bound "length"; never
            parsed). The other plausibility bounds are ``BOUNDS``.
        max_memory_mb: address-space limit per worker (None: no limit).
        kill_grace_s: extra time after ``timeout_s`` before the parent kills a worker.
        startup_timeout_s: a worker that is not ready by then is replaced (RuntimeError after 4 failures).
        soft_timeout: arm SIGALRM in the workers (default). False leaves only the parent's kill (tests).

    Items decided without math-verify (no answer, integer fast path, multiple choice, implausible) are graded in
    the parent; identical (answer, gold) pairs within one call are graded once. Workers start lazily on the
    first call that needs them and are reused; call ``close()`` (or use ``with``) to stop them.
    """

    def __init__(self, num_workers: int = 2, timeout_s: float = 5.0, mode: str = "boxed", *,
                 chunk_size: int = 32, max_answer_chars: int = MAX_ANSWER_CHARS, max_memory_mb: int | None = 4096,
                 kill_grace_s: float = 1.0, startup_timeout_s: float = 120.0, soft_timeout: bool = True):
        if mode not in MODES:
            raise ValueError(f"unknown extraction mode {mode!r}; expected one of {MODES}")
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        if not timeout_s or timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.num_workers = int(num_workers)
        self.timeout_s = float(timeout_s)
        self.mode = mode
        self.chunk_size = max(1, int(chunk_size))
        self.max_answer_chars = int(max_answer_chars)
        self.max_memory_mb = max_memory_mb
        self.kill_grace_s = float(kill_grace_s)
        self.startup_timeout_s = float(startup_timeout_s)
        self.soft_timeout = bool(soft_timeout)
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._closed = False
        #: counters: items graded, decided in the parent, of those rejected as implausible, sent to math-verify
        #: (unique), timeouts, worker kills and respawns, and the longest time one item took in a worker as seen
        #: by the parent (seconds)
        self.stats = {"items": 0, "parent": 0, "implausible": 0, "pool": 0, "timeouts": 0, "kills": 0,
                      "respawns": 0, "max_item_s": 0.0}

    # -- lifecycle --------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Grader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def close(self) -> None:
        """Stop the worker processes (idempotent). The grader cannot be used afterwards."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        for w in self._workers:
            self._stop_worker(w, graceful=True)
        self._workers = []

    def _spawn(self) -> _Worker:
        return _spawn_worker(self.timeout_s if self.soft_timeout else 0.0, self.max_memory_mb)

    @staticmethod
    def _stop_worker(w: _Worker, graceful: bool = False) -> None:
        try:
            if graceful and w.proc.poll() is None and w.chunk is None:
                try:
                    w.send_conn.send(None)
                    w.proc.wait(timeout=1.0)
                except Exception:
                    pass
            if w.proc.poll() is None:
                w.proc.kill()
            w.proc.wait(timeout=5.0)
        except Exception:
            pass
        for c in (w.send_conn, w.conn):
            try:
                c.close()
            except Exception:
                pass

    # -- grading ----------------------------------------------------------------------------------
    def grade(self, responses: Sequence[str], golds: Sequence, answer_types: Sequence[str] | str = "math",
              mode: str | None = None) -> list[Verdict]:
        """Grade ``responses[i]`` against ``golds[i]``; returns one Verdict per response, in order.

        answer_types: one type for all ("math" | "mc") or one per response. Never raises because of a
        response's content; raises ValueError on mismatched lengths or an unknown mode / answer type.
        """
        if self._closed:
            raise RuntimeError("Grader is closed")
        mode = self.mode if mode is None else mode
        if mode not in MODES:
            raise ValueError(f"unknown extraction mode {mode!r}; expected one of {MODES}")
        responses = list(responses)
        golds = list(golds)
        n = len(responses)
        if len(golds) != n:
            raise ValueError(f"responses and golds differ in length: {n} responses, {len(golds)} golds")
        if isinstance(answer_types, str):
            types = [answer_types] * n
        else:
            types = list(answer_types)
            if len(types) != n:
                raise ValueError(f"answer_types has {len(types)} entries for {n} responses")
        for t in set(types):
            if t not in ANSWER_TYPES:
                raise ValueError(f"unknown answer_type {t!r}; expected one of {ANSWER_TYPES}")

        out: list[Verdict | None] = [None] * n
        extracted_of: dict[int, str] = {}
        uniq: dict[tuple[str, str, str], int] = {}
        tasks: list[tuple[str, str, str]] = []
        users: list[list[int]] = []
        for i in range(n):
            verdict, work = _prepare(responses[i], golds[i], types[i], mode, self.max_answer_chars)
            if verdict is not None:
                out[i] = verdict
                self.stats["implausible"] += verdict.reason == "implausible"
                continue
            extracted, task = work
            extracted_of[i] = extracted
            k = uniq.get(task)
            if k is None:
                k = uniq[task] = len(tasks)
                tasks.append(task)
                users.append([])
            users[k].append(i)
        self.stats["items"] += n
        self.stats["parent"] += n - len(extracted_of)
        self.stats["pool"] += len(tasks)
        if tasks:
            with self._lock:
                if self.num_workers == 0:
                    results = _grade_inprocess(tasks, self.timeout_s)
                else:
                    results = self._grade_pool(tasks)
            for k, (ok, reason) in enumerate(results):
                if reason == "timeout":
                    self.stats["timeouts"] += 1
                for i in users[k]:
                    out[i] = Verdict(bool(ok), extracted_of[i], reason)
        return out  # type: ignore[return-value]

    def _grade_pool(self, tasks: list[tuple[str, str, str]]) -> list[tuple[bool, str]]:
        results: list[tuple[bool, str] | None] = [None] * len(tasks)
        pending = deque(range(len(tasks)))
        for idx, w in enumerate(self._workers):
            if w.chunk is not None or w.proc.poll() is not None:  # left over from an interrupted call, or dead
                self._stop_worker(w)
                self._workers[idx] = self._spawn()
                self.stats["respawns"] += 1
        while len(self._workers) < self.num_workers:
            self._workers.append(self._spawn())
        try:
            return self._pool_loop(tasks, results, pending)
        except BaseException:
            # interrupted (Ctrl-C) or failed: workers with work in flight would answer stale items later
            busy = [w for w in self._workers if w.chunk is not None]
            for w in busy:
                self._stop_worker(w)
            self._workers = [w for w in self._workers if w.chunk is None]  # refilled by the next call
            raise

    def _pool_loop(self, tasks, results, pending) -> list[tuple[bool, str]]:
        from multiprocessing.connection import wait

        # chunk so that every worker gets several chunks (load balance), capped by chunk_size
        cs = max(1, min(self.chunk_size, math.ceil(len(tasks) / (4 * self.num_workers))))
        hard = self.timeout_s + self.kill_grace_s
        startup_failures = 0
        remaining = len(tasks)

        def replace(idx: int, current_reason: str | None) -> None:
            nonlocal remaining
            w = self._workers[idx]
            if w.chunk is not None:
                if current_reason is not None and w.pos < len(w.chunk):
                    results[w.chunk[w.pos]] = (False, current_reason)
                    remaining -= 1
                    pending.extendleft(reversed(w.chunk[w.pos + 1:]))
                else:
                    pending.extendleft(reversed(w.chunk[w.pos:]))
                w.chunk = None
            self._stop_worker(w)
            self._workers[idx] = self._spawn()
            self.stats["respawns"] += 1

        while remaining > 0:
            now = time.monotonic()
            for idx in range(len(self._workers)):
                w = self._workers[idx]
                if w.ready and w.chunk is None and pending:
                    chunk = [pending.popleft() for _ in range(min(cs, len(pending)))]
                    try:
                        w.send_conn.send([(iid,) + tasks[iid] for iid in chunk])
                    except Exception:  # the worker is gone: put the chunk back, start another
                        pending.extendleft(reversed(chunk))
                        replace(idx, None)
                        continue
                    w.chunk, w.pos, w.t_last = chunk, 0, now
            waiting = [w for w in self._workers if (not w.ready) or w.chunk is not None]
            if not waiting:  # defensive: nothing in flight but items remain -> respawn all
                for idx in range(len(self._workers)):
                    replace(idx, None)
                continue
            deadline = min((w.t_last + hard) if w.ready else (w.t_spawn + self.startup_timeout_s)
                           for w in waiting)
            ready_conns = wait([w.conn for w in waiting], timeout=max(0.0, deadline - time.monotonic()))
            by_conn = {id(w.conn): idx for idx, w in enumerate(self._workers)}
            for conn in ready_conns:
                idx = by_conn.get(id(conn))
                if idx is None:
                    continue
                w = self._workers[idx]
                try:
                    # drain everything available on this pipe
                    while True:
                        msg = conn.recv()
                        if msg[0] == "ready":
                            w.ready = True
                            startup_failures = 0
                        else:
                            iid, ok, reason = msg
                            if w.chunk is not None and w.pos < len(w.chunk) and w.chunk[w.pos] == iid:
                                results[iid] = (bool(ok), reason)
                                remaining -= 1
                                w.pos += 1
                                t_now = time.monotonic()
                                self.stats["max_item_s"] = max(self.stats["max_item_s"], t_now - w.t_last)
                                w.t_last = t_now
                                if w.pos >= len(w.chunk):
                                    w.chunk = None
                        if not conn.poll():
                            break
                except (EOFError, OSError):
                    # the worker died (e.g. killed by the OOM killer): its current item is an error
                    if not w.ready:
                        startup_failures += 1
                        if startup_failures > 3:
                            raise RuntimeError("grading workers fail to start (died 4 times in a row)")
                    replace(idx, "error" if w.ready else None)
            now = time.monotonic()
            for idx, w in enumerate(self._workers):
                if w.ready and w.chunk is not None and now - w.t_last > hard:
                    if w.conn.poll():
                        continue  # a result arrived meanwhile; read it next round
                    self.stats["kills"] += 1
                    self.stats["max_item_s"] = max(self.stats["max_item_s"], now - w.t_last)
                    replace(idx, "timeout")
                elif not w.ready and now - w.t_spawn > self.startup_timeout_s:
                    startup_failures += 1
                    if startup_failures > 3:
                        raise RuntimeError(f"grading workers did not start within {self.startup_timeout_s}s")
                    replace(idx, None)
        return results  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------------
# module-level default graders
# --------------------------------------------------------------------------------------------------
_DEFAULT_GRADERS: dict[tuple, Grader] = {}
_DEFAULT_LOCK = threading.Lock()


def get_grader(num_workers: int = 2, timeout_s: float = 5.0, mode: str = "boxed") -> Grader:
    """A shared Grader for this configuration, created on first use and closed at interpreter exit."""
    key = (int(num_workers), float(timeout_s), mode)
    with _DEFAULT_LOCK:
        g = _DEFAULT_GRADERS.get(key)
        if g is None or g.closed:
            g = _DEFAULT_GRADERS[key] = Grader(num_workers=num_workers, timeout_s=timeout_s, mode=mode)
        return g


def close_default_graders() -> None:
    """Close every grader made by get_grader (also registered with atexit)."""
    with _DEFAULT_LOCK:
        for g in _DEFAULT_GRADERS.values():
            g.close()
        _DEFAULT_GRADERS.clear()


atexit.register(close_default_graders)
