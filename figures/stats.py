"""The statistics of the verdicts (figures/claims.py), pure functions of plain numbers; the rule that turns
them into a class is `classify` (written out in docs/verdicts.md), the family-wise control is `holm`.

    d = paired_differences({0: .15, 1: .22}, {0: .12, 1: .11})   # {seed: a - b} on the seeds both have
    s = t_interval(list(d.values()))                                # Interval(mean, lo, hi, n, sd, p)
    classify(s, floor=0.011, kind=GREATER)                          # ("yes" | "no" | "inconclusive", why)
    holm([0.01, 0.04, 0.03])                                        # [0.03, 0.06, 0.06]
    spearman([.1, .3, .2, .5], [1, 3, 2, 4])                        # Interval(mean=ρ, lo, hi, n, None, p)

The unit is the seed: each seed gives one number (a paired difference of two arms that start from the same
θ*, or a change of one arm), and the interval is Student's t interval over those numbers:
    mean ± t_{1-(1-level)/2, n-1} · sd / √n,  sd = √(Σ (x_i - mean)² / (n - 1)).
An across-seed dose-response (one pair of numbers a seed) is Spearman's ρ with a Fisher-z interval
(`spearman`). The t quantile is computed here (regularised incomplete beta function, bisection): no SciPy.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Mapping, Optional, Sequence

LEVEL = 0.95            # the intervals' confidence level
ALPHA = 0.05            # the tests' level: a class needs p (Holm-adjusted in the confirmatory family) < ALPHA
NOISE_MULTIPLE = 2.0    # an effect is decided only when |mean| >= this x the evaluation noise floor

YES, NO, INCONCLUSIVE, NOT_TESTABLE = "yes", "no", "inconclusive", "not testable here"
# claim kinds: what "yes" asserts about the per-seed quantity x
GREATER = "greater"      # x > 0 (a difference or a change in the claimed direction)
LESS = "less"            # x < 0
NO_CHANGE = "no_change"  # x = 0 within the noise (e.g. "stagnates")
NO_DROP = "no_drop"      # x is not below 0 by more than the noise (e.g. "stays stable")


@dataclass
class Interval:
    """Student's t interval of a mean over n per-seed numbers: mean, [lo, hi], sd (n-1 denominator), the
    two-sided p-value of mean = 0; lo/hi/sd/p are None with n < 2."""
    mean: float
    lo: Optional[float]
    hi: Optional[float]
    n: int
    sd: Optional[float]
    p: Optional[float]
    level: float = LEVEL

    def asdict(self) -> dict:
        return asdict(self)


SPEARMAN = "spearman"    # Verdict.stat["statistic"] of an across-seeds ρ (a t interval's record has no key)


def interval_of(stat: Mapping) -> Interval:
    """An Interval from its recorded form (Verdict.stat: Interval.asdict(), with `statistic: spearman` for
    an across-seeds ρ)."""
    return Interval(**{k: v for k, v in stat.items() if k != "statistic"})


def is_rho(stat: Optional[Mapping]) -> bool:
    """A recorded stat is an across-seeds Spearman ρ (its own units: no noise floor, no minimum effect)."""
    return (stat or {}).get("statistic") == SPEARMAN


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def sample_sd(xs: Sequence[float]) -> Optional[float]:
    """√(Σ (x - mean)² / (n - 1)); None with fewer than 2 numbers."""
    if len(xs) < 2:
        return None
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz; Numerical Recipes 6.4)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0

    def keep(v: float) -> float:
        return v if abs(v) > tiny else tiny
    c, d = 1.0, 1.0 / keep(1.0 - qab * x / qap)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))          # even step
        d, c = 1.0 / keep(1.0 + aa * d), keep(1.0 + aa / c)
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))  # odd step
        d, c = 1.0 / keep(1.0 + aa * d), keep(1.0 + aa / c)
        h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbeta) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbeta) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom: 1 - I_{df/(df+t²)}(df/2, 1/2) / 2 for t >= 0."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(q: float, df: float) -> float:
    """The q-quantile of Student's t (0 < q < 1), by bisection on t_cdf to 1e-12."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile {q} not in (0, 1)")
    lo, hi = -1e6, 1e6
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return 0.5 * (lo + hi)


def t_interval(xs: Sequence[float], level: float = LEVEL) -> Interval:
    """Student's t interval of the mean of xs (module docstring), and the two-sided p of mean = 0
    (2·(1 - t_cdf(|mean| / (sd/√n), n - 1)); p = 1 when every x is 0, 0 when they are equal and not 0)."""
    xs = [float(x) for x in xs]
    if not xs:
        raise ValueError("t_interval of no numbers")
    n, m = len(xs), mean(xs)
    sd = sample_sd(xs)
    if sd is None:
        return Interval(m, None, None, n, None, None, level)
    se = sd / math.sqrt(n)
    half = t_quantile(1.0 - (1.0 - level) / 2.0, n - 1) * se
    if se == 0.0:
        p = 1.0 if m == 0.0 else 0.0
    else:
        p = 2.0 * (1.0 - t_cdf(abs(m) / se, n - 1))
    return Interval(m, m - half, m + half, n, sd, p, level)


def ranks(xs: Sequence[float]) -> list[float]:
    """1-based ranks of xs, ties given their average rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return r


def spearman(xs: Sequence[float], ys: Sequence[float], level: float = LEVEL) -> Interval:
    """Spearman's ρ over paired numbers (one pair a seed) as an Interval (sd None): ρ = Pearson's r of the
    ranks; two-sided p of ρ = 0 from t = ρ·√((n − 2)/(1 − ρ²)), df n − 2 (p = 0 at |ρ| = 1, 1 when a side
    is constant: ρ = 0); interval tanh(atanh ρ ± z_q·√(1.06/(n − 3))) (Fieller, Hartley & Pearson 1957),
    None with n < 4. xs and ys have the same length n >= 2."""
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError(f"spearman needs two equal-length lists of >= 2 numbers, got {len(xs)}, {len(ys)}")
    n = len(xs)
    rx, ry = ranks([float(x) for x in xs]), ranks([float(y) for y in ys])
    mx, my = mean(rx), mean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    rho = 0.0 if sxx == 0 or syy == 0 else max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))
    if n < 3:
        return Interval(rho, None, None, n, None, None, level)
    if abs(rho) >= 1.0:
        p = 0.0
    else:
        t = abs(rho) * math.sqrt((n - 2) / (1.0 - rho * rho))
        p = 2.0 * (1.0 - t_cdf(t, n - 2))
    lo = hi = None
    if n >= 4 and abs(rho) < 1.0:
        z, half = math.atanh(rho), NormalDist().inv_cdf(1.0 - (1.0 - level) / 2.0) * math.sqrt(1.06 / (n - 3))
        lo, hi = math.tanh(z - half), math.tanh(z + half)
    elif n >= 4:
        lo = hi = rho
    return Interval(rho, lo, hi, n, None, p, level)


def paired_differences(a: Mapping[int, float], b: Mapping[int, float]) -> dict[int, float]:
    """{seed: a[seed] - b[seed]} over the seeds both have (None values skipped), in seed order."""
    return {s: a[s] - b[s] for s in sorted(set(a) & set(b)) if a[s] is not None and b[s] is not None}


def classify(iv: Optional[Interval], floor: Optional[float], kind: str = GREATER,
             multiple: float = NOISE_MULTIPLE, p: Optional[float] = None,
             alpha: float = ALPHA) -> tuple[str, str]:
    """(class, reason) of a claim about the per-seed quantity whose interval is iv; floor = the evaluation
    noise floor (sd of one evaluation of fixed weights), m = multiple · floor:
    - GREATER (x > 0): yes when lo > 0 and mean >= m; no when hi < 0 and -mean >= m.
    - LESS (x < 0): the mirror: yes when hi < 0 and -mean >= m; no when lo > 0 and mean >= m.
    - NO_CHANGE (x = 0): yes when the interval lies inside [-m, m]; no when it excludes 0 and |mean| >= m.
    - NO_DROP (x >= 0 up to noise): yes when lo > -m; no when hi < 0 and -mean >= m.
    A GREATER / LESS yes or no also needs p < alpha, p the test's p-value (default the interval's own, for
    which the condition is the interval's; a confirmatory entry passes its Holm-adjusted p).
    Otherwise inconclusive; always inconclusive without a measured floor or with fewer than 2 seeds."""
    if iv is None:
        return INCONCLUSIVE, "no seed has both numbers"
    if floor is None:
        return INCONCLUSIVE, "noise floor not measured"
    if iv.lo is None or iv.hi is None:
        return INCONCLUSIVE, f"{iv.n} seed: no interval"
    m = multiple * floor
    big = abs(iv.mean) >= m
    excl = f"interval excludes 0 and |mean| {abs(iv.mean):.3f} >= {multiple:g} x floor {m:.3f}"
    if kind in (GREATER, LESS):
        sign = 1.0 if kind == GREATER else -1.0
        lo, hi = sorted((sign * iv.lo, sign * iv.hi))
        cls = YES if lo > 0 and big else NO if hi < 0 and big else None
        if cls is not None:
            pv = iv.p if p is None else p
            if pv is None or pv >= alpha:
                return INCONCLUSIVE, (f"{excl}, but p {_p(pv)} >= {alpha:g}" + (f" (raw p {_p(iv.p)})"
                                                                                  if p is not None else ""))
            tail = f", p {_p(pv)} < {alpha:g}" + (" (Holm-adjusted)" if p is not None else "")
            return cls, excl + tail + ("" if cls == YES else " (the other direction)")
    elif kind == NO_CHANGE:
        if -m <= iv.lo and iv.hi <= m:
            return YES, f"interval inside ±{multiple:g} x floor = ±{m:.3f}"
        if (iv.lo > 0 or iv.hi < 0) and big:
            return NO, excl
    elif kind == NO_DROP:
        if iv.lo > -m:
            return YES, f"interval above -{multiple:g} x floor = {-m:.3f}"
        if iv.hi < 0 and big:
            return NO, excl
    else:
        raise ValueError(f"unknown claim kind {kind!r}")
    return INCONCLUSIVE, (f"interval [{iv.lo:+.3f}, {iv.hi:+.3f}] and mean {iv.mean:+.3f} vs {multiple:g} x "
                          f"floor {m:.3f}: not decided")


def _p(p: Optional[float]) -> str:
    return "n/a" if p is None else f"{p:.2g}"


def holm(ps: Sequence[Optional[float]]) -> list[float]:
    """Holm's step-down adjusted p-values of a family of m tests, in the order given. With the p-values
    sorted ascending, p_(1) <= ... <= p_(m):

        adj_(i) = max_{j <= i} min(1, (m - j + 1) · p_(j))

    A test without a p-value (None: not run, not testable, one seed) counts as p = 1: it stays in the family
    (m does not shrink) and is never rejected. Ties keep their given order. Rejecting adj < α controls the
    family-wise error rate at α."""
    m = len(ps)
    filled = [1.0 if p is None else float(p) for p in ps]
    order = sorted(range(m), key=lambda i: filled[i])
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * filled[i]))
        out[i] = running
    return out


def combine(classes: Sequence[str]) -> str:
    """One class from sub-claims that must all hold: no if any is no, yes if all are yes, not testable if all
    are, else inconclusive (not-testable parts dropped when others are testable)."""
    testable = [c for c in classes if c != NOT_TESTABLE]
    if not testable:
        return NOT_TESTABLE
    if NO in testable:
        return NO
    if all(c == YES for c in testable):
        return YES
    return INCONCLUSIVE
