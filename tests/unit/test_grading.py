"""Tests for common.grading (the grader / RL outcome reward) and the eval.grade CLI.

Default run: well under a minute of grading on 2 cores; the exhaustive variants are marked slow.
"""
from __future__ import annotations

import random

import pytest

from bench.grading import (shipped_gold_maxima, shipped_golds)
from common.benchmarks import load_benchmark
from common.grading import (BOUNDS, GOLD_MAXIMA, Grader, Verdict, answer_shape, extract_answer,
                            extract_answer_line, extract_boxed, grade_one, implausible_bound, mc_letter,
                            normalize_gold)
from common.grading.normalize import _cheap_compare
from common.grading.verify import _math_verify


# ---------------------------------------------------------------------------------------------- extraction
@pytest.mark.parametrize("text,expected", [
    (r"so \boxed{5}", "5"),
    (r"\boxed{1} then \boxed{2}", "2"),                                  # the final box is the answer
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),                            # nested braces
    (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),                                  # escaped braces do not count
    (r"\boxed{ \left( 3, \frac{\pi}{2} \right) }.", r"\left( 3, \frac{\pi}{2} \right)"),
    (r"\boxed 7 is it", "7"),                                            # brace-less form
    (r"\fbox{8}", "8"),
    (r"$\boxed{\text{(C)}}$", r"\text{(C)}"),
    (r"\boxed{\boxed{3}}", "3"),
    (r"\boxed{4} and then \boxed{", None),                               # truncated final box: no answer
    (r"\boxed{\frac{1}{2}", None),
    ("no box here: 42", None),
    (r"\boxedx{3}", None),
    ("", None),
])
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


def test_extract_boxed_non_string_and_huge_inputs():
    assert extract_boxed(None) is None  # type: ignore[arg-type]
    big = "{" * 200_000 + r"\boxed{" + "{" * 200_000
    assert extract_boxed(big) is None
    assert extract_boxed("x" * 1_000_000 + r"\boxed{9}") == "9"


def test_extract_answer_modes():
    dapo = "work...\nAnswer: 12\nmore\nAnswer: $\\frac{3}{4}$.\n"
    assert extract_answer_line(dapo) == r"\frac{3}{4}"
    assert extract_answer(dapo, "answer_line") == r"\frac{3}{4}"
    assert extract_answer(dapo, "boxed") is None
    assert extract_answer("Answer: \\boxed{7}", "answer_line") == "7"
    both = "\\boxed{5}\nAnswer: 6"
    assert extract_answer(both, "boxed_or_answer_line") == "5"
    assert extract_answer("Answer: 6", "boxed_or_answer_line") == "6"
    with pytest.raises(ValueError, match="bogus"):
        extract_answer("x", "bogus")


def test_normalize_gold():
    assert normalize_gold("27.0") == "27"
    assert normalize_gold(27.0) == "27"
    assert normalize_gold("$\\frac{1}{2}$") == "\\frac{1}{2}"
    assert normalize_gold(["$69$,$84$"]) == "69,84"
    assert normalize_gold(["1", "2"]) == "1, 2"
    with pytest.raises(ValueError):
        normalize_gold(None)


@pytest.mark.parametrize("text,letter", [
    ("C", "C"), ("(C)", "C"), ("\\text{(C)}", "C"), ("\\textbf{C}", "C"), ("C. 42 apples", "C"),
    ("C) 42", "C"), ("$J$", "J"), ("c", "C"), ("Option B", "B"), ("The answer is (D)", "D"),
    ("42", None), ("a value", None), ("K", None), ("", None),
])
def test_mc_letter(text, letter):
    assert mc_letter(text) == letter


# ---------------------------------------------------------------------------------------------- grade_one
def test_unboxed_right_number_is_wrong():
    """math-verify on the raw response would accept it (lenient fallback); the reward must not."""
    import math_verify

    response = "We compute 6*7 and the answer is 42."
    assert math_verify.verify(math_verify.parse("$42$"), math_verify.parse(response))  # the trap
    v = grade_one(response, "42")
    assert v == Verdict(False, None, "no_answer")
    # same for a non-integer gold (not the integer fast path)
    assert not grade_one("so the result is \\frac{1}{2} obviously", "0.5").correct
    # and an unboxed right answer after a wrong boxed one is still wrong
    assert not grade_one("\\boxed{41}. Hmm, actually it is 42.", "42").correct


def test_final_box_counts():
    assert grade_one(r"first \boxed{3}, finally \boxed{5}", "5").correct
    assert not grade_one(r"first \boxed{5}, finally \boxed{3}", "5").correct


@pytest.mark.parametrize("pred,gold,ok", [
    ("042", "42", True), ("-0", "0", True), ("-5", "5", False), ("1000000000000000000000001",
                                                                "1000000000000000000000001", True),
    (r"\frac12", "0.5", True), (r"\dfrac{1}{2}", r"\frac{1}{2}", True), ("2/4", r"\frac{1}{2}", True),
    (r"\frac{1}{3}", "0.33", False), ("x = 5", "5", True), (r"2\sqrt{3}", r"\sqrt{12}", True),
    (r"\sqrt{12}", "3", False), (r"(3, \frac{\pi}{2})", r"\left( 3, \frac{\pi}{2} \right)", True),
    (r"[1, 2)", r"[1, 2)", True), (r"(1, 2]", r"[1, 2)", False), (r"x^2+2x+1", r"(x+1)^2", True),
    ("84, 69", "69,84", True), ("69", "69,84", False),                    # multi-answer gold: the whole set
    (r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", True),
    ("27.0", "27", True), ("4.5e33", "4.5e33", True),
])
def test_grade_one_math(pred, gold, ok):
    v = grade_one(f"Reasoning... \\boxed{{{pred}}}", gold)
    assert v.correct is ok, v
    assert v.reason == "ok" and v.extracted == pred


def test_grade_one_list_gold_and_reasons():
    assert grade_one(r"\boxed{(1,2),(3,4)}", ["$(3,4)$", "$(1,2)$"]).correct
    assert grade_one(r"\boxed{}", "1").reason == "no_answer"
    assert grade_one(r"\boxed{$ $}", "1").reason == "no_answer"
    long = grade_one("\\boxed{" + "1+" * 2000 + "1}", "4001")
    assert (long.reason, long.bound, long.correct) == ("implausible", "length", False)
    assert grade_one(12345, "1").reason == "error"  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="answer_type"):
        grade_one("\\boxed{1}", "1", answer_type="essay")


def test_grade_one_mc():
    assert grade_one(r"... so \boxed{\text{(C)}}", "C", "mc").correct
    assert grade_one(r"\boxed{C. Methane}", "C", "mc").correct
    assert not grade_one(r"\boxed{D}", "C", "mc").correct
    assert not grade_one("The answer is C", "C", "mc").correct           # not boxed
    assert grade_one("Answer: C", "C", "mc", mode="answer_line").correct
    with pytest.raises(ValueError, match="option letter"):
        grade_one(r"\boxed{A}", "42", "mc")


def test_grade_one_answer_line_mode():
    assert grade_one("steps\nAnswer: 34", "34", mode="answer_line").correct
    assert not grade_one("steps, 34 is it", "34", mode="answer_line").correct


def test_cheap_paths_agree_with_math_verify():
    """The parent-side shortcuts (integers, canonical strings, plain numbers) give math-verify's verdict."""
    rng = random.Random(0)
    pairs = [(str(rng.randint(-50, 50)), str(rng.randint(-50, 50))) for _ in range(30)]
    pairs += [("007", "7"), ("-0", "0"), (r"\frac{2}{4}", "0.5"), ("0.3333333", r"\frac{1}{3}"),
              ("0.33", r"\frac13"), ("3/7", r"\frac{3}{7}"), ("1.50", "1.5"), ("2.5", "5/2"),
              ("-3/4", "-0.75"), (r"\dfrac{3}{4}", r"\frac{3}{4}"), (r"\left(1,2\right)", "(1, 2)"),
              ("x=3", "3"), ("y = 2/3", "4/6")]
    import math_verify

    for pred, gold in pairs:
        fast = _cheap_compare(pred, gold)
        assert fast is not None, (pred, gold)
        mv = math_verify.verify(math_verify.parse(f"${gold}$"), math_verify.parse(f"${pred}$"))
        assert fast == mv, (pred, gold, fast, mv)


def _check_math_verify_accepts_golds(name, limit):
    """The shortcut above decides most gold-vs-gold pairs by string equality; this checks math-verify itself
    parses each (non-trivial) gold and verifies it against itself."""
    import signal

    from common.grading.verify import _on_alarm

    probs = [p for p in load_benchmark(name, "local") if p.answer_type == "math"
             and not p.gold.lstrip("-").isdigit()]
    probs = probs[:limit]
    old = signal.signal(signal.SIGALRM, _on_alarm)
    bad = []
    try:
        for p in probs:
            signal.setitimer(signal.ITIMER_REAL, 5.0)
            try:
                ok, _ = _math_verify(normalize_gold(extract_boxed(_gold_response(p.gold))), p.gold)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            if not ok:
                bad.append((p.index, p.gold))
    finally:
        signal.signal(signal.SIGALRM, old)
    assert len(bad) <= 0.005 * max(len(probs), 1), bad


def _gold_response(gold: str) -> str:
    return f"Let me think step by step. ... Hence the final answer is $\\boxed{{{gold}}}$."


@pytest.mark.parametrize("name", ["math500", "minerva_math", "olympiadbench"])
def test_math_verify_accepts_golds(name):
    _check_math_verify_accepts_golds(name, 40)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["math500", "minerva_math", "olympiadbench"])
def test_math_verify_accepts_golds_full(name):
    _check_math_verify_accepts_golds(name, None)


# ---------------------------------------------------------------------------------------------- plausibility
def _tower(base: str, height: int) -> str:
    s = base
    for _ in range(height - 1):
        s = f"{base}^{{{s}}}"
    return s


@pytest.mark.parametrize("answer,measures", [
    ("x^2", dict(exponents=1, exponent_depth=1, nesting=0)),
    (r"a^{b^{c}}", dict(exponents=2, exponent_depth=2, nesting=2)),
    ("a^b^c", dict(exponent_depth=2)),                                       # a chain nests like a tower
    (r"x^2 y^3 z^4", dict(exponents=3, exponent_depth=1)),                   # not a chain
    ("9**9**9", dict(exponents=2, exponent_depth=2)),
    # \left X ... \right Y is one pair
    (r"\left(\left[1\right)\right.", dict(nesting=2)),
    (r"\{1, \{2\}\}", dict(nesting=2)),
    ("[1, 2)", dict(nesting=1)),
    (")))(", dict(nesting=1)),                                               # unmatched closers are ignored
    ("3.14159 + 123456", dict(digit_run=6, length=16)),
    ("x + ➄➄➄➄", dict(digit_run=0)),                                         # only ASCII digits count
    (r"10^{10^{10}}", dict(power_log10=1e10)),                               # towers in log space
    (r"2^{1009}", dict(power_log10=pytest.approx(303.74, abs=0.01))),
    (r"10^{-5} + 1^{1000} + 0.5^{99}", dict(power_log10=0.0)),               # |a| <= 1 or b < 0: small
    (r"(10^{6})!", dict(operand_log10=6.0)),
    (r"\binom{10^{11}}{3}", dict(operand_log10=pytest.approx(11.0))),
    (r"\sum_{n=1}^{10^{7}} n", dict(operand_log10=pytest.approx(7.0))),
    (r"\frac{d !}{2 k(d-k) !} + 100!", dict(operand_log10=2.0)),
    (r"2^{100!}", dict(operand_log10=2.0, power_log10=pytest.approx(0.30103 * 9.33262e157, rel=1e-4))),
    (r"10,\!080", dict(operand_log10=0.0, digit_run=3)),                     # \! is spacing, not a factorial
])
def test_answer_shape(answer, measures):
    shape = answer_shape(answer)
    for name, value in measures.items():
        assert getattr(shape, name) == value, (name, shape)


#: per bound: an answer at the bound (plausible) and one just over it (rejected with that bound)
AT_AND_OVER = {
    "length": ("1+" * 499 + "11", "1+" * 500 + "1"),
    "nesting": ("(" * 10 + "x" + ")" * 10, "(" * 11 + "x" + ")" * 11),
    "exponents": (" + ".join(f"x^{{{k}}}" for k in range(1, 41)),
                  " + ".join(f"x^{{{k}}}" for k in range(1, 42))),
    "exponent_depth": (_tower("x", 4), _tower("x", 5)),                    # x^{x^{x^{x}}} has depth 3
    "digit_run": ("x + " + "1" * 50, "x + " + "1" * 51),
    "power_log10": ("10^{10000}", "10^{10001}"),
    "operand_log10": ("100000!", "100001!"),
}


def test_bounds_cover_every_measure():
    assert set(AT_AND_OVER) == set(BOUNDS) == set(GOLD_MAXIMA)


@pytest.mark.parametrize("name", sorted(AT_AND_OVER))
def test_bound_just_over_is_implausible(name):
    at, over = AT_AND_OVER[name]
    assert getattr(answer_shape(at), name) == BOUNDS[name]
    assert implausible_bound(at, r"\frac{3}{7}") is None
    assert implausible_bound(over, r"\frac{3}{7}") == name
    v = grade_one(f"so \\boxed{{{over}}}", r"\frac{3}{7}")
    assert (v.correct, v.reason, v.bound) == (False, "implausible", name), v
    with Grader(num_workers=0) as g:  # the Grader decides it in the parent, without math-verify
        assert g.grade([f"\\boxed{{{over}}}"], ["5"]) == [Verdict(False, over[:200] + "…" if name == "length"
                                                                  else over, "implausible", name)]
        assert g.stats["implausible"] == 1 and g.stats["pool"] == 0


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_gold_at_each_maximum_is_not_rejected(name):
    """The shipped gold that comes nearest each bound is plausible, and right against itself."""
    _, bench, gold = shipped_gold_maxima()[name]
    assert implausible_bound(gold, "0") is None, (bench, gold)
    assert grade_one(f"\\boxed{{{gold}}}", gold).correct


def test_gold_maxima_recorded_and_bounds_have_margin():
    """GOLD_MAXIMA (documented in common.grading) are the maxima measured on the shipped golds, and every
    bound is at least twice its gold maximum (the log10 ones: at least 1000 times in value)."""
    maxima = shipped_gold_maxima()
    assert {k: round(v, 2) for k, (v, _, _) in maxima.items()} == pytest.approx(GOLD_MAXIMA, abs=0.01)
    for name, bound in BOUNDS.items():
        if name.endswith("_log10"):
            assert bound >= GOLD_MAXIMA[name] + 3, name
        else:
            assert bound >= 2 * GOLD_MAXIMA[name], name


def test_precheck_never_rejects_a_shipped_gold():
    golds = shipped_golds()
    assert len(golds) == 1930
    rejected = [(b, g, implausible_bound(g)) for b, g, t in golds if implausible_bound(g) is not None]
    assert rejected == []


def test_bound_raised_to_an_extreme_gold():
    """A gold beyond a bound (not a shipped one) raises that bound to its own measure."""
    deep_gold = "(" * 12 + "x" + ")" * 12
    assert implausible_bound("(" * 12 + "y" + ")" * 12, deep_gold) is None
    assert implausible_bound("(" * 13 + "y" + ")" * 13, deep_gold) == "nesting"
    assert implausible_bound("(" * 12 + "y" + ")" * 12, "x") == "nesting"
    long_gold = "+".join(["1"] * 700)
    assert grade_one(f"\\boxed{{{long_gold}}}", long_gold).correct  # equal to its gold: never rejected


