"""Tests for eval.grading (the grader / RL outcome reward) and the eval.grade CLI.

Default run: well under a minute of grading on 2 cores; the exhaustive variants are marked slow.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eval.benchmarks import load_benchmark
from eval.grading import (REASONS, Grader, Verdict, _cheap_compare, _grade_extracted, _math_verify, extract_answer,
                          extract_answer_line, extract_boxed, get_grader, grade_one, mc_letter, normalize_gold)

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ["aime24", "aime25", "amc23", "amc", "math500", "minerva_math", "olympiadbench", "mmlu_pro"]
#: benchmarks whose wrong-gold check runs math-verify on symbolic pairs (slow): subset by default
HEAVY = {"math500": 100, "minerva_math": 50, "olympiadbench": 100}


@pytest.fixture(scope="module")
def grader():
    with Grader(num_workers=2, timeout_s=5.0) as g:
        yield g


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


def test_extract_boxed_non_string_and_linear_time():
    assert extract_boxed(None) is None  # type: ignore[arg-type]
    big = "{" * 200_000 + r"\boxed{" + "{" * 200_000
    t = time.perf_counter()
    assert extract_boxed(big) is None
    assert extract_boxed("x" * 1_000_000 + r"\boxed{9}") == "9"
    assert time.perf_counter() - t < 2.0


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
    assert long.reason == "error" and not long.correct
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
              ("0.33", r"\frac13"), ("3/7", r"\frac{3}{7}"), ("1.50", "1.5"), ("2.5", "5/2"), ("-3/4", "-0.75"),
              (r"\dfrac{3}{4}", r"\frac{3}{4}"), (r"\left(1,2\right)", "(1, 2)"), ("x=3", "3"), ("y = 2/3", "4/6")]
    import math_verify

    for pred, gold in pairs:
        fast = _cheap_compare(pred, gold)
        assert fast is not None, (pred, gold)
        mv = math_verify.verify(math_verify.parse(f"${gold}$"), math_verify.parse(f"${pred}$"))
        assert fast == mv, (pred, gold, fast, mv)


def test_in_process_timeout():
    t = time.perf_counter()
    v = grade_one(r"\boxed{10^{10^{10^{10}}}}", "5", timeout_s=1.0)
    assert v.reason == "timeout" and not v.correct
    assert time.perf_counter() - t < 4.0
    assert _grade_extracted("2", "2", "math") == (True, "ok")  # the grader still works afterwards


# ---------------------------------------------------------------------------------------------- Grader
MIXED = [(r"\boxed{\frac12}", "0.5", "math"), (r"\boxed{7}", "7", "math"), ("no answer", "7", "math"),
         (r"\boxed{2\sqrt{3}}", r"\sqrt{12}", "math"), (r"\boxed{x^2}", "x^3", "math"),
         (r"\boxed{(B)}", "B", "mc"), (r"\boxed{A}", "B", "mc"), (r"\boxed{\{1,2\}}", "2, 1", "math")]


def test_grader_matches_in_process(grader):
    rs, gs, ts = map(list, zip(*MIXED))
    v_pool = grader.grade(rs, gs, ts)
    with Grader(num_workers=0) as g0:
        v_local = g0.grade(rs, gs, ts)
    assert v_pool == v_local
    assert [v.correct for v in v_pool] == [True, True, False, True, False, True, False, True]
    assert all(v.reason in REASONS for v in v_pool)


def test_grader_errors(grader):
    with pytest.raises(ValueError, match="2 responses, 1 golds"):
        grader.grade(["a", "b"], ["1"])
    with pytest.raises(ValueError, match="answer_types has 1 entries for 2"):
        grader.grade(["a", "b"], ["1", "2"], ["math"])
    with pytest.raises(ValueError, match="essay"):
        grader.grade(["a"], ["1"], "essay")
    with pytest.raises(ValueError, match="mode"):
        Grader(mode="nope")
    assert grader.grade([], []) == []


def test_grader_close_and_reuse():
    g = Grader(num_workers=1, timeout_s=5.0)
    assert g.grade([r"\boxed{\sqrt{4}}"], ["2"])[0].correct
    procs = [w.proc for w in g._workers]
    assert procs and all(p.poll() is None for p in procs)
    g.close()
    assert all(p.poll() is not None for p in procs)
    with pytest.raises(RuntimeError, match="closed"):
        g.grade(["x"], ["1"])
    a = get_grader(num_workers=0, timeout_s=3.0)
    assert get_grader(num_workers=0, timeout_s=3.0) is a


def test_grader_survives_killed_worker(grader):
    grader.grade([r"\boxed{\sqrt{9}}"], ["3"])
    grader._workers[0].proc.kill()
    grader._workers[0].proc.wait()
    rs = [rf"\boxed{{\sqrt{{{k * k}}}}}" for k in range(2, 12)]
    v = grader.grade(rs, [str(k) for k in range(2, 12)])
    assert all(x.correct for x in v)


def test_parent_kills_a_stuck_worker():
    """Without the worker's own alarm only the parent's kill can stop the item; the rest is graded."""
    timeout = 1.0
    with Grader(num_workers=2, timeout_s=timeout, soft_timeout=False, kill_grace_s=0.5) as g:
        rs = [r"\boxed{10^{10^{10^{10}}}}"] + [rf"\boxed{{\frac{{{k}}}{{2}} + 0}}" for k in range(6)]
        gs = ["5"] + [f"{k / 2}" for k in range(6)]
        t = time.perf_counter()
        v = g.grade(rs, gs)
        wall = time.perf_counter() - t
        assert v[0] == Verdict(False, "10^{10^{10^{10}}}", "timeout")
        assert all(x.correct for x in v[1:]), v
        assert g.stats["kills"] == 1 and g.stats["respawns"] == 1
        assert g.stats["max_item_s"] < timeout + 0.5 + 1.0
        assert wall < 60
        assert g.grade([r"\boxed{\sqrt{16}}"], ["4"])[0].correct  # the replacement worker works


# ---------------------------------------------------------------------------------------------- shipped data
def _gold_response(gold: str) -> str:
    return f"Let me think step by step. ... Hence the final answer is $\\boxed{{{gold}}}$."


@pytest.mark.parametrize("name", SHIPPED)
def test_gold_boxed_is_correct(grader, name):
    probs = load_benchmark(name, "local")
    v = grader.grade([_gold_response(p.gold) for p in probs], [p.gold for p in probs],
                     [p.answer_type for p in probs])
    bad = [(p.index, p.gold, x.reason) for p, x in zip(probs, v) if not x.correct]
    assert len(bad) <= 0.005 * len(probs), bad


def _check_math_verify_accepts_golds(name, limit):
    """The shortcut above decides most gold-vs-gold pairs by string equality; this checks math-verify itself
    parses each (non-trivial) gold and verifies it against itself."""
    import signal

    from eval.grading import _on_alarm, normalize_gold

    probs = [p for p in load_benchmark(name, "local") if p.answer_type == "math" and not p.gold.lstrip("-").isdigit()]
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


@pytest.mark.parametrize("name", ["math500", "minerva_math", "olympiadbench"])
def test_math_verify_accepts_golds(name):
    _check_math_verify_accepts_golds(name, 40)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["math500", "minerva_math", "olympiadbench"])
def test_math_verify_accepts_golds_full(name):
    _check_math_verify_accepts_golds(name, None)


def _shifted_gold_pairs(probs):
    """(response with another problem's gold boxed, gold) pairs, skipping identical golds."""
    golds = [p.gold for p in probs]
    out = []
    for i, g in enumerate(golds):
        j = (i + 1) % len(golds)
        while golds[j] == g and j != i:
            j = (j + 1) % len(golds)
        if j != i:
            out.append((_gold_response(golds[j]), g))
    return out


def _check_wrong_gold(grader, name, limit=None):
    probs = load_benchmark(name, "local", limit=limit)
    pairs = _shifted_gold_pairs(probs)
    v = grader.grade([r for r, _ in pairs], [g for _, g in pairs], probs[0].answer_type)
    accepted = [(pairs[k][1], x.extracted) for k, x in enumerate(v) if x.correct]
    assert len(accepted) <= 0.01 * len(pairs), accepted
    # a few symbolic comparisons (minerva) take seconds; on a loaded machine some can hit the 5 s timeout
    timeouts = sum(x.reason == "timeout" for x in v)
    assert timeouts <= max(2, 0.03 * len(pairs)), timeouts


@pytest.mark.parametrize("name", SHIPPED)
def test_other_gold_is_wrong(grader, name):
    _check_wrong_gold(grader, name, HEAVY.get(name))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HEAVY))
def test_other_gold_is_wrong_full(grader, name):
    _check_wrong_gold(grader, name)


# ---------------------------------------------------------------------------------------------- pathological
def pathological_strings(n: int = 1000, seed: int = 0, distinct_slow: int = 2) -> list[str]:
    """Adversarial responses: huge exponents, deep nesting, unbalanced braces, 100 kB texts, boxed garbage.

    Templates known to make math-verify slow take only ``distinct_slow`` distinct values (the grader grades
    identical answers once), so the default test stays short; the slow test uses all-distinct strings.
    """
    rng = random.Random(seed)
    big = "x" * 100_000

    def tower(base, depth, op="^"):
        s = str(base)
        for _ in range(depth - 1):
            s = f"{base}^{{{s}}}" if op == "^" else f"{base}**{s}"
        return s

    def d(i):  # few distinct values for the slow templates
        return i % distinct_slow

    makers = [
        lambda i: f"\\boxed{{{tower(10 + d(i), 4)}}}",                                  # slow
        lambda i: f"\\boxed{{{tower(9, 4, '**')}+{i}}}",
        lambda i: f"\\boxed{{{tower(2 + d(i), 5)}}}",                                   # slow
        lambda i: "\\boxed{" + "{" * (50 + d(i)) + "1" + "}" * (50 + d(i)) + "}",       # slow
        lambda i: "\\boxed{" + "(" * (25 + d(i)) + "1" + ")" * (25 + d(i)) + "}",       # slow
        lambda i: "\\boxed{" + "\\frac{1}{" * (20 + d(i)) + "2" + "}" * (20 + d(i)) + "}",
        lambda i: "\\boxed{" + "\\sqrt{" * (40 + d(i)) + "2" + "}" * (40 + d(i)) + "}",
        lambda i: "\\boxed{\\frac{1}{2" + f" {i}",                                      # unbalanced, truncated
        lambda i: "}" * (i % 13 + 1) + "\\boxed{" + "{" * (i % 9 + 1) + str(i),         # unbalanced
        lambda i: "\\boxed{" + big[: 1000 + i] + "}",                                   # over-long answer
        lambda i: big + f" the answer is {i}",                                          # 100 kB, no box
        lambda i: big + f"\\boxed{{{i}}}",                                              # 100 kB, then a box
        lambda i: ("\\boxed{" * 2000) + str(i),
        lambda i: f"\\boxed{{{i}}}" * 5000,
        lambda i: "\\boxed{" + "".join(rng.choice("\\{}^_$()[]&%#~'\"x1 ") for _ in range(200)) + "}",
        lambda i: "\\boxed{" + "".join(chr(rng.randrange(1, 0x2FFF)) for _ in range(100)) + "}",
        lambda i: f"\\boxed{{({10 ** (d(i) + 4)})!}}",                                  # slow
        lambda i: f"\\boxed{{\\binom{{10^{{{10 + d(i)}}}}}{{10^{{5}}}}}}",              # slow
        lambda i: f"\\boxed{{\\int_0^\\infty e^{{x^{{{d(i) + 2}}}}} dx}}",              # slow
        lambda i: f"\\boxed{{\\lim_{{x\\to 0}} \\frac{{1}}{{x^{{{i}}}}}}}",
        lambda i: f"\\boxed{{1/0 + {i}}}",
        lambda i: f"\\boxed{{0^0 \\cdot \\infty - \\infty + {i}}}",
        lambda i: f"\\boxed{{\\begin{{pmatrix}} {i} & \\\\ \\end{{bmatrix}}}}",
        lambda i: f"\\boxed{{x^{{x^{{x^{{x^{{{d(i)}}}}}}}}}}}",                         # slow
        lambda i: "\\boxed{" + "1" * (d(i) + 50) + "^{" + "9" * 50 + "}}",              # slow
        lambda i: "\\boxed{" + "+".join(["x"] * (i % 300 + 10)) + "}",
        lambda i: f"\\boxed{{\\sum_{{n=1}}^{{10^{{{d(i) + 10}}}}} n^{{n}}}}",           # slow
        lambda i: f"\\boxed{{{'-' * (i % 50 + 1)}{i}}}",
        lambda i: "\\boxed{}" + f" {i}",
        lambda i: "\\boxed{\\text{" + "a" * (i % 500) + "}}",
        lambda i: "\\boxed{\\\\\\\\\\\\}",
        lambda i: "\\boxed{\x00\x01\x02" + str(i) + "}",
        lambda i: "\\boxed{" + "\\left(" * (d(i) + 30) + "1" + "\\right)" * (d(i) + 30) + "}",  # slow
        lambda i: "\\boxed{" + "[" * 30 + str(d(i)) + "]" * 30 + "}",                   # slow
        lambda i: "\\boxed{" + ",".join(str(k) for k in range(d(i) + 100)) + "}",       # slow
        lambda i: "\\boxed{" + "=".join(["x"] * (i % 50 + 5)) + "}",
        lambda i: f"\\boxed{{\\frac{{{'9' * 300}}}{{{'7' * 300}}}}}",
        lambda i: f"\\boxed{{10^{{10^{{10^{{10}}}}}} - 10^{{10^{{10^{{10}}}}}} + {d(i)}}}",  # slow
        lambda i: f"\\boxed{{e^{{e^{{e^{{e^{{{d(i)}}}}}}}}}}}",                         # slow
        lambda i: f"\\boxed{{\\mathrm{{{i}}}\\%\\%\\%}}",
    ]
    return [makers[i % len(makers)](i // len(makers)) for i in range(n)]


def _run_pathological(strings, timeout, workers=2):
    gold = r"\frac{3}{7}"
    with Grader(num_workers=workers, timeout_s=timeout, kill_grace_s=1.0) as g:
        g.grade([r"\boxed{\sqrt{4}}"], ["2"])  # start the workers (not timed)
        t = time.perf_counter()
        v = g.grade(strings, [gold] * len(strings))
        wall = time.perf_counter() - t
        stats = dict(g.stats)
    assert len(v) == len(strings)
    assert all(isinstance(x, Verdict) and x.reason in REASONS for x in v)
    assert not any(x.correct for x in v)
    # every item finished within its budget (worker alarm at `timeout`, parent kill at timeout + grace)
    assert stats["max_item_s"] <= timeout + 1.0 + 0.5, stats
    # total wall time: each distinct answer that reached math-verify took at most timeout + grace,
    # spread over the workers; plus slack for a loaded 2-core machine
    bound = 20 + (timeout + 1.0) * stats["pool"] / workers
    assert wall < bound, (wall, bound, stats)
    return v, wall, stats


def test_pathological_strings_never_hang():
    strings = pathological_strings(1000)
    assert len(strings) == 1000 and max(map(len, strings)) >= 100_000
    v, wall, stats = _run_pathological(strings, timeout=1.0)
    assert wall < 150, (wall, stats)


@pytest.mark.slow
def test_pathological_strings_all_distinct():
    _run_pathological(pathological_strings(1000, distinct_slow=1000), timeout=1.0)


# ---------------------------------------------------------------------------------------------- CLI
def _run_cli(*args):
    return subprocess.run([sys.executable, "-m", "eval.grade", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_cli_end_to_end(tmp_path):
    probs = load_benchmark("aime24", "local")
    resp = tmp_path / "aime24_samples.jsonl"
    with open(resp, "w") as f:
        for p in probs:
            for _ in range(2):  # k = 2 samples per problem share an index
                f.write(json.dumps({"index": p.index, "response": _gold_response(p.gold), "sample": _}) + "\n")
    r = _run_cli("--benchmark", "aime24", "--responses", str(resp), "--workers", "2", "--timeout", "5")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "accuracy: 1.0000"
    graded = [json.loads(x) for x in open(tmp_path / "aime24_samples.graded.jsonl")]
    assert len(graded) == 60 and all(g["correct"] and g["reason"] == "ok" for g in graded)
    assert graded[0]["gold"] == probs[0].gold and graded[1]["sample"] == 1

    # some wrong and unanswered rows: accuracy printed with 4 decimals
    mixed = tmp_path / "mixed.jsonl"
    rows = [{"index": 0, "response": _gold_response(probs[0].gold)},
            {"index": 1, "response": "no idea"},
            {"index": 2, "response": r"\boxed{1}"}]
    mixed.write_text("".join(json.dumps(x) + "\n" for x in rows))
    r = _run_cli("--benchmark", "aime24", "--responses", str(mixed), "--workers", "0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "accuracy: 0.3333"


def test_cli_bad_input(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"index": 30, "response": "x"}) + "\n")
    r = _run_cli("--benchmark", "aime24", "--responses", str(bad), "--workers", "0")
    assert r.returncode == 2 and "index 30" in r.stderr
    bad.write_text(json.dumps({"response": "x"}) + "\n")
    r = _run_cli("--benchmark", "aime24", "--responses", str(bad), "--workers", "0")
    assert r.returncode == 2 and "'index'" in r.stderr
    r = _run_cli("--benchmark", "nope", "--responses", str(bad), "--workers", "0")
    assert r.returncode == 2 and "'nope'" in r.stderr
