"""The checklist's record: `Verdict` (one decided claim or world check, with its numbers), the per-seed
helpers the claims engine (figures/claims.py) and the world checks (figures/world_checks.py) share, and the
files (checklist.json / world_checks.json: `write_verdicts`, `read_verdicts`) and terminal lines
(`verdict_lines`) the driver prints at its end (reproduce/run_all.py print_verdicts).

Each decided claim names the quantity it compares, per seed (the unit), Student's t interval of its mean over
seeds (figures/stats.py), its raw p and, in the confirmatory family of a confirmation preset, its
Holm-adjusted p, and the evaluation noise floor (noise_floor.json beside the table; reproduce/jobs/noise.py).
The rule that gives the class is figures.stats.classify's (docs/verdicts.md); the register of the claims and
their quantities is figures/claims.py's.

"end" = the mean of a seed's last END_WINDOW validation points; a training metric "at" a step = the mean of
the REWARD_WINDOW logged steps nearest it.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from . import stats as S
from .data import Context, Curve

# collapse_stats (the world checks): a peak this far above the end, before the end window
COLLAPSE_DROP = 0.03
END_WINDOW = 3            # validation points averaged for a seed's end value
REWARD_WINDOW = 5         # metrics steps averaged for the training reward (and KL) at a point

YES, NO, NOT_RUN = S.YES, S.NO, "not run"
INCONCLUSIVE, NOT_TESTABLE = S.INCONCLUSIVE, S.NOT_TESTABLE


@dataclass
class Verdict:
    key: str
    question: str
    verdict: str
    evidence: str
    numbers: dict = field(default_factory=dict)
    per_seed: dict = field(default_factory=dict)     # seed -> {"verdict", "evidence"} (world checks)
    quantity: str = ""                                # what is compared, per seed
    stat: dict = field(default_factory=dict)         # the deciding interval (figures.stats.Interval.asdict)
    floor: Optional[float] = None                    # the evaluation noise floor it was held against
    reason: str = ""                                  # why this class (figures.stats.classify)
    p_adjusted: Optional[float] = None               # Holm-adjusted p (confirmatory family, confirm seeds)
    confirmatory: bool = False                       # the register's flag (decided by Holm on confirm seeds)
    decided_as: str = ""                             # confirmatory (Holm, m = ...) | exploratory (raw p)
    min_effect: Optional[float] = None               # |mean| needed for yes / no (NOISE_MULTIPLE x floor)
    paper: str = ""                                  # where the paper makes the claim
    direction: str = ""                              # greater | less | no_change | no_drop
    split: str = ""                                  # validation | test | train


def _f(x: Optional[float], nd: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{nd}f}"


def end_value(c: Curve) -> Optional[float]:
    if c.empty:
        return None
    tail = c.mean[-END_WINDOW:]
    return sum(tail) / len(tail)


@dataclass
class CollapseStats:
    peak: float
    peak_step: int
    end: float
    end_from: int
    start: float
    drop: float
    collapsed: bool


def collapse_stats(c: Curve) -> Optional[CollapseStats]:
    if c.empty:
        return None
    i = max(range(len(c)), key=lambda j: (c.mean[j], -c.step[j]))
    end = end_value(c)
    end_from = c.step[-min(END_WINDOW, len(c))]
    drop = c.mean[i] - end
    collapsed = drop >= COLLAPSE_DROP and c.step[i] < end_from
    return CollapseStats(c.mean[i], c.step[i], end, end_from, c.mean[0], drop, collapsed)


def _window_mean(c: Curve, center: Optional[int] = None) -> Optional[float]:
    if c.empty:
        return None
    if center is None:
        vals = c.mean[-REWARD_WINDOW:]
    else:
        near = sorted(range(len(c)), key=lambda j: abs(c.step[j] - center))[:REWARD_WINDOW]
        vals = [c.mean[j] for j in near]
    return sum(vals) / len(vals)


# ------------------------------------------------------------------------------------- per-seed numbers
def floor_of(ctx: Context) -> Optional[float]:
    """The evaluation noise floor: noise_floor.json's sd (one validation of fixed weights), at least the
    score's resolution (1 / (problems x samples): a floor measured as 0 would let any interval decide), or
    None."""
    nf = ctx.noise_floor
    return max(float(nf["sd"]), float(nf.get("resolution") or 0.0)) if nf else None


def _seed_curve(ctx: Context, arm: str, seed: int) -> Curve:
    return ctx.for_seed(seed).val_curve(arm)


def _by_seed(ctx: Context, arm: str, fn) -> dict[int, float]:
    """{seed: fn(that seed's validation curve of arm)} over the arm's seeds with a curve (None results
    dropped)."""
    out = {}
    for s in ctx.seeds(arm):
        c = _seed_curve(ctx, arm, s)
        v = fn(c, s) if not c.empty else None
        if v is not None:
            out[s] = float(v)
    return out


def ends(ctx: Context, arm: str) -> dict[int, float]:
    return _by_seed(ctx, arm, lambda c, s: end_value(c))


def starts(ctx: Context, arm: str) -> dict[int, float]:
    """The arm's first validation point per seed (a stage-2 arm: θ*'s validation)."""
    return _by_seed(ctx, arm, lambda c, s: c.mean[0])


def _seeds_str(d: dict) -> str:
    return ", ".join(f"s{s} {v:+.3f}" for s, v in d.items())


def describe(iv: S.Interval, floor: Optional[float], p_adjusted: Optional[float] = None) -> str:
    """`mean +0.052, 95% t interval [-0.079, +0.182], 3 seeds, p 0.23, noise floor 0.011 (x2 = 0.022)`; with
    a Holm-adjusted p (a confirmatory entry on confirmation seeds) `p 0.01 (Holm-adjusted 0.04)`."""
    ci = (f"{iv.level:.0%} t interval [{iv.lo:+.3f}, {iv.hi:+.3f}]" if iv.lo is not None else "no interval")
    p = f", p {iv.p:.2g}" if iv.p is not None else ""
    if p_adjusted is not None:
        p += f" (Holm-adjusted {p_adjusted:.2g})" if p else f", Holm-adjusted p {p_adjusted:.2g}"
    fl = (f"noise floor {floor:.3f} (x{S.NOISE_MULTIPLE:g} = {S.NOISE_MULTIPLE * floor:.3f})"
          if floor is not None
          else "noise floor not measured")
    return f"mean {iv.mean:+.3f}, {ci}, {iv.n} seed{'s' if iv.n != 1 else ''}{p}, {fl}"


def describe_rho(iv: S.Interval, p_adjusted: Optional[float] = None) -> str:
    """An across-seeds Spearman ρ (figures.stats.spearman): `Spearman ρ +0.829, 95% Fisher-z interval
    [+0.019, +0.982], 6 seeds, p 0.042`: no noise floor (ρ has its own units)."""
    return ("Spearman ρ " + describe(iv, None, p_adjusted).split(", noise floor")[0].replace("mean ", "", 1)
            .replace("t interval", "Fisher-z interval"))


def theta_star_copy(ctx: Context, arm: str) -> Optional[str]:
    """Why `arm`'s weights are θ*'s (so no comparison with it tests anything), or None: its eval rows equal
    dapo's at θ* on every seed (the same evaluation seed gives the same numbers only for the same weights), or
    its config's teacher is its start checkpoint."""
    if ctx.arm_facts(arm).get("teacher_is_start"):
        return f"{arm}'s teacher is its start checkpoint (config)"
    mine, base = ctx.eval_rows(arm), ctx.eval_rows("dapo")
    if mine.empty or base.empty:
        return None
    cols = ["seed", "benchmark", "metric", "value"]
    steps, _ = ctx.select_steps(arm)
    m = ctx.eval_rows_at(arm, steps)[cols].sort_values(cols[:3]).reset_index(drop=True)
    b = base[base["seed"].isin(list(steps))][cols].sort_values(cols[:3]).reset_index(drop=True)
    if len(m) and len(m) == len(b) and (m == b).all().all():
        return (f"{arm}'s eval rows equal θ*'s (dapo at its peak) on every seed, bit for bit: its weights "
                f"are θ* (its teacher is its start), so the check would be ARMOR vs θ*")
    return None


def write_verdicts(verdicts: list[Verdict], out_dir, stem: str, markdown: str) -> list[Verdict]:
    """OUT/<stem>.md (the markdown given) and OUT/<stem>.json (every verdict with its numbers)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(markdown)
    (out / f"{stem}.json").write_text(json.dumps([asdict(v) for v in verdicts], indent=1, default=str))
    return verdicts


def read_verdicts(path) -> list[Verdict]:
    """The verdicts write_verdicts wrote to `path` (OUT/<stem>.json)."""
    return [Verdict(**v) for v in json.loads(Path(path).read_text())]


def verdict_lines(verdicts: list[Verdict]) -> list[str]:
    """One line a verdict, for a terminal: `  [class] question`, and for a stated statistic `: quantity: mean,
    interval, seeds, p (raw), Holm-adjusted p (confirmatory family), noise floor` (a not-testable or not-run
    one: its reason)."""
    out = []
    for v in verdicts:
        line = f"  [{v.verdict}] {v.question}"
        if v.stat:
            iv = S.interval_of(v.stat)
            if S.is_rho(v.stat):              # an across-seeds ρ: its own interval and p
                desc = describe_rho(iv, v.p_adjusted)
            else:
                desc = describe(iv, v.floor, v.p_adjusted)
                if v.split == "train":        # a training metric: decided on its interval alone
                    desc = desc.split(", noise floor")[0] + ", a training metric: its interval alone"
            line += f" — {v.quantity}: {desc}"
        elif v.verdict in (NOT_TESTABLE, NOT_RUN) and v.evidence:
            line += f" — {v.evidence}"
        out.append(line)
    return out
