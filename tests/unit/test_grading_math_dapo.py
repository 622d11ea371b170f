"""The authors' scorer (common.grading.math_dapo, registered as ``math_dapo``): a table of cases from its
specification, each with the verdict the specification gives (the last 300 characters, the last
``Answer:`` match, Minerva's normalisation, string equality, +1 / -1, no boxed fallback), and the scorer
through Grader."""
from __future__ import annotations

import pytest

from common.grading import SCORERS, Grader, check_scorer, math_dapo_score, normalize_final_answer
from common.grading.math_dapo import WINDOW_CHARS

PAD = "x" * 40


@pytest.mark.parametrize("response,gold,acc", [
    # the answer line, as the DAPO prompt asks
    ("Work.\nAnswer: 540", "540", True),
    ("Work.\nAnswer: 541", "540", False),
    ("answer: 540", "540", True),                                        # case-insensitive
    ("ANSWER :  540", "540", True),                                      # spaces around the colon
    ("Answer: 540\n\nThat is all.", "540", True),                        # text after the line
    # several answer lines: the last one counts
    ("Answer: 12\nwait, no.\nAnswer: 540", "540", True),
    ("Answer: 540\nwait, no.\nAnswer: 12", "540", False),
    # boxed only: no boxed fallback
    (r"so the answer is \boxed{540}.", "540", False),
    (r"\boxed{540}" + "\nAnswer: 540", "540", True),                     # box and line: the line
    (r"Answer: \boxed{540}", "540", True),                               # a box inside the line is unwrapped
    (r"Answer: $\boxed{540}$", "540", True),
    ("**Answer:** 540", "540", False),                                   # markdown bold: "** 540" is read
    ("Answer: 540.", "540", False),                                      # a trailing period stays
    ("Answer: $540$.", "540", True),                                     # ".$" -> "$", then the $ span
    # units and \text{}
    ("Answer: 540 degrees", "540", True),
    (r"Answer: 540^\circ", "540", True),
    ("Answer: 12 students", "12", True),
    ("Answer: 5 cm", "5", True),
    (r"Answer: \text{540}", "540", True),
    (r"Answer: 540\text{ dollars}", "540", True),
    (r"Answer: \$540", "540", True),
    # equations: the right-hand side of the last "="
    ("Answer: x = 5", "5", True),
    ("Answer: 2 + 3 = 5", "5", True),
    # leading zeros, thousands separators, decimals: strings, not numbers
    ("Answer: 023", "23", False),
    ("Answer: 23", "023", False),
    ("Answer: 023", "023", True),
    ("Answer: 1,000", "1000", True),
    ("Answer: 1000", "1,000", True),
    ("Answer: 142.0", "142", False),
    ("Answer: 0.5", "0.5", True),
    ("Answer: 0.50", "0.5", False),
    ("Answer: 0.5", r"\frac{1}{2}", False),
    ("Answer: -5", "-5", True),
    # LaTeX fractions and roots
    (r"Answer: \frac{1}{2}", r"\frac{1}{2}", True),
    (r"Answer: \frac12", r"\frac{1}{2}", True),                         # \fracab -> \frac{a}{b}
    (r"Answer: \dfrac{1}{2}", r"\frac{1}{2}", False),                    # \dfrac is another string
    ("Answer: 1/2", r"\frac{1}{2}", False),
    (r"Answer: \frac{\sqrt{3}}{2}", r"\frac{\sqrt{3}}{2}", True),
    (r"Answer: 2\sqrt3", r"2\sqrt{3}", True),                            # \sqrta -> \sqrt{a}
    # no answer at all
    ("I do not know.", "540", False),
    ("", "540", False),
])
def test_math_dapo_table(response, gold, acc):
    s = math_dapo_score(response, gold)
    assert s.acc is acc
    assert s.score == (1.0 if acc else -1.0)


def test_window_edges():
    """Only the last WINDOW_CHARS characters are read: the line must start inside them."""
    line = "Answer: 540\n"                                                     # 12 characters
    fits = line + "y" * (WINDOW_CHARS - len(line))                            # exactly 300: the line is in
    cut = line + "y" * (WINDOW_CHARS - len(line) + 1)                         # 301: "nswer: 540" is read
    assert len(fits) == WINDOW_CHARS and math_dapo_score(fits, "540").acc
    s = math_dapo_score(cut, "540")
    assert not s.acc and not s.found and s.pred == "[INVALID]"
    # an earlier line outside the window never counts, a later one inside it does
    two = "Answer: 540\n" + "y" * 400 + "\nAnswer: 7"
    assert not math_dapo_score(two, "540").acc and math_dapo_score(two, "7").acc
    # the line cut mid-word by the window start is not a line
    assert not math_dapo_score("Answer: " + "1" * WINDOW_CHARS, "1" * WINDOW_CHARS).found


@pytest.mark.parametrize("raw,norm", [
    ("x = 5", "5"), ("540 degrees", "540"), (r"\text{(C)}", "(C)"), ("1,234,567", "1234567"),
    (r"\frac12", r"\frac{1}{2}"), (r"\sqrt2", r"\sqrt{2}"), (r"$\frac{1}{2}$", r"\frac{1}{2}"),
    (r"\boxed{42}", "42"), ("10 \\; \\text{m}", "10"),
    ("1,2", "12"),                                        # digits and commas only: the commas go
])
def test_normalize_final_answer(raw, norm):
    assert normalize_final_answer(raw) == norm


def test_registry_and_grader():
    assert SCORERS.names() == ("math_verify", "math_dapo")
    with pytest.raises(ValueError, match="unknown scorer 'dapo'"):
        check_scorer("dapo")
    with pytest.raises(ValueError, match="unknown scorer"):
        Grader(num_workers=0, scorer="nope")
    responses = ["Answer: 540", r"\boxed{540}", "Answer: 023", "Answer: C", r"\boxed{C}"]
    golds = ["540", "540", "23", "C", "C"]
    types = ["math", "math", "math", "mc", "mc"]
    with Grader(num_workers=0, scorer="math_dapo", mode="answer_line") as g:
        v = g.grade(responses, golds, types)
    assert [x.correct for x in v] == [True, False, False, True, False]
    assert [x.reason for x in v[:3]] == ["ok", "no_answer", "ok"]
    assert v[0].extracted == "540" and v[1].extracted is None
    with Grader(num_workers=0, mode="boxed_or_answer_line") as g:                # math-verify: both forgive
        assert [x.correct for x in g.grade(responses[:3], golds[:3])] == [True, True, True]


def test_eval_grade_regrades_a_sample_file_by_either_scorer(tmp_path, capsys):
    """``eval.grade --scorer``: the same responses file graded by math_dapo and by math_verify."""
    import json

    from eval.grade import main
    from common.benchmarks import load_benchmark
    gold = load_benchmark("aime24")[0].gold
    rows = [{"index": 0, "response": f"Answer: {gold}"}, {"index": 0, "response": f"\\boxed{{{gold}}}"}]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    accs = {}
    for scorer in ("math_dapo", "math_verify"):
        out = tmp_path / f"{scorer}.jsonl"
        assert main(["--benchmark", "aime24", "--responses", str(path), "--scorer", scorer,
                     "--mode", "boxed_or_answer_line", "--workers", "0", "--out", str(out)]) == 0
        accs[scorer] = capsys.readouterr().out.strip().splitlines()[-1]
        assert [json.loads(x)["correct"] for x in out.read_text().splitlines()] == \
            ([True, False] if scorer == "math_dapo" else [True, True])
    assert accs == {"math_dapo": "accuracy: 0.5000", "math_verify": "accuracy: 1.0000"}
