"""Grading throughput benchmark (not a test).

    python -m bench.grading [--n 2000] [--workers 2] [--timeout 5] [--pathological]

Builds MATH-500-like responses from the MATH-500 golds: ~1 kB of reasoning text ending in a boxed answer,
mixing exact golds, reformatted golds (\\dfrac, a/b, spaces, "x = ..."), wrong golds (another problem's) and
unboxed answers. Reports answers/s in-process and with worker processes, separately for the non-integer part
(math-verify) and for integer answers (the fast path, as in RL on DAPO-style/tiny-world answers), and the
wall-time cost of one hard answer that hits the timeout (worker alarm, and the parent's kill).
Target: >= 200 answers/s with 2 workers on the MATH-500-like mix.

Then the plausibility report (alone with ``--pathological``): the maxima of the shipped benchmarks' gold
answers for each plausibility bound of ``common.grading.BOUNDS`` (measured here, ``shipped_gold_maxima``), the
gold self-agreement rate (every shipped gold boxed and graded against itself, and how many golds the
pre-check alone would reject), and the 200-case pathological set (``pathological_set``: towers of exponents,
deep nesting, 100 kB strings, huge factorials and digit strings, garbage, and a few normal answers) graded on
``--workers`` fresh workers: wall time, verdict counts by reason (implausible ones by bound) and whether every
verdict is as expected. Target: the set in <= 15 s on 2 workers, golds >= 99.5% right. Then the AIME set
(``aime_pathological_set``, project issue 36): 200 pathological answers to the 60 AIME problems, one answer
sympy cannot settle (``UNSETTLED``, a divergent integral) among them in 12 responses against 12 different
golds: wall time, answers/CPU-s, verdicts by reason, timeouts and "timeout_seen" verdicts. The grader tries
that answer once (one timeout) and answers the other 11 from its memory of timed-out answers. Target: <= 10 s
on 2 workers (30.4-31.4 s and 6.7-7.9 answers/CPU-s before the memory, 5.8-6.2 s and 56.5-68.5 answers/CPU-s
after, measured interleaved at load average 4-5 on 2 cores). Last, the tests' adversarial strings and one
slow answer repeated 12 times against one gold.

Wall-clock rates depend on how loaded the machine is; "answers/CPU-s" (answers per CPU-second used by the
parent and the workers) does not, and times the number of free cores estimates the unloaded rate.
"""
from __future__ import annotations

import argparse
import os
import random
import re
import time
from collections import Counter
from typing import NamedTuple

from common.benchmarks import BENCHMARK_DIR, BENCHMARKS, load_benchmark
from common.grading import BOUNDS, GOLD_MAXIMA, Grader, answer_shape, implausible_bound

NONINT_SHARE = 0.75
FILLER = ("Let us work through the problem step by step. First we set up the relevant quantities and "
          "simplify the expression carefully, checking each algebraic manipulation along the way. ")


def reformat(gold: str, rng: random.Random) -> str:
    """An equivalent rewriting of a gold answer (as models often produce)."""
    g = gold
    choices = []
    if "\\frac" in g:
        choices.append(lambda s: s.replace("\\frac", "\\dfrac"))
        m = re.fullmatch(r"\\frac\{(-?\d+)\}\{(\d+)\}", g)
        if m:
            choices.append(lambda s, m=m: f"{m.group(1)}/{m.group(2)}")
    if re.fullmatch(r"-?\d+", g):
        choices.append(lambda s: f"{s}.0")
    choices.append(lambda s: s.replace(",", ", ") if "," in s else f"x = {s}")
    choices.append(lambda s: " " + s + " ")
    return rng.choice(choices)(g)


def make_responses(n: int, seed: int = 0):
    probs = load_benchmark("math500")
    golds = [p.gold for p in probs]
    rng = random.Random(seed)
    responses, gold_list = [], []
    nonint = [p for p in probs if not re.fullmatch(r"-?\d+", p.gold)]
    for i in range(n):
        # mostly non-integer golds (75%), so the integer fast path does not dominate
        p = rng.choice(nonint) if rng.random() < NONINT_SHARE else rng.choice(probs)
        r = rng.random()
        if r < 0.40:
            ans = f"\\boxed{{{p.gold}}}"
        elif r < 0.65:
            ans = f"\\boxed{{{reformat(p.gold, rng)}}}"
        elif r < 0.90:
            other = golds[(p.index + 1 + rng.randrange(len(golds) - 1)) % len(golds)]
            ans = f"\\boxed{{{other}}}"
        else:
            ans = f"the answer is {p.gold}"
        text = FILLER * rng.randint(4, 10) + f"Therefore the final answer is ${ans}$."
        responses.append(text)
        gold_list.append(p.gold)
    return responses, gold_list


def rate(grader: Grader, responses, golds, repeat: int = 1) -> tuple[float, float]:
    t = time.perf_counter()
    for _ in range(repeat):
        v = grader.grade(responses, golds)
    dt = time.perf_counter() - t
    return len(responses) * repeat / dt, sum(x.correct for x in v) / len(v)


def _datasets(n: int):
    responses, golds = make_responses(n)
    nonint = [(r, g) for r, g in zip(responses, golds) if not re.fullmatch(r"-?\d+", g)]
    dapo_like = [(f"{FILLER * 5}so the answer is $\\boxed{{{k + (i % 3 == 0)}}}$.", str(k))
                 for i, k in enumerate(random.Random(1).choices(range(1000), k=5000))]
    return {"full mix": (responses, golds),
            "non-integer golds only": ([r for r, _ in nonint], [g for _, g in nonint]),
            "integer fast path (DAPO-like)": ([r for r, _ in dapo_like], [g for _, g in dapo_like])}


def _measure(n: int, workers: int, timeout: float, name: str, warm: bool) -> dict:
    """One measurement, meant to run in a fresh process (no parse caches shared between measurements)."""
    rs, gs = _datasets(n)[name]
    with Grader(num_workers=workers, timeout_s=timeout) as g:
        t0 = time.perf_counter()
        g.grade(["\\boxed{2\\sqrt{3}}"], ["\\sqrt{12}"])  # start the workers / import math-verify (not timed)
        if warm:
            wr, wg = make_responses(300, seed=99)  # other responses, same distribution (not timed)
            g.grade(wr, wg)
        setup = time.perf_counter() - t0
        s0 = dict(g.stats)
        pids = [os.getpid()] + [w.proc.pid for w in g._workers]
        c0 = _cpu_seconds(pids)
        r, acc = rate(g, rs, gs)
        c1 = _cpu_seconds(pids)
        d = {k: g.stats[k] - s0[k] for k in g.stats}
    cpu = (c1 - c0) if (c0 is not None and c1 is not None) else None
    return {"rate": r, "acc": acc, "n": len(rs), "parent": d["parent"], "pool": d["pool"],
            "timeouts": d["timeouts"], "setup": setup, "cpu": cpu}


def _cpu_seconds(pids) -> float | None:
    """User+system CPU seconds of these processes (Linux /proc; None elsewhere)."""
    try:
        tck = os.sysconf("SC_CLK_TCK")
        total = 0
        for pid in pids:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / tck
    except (OSError, ValueError, IndexError):
        return None


def _timeout_cost(n: int, workers: int) -> None:
    rs, gs = _datasets(n)["non-integer golds only"]
    base_r, base_g = rs[:200], gs[:200]
    bad = SLOW_IN_BOUNDS
    timeout = 1.0
    for soft, label in ((True, "worker alarm"), (False, "parent kill + respawn")):
        with Grader(num_workers=workers, timeout_s=timeout, soft_timeout=soft) as g:
            g.grade(base_r, base_g)  # warm: the timed batches below hit the same caches
            t = time.perf_counter()
            g.grade(base_r, base_g)
            t_base = time.perf_counter() - t
            t = time.perf_counter()
            v = g.grade(base_r + [bad], base_g + ["5"])
            t_bad = time.perf_counter() - t
            print(f"timeout cost ({label}, timeout_s={timeout}, {workers} workers): one hard answer "
                  f"adds {t_bad - t_base:+.2f}s wall to a 200-answer batch ({t_base:.2f}s -> {t_bad:.2f}s; "
                  f"verdict reason: {v[-1].reason}; kills={g.stats['kills']}, "
                  f"respawns={g.stats['respawns']})",
                  flush=True)


# --------------------------------------------------------------------------------------------------
# plausibility bounds: gold-answer maxima, gold self-agreement, the pathological set
# --------------------------------------------------------------------------------------------------
#: a short answer within every plausibility bound on which math-verify (sympy) still runs past a timeout of
#: seconds: what the per-item timeout, not the plausibility pre-check, is for
SLOW_IN_BOUNDS = "\\boxed{\\sum_{n=1}^{1000} n^{n}}"
#: a slow answer within the bounds, as an RL group may repeat it (project issue 28)
REPEATED_SLOW = "\\int_0^\\infty e^{-x^{x^{x}}} dx"


def shipped_golds() -> list[tuple[str, str, str]]:
    """(benchmark, gold, answer_type) for every problem of every benchmark file shipped in
    common/data/benchmarks, read through the registry (its gold extraction); a file registered under two names
    is read once."""
    out, seen = [], set()
    for name, spec in BENCHMARKS.items():
        path = spec.local_path()
        if path is None or path.parent != BENCHMARK_DIR or not path.exists() or path in seen:
            continue
        seen.add(path)
        out += [(name, p.gold, p.answer_type) for p in load_benchmark(name, "local")]
    return out


def shipped_gold_maxima(golds=None) -> dict[str, tuple[float, str, str]]:
    """For each plausibility bound: (maximum over the shipped golds, its benchmark, that gold).

    These are the numbers ``common.grading.GOLD_MAXIMA`` records and ``BOUNDS`` are chosen from.
    """
    golds = shipped_golds() if golds is None else golds
    best: dict[str, tuple[float, str, str]] = {}
    for bench, gold, _ in golds:
        shape = answer_shape(gold)
        for name in BOUNDS:
            v = getattr(shape, name)
            if name not in best or v > best[name][0]:
                best[name] = (v, bench, gold)
    return best


def gold_self_agreement(grader: Grader, golds=None) -> dict:
    """Every shipped gold, boxed in a short response, graded against itself: the rate judged correct, the
    reasons of the others, and how many golds the pre-check alone (against a plain gold) calls implausible."""
    golds = shipped_golds() if golds is None else golds
    responses = [f"Hence the final answer is $\\boxed{{{g}}}$." for _, g, _ in golds]
    v = grader.grade(responses, [g for _, g, _ in golds], [t for _, _, t in golds])
    wrong = [(b, g, x.reason) for (b, g, _), x in zip(golds, v) if not x.correct]
    bounds = [(b, g, implausible_bound(g) if t == "math" else None) for b, g, t in golds]
    rejected = [x for x in bounds if x[2] is not None]
    return {"n": len(golds), "rate": 1 - len(wrong) / len(golds), "wrong": wrong, "rejected": rejected}


class PathologicalCase(NamedTuple):
    """One item of ``pathological_set``: a response, its gold, whether it is right, and its kind."""

    response: str
    gold: str
    correct: bool
    kind: str  # "normal" for the ordinary answers, else the kind of pathology (tower, nesting, long, ...)


def _tower(base: str, height: int) -> str:
    s = base
    for _ in range(height - 1):
        s = f"{base}^{{{s}}}"
    return s


def pathological_set(n: int = 200, seed: int = 0) -> list[PathologicalCase]:
    """A deterministic set of ``n`` responses in the style of the tests' pathological strings, with distinct
    (response, gold) pairs (the grader's de-duplication does not help): numeric and symbolic towers of
    exponents, deep nesting of every bracket kind, 100 kB responses and over-long answers, huge factorials /
    binomials / sums, huge digit strings and powers, many exponents, unbalanced and garbage boxes, and 10%
    normal answers (MATH-500 golds, right as given or reformatted, another problem's gold, or 1/2 written as a
    fraction) whose verdicts show that grading still works.

    Every pathological response is wrong. Short answers that are within the bounds but still hard for
    math-verify (``SLOW_IN_BOUNDS``, divergent integrals) are left out: they cost the per-item timeout,
    which is not what this set measures.
    """
    rng = random.Random(seed)
    normal = [p.gold for p in load_benchmark("math500", "local")]
    golds = ["\\frac{3}{7}", "204", "(1, 2)", "2\\sqrt{3}", "x^2 + 1"]  # golds of the pathological ones
    big = FILLER * (100_000 // len(FILLER) + 1)

    def box(s: str) -> str:
        return f"{FILLER * 2}Therefore the final answer is $\\boxed{{{s}}}$."

    def other(g: str) -> str:  # another problem's gold
        return next(h for h in normal[rng.randrange(len(normal)):] + normal if h != g)

    # (kind, maker of the i-th response of this kind); "normal" makers give (response, gold, correct)
    makers = [
        ("tower", lambda i: box(_tower(str(2 + i), 5 + i % 3))),                      # 2^{2^{2^{2^{2}}}}, ...
        ("tower", lambda i: box(_tower(str(10 + i), 4))),                             # 10^{10^{10^{10}}}
        ("tower", lambda i: box(f"10^{{10^{{{5 + i}}}}}")),                           # 10^{10^5}: 10^5 digits
        ("tower", lambda i: box(f"{_tower('10', 3 + i % 2)} - {_tower('10', 3 + i % 2)} + {i}")),
        ("tower", lambda i: box(_tower("x", 4 + i))),
        ("tower", lambda i: box(_tower("e", 4 + i) + f" + {i}")),
        ("tower", lambda i: box("**".join(["9"] * (5 + i)))),                         # a Python-style chain
        ("nesting", lambda i: box("{" * (11 + 7 * i) + "1" + "}" * (11 + 7 * i))),
        ("nesting", lambda i: box("(" * (12 + 5 * i) + str(i) + ")" * (12 + 5 * i))),
        ("nesting", lambda i: box("[" * (11 + 9 * i) + str(i) + "]" * (11 + 9 * i))),
        ("nesting", lambda i: box("\\left(" * (11 + 4 * i) + "1" + "\\right)" * (11 + 4 * i))),
        ("nesting", lambda i: box("\\frac{1}{" * (11 + 3 * i) + "2" + "}" * (11 + 3 * i))),
        ("nesting", lambda i: box("\\sqrt{" * (12 + 6 * i) + "2" + "}" * (12 + 6 * i))),
        ("nesting", lambda i: box("\\{" * (11 + i) + str(i) + "\\}" * (11 + i))),
        ("long", lambda i: box("x" * (100_000 + i))),                                 # a 100 kB answer
        # just over 1000 characters
        ("long", lambda i: box("+".join(["1"] * (501 + 100 * i)))),
        ("long", lambda i: big + f" so the answer is {i}."),                          # 100 kB, no box
        ("long", lambda i: big + box(_tower("3", 5 + i))),                            # 100 kB, then a tower
        ("factorial", lambda i: box(f"(10^{{{6 + i}}})!")),
        ("factorial", lambda i: box(f"{10 ** (6 + i) + 7}!")),
        ("factorial", lambda i: box(f"\\binom{{10^{{{11 + i}}}}}{{10^{{5}}}}")),
        ("factorial", lambda i: box(f"\\sum_{{n=1}}^{{10^{{{10 + i}}}}} n^{{n}}")),
        ("factorial", lambda i: box(f"\\prod_{{k=1}}^{{{10 ** (6 + i)}}} k + 1")),
        ("digits", lambda i: box(str(rng.randrange(10 ** (60 + 30 * i), 10 ** (61 + 30 * i))))),
        ("digits", lambda i: box("1" * (51 + i) + "^{" + "9" * (50 + i) + "}")),
        ("digits", lambda i: box(f"\\frac{{{'9' * (80 + i)}}}{{{'7' * (80 + i)}}}")),
        ("digits", lambda i: box(f"0.{'3' * (51 + 20 * i)}")),
        # 7^{100000}: 84510 digits
        ("digits", lambda i: box(f"{7 + i}^{{{10 ** (5 + i)}}}")),
        ("exponents", lambda i: box(" + ".join(f"x^{{{k}}}" for k in range(41 + 10 * i, 0, -1)))),
        ("garbage", lambda i: "\\boxed{\\frac{1}{2" + f" {i}"),                       # truncated final box
        ("garbage", lambda i: "}" * (i % 13 + 1) + "\\boxed{" + "{" * (i % 9 + 1) + str(i)),
        ("garbage", lambda i: ("\\boxed{" * 2000) + str(i)),
        ("garbage", lambda i: box("".join(rng.choice("\\{}^_$()[]&%#~'\"x1 ") for _ in range(120)))),
        ("garbage", lambda i: box("".join(chr(rng.randrange(1, 0x2FFF)) for _ in range(100)))),
        # 2^{20!}: 10^17.9 digits
        ("factorial", lambda i: box(f"2^{{{20 + i}!}}")),
        ("garbage", lambda i: box(f"\\mathrm{{{i}}}\\%\\%\\%")),
        ("normal", lambda i, g: (box(g), g, True)),                                   # right as given
        ("normal", lambda i, g: (box(reformat(g, rng)), g, True)),                    # right, reformatted
        ("normal", lambda i, g: (box(other(g)), g, False)),                           # another problem's gold
        ("normal", lambda i, g: (box(f"{2 * i + 1}/{4 * i + 2}"), "\\frac{1}{2}", True)),
    ]
    cases = []
    for k in range(n):
        kind, make = makers[k % len(makers)]
        i = k // len(makers)
        if kind == "normal":
            cases.append(PathologicalCase(*make(i, normal[rng.randrange(len(normal))]), kind))
        else:
            cases.append(PathologicalCase(make(i), golds[k % len(golds)], False, kind))
    return cases


#: an answer within every plausibility bound that sympy cannot settle, whatever the gold (a divergent
#: integral: math-verify's ``simplify(gold - answer)`` runs past 20 s here against 204, 33 and 3/7; parsing it
#: takes 0.03 s): a timeout that cost its full ``timeout_s`` once per gold before project issue 36
UNSETTLED = "\\int_0^\\infty e^{x^{3}} dx"


def aime_golds() -> list[str]:
    """The golds of the shipped AIME problems (aime24, then aime25: 60 integers)."""
    return [p.gold for b in ("aime24", "aime25") for p in load_benchmark(b, "local")]


def aime_pathological_set(n: int = 200, repeats: int = 12, seed: int = 0) -> list[PathologicalCase]:
    """``n`` responses to the AIME problems (project issue 36): ``n - repeats`` of ``pathological_set``'s
    kinds against the golds of the AIME problems (the k-th pathological answer against problem ``k % 60``;
    the normal answers are their problem's gold as given, reformatted, as a fraction, or another problem's
    gold), and ``UNSETTLED`` boxed in ``repeats`` responses to ``repeats`` problems with different golds,
    spread over the set: one answer sympy cannot settle, in ``repeats`` distinct (answer, gold) tasks. Before
    the grader remembered timed-out answers, each of them cost the full timeout; now the first one does and
    the others get reason ``"timeout_seen"``.
    """
    rng = random.Random(seed)
    aime = aime_golds()
    cases = []
    for k, c in enumerate(pathological_set(n - repeats, seed)):
        if c.kind != "normal":
            cases.append(c._replace(gold=aime[k % len(aime)]))
            continue
        g = aime[(k + k // len(aime)) % len(aime)]  # shifted each round: no (answer, gold) pair twice
        j = sum(x.kind == "normal" for x in cases) % 4
        if j == 0:
            cases.append(PathologicalCase(f"{FILLER}so $\\boxed{{{g}}}$.", g, True, "normal"))
        elif j == 1:
            cases.append(PathologicalCase(f"{FILLER}so $\\boxed{{{reformat(g, rng)}}}$.", g, True, "normal"))
        elif j == 2:
            h = next(h for h in aime[k % len(aime):] + aime if int(h) != int(g))
            cases.append(PathologicalCase(f"{FILLER}so $\\boxed{{{h}}}$.", g, False, "normal"))
        else:
            cases.append(PathologicalCase(f"{FILLER}so $\\boxed{{\\frac{{{2 * int(g)}}}{{2}}}}$.", g, True,
                                          "normal"))
    distinct: list[str] = []  # the first `repeats` problems whose golds differ in value
    for g in aime:
        if len(distinct) < repeats and all(int(g) != int(h) for h in distinct):
            distinct.append(g)
    if len(distinct) < repeats:
        raise ValueError(f"repeats={repeats}: only {len(distinct)} AIME problems have different golds")
    for j, g in enumerate(distinct):
        at = min(len(cases), j * (n // repeats) + n // (2 * repeats))
        cases.insert(at, PathologicalCase(f"{FILLER}Attempt {j}: the answer is $\\boxed{{{UNSETTLED}}}$.",
                                          g, False, "integral"))
    return cases


def adversarial_strings(n: int = 1000, seed: int = 0, distinct_slow: int = 2) -> list[str]:
    """Adversarial responses: huge exponents, deep nesting, unbalanced braces, 100 kB texts, boxed garbage.

    The tests' adversarial set (tests/unit/test_grading.py grades it). Templates known to make math-verify
    slow take only ``distinct_slow`` distinct values (the grader grades identical answers once), so the
    default test stays short; the slow test and the benchmark's second pathological figure use all-distinct
    strings.
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
        # unbalanced, truncated
        lambda i: "\\boxed{\\frac{1}{2" + f" {i}",
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


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _graded(g: Grader, responses, golds):
    """(verdicts, wall seconds, CPU seconds of the parent and the workers or None, stats delta) of one call.
    The CPU of a worker the parent killed during the call is not counted (its process is gone)."""
    g.grade(["\\boxed{2\\sqrt{3}}"], ["\\sqrt{12}"])  # start the workers / import math-verify (not timed)
    s0, pids = dict(g.stats), [os.getpid()] + [w.proc.pid for w in g._workers]
    c0, t = _cpu_seconds(pids), time.perf_counter()
    v = g.grade(responses, golds)
    wall, c1 = time.perf_counter() - t, _cpu_seconds(pids)
    cpu = (c1 - c0) if (c0 is not None and c1 is not None) else None
    return v, wall, cpu, {k: g.stats[k] - s0.get(k, 0) for k in g.stats}


def aime_report(workers: int, timeout: float) -> dict:
    """Grade ``aime_pathological_set()`` on ``workers`` fresh workers and print the wall time, answers per
    CPU-second, the verdicts by reason and the math-verify calls (target: <= 10 s on 2 workers)."""
    cases = aime_pathological_set()
    with Grader(num_workers=workers, timeout_s=timeout) as g:
        v, wall, cpu, st = _graded(g, [c.response for c in cases], [c.gold for c in cases])
    reasons = Counter(x.reason for x in v)
    unexpected = [(k, c.kind, x.reason) for k, (c, x) in enumerate(zip(cases, v)) if x.correct != c.correct]
    per_cpu = f"{len(cases) / cpu:.1f}" if cpu else "n/a"
    print(f"AIME pathological set (aime_pathological_set(): {len(cases)} responses to 60 AIME problems, "
          f"{UNSETTLED} in 12 of them against 12 golds): graded in {wall:.2f}s wall on {workers} workers "
          f"(timeout_s={timeout}), {per_cpu} answers/CPU-s; target <= 10s: "
          f"{'met' if wall <= 10 else 'NOT met'}; "
          + ", ".join(f"{k}={reasons[k]}" for k in sorted(reasons)) + f"; sent to math-verify {st['pool']}, "
          f"timeouts {st['timeouts']}, timeouts seen {st.get('timeouts_seen', 0)}, kills {st['kills']}; "
          f"verdicts as expected: {len(cases) - len(unexpected)}/{len(cases)}"
          + (f" (unexpected: {unexpected[:5]})" if unexpected else ""), flush=True)
    return {"wall": wall, "cpu": cpu, "reasons": dict(reasons), "unexpected": unexpected, "stats": st}


def plausibility_report(workers: int, timeout: float, adversarial: bool = True) -> dict:
    """Print the gold-answer maxima and bounds, the gold self-agreement and the pathological set's grading
    (wall time on ``workers`` fresh workers, verdict counts by reason), then (``adversarial``) the same for
    200 all-distinct strings of the tests' adversarial generator; returns the numbers."""
    golds = shipped_golds()
    maxima = shipped_gold_maxima(golds)
    n_files = len({b for b, _, _ in golds})
    print(f"gold-answer maxima ({len(golds)} golds, {n_files} shipped files): "
          + ", ".join(f"{k} {_fmt(round(v, 2))} ({b}: {g[:40]!r})" for k, (v, b, g) in maxima.items()),
          flush=True)
    print("plausibility bounds (common.grading.BOUNDS): " + ", ".join(
        f"{k} {_fmt(v)} (10^{v - maxima[k][0]:.4g} times the gold max value)" if k.endswith("_log10")
        else f"{k} {_fmt(v)} ({v / maxima[k][0]:.1f}x the gold max)" for k, v in BOUNDS.items()), flush=True)
    drift = [k for k in BOUNDS if abs(maxima[k][0] - GOLD_MAXIMA[k]) > 0.01]
    if drift:
        print(f"WARNING: the gold maxima differ from common.grading.GOLD_MAXIMA for {drift}", flush=True)

    cases = pathological_set()
    with Grader(num_workers=workers, timeout_s=timeout) as g:
        t = time.perf_counter()
        g.grade(["\\boxed{2\\sqrt{3}}"], ["\\sqrt{12}"])  # start the workers / import math-verify
        setup = time.perf_counter() - t
        agree = gold_self_agreement(g, golds)
        s0 = dict(g.stats)
        t = time.perf_counter()
        v = g.grade([c.response for c in cases], [c.gold for c in cases])
        wall = time.perf_counter() - t
        st = {k: g.stats[k] - s0[k] for k in g.stats}
    print(f"gold self-agreement: {agree['rate']:.4f} ({agree['n'] - len(agree['wrong'])}/{agree['n']} "
          f"shipped golds boxed and graded correct against themselves; {len(agree['rejected'])} golds "
          f"rejected by the pre-check alone"
          f"{': ' + repr(agree['rejected'][:5]) if agree['rejected'] else ''})", flush=True)
    reasons = Counter(x.reason for x in v)
    bounds = Counter(x.bound for x in v if x.reason == "implausible")
    unexpected = [(k, c.kind, x.reason) for k, (c, x) in enumerate(zip(cases, v)) if x.correct != c.correct]
    n_normal = sum(c.kind == "normal" for c in cases)
    print(f"pathological set: {len(cases)} responses ({n_normal} normal, "
          f"{sum(len(c.response) for c in cases) / 1e6:.1f} MB) graded in {wall:.2f}s wall on {workers} "
          f"workers (timeout_s={timeout}; worker start {setup:.1f}s, not included); target <= 15s: "
          f"{'met' if wall <= 15 else 'NOT met'}", flush=True)
    print("pathological set verdicts by reason: " + ", ".join(f"{k}={reasons[k]}" for k in sorted(reasons))
          + "; implausible by bound: " + ", ".join(f"{k}={bounds[k]}" for k in sorted(bounds))
          + f"; sent to math-verify {st['pool']}, timeouts {st['timeouts']}, kills {st['kills']}; "
          f"verdicts as expected: {len(cases) - len(unexpected)}/{len(cases)}"
          + (f" (unexpected: {unexpected[:5]})" if unexpected else ""), flush=True)
    out = {"maxima": maxima, "agreement": agree, "wall": wall, "reasons": dict(reasons),
           "bounds": dict(bounds), "unexpected": unexpected}
    if not adversarial:
        return out
    out["aime"] = aime_report(workers, timeout)
    # the tests' adversarial strings, all distinct: within-bound slow ones (divergent integrals) still reach
    # math-verify and cost the per-item timeout
    adv = adversarial_strings(200, distinct_slow=200)
    with Grader(num_workers=workers, timeout_s=timeout) as g:
        g.grade(["\\boxed{2\\sqrt{3}}"], ["\\sqrt{12}"])
        s0 = dict(g.stats)
        t = time.perf_counter()
        va = g.grade(adv, ["\\frac{3}{7}"] * len(adv))
        adv_wall = time.perf_counter() - t
        sa = {k: g.stats[k] - s0[k] for k in g.stats}
        # an RL group repeating one slow answer 12 times: graded once, its timeout every duplicate's
        rep = [f"Attempt {k}: so $\\boxed{{{REPEATED_SLOW}}}$." for k in range(12)]
        s0, t = dict(g.stats), time.perf_counter()
        vr = g.grade(rep, ["\\frac{3}{7}"] * len(rep))
        rep_wall, rep_calls = time.perf_counter() - t, g.stats["pool"] - s0["pool"]
    ra = Counter(x.reason for x in va)
    print(f"tests' adversarial strings (adversarial_strings(200, distinct_slow=200)): graded in "
          f"{adv_wall:.2f}s wall on {workers} workers (timeout_s={timeout}); target <= 15s: "
          f"{'met' if adv_wall <= 15 else 'NOT met'}; "
          + ", ".join(f"{k}={ra[k]}" for k in sorted(ra)) + f"; sent to math-verify {sa['pool']}, "
          f"timeouts {sa['timeouts']}, kills {sa['kills']}; "
          f"correct verdicts {sum(x.correct for x in va)} (expect 0)", flush=True)
    print(f"one slow answer repeated 12 times ({REPEATED_SLOW}): {rep_wall:.2f}s wall, sent to math-verify "
          f"{rep_calls} time(s), verdicts {dict(Counter(x.reason for x in vr))} (without de-duplication: "
          f"12 calls, ~{12 * rep_wall / max(1, workers):.0f}s if each costs as much)", flush=True)
    return {**out, "adversarial_wall": adv_wall, "adversarial_reasons": dict(ra)}


def main(argv=None) -> None:
    import json
    import subprocess
    import sys

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="responses in the MATH-500-like mix")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--pathological", action="store_true",
                    help="only the plausibility report (gold maxima and bounds, gold self-agreement, "
                         "the pathological set)")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: "workers|name|warm" -> one JSON line
    args = ap.parse_args(argv)

    if args.one:
        w, name, warm = args.one.split("|")
        print(json.dumps(_measure(args.n, int(w), args.timeout, name, warm == "1")))
        return
    if args.pathological:
        plausibility_report(args.workers, args.timeout)
        return

    data = _datasets(args.n)
    rs, gs = data["full mix"]
    n_int = sum(bool(re.fullmatch(r"-?\d+", g)) for g in gs)
    print(f"MATH-500-like mix: {len(rs)} responses; golds: {len(rs) - n_int} non-integer "
          f"({100 * (len(rs) - n_int) / len(rs):.0f}%), {n_int} integer; cpus: {os.cpu_count()}, "
          f"load average: {os.getloadavg()[0]:.1f}", flush=True)
    for workers in (0, args.workers):
        label = "in-process" if workers == 0 else f"{workers} workers"
        for name in data:
            for warm in (False, True):
                if warm and name.startswith("integer"):
                    continue
                out = subprocess.run([sys.executable, "-m", "bench.grading", "--n", str(args.n),
                                      "--timeout", str(args.timeout), "--one",
                                      f"{workers}|{name}|{int(warm)}"],
                                     capture_output=True, text=True, check=True)
                m = json.loads(out.stdout.strip().splitlines()[-1])
                # answers per CPU-second of all grading processes: what an unloaded machine gives per core
                per_cpu = f"{m['n'] / m['cpu']:9.1f}" if m["cpu"] else "      n/a"
                print(f"[{label:>10}] {name:<30} {'warm' if warm else 'cold'}  {m['n']:5d} answers "
                      f"{m['rate']:9.1f} answers/s wall, {per_cpu} answers/CPU-s  accuracy {m['acc']:.3f}  "
                      f"(decided in parent {m['parent']}, math-verify {m['pool']} unique, "
                      f"timeouts {m['timeouts']}; setup {m['setup']:.1f}s)", flush=True)
    _timeout_cost(args.n, args.workers)
    plausibility_report(args.workers, args.timeout)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
