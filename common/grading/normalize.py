"""Gold normalisation and the comparisons decided without math-verify (``_cheap_compare``).

Golds: ``$`` delimiters removed, as the authors' data holds them: ``"27.0"`` -> ``"27"``, ``"023"`` ->
``"23"`` (string-equality scorers such as math_dapo need it; math-verify reads both as the same number);
multi-answer golds (OlympiadBench lists, or a ``list[str]`` gold) are joined with ``", "``, which math-verify
reads as the set {a, b}, so a prediction is correct iff it verifies against the whole set (order-free).
Shortcuts decided in the parent, each with math-verify's verdict (a test checks the agreement): both plain
integers (``-?\\d+``) -> integer comparison (~1000x faster; RL on integer answers never reaches math-verify);
identical up to ``\\left``/``\\right``, spacing and ``\\dfrac`` -> correct; ``x = <rhs>`` against a gold
without ``=`` -> the rhs is compared; both plain numbers (integers, decimals, integer fractions) -> exact, or
after rounding to 6 decimals when a decimal is involved.
"""
from __future__ import annotations

import math
import re

__all__ = ["normalize_gold"]

_INT_RE = re.compile(r"-?\d+")
_FLOAT_INT_RE = re.compile(r"(-?)0*(\d+?)(?:\.0*)?")


def _strip_dollars(s: str) -> str:
    return s.replace("\\$", "").replace("$", "").strip()


def normalize_gold(gold) -> str:
    """Gold answer as one string: ``$`` delimiters removed, integers without leading zeros or a ``.0``
    (``"27.0"``, ``"027"`` -> ``"27"``), lists joined with ", ".

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
    if m:                                        # "023" -> "23", "142.0" -> "142", "-0" -> "0"
        g = (m.group(1) if m.group(2) != "0" else "") + m.group(2)
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
    r"|\\frac\{(?P<fn>-?\d{1,60})\}\{(?P<fd>\d{1,60})\}|\\frac(?P<sn>\d)(?P<sd>\d)"
    r"|(?P<n>\d{1,60})/(?P<d>\d{1,60}))")


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
