"""Every shipped benchmark gold, normalised once at load as the authors' data holds it ("023" -> "23",
"142.0" -> "142"), survives both scorers when echoed back in the DAPO format and in a box."""
from __future__ import annotations

from bench.grading import shipped_golds
from common.grading import Grader, normalize_gold


def test_golds_normalised_as_the_authors_hold_them():
    assert [normalize_gold(g) for g in ("023", "142.0", "-007", "0", "00", "1.50", "0.5")] == \
        ["23", "142", "-7", "0", "0", "1.50", "0.5"]
    golds = [g for _, g, t in shipped_golds() if t == "math"]
    assert golds and all(normalize_gold(g) == g for g in golds)           # loading already normalised them
    assert not [g for g in golds if g[:1] == "0" and g.isdigit() and g != "0"]


def test_every_gold_survives_both_scorers():
    golds = sorted({g for _, g, t in shipped_golds() if t == "math"})
    line = [f"Work.\nAnswer: {g}" for g in golds]
    boxed = [f"Work, so \\boxed{{{g}}}." for g in golds]
    line_box = [f"Work.\nAnswer: \\boxed{{{g}}}" for g in golds]
    with Grader(num_workers=0, scorer="math_dapo", mode="answer_line") as g:
        assert [x for x, v in zip(golds, g.grade(line, golds)) if not v.correct] == []
        # a box inside the line: unwrapped, except where the gold is an equation (the text after its last
        # "=" is read before the box is unwrapped)
        assert [x for x, v in zip(golds, g.grade(line_box, golds)) if not v.correct and "=" not in x] == []
        assert not any(v.correct for v in g.grade(boxed, golds))          # no boxed fallback
    with Grader(num_workers=2, mode="boxed") as g:
        assert [x for x, v in zip(golds, g.grade(boxed, golds)) if not v.correct] == []
    with Grader(num_workers=2, mode="answer_line") as g:
        # the answer-line reader strips a trailing period, so a gold ending in "." is read without it
        assert [x for x, v in zip(golds, g.grade(line, golds)) if not v.correct and not x.endswith(".")] == []
