"""Grading throughput benchmark (not a test).

    python -m eval.bench_grading [--n 2000] [--workers 2] [--timeout 5]

Builds MATH-500-like responses from the MATH-500 golds: ~1 kB of reasoning text ending in a boxed answer,
mixing exact golds, reformatted golds (\\dfrac, a/b, spaces, "x = ..."), wrong golds (another problem's) and
unboxed answers. Reports answers/s in-process and with worker processes, separately for the non-integer part
(math-verify) and for integer answers (the fast path, as in RL on DAPO-style/tiny-world answers), and the
wall-time cost of one pathological answer that hits the timeout (worker alarm, and the parent's kill).
Target: >= 200 answers/s with 2 workers on the MATH-500-like mix.

Wall-clock rates depend on how loaded the machine is; "answers/CPU-s" (answers per CPU-second used by the
parent and the workers) does not, and times the number of free cores estimates the unloaded rate.
"""
from __future__ import annotations

import argparse
import os
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
    bad = "\\boxed{10^{10^{10^{10}}}}"
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
            print(f"timeout cost ({label}, timeout_s={timeout}, {workers} workers): one pathological answer "
                  f"adds {t_bad - t_base:+.2f}s wall to a 200-answer batch ({t_base:.2f}s -> {t_bad:.2f}s; "
                  f"verdict reason: {v[-1].reason}; kills={g.stats['kills']}, respawns={g.stats['respawns']})",
                  flush=True)


def main(argv=None) -> None:
    import json
    import subprocess
    import sys

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="responses in the MATH-500-like mix")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: "workers|name|warm" -> one JSON line
    args = ap.parse_args(argv)

    if args.one:
        w, name, warm = args.one.split("|")
        print(json.dumps(_measure(args.n, int(w), args.timeout, name, warm == "1")))
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
                out = subprocess.run([sys.executable, "-m", "eval.bench_grading", "--n", str(args.n),
                                      "--timeout", str(args.timeout), "--one", f"{workers}|{name}|{int(warm)}"],
                                     capture_output=True, text=True, check=True)
                m = json.loads(out.stdout.strip().splitlines()[-1])
                # answers per CPU-second of all grading processes: what an unloaded machine gives per core
                per_cpu = f"{m['n'] / m['cpu']:9.1f}" if m["cpu"] else "      n/a"
                print(f"[{label:>10}] {name:<30} {'warm' if warm else 'cold'}  {m['n']:5d} answers "
                      f"{m['rate']:9.1f} answers/s wall, {per_cpu} answers/CPU-s  accuracy {m['acc']:.3f}  "
                      f"(decided in parent {m['parent']}, math-verify {m['pool']} unique, "
                      f"timeouts {m['timeouts']}; setup {m['setup']:.1f}s)", flush=True)
    _timeout_cost(args.n, args.workers)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
