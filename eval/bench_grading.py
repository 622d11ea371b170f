"""Grading throughput benchmark (not a test).

    python -m eval.bench_grading [--n 2000] [--workers 2] [--timeout 5]

Builds MATH-500-like responses from the MATH-500 golds: ~1 kB of reasoning text ending in a boxed answer,
mixing exact golds, reformatted golds (\\dfrac, a/b, spaces, "x = ..."), wrong golds (another problem's) and
unboxed answers. Reports answers/s in-process and with worker processes, separately for the non-integer part
(math-verify) and for integer answers (the fast path, as in RL on DAPO-style/tiny-world answers), and the
wall-time cost of one pathological answer that hits the timeout (worker alarm, and the parent's kill).
Target: >= 200 answers/s with 2 workers on the MATH-500-like mix.
"""
from __future__ import annotations

import argparse
import random
import re
import time

from eval.benchmarks import load_benchmark
from eval.grading import Grader

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


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="responses in the MATH-500-like mix")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=5.0)
    args = ap.parse_args(argv)

    responses, golds = make_responses(args.n)
    is_int = [bool(re.fullmatch(r"-?\d+", g)) for g in golds]
    nonint = [(r, g) for r, g, k in zip(responses, golds, is_int) if not k]
    ints = [(r, g) for r, g, k in zip(responses, golds, is_int) if k]
    print(f"MATH-500-like mix: {len(responses)} responses, {len(nonint)} with non-integer golds "
          f"({100 * len(nonint) / len(responses):.0f}%), {len(ints)} integer")
    dapo_like = [(f"{FILLER * 5}so the answer is $\\boxed{{{n + (i % 3 == 0)}}}$.", str(n))
                 for i, n in enumerate(random.Random(1).choices(range(1000), k=5000))]

    sets = [("full mix", responses, golds),
            ("non-integer golds only", [r for r, _ in nonint], [x for _, x in nonint]),
            ("integer fast path (DAPO-like)", [r for r, _ in dapo_like], [x for _, x in dapo_like])]
    warm_r, warm_g = make_responses(300, seed=99)  # different responses, same distribution
    for workers in (0, args.workers):
        label = "in-process" if workers == 0 else f"{workers} workers"
        for name, rs, gs in sets:
            for warm in (False, True):
                if warm and name.startswith("integer"):
                    continue
                # a fresh grader per measurement: no caches shared between measurements
                with Grader(num_workers=workers, timeout_s=args.timeout) as g:
                    t0 = time.perf_counter()
                    g.grade(["\\boxed{\\frac{1}{3}}"], ["2/6"])  # start the workers (not timed)
                    if warm:
                        g.grade(warm_r, warm_g)  # steady state of a long-lived grader (not timed)
                    prep = time.perf_counter() - t0
                    s0 = dict(g.stats)
                    r, acc = rate(g, rs, gs)
                    d = {k: g.stats[k] - s0[k] for k in g.stats}
                    state = "warm" if warm else "cold"
                    print(f"[{label:>10}] {name:<30} {state}  {len(rs):5d} answers {r:9.1f} answers/s  "
                          f"accuracy {acc:.3f}  (decided in parent {d['parent']}, math-verify {d['pool']} "
                          f"unique, timeouts {d['timeouts']}; setup {prep:.1f}s)")

    # cost of one timeout: a batch of 200 ordinary answers with and without one pathological string
    base_r, base_g = [r for r, _ in nonint[:200]], [x for _, x in nonint[:200]]
    bad = "\\boxed{10^{10^{10^{10}}}}"
    for soft, label in ((True, "worker alarm"), (False, "parent kill + respawn")):
        timeout = 1.0
        with Grader(num_workers=args.workers, timeout_s=timeout, soft_timeout=soft) as g:
            g.grade(base_r, base_g)  # warm: the timed batches below hit the same caches
            t = time.perf_counter()
            g.grade(base_r, base_g)
            t_base = time.perf_counter() - t
            t = time.perf_counter()
            v = g.grade(base_r + [bad], base_g + ["5"])
            t_bad = time.perf_counter() - t
            print(f"timeout cost ({label}, timeout_s={timeout}): one pathological answer adds "
                  f"{t_bad - t_base:+.2f}s wall to a 200-answer batch (verdict reason: {v[-1].reason}; "
                  f"kills={g.stats['kills']}, respawns={g.stats['respawns']})")


if __name__ == "__main__":
    main()
