"""How many seeds the headline comparisons need: a results table's per-seed gaps -> paired-t power.

    python -m reproduce.studies.power --claims reproduce/results/tiny/    # the confirmatory family
    python -m reproduce.studies.power --claims DIR --max-seeds 19          # ... within a seed budget
    python -m reproduce.studies.power --results reproduce/results/tiny/results.parquet

--claims (the confirmation seeds' number, docs/claims.md): for every confirmatory entry of the claims register
(reproduce/matrix/claims.yaml), its per-seed values in a design results folder (figures/claims.py, as the
checklist computes them), their mean d and sd s, and the seeds a paired two-sided t test needs for power 0.8
at the Holm level of the entry's rank among the family's design p-values, α/(m − rank + 1), and at the
conservative α/m (every entry at the smallest level); the confirmation preset runs the largest n(α/m), at
least MIN_CONFIRM_SEEDS (with --max-seeds N, the budget: the largest among the entries that need at most N;
the others are named as expected to stay undecided).

For each comparison (`COMPARISONS`: arm minus reference, each seed's end value = the mean of its last
`END_POINTS` validation points; "theta*" = the arm's own first stage-2 point, i.e. θ*'s weights) it prints the
per-seed gaps, their mean d and standard deviation s, and the seeds n at which a two-sided paired t-test at
level 0.05 rejects "no difference" with probability ≥ 0.8 if the true gap is d and the seed sd is s:

    power(n) = P(|T| > t_{0.975, n-1}),   T ~ noncentral t(df = n - 1, nc = d·√n / s)

The evaluation noise is read from an arm whose weights never move (`--fixed-arm`, default opd: with θ* as its
teacher OPD's update is exactly zero, so its validations are repeated evaluations of θ*): σ_e = pooled sd of
its points within a seed. A gap of two end values carries σ_g² = 2·σ_e²/END_POINTS of it; with m times the
validation samples per prompt that part becomes σ_g²/m, so the seed sd would be s_m = √(s² − σ_g²(1 − 1/m)).
The table prints n for m = 1, 2, 4: seeds vs validation samples. Reads the results file only.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Optional

import pandas as pd
from scipy import integrate, stats

END_POINTS = 3                       # an arm's end value: mean of its last 3 validation points (checklist)
ALPHA, POWER = 0.05, 0.8
THETA = "theta*"
# (label, arm, reference): issue 30's headline comparisons; reset arms' end windows lie after their 1st reset
COMPARISONS = (("ARMOR vs dapo_cont", "armor", "dapo_cont"),
               ("anchor-only vs dapo_cont", "anchor_only", "dapo_cont"),
               ("reset every 20 vs never", "armor_reset_20", "armor_reset_never"),
               ("reset every 40 (armor) vs never", "armor", "armor_reset_never"),
               ("KL beta = 1 vs theta*", "kl_k3_b1", THETA))


def validation_curves(df: pd.DataFrame) -> dict[tuple[str, int], list[tuple[int, float]]]:
    """(arm, seed) -> [(step, value)] of the first validation benchmark's avg@k rows."""
    v = df[(df["source"] == "validation") & df["metric"].str.startswith("avg@")]
    if v.empty:
        raise ValueError("the results have no validation avg@k rows")
    v = v[v["benchmark"] == sorted(v["benchmark"].unique())[0]]
    return {(a, int(s)): sorted(zip(g["step"].astype(int), g["value"].astype(float)))
            for (a, s), g in v.groupby(["arm", "seed"])}


def end_value(curve: list[tuple[int, float]]) -> float:
    tail = [x for _, x in curve[-END_POINTS:]]
    return sum(tail) / len(tail)


def gaps(curves: dict, arm: str, ref: str) -> dict[int, float]:
    """seed -> end(arm) − end(ref) (ref = THETA: the arm's first point), on the seeds both ran."""
    out = {}
    for (a, s), c in sorted(curves.items()):
        if a != arm:
            continue
        if ref == THETA:
            out[s] = end_value(c) - c[0][1]
        elif (ref, s) in curves:
            out[s] = end_value(c) - end_value(curves[(ref, s)])
    return out


def eval_sd(curves: dict, arm: str) -> Optional[float]:
    """Pooled within-seed sd of an arm's validation points (an arm whose weights do not move: evaluation
    noise)."""
    ss, dof = 0.0, 0
    for (a, _), c in curves.items():
        if a == arm and len(c) > 1:
            xs = [x for _, x in c]
            m = sum(xs) / len(xs)
            ss += sum((x - m) ** 2 for x in xs)
            dof += len(xs) - 1
    return math.sqrt(ss / dof) if dof else None


def power(n: int, d: float, s: float, alpha: float = ALPHA) -> float:
    """Power of the two-sided paired t-test with n seeds at true mean gap d and seed sd s."""
    if n < 2:
        return 0.0
    if s <= 0:
        return 1.0 if d != 0 else alpha
    nc, df = abs(d) * math.sqrt(n) / s, n - 1
    t = stats.t.ppf(1 - alpha / 2, df)
    # P(|Z + nc| > t·√(V/df)), V ~ χ²(df), integrated over V (scipy's nct is nan for large nc at small df)
    f = lambda v: (stats.norm.sf(t * math.sqrt(v / df) - nc) + stats.norm.cdf(-t * math.sqrt(v / df) - nc)) \
        * stats.chi2.pdf(v, df)
    return float(min(1.0, integrate.quad(f, 0, math.inf, limit=200)[0]))


def seeds_needed(d: float, s: float, target: float = POWER, n_max: int = 100,
                 alpha: float = ALPHA) -> Optional[int]:
    """The least n ≥ 2 with power(n) ≥ target at level alpha, or None up to n_max."""
    for n in range(2, n_max + 1):
        if power(n, d, s, alpha) >= target:
            return n
    return None


def claims_power(results_dir: Path, register=None) -> list[dict]:
    """Per confirmatory entry of the register, from a design results folder: {key, n (seeds), d, sd, p (the
    design seeds' raw p), along (d lies in the claimed direction), rank (Holm rank by p, 1 = smallest), level
    (α/(m − rank + 1)), n_rank, n_m (seeds for power POWER at that level and at α/m)}, or {key, why} when it
    has fewer than 2 seeds' values."""
    from figures.claims import Entry, measure
    from figures.data import load_context
    from reproduce.matrix.claims import register_meta
    ctx = load_context(Path(results_dir) / "results.parquet")
    # the register as the design run's driver bound it to its preset (results.meta.json), else given
    meta = register_meta(register) if register is not None else ctx.claims
    fam = [Entry.from_json(e) for e in meta["entries"] if e["confirmatory"]]
    m = len(fam)
    rows = []
    for e in fam:
        v = measure(ctx, e)
        xs = list((v.numbers.get("per_seed") or {}).values())
        if len(xs) < 2:
            rows.append({"key": e.key, "why": v.evidence or f"{len(xs)} seed"})
            continue
        d = sum(xs) / len(xs)
        sd = math.sqrt(sum((x - d) ** 2 for x in xs) / (len(xs) - 1))
        sign = 1.0 if e.direction == "greater" else -1.0
        rows.append({"key": e.key, "n": len(xs), "d": d, "sd": sd, "p": v.stat["p"],
                     "along": sign * d > 0})
    ranked = sorted((r for r in rows if "p" in r), key=lambda r: r["p"])
    for rank, r in enumerate(ranked, 1):
        r["rank"], r["level"] = rank, ALPHA / (m - rank + 1)
        r["n_rank"] = seeds_needed(r["d"], r["sd"], alpha=r["level"])
        r["n_m"] = seeds_needed(r["d"], r["sd"], alpha=ALPHA / m)
    return rows


def claims_report(results_dir: Path, max_seeds: Optional[int] = None) -> str:
    """The table of claims_power: the confirmation seeds each confirmatory entry needs, and the preset's
    count: max n(α/m) over the entries (with `max_seeds`, the budget: over those that need at most that
    many; the others are listed as expected to stay undecided), at least MIN_CONFIRM_SEEDS."""
    from reproduce.matrix.claims import MIN_CONFIRM_SEEDS
    rows = claims_power(results_dir)
    m = len(rows)
    lines = [f"confirmatory family of the claims register: m = {m}; design results {results_dir}",
             f"paired two-sided t, power {POWER}: n at the Holm level of the entry's rank (α/(m − rank + 1)) "
             f"and at α/m = {ALPHA / m:.4f}", "",
             f"{'entry':<34} {'seeds':>5} {'mean':>7} {'sd':>6} {'p':>8} {'rank':>4} {'level':>7} "
             f"{'n(rank)':>7} {'n(α/m)':>7}  direction"]
    for r in rows:
        if "why" in r:
            lines.append(f"{r['key']:<34} no per-seed values: {r['why']}")
            continue
        fmt = lambda n: ">100" if n is None else str(n)  # noqa: E731
        lines.append(f"{r['key']:<34} {r['n']:>5} {r['d']:+7.3f} {r['sd']:6.3f} {r['p']:8.2g} {r['rank']:>4} "
                     f"{r['level']:7.4f} {fmt(r['n_rank']):>7} {fmt(r['n_m']):>7}  "
                     f"{'claimed' if r['along'] else 'against the claim'}")
    ns = [r["n_m"] for r in rows if "n_m" in r]
    if ns and max_seeds is None:
        worst = ">100" if None in ns else str(max(max(ns), MIN_CONFIRM_SEEDS))
        lines += ["", f"the confirmation preset's seeds: max n(α/m) over the entries, at least "
                      f"{MIN_CONFIRM_SEEDS}: {worst}"]
    elif ns:
        fit = [r["n_m"] for r in rows if r.get("n_m") is not None and r["n_m"] <= max_seeds]
        out = [r["key"] for r in rows if "n_m" in r and (r["n_m"] is None or r["n_m"] > max_seeds)]
        lines += ["", f"the confirmation preset's seeds: max n(α/m) over the entries that need at most "
                      f"{max_seeds} (--max-seeds), at least {MIN_CONFIRM_SEEDS}: "
                      f"{max(fit + [MIN_CONFIRM_SEEDS])}",
                  f"expected to stay undecided (n(α/m) > {max_seeds}): {', '.join(out) or 'none'}"]
    return "\n".join(lines)


def report(df: pd.DataFrame, fixed_arm: str = "opd", sample_factors: tuple[int, ...] = (1, 2, 4)) -> str:
    curves = validation_curves(df)
    se = eval_sd(curves, fixed_arm)
    sg2 = 2 * se ** 2 / END_POINTS if se is not None else 0.0
    ms = "/".join(map(str, sample_factors))
    lines = ([f"evaluation noise: sd of one validation {se:.4f} (pooled within-seed sd of {fixed_arm}'s "
              "points);",
              f"  in a gap of two {END_POINTS}-point end values {math.sqrt(sg2):.4f}"] if se is not None else
             [f"evaluation noise: {fixed_arm} not in the results (not subtracted)"])
    lines += [f"paired t over seeds, two-sided level {ALPHA}: n = seeds for power {POWER} with m = {ms} x "
              f"the validation samples;", "  power and the 95% interval's half-width at 3/5/10 seeds", "",
              f"{'comparison':<32} {'mean':>7} {'sd':>6} {'d/sd':>5}  {'n(m=' + ms + ')':<13} {'power':<15} "
              f"{'95% CI +-'}"]
    for label, arm, ref in COMPARISONS:
        g = gaps(curves, arm, ref)
        if len(g) < 2:
            lines.append(f"{label:<32} fewer than 2 seeds in the results")
            continue
        xs = list(g.values())
        d = sum(xs) / len(xs)
        s = math.sqrt(sum((x - d) ** 2 for x in xs) / (len(xs) - 1))
        ns = []
        for m in sample_factors:
            n = seeds_needed(d, math.sqrt(max(s ** 2 - sg2 * (1 - 1 / m), 0.0)))
            ns.append(str(n) if n is not None else ">100")
        pw = "/".join(f"{power(n, d, s):.2f}" for n in (3, 5, 10))
        hw = "/".join(f"{stats.t.ppf(1 - ALPHA / 2, n - 1) * s / math.sqrt(n):.3f}" for n in (3, 5, 10))
        ratio = f"{abs(d) / s:5.2f}" if s else "  inf"
        lines.append(f"{label:<32} {d:+7.3f} {s:6.3f} {ratio}  {'/'.join(ns):<13} {pw:<15} {hw}")
        lines.append(f"  per-seed gaps ({arm} - {ref}): " + " ".join(f"{x:+.3f}" for x in xs))
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m reproduce.studies.power", description=__doc__.split("\n")[0])
    ap.add_argument("--results", default="reproduce/results/tiny/results.parquet")
    ap.add_argument("--fixed-arm", default="opd", help="an arm whose weights never move (evaluation noise)")
    ap.add_argument("--claims", type=Path, metavar="DIR",
                    help="a design results folder: the seeds each confirmatory entry of the register needs")
    ap.add_argument("--max-seeds", type=int, metavar="N",
                    help="--claims: the budget: the count covers the entries that need at most N seeds")
    a = ap.parse_args(argv)
    if a.max_seeds is not None and a.max_seeds < 2:
        ap.error(f"--max-seeds: {a.max_seeds} must be at least 2")
    if a.claims is not None:
        if not (a.claims / "results.parquet").is_file():
            ap.error(f"--claims: {a.claims} holds no results.parquet")
        print(claims_report(a.claims, a.max_seeds))
        return 0
    print(report(pd.read_parquet(a.results), a.fixed_arm))
    return 0


if __name__ == "__main__":
    sys.exit(main())
