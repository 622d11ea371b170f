"""The plausibility bound: answers no benchmark gold comes near are wrong without math-verify.

Answers beyond a length, nesting, exponent, digit-run, numeric-power or factorial-operand bound (``BOUNDS``,
chosen from the shipped golds' ``GOLD_MAXIMA``; a bound the gold itself exceeds is raised to the gold's
measure) are rejected in the parent with reason ``"implausible"``. The measures come from one linear-time
string scan (``answer_shape``): towers of exponents, deep nesting and huge factorials would otherwise cost
math-verify seconds or its whole timeout each.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["AnswerShape", "BOUNDS", "GOLD_MAXIMA", "MAX_ANSWER_CHARS", "answer_shape", "implausible_bound"]

#: Maxima over the gold answers of every shipped benchmark (1,930 golds of common/data/benchmarks, read
#: through the registry; ``bench.grading.shipped_gold_maxima()`` measures them and prints them, a test checks
#: that these still hold): length 210 characters (minerva_math), nesting 4 (minerva_math), exponents 7
#: (``x^8 + x^7 + ... + x^2 + x + 1``), exponent depth 1 (no gold has an exponent inside an exponent), digit
#: run 8 (``10112369``), numeric power 10^303.7 (``2^{1009}``), combinatorial operand 10^2 (``100!``).
GOLD_MAXIMA = {"length": 210, "nesting": 4, "exponents": 7, "exponent_depth": 1, "digit_run": 8,
               "power_log10": 303.74, "operand_log10": 2.0}
#: Plausibility bounds (an answer above one is wrong with reason "implausible"), each well above its gold
#: maximum (length 4.8x, nesting 2.5x, exponents 5.7x, exponent depth 3x, digit run 6x and above
#: DAPO-Math-17k's 23, numeric power 33x in digits, combinatorial operand 1000x in value) and at or below
#: where math-verify gets slow (10 nested braces cost it ~0.7 s, 26 parentheses ~1.9 s, 51 braces more than 2
#: s; ``(10^6)!`` ~4 s; ``10^{10^{10^{10}}}`` never finishes). Measures:
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
    """The first bound of ``BOUNDS`` that ``answer`` exceeds (None if it exceeds none): such an answer cannot
    be a benchmark answer and is wrong without being parsed.

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
