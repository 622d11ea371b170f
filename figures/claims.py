"""The claims engine: every entry of the claims register, decided from the results (docs/claims.md,
docs/verdicts.md). It replaces the hand-written checks: checklist.json / checklist.md hold one verdict an
entry, with its per-seed values, raw p and (confirmatory family, confirmation seeds) Holm-adjusted p.

    ctx = load_context("reproduce/results/tiny/results.parquet")
    verdicts = run_claims(ctx)            # [Verdict], in the register's order
    write_checklist(ctx, "out/")          # checklist.md + checklist.json + the forest plot claims.png/.pdf
    python -m figures.claims reproduce/results/tiny/                 # one line an entry
    python -m figures.claims --readme-table reproduce/results/tiny/  # the README's claims table

The register reaches the figures as the driver resolved it for the preset (results.meta.json `claims`,
`Context.claims`): the seeds' role (`design`: every entry exploratory, raw p, no Holm; `confirm`: the
confirmatory entries one Holm family), roles resolved to arms ({name, arm, before}), and whether the preset
runs each entry's arms. Everything else comes from `Context`.

Quantities (per seed; fractions of the split's score; `QUANTITIES`; "end" = mean of the last END_WINDOW
validation points; θ* = the seed's θ* step, θ* value = the validation there; a composite arm, e.g. the role
ARMOR = armor_restart with `before` armor_reset_never, is its `before` arm's curve before its own start):
  end_minus_theta   [A]     end(A) − θ* value
  end_minus_start   [A]     end(A) − A's first validation point
  end_diff          [A, B]  end(A) − end(B)
  stage1_fall       [A]     A's value at θ* − its end (a stage-1 arm)
  reward_rise       [A]     reward_mean at the end − at θ* (REWARD_WINDOW logged steps each)
  peak_minus_theta  [A]     peak(A after θ*) − θ* value; peak = max over steps > θ* of the curve smoothed
                            (centred) over protocol.peak_selection_window points
  peak_minus_peak   [A, B]  peak(A after θ*) − peak(B), B a stage-1 arm (the max of its smoothed curve)
  peak_after_diff   [A, B]  max(A) − max(B) over their common validation steps after A's divergence point
                            (θ* + τ for an in-run reset every τ, the restart point for a restarted run)
  mid_diff          [A, B]  mean(A) − mean(B) over their common validation steps in stage 2's middle third
                            [start + S/3, start + 2S/3], S = protocol.stage2_steps
  kl_contrast       [A, B]  log(rKL_A / rKL_B) − log(fKL_A / fKL_B), each KL the mean of the REWARD_WINDOW
                            logged steps nearest the stage-2 step protocol.kl_after_steps
  eval_diff         [A, B]  test: A's score at `at` − B's at θ* (a stage-1 B) or at `at`; score = mean over
                            protocol.eval_benchmarks of avg@k (largest k); at: last (the run's last step) |
                            best (the checkpoint the evaluation chose by validation, as the tables)
  pass_diff         [A, B]  the same with pass@k (the largest k)

Classes (figures.stats.classify, the minimum effect m = NOISE_MULTIPLE × the noise floor; a training metric
(split train) is decided on its interval alone, m = 0): greater / less: yes when p < 0.05 (Holm-adjusted for a
confirmatory entry on confirmation seeds), the interval excludes 0 in the claimed direction and |mean| ≥ m, no
the same in the other direction; no_change / no_drop as docs/verdicts.md; otherwise inconclusive. "not
testable here" with the reason when the world cannot test the entry (an arm whose weights are θ*'s: OPD whose
teacher is its start; a reset arm with no point after its first reset); "not run" when an arm is absent (and
"not run in this preset" when the preset does not run it).
"""
from __future__ import annotations

import argparse
import math
import sys
import textwrap
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from common.results import metric_k

from . import stats as S
from .checklist import (NOT_RUN, NOT_TESTABLE, REWARD_WINDOW, Verdict, _window_mean, describe,
                        describe_rho, end_value, floor_of, theta_star_copy, write_verdicts)
from .data import Context, Curve, load_context

DESIGN, CONFIRM = "design", "confirm"          # the seeds' role (protocol.claims)
NOT_IN_PRESET = "not run in this preset"       # the reason of an entry whose arms the preset does not run
SEED_ROLES = (DESIGN, CONFIRM)
DIRECTIONS = (S.GREATER, S.LESS, S.NO_CHANGE, S.NO_DROP)
SPLITS = ("validation", "test", "train")
AT = ("last", "best")
RESET_FAMILIES = ("reset", "qae_armor")         # sweeps whose value is a reset period τ (arm facts `sweep`)
FOREST = "claims"                                # the forest plot's file stem
PLAIN = {S.YES: "holds here", S.NO: "fails here", S.INCONCLUSIVE: "undecided here",
         NOT_TESTABLE: "not testable here", NOT_RUN: "not run"}


class NotRun(Exception):
    """An arm (or the rows the quantity needs) is absent: the entry is "not run"."""


class NotTestable(Exception):
    """The world or protocol cannot test the entry: "not testable here", with the reason."""


@dataclass(frozen=True)
class Spec:
    """One arm of an entry: the register's name (a role or an arm), the arm, and the arm whose curve stands
    before the arm's own start (a composite role), if any."""
    name: str
    arm: str
    before: Optional[str] = None

    @property
    def label(self) -> str:
        return self.arm if self.name == self.arm else f"{self.name} ({self.arm})"


@dataclass(frozen=True)
class Entry:
    """One register entry as the driver wrote it (results.meta.json `claims.entries`)."""
    key: str
    paper: str
    claim: str
    quantity: str
    specs: tuple[Spec, ...]
    direction: str
    split: str
    confirmatory: bool = False
    at: Optional[str] = None
    in_preset: bool = True
    missing: tuple[str, ...] = ()
    covariate: Optional[str] = None

    @classmethod
    def from_json(cls, d: dict) -> "Entry":
        specs = tuple(Spec(a["name"], a["arm"], a.get("before")) for a in d["arms"])
        return cls(d["key"], d.get("paper", ""), d.get("claim", d["key"]), d["quantity"], specs,
                   d["direction"], d["split"], bool(d.get("confirmatory")), d.get("at"),
                   bool(d.get("in_preset", True)), tuple(d.get("missing") or ()), d.get("covariate"))


@dataclass(frozen=True)
class Quantity:
    """A register quantity: how many arms, its split, whether it takes `at`, its label and its per-seed
    computation fn(ctx, entry) -> ({seed: value}, numbers)."""
    arity: int
    split: str
    label: Callable[[Entry, Context], str]
    compute: Callable[[Context, Entry], tuple[dict, dict]]
    needs_at: bool = False
    across_seeds: bool = False      # a dose-response over seeds: Spearman's ρ of the per-seed values and the
                                    # entry's covariate (numbers["covariate"]), not a mean over seeds


# ------------------------------------------------------------------------------------------ per seed
def smooth(values: list[float], window: int) -> list[float]:
    """Centred moving average over `window` points, fewer at the ends (reproduce/jobs/peaks.py's rule for
    θ*): point i averages values[i − (w−1)//2 : i + w//2 + 1]."""
    if window <= 1:
        return list(values)
    lo, hi = (window - 1) // 2, window // 2
    return [sum(seg) / len(seg) for seg in (values[max(0, i - lo): i + hi + 1] for i in range(len(values)))]


def seed_curve(ctx: Context, spec: Spec, seed: int) -> Curve:
    """One seed's validation curve of an entry's arm; a composite arm: its `before` arm's points before the
    arm's own start, then its own (empty when the arm itself has none)."""
    view = ctx.for_seed(seed)
    own = view.val_curve(spec.arm)
    if spec.before is None or own.empty:
        return own
    start = view.arm_start(spec.arm)
    start = own.step[0] if start is None else start
    b = view.val_curve(spec.before)
    keep = [i for i, s in enumerate(b.step) if s < start]
    return Curve([b.step[i] for i in keep] + own.step, [b.mean[i] for i in keep] + own.mean,
                 [b.lo[i] for i in keep] + own.lo, [b.hi[i] for i in keep] + own.hi,
                 [b.n[i] for i in keep] + own.n)


def theta_step(ctx: Context, seed: int) -> Optional[int]:
    return ctx.for_seed(seed).theta_star()


def _window(ctx: Context) -> int:
    return max(1, int(ctx.protocol.get("peak_selection_window") or 1))


def _peak_after(c: Curve, after: int, window: int) -> Optional[float]:
    sm = smooth(c.mean, window)
    vals = [v for s, v in zip(c.step, sm) if s > after]
    return max(vals) if vals else None


def _require_curves(ctx: Context, specs) -> None:
    """Every arm of the entry has validation rows (a composite arm: its `before` arm too)."""
    missing = [sp.label for sp in specs if ctx.val_curve(sp.arm).empty]
    missing += [sp.before for sp in specs if sp.before and ctx.val_curve(sp.before).empty]
    if missing:
        raise NotRun(f"no validation rows of {', '.join(missing)}")


def _paired(ctx: Context, specs, fn) -> tuple[dict, dict]:
    """{seed: fn(seed)} over the first arm's seeds, None results left out (fn may return (value, extra)); the
    extras by seed under numbers["at"]."""
    out, extra = {}, {}
    for s in ctx.seeds(specs[0].arm):
        v = fn(s)
        if isinstance(v, tuple):
            v, x = v
            if v is not None:
                extra[s] = x
        if v is not None:
            out[s] = float(v)
    return out, ({"at": extra} if extra else {})


def q_end_minus_theta(ctx: Context, e: Entry) -> tuple[dict, dict]:
    a = e.specs[0]
    _require_curves(ctx, [a])

    def one(s):
        c, t = seed_curve(ctx, a, s), theta_step(ctx, s)
        v0 = c.at(t) if t is not None else None
        return (None, None) if c.empty or v0 is None else (end_value(c) - v0, {"theta_star": t})
    return _paired(ctx, e.specs, one)


def q_end_minus_start(ctx: Context, e: Entry) -> tuple[dict, dict]:
    a = e.specs[0]
    _require_curves(ctx, [a])

    def one(s):
        c = seed_curve(ctx, a, s)
        return None if c.empty else end_value(c) - c.mean[0]
    return _paired(ctx, e.specs, one)


def q_end_diff(ctx: Context, e: Entry) -> tuple[dict, dict]:
    a, b = e.specs
    _require_curves(ctx, e.specs)

    def one(s):
        ca, cb = seed_curve(ctx, a, s), seed_curve(ctx, b, s)
        return None if ca.empty or cb.empty else end_value(ca) - end_value(cb)
    return _paired(ctx, e.specs, one)


def q_stage1_fall(ctx: Context, e: Entry) -> tuple[dict, dict]:
    a = e.specs[0]
    _require_curves(ctx, [a])

    def one(s):
        c, t = seed_curve(ctx, a, s), theta_step(ctx, s)
        v = c.at(t) if t is not None else None
        return (None, None) if v is None else (v - end_value(c), {"theta_star": t})
    return _paired(ctx, e.specs, one)


def q_reward_rise(ctx: Context, e: Entry) -> tuple[dict, dict]:
    a = e.specs[0]
    if ctx.metric_curve(a.arm, "reward_mean").empty:
        raise NotRun(f"no training reward (reward_mean) of {a.label} in the per-step table")

    def one(s):
        rew, t = ctx.for_seed(s).metric_curve(a.arm, "reward_mean"), theta_step(ctx, s)
        if rew.empty or t is None:
            return None, None
        return _window_mean(rew) - _window_mean(rew, t), {"theta_star": t}
    return _paired(ctx, e.specs, one)


def q_peak_minus_theta(ctx: Context, e: Entry) -> tuple[dict, dict]:
    a = e.specs[0]
    _require_curves(ctx, [a])
    w = _window(ctx)

    def one(s):
        c, t = seed_curve(ctx, a, s), theta_step(ctx, s)
        v0 = c.at(t) if t is not None else None
        pk = _peak_after(c, t, w) if v0 is not None else None
        return (None, None) if pk is None else (pk - v0, {"theta_star": t, "peak": pk})
    return _paired(ctx, e.specs, one)


def q_peak_minus_peak(ctx: Context, e: Entry) -> tuple[dict, dict]:
    a, b = e.specs
    _require_curves(ctx, e.specs)
    w = _window(ctx)

    def one(s):
        ca, cb, t = seed_curve(ctx, a, s), seed_curve(ctx, b, s), theta_step(ctx, s)
        pa = _peak_after(ca, t, w) if t is not None else None
        if pa is None or cb.empty:
            return None, None
        pb = max(smooth(cb.mean, w))
        return pa - pb, {"peak_a": pa, "peak_b": pb}
    return _paired(ctx, e.specs, one)


def divergence(ctx: Context, spec: Spec, seed: int) -> tuple[Optional[int], str]:
    """(total step, how) after which `spec` differs from the arm it is compared with: θ* + τ for an in-run
    reset every τ steps (the driver's sweep facts), else the arm's own start (a restarted run: its restart
    point, where both hold the same checkpoint)."""
    start = ctx.for_seed(seed).arm_start(spec.arm)
    sw = ctx.arm_facts(spec.arm).get("sweep") or {}
    if start is not None and sw.get("family") in RESET_FAMILIES and sw.get("value") is not None:
        tau = int(sw["value"])
        return start + tau, f"its first reset (θ* + {tau})"
    return start, "its start"


def q_peak_after_diff(ctx: Context, e: Entry) -> tuple[dict, dict]:
    a, b = e.specs
    _require_curves(ctx, e.specs)
    out, windows, hows = {}, {}, set()
    for s in ctx.seeds(a.arm):
        ca, cb = seed_curve(ctx, a, s), seed_curve(ctx, b, s)
        d, how = divergence(ctx, a, s)
        if ca.empty or cb.empty or d is None:
            continue
        hows.add(f"{how}, step {d}")
        common = sorted(set(ca.after(d).step) & set(cb.after(d).step))
        if common:
            out[s] = max(ca.at(x) for x in common) - max(cb.at(x) for x in common)
            windows[s] = common
    if not out:
        raise NotTestable(f"{a.label}: no validation point after {'; '.join(sorted(hows)) or 'its start'} "
                          f"shared with {b.label}: before it the two are the same weights")
    return out, {"windows": windows}


def q_mid_diff(ctx: Context, e: Entry) -> tuple[dict, dict]:
    a, b = e.specs
    _require_curves(ctx, e.specs)
    length = int(ctx.protocol.get("stage2_steps") or 0)
    out, windows = {}, {}
    for s in ctx.seeds(a.arm):
        ca, cb = seed_curve(ctx, a, s), seed_curve(ctx, b, s)
        start = ctx.for_seed(s).arm_start(a.arm)
        if ca.empty or cb.empty or start is None:
            continue
        n = length or (ca.step[-1] - start)
        lo, hi = start + n / 3, start + 2 * n / 3
        common = sorted(x for x in set(ca.step) & set(cb.step) if lo <= x <= hi)
        if common:
            out[s] = (sum(ca.at(x) for x in common) - sum(cb.at(x) for x in common)) / len(common)
            windows[s] = common
    if not out:
        raise NotTestable(f"{a.label} and {b.label} share no validation step in stage 2's middle third")
    return out, {"windows": windows}


def _kl_at(ctx: Context, arm: str, seed: int, n: int) -> Optional[tuple[float, float]]:
    """(reverse, forward) KL of one seed: the means over the REWARD_WINDOW logged stage-2 steps nearest n."""
    m = ctx.for_seed(seed).metrics(arm)
    if m.empty or "kl_reverse" not in m.columns or "kl_forward" not in m.columns:
        return None
    d = m.dropna(subset=["kl_reverse", "kl_forward"])
    if d.empty:
        return None
    d = d.assign(_dist=(d["local_step"].astype(float) - n).abs()).sort_values(["_dist", "local_step"])
    near = d.head(REWARD_WINDOW)
    return float(near["kl_reverse"].mean()), float(near["kl_forward"].mean())


def q_kl_contrast(ctx: Context, e: Entry) -> tuple[dict, dict]:
    a, b = e.specs
    n = ctx.protocol.get("kl_after_steps")
    if n is None:
        raise NotTestable("protocol.kl_after_steps is not in the results' record")
    for sp in e.specs:
        m = ctx.metrics(sp.arm)
        if m.empty or "kl_reverse" not in m.columns or "kl_forward" not in m.columns:
            raise NotRun(f"no reverse / forward KL of {sp.label} in the per-step table")

    def one(s):
        ka, kb = _kl_at(ctx, a.arm, s, int(n)), _kl_at(ctx, b.arm, s, int(n))
        if ka is None or kb is None or min(*ka, *kb) <= 0:
            return None, None
        val = math.log(ka[0] / kb[0]) - math.log(ka[1] / kb[1])
        return val, {"reverse": [ka[0], kb[0]], "forward": [ka[1], kb[1]]}
    out, nums = _paired(ctx, e.specs, one)
    return out, {**nums, "kl_after_steps": int(n)}


def _eval_benchmarks(ctx: Context) -> list[str]:
    return [str(b).split("=", 1)[0] for b in (ctx.protocol.get("eval_benchmarks") or [])]


def eval_score(ctx: Context, arm: str, seed: int, step: int, kind: str) -> Optional[float]:
    """Mean over the evaluated benchmarks (protocol.eval_benchmarks where listed) of `kind`@k (avg or pass),
    the largest k of each, of one seed's checkpoint at `step`; None without such rows."""
    ev = ctx.for_seed(seed).eval_rows(arm)
    ev = ev[ev["step"] == step]
    names = _eval_benchmarks(ctx)
    if names:
        ev = ev[ev["benchmark"].isin(names)]
    scores = []
    for _, g in ev.groupby("benchmark"):
        ms = [m for m in g["metric"].unique() if metric_k(m)[0] == kind]
        if ms:
            best = max(ms, key=lambda m: metric_k(m)[1] or 0)
            scores.append(float(g[g["metric"] == best]["value"].mean()))
    return sum(scores) / len(scores) if scores else None


def eval_step(ctx: Context, spec: Spec, seed: int, at: str) -> tuple[Optional[int], str]:
    """(step, why not) of the checkpoint `at` stands for: "theta" θ*, "last" the run's last step (when it was
    evaluated), "best" the evaluation's choice by validation (Context.select_steps, as the tables)."""
    view = ctx.for_seed(seed)
    steps = sorted(set(view.eval_rows(spec.arm)["step"]))
    if at == "theta":
        t = theta_step(ctx, seed)
        return (t, "") if t in steps else (None, f"θ* (step {t}) of {spec.label} not evaluated")
    if at == "best":
        chosen, _ = view.select_steps(spec.arm, ctx.arm_facts(spec.arm).get("table_step"))
        return (chosen.get(seed), "") if seed in chosen else (None, f"{spec.label} not evaluated")
    rows = view.val_curve(spec.arm).step + steps
    last = max(rows) if rows else None
    return (last, "") if last in steps else (None, f"the last checkpoint of {spec.label} (step {last}) was "
                                                   f"not evaluated (evaluated: {steps})")


def _q_eval(kind: str):
    def compute(ctx: Context, e: Entry) -> tuple[dict, dict]:
        a, b = e.specs
        for sp in e.specs:
            if ctx.eval_rows(sp.arm).empty:
                raise NotRun(f"no eval rows of {sp.label}: this preset did not evaluate it")
        b_at = "theta" if ctx.arm_facts(b.arm).get("stage") == 1 else e.at
        out, at, why = {}, {}, set()
        for s in ctx.seeds(a.arm):
            (sa, wa), (sb, wb) = eval_step(ctx, a, s, e.at), eval_step(ctx, b, s, b_at)
            why |= {w for w in (wa, wb) if w}
            va = eval_score(ctx, a.arm, s, sa, kind) if sa is not None else None
            vb = eval_score(ctx, b.arm, s, sb, kind) if sb is not None else None
            if va is not None and vb is not None:
                out[s], at[s] = va - vb, [sa, sb]
        if not out:
            raise NotRun("; ".join(sorted(why)) or f"no seed has {kind}@k of both")
        return out, {"steps": at}
    return compute


def run_metric_mean(ctx: Context, spec: Spec, seed: int, column: str) -> Optional[float]:
    """Mean over one seed's logged steps of a per-step column (steps.parquet) along an entry's arm: a
    composite arm's `before` run before the arm's own start, then its own steps; None without values."""
    view = ctx.for_seed(seed)
    parts = []
    own = view.metrics(spec.arm)
    if spec.before is not None and not own.empty:
        start = view.arm_start(spec.arm)
        b = view.metrics(spec.before)
        if start is not None and not b.empty and column in b.columns:
            parts.append(b[b["step"] < start][column])
    if not own.empty and column in own.columns:
        parts.append(own[column])
    vals = [float(x) for p in parts for x in p.dropna()]
    return sum(vals) / len(vals) if vals else None


def q_fall_vs_covariate(ctx: Context, e: Entry) -> tuple[dict, dict]:
    """Per seed: A's fall from θ*, −(end(A) − θ* value), and the mean of the entry's covariate (a per-step
    column, e.g. anchor_mode_shortcut) along B's run; Spearman's ρ over seeds decides it."""
    a, b = e.specs
    _require_curves(ctx, [a])
    if not e.covariate:
        raise NotTestable("the entry names no covariate (a per-step column)")
    if e.covariate not in ctx.metrics(b.arm).columns:
        raise NotRun(f"no per-step {e.covariate} of {b.label}")
    falls, _ = q_end_minus_theta(ctx, dataclasses.replace(e, quantity="end_minus_theta", specs=(a,)))
    out, cov = {}, {}
    for s, v in falls.items():
        c = run_metric_mean(ctx, b, s, e.covariate)
        if c is not None:
            out[s], cov[s] = -v, c
    return out, {"covariate": cov, "covariate_name": e.covariate}


def _lbl(tmpl: str):
    def label(e: Entry, ctx: Context) -> str:
        names = [sp.label for sp in e.specs]
        return tmpl.format(*names, at=e.at, n=ctx.protocol.get("kl_after_steps"))
    return label


QUANTITIES: dict[str, Quantity] = {
    "end_minus_theta": Quantity(1, "validation", _lbl("end({0}) − θ*"), q_end_minus_theta),
    "end_minus_start": Quantity(1, "validation", _lbl("end({0}) − its start"), q_end_minus_start),
    "end_diff": Quantity(2, "validation", _lbl("end({0}) − end({1})"), q_end_diff),
    "stage1_fall": Quantity(1, "validation", _lbl("{0} at θ* − its end"), q_stage1_fall),
    "reward_rise": Quantity(1, "train", _lbl("{0} training reward: end − at θ*"), q_reward_rise),
    "peak_minus_theta": Quantity(1, "validation", _lbl("peak({0} after θ*) − θ*"), q_peak_minus_theta),
    "peak_minus_peak": Quantity(2, "validation", _lbl("peak({0} after θ*) − peak({1})"), q_peak_minus_peak),
    "peak_after_diff": Quantity(2, "validation", _lbl("max({0}) − max({1}) after {0}'s divergence"),
                                q_peak_after_diff),
    "mid_diff": Quantity(2, "validation", _lbl("mean({0}) − mean({1}), stage 2's middle third"), q_mid_diff),
    "kl_contrast": Quantity(2, "train", _lbl("log rKL ratio − log fKL ratio, {0} / {1}, step {n}"),
                            q_kl_contrast),
    "eval_diff": Quantity(2, "test", _lbl("test avg@k: {0} at {at} − {1}"), _q_eval("avg"), needs_at=True),
    "pass_diff": Quantity(2, "test", _lbl("test pass@k: {0} at {at} − {1}"), _q_eval("pass"),
                          needs_at=True),
    "fall_vs_covariate": Quantity(2, "validation", lambda e, ctx: f"Spearman ρ over seeds: "
                                  f"{e.specs[0].label}'s fall from θ* vs mean {e.covariate} along "
                                  f"{e.specs[1].label}", q_fall_vs_covariate, across_seeds=True),
}


# ------------------------------------------------------------------------------------------ deciding
def entries(ctx: Context) -> list[Entry]:
    return [Entry.from_json(d) for d in ctx.claims.get("entries") or []]


def seed_role(ctx: Context) -> str:
    return str(ctx.claims.get("role") or DESIGN)


def family(ctx: Context) -> list[Entry]:
    """The Holm family: the confirmatory entries on confirmation seeds; none on design seeds."""
    return [e for e in entries(ctx) if e.confirmatory] if seed_role(ctx) == CONFIRM else []


def _decided_as(ctx: Context, e: Entry, m: int) -> str:
    if not e.confirmatory:
        return "exploratory (raw p)"
    if seed_role(ctx) == CONFIRM:
        return f"confirmatory (Holm, m = {m})"
    return "confirmatory, on design seeds (raw p, no Holm)"


def measure(ctx: Context, e: Entry) -> Verdict:
    """One entry's per-seed values and interval, undecided (class from `decide`), or its not run / not
    testable verdict."""
    q = QUANTITIES[e.quantity]
    quantity = q.label(e, ctx)
    base = dict(quantity=quantity, confirmatory=e.confirmatory, paper=e.paper, direction=e.direction,
                split=e.split)
    if not e.in_preset:
        where = ctx.claims.get("design_preset")
        tail = (f"; decided on the design preset `{where}`" if seed_role(ctx) == CONFIRM and where
                and not e.confirmatory else "")
        return Verdict(e.key, e.claim, NOT_RUN, f"not run in this preset: it does not run "
                       f"{', '.join(e.missing) or 'its arms'}{tail}", reason=NOT_IN_PRESET, **base)
    try:
        for sp in e.specs:
            if ctx.arm_facts(sp.arm).get("stage") != 1 and (why := theta_star_copy(ctx, sp.arm)):
                raise NotTestable(why)
        per_seed, numbers = q.compute(ctx, e)
        if not per_seed:
            raise NotRun(f"no seed has {quantity}")
    except NotTestable as x:
        return Verdict(e.key, e.claim, NOT_TESTABLE, str(x), reason=str(x), **base)
    except NotRun as x:
        return Verdict(e.key, e.claim, NOT_RUN, f"not run: {x}", reason=str(x), **base)
    if q.across_seeds:
        if len(per_seed) < 2:
            why = f"{len(per_seed)} seed(s) with both numbers"
            return Verdict(e.key, e.claim, NOT_RUN, f"not run: {why}", reason=why, **base)
        cov = numbers["covariate"]
        iv = S.spearman(list(per_seed.values()), [cov[s] for s in per_seed])
        stat = {**iv.asdict(), "statistic": S.SPEARMAN}
    else:
        stat = S.t_interval(list(per_seed.values())).asdict()
    return Verdict(e.key, e.claim, S.INCONCLUSIVE, "", {"per_seed": per_seed, **numbers}, stat=stat, **base)


def decide(ctx: Context, e: Entry, v: Verdict, p_adjusted: Optional[float], m: int) -> Verdict:
    """The class of a measured entry: figures.stats.classify against the minimum effect (a training metric:
    its interval alone), with the Holm-adjusted p for a member of the family."""
    v.decided_as = _decided_as(ctx, e, m)
    v.p_adjusted = p_adjusted
    if not v.stat:
        return v
    floor = floor_of(ctx)
    rho = S.is_rho(v.stat)
    own_units = e.split == "train" or rho      # decided on the interval and p alone, no noise floor
    v.floor = None if own_units else floor
    v.min_effect = 0.0 if own_units else (S.NOISE_MULTIPLE * floor if floor is not None else None)
    iv = S.interval_of(v.stat)
    v.verdict, v.reason = S.classify(iv, 0.0 if own_units else floor, e.direction, p=p_adjusted)
    per_seed = v.numbers["per_seed"]
    if rho:
        cov = v.numbers["covariate"]
        seeds = ", ".join(f"s{s} {x:+.3f} / {cov[s]:.3f}" for s, x in per_seed.items())
        v.evidence = (f"{v.quantity}: {describe_rho(iv, p_adjusted)} (over seeds); per seed fall / "
                      f"{v.numbers['covariate_name']}: {seeds}")
        return v
    desc = describe(iv, None if own_units else floor, p_adjusted)
    if own_units:
        desc = desc.split(", noise floor")[0] + " (a training metric: its interval alone)"
    seeds = ", ".join(f"s{s} {x:+.3f}" for s, x in per_seed.items())
    v.evidence = f"{v.quantity}: {desc}; per seed {seeds}"
    return v


def run_claims(ctx: Context) -> list[Verdict]:
    """Every entry of the register, in its order: measured, then the family Holm-adjusted, then classed."""
    es = entries(ctx)
    measured = [measure(ctx, e) for e in es]
    fam = [i for i, e in enumerate(es) if e in family(ctx)]
    adjusted = S.holm([(measured[i].stat or {}).get("p") for i in fam])
    adj = dict(zip(fam, adjusted))
    return [decide(ctx, e, v, adj.get(i), len(fam)) for i, (e, v) in enumerate(zip(es, measured))]


# ------------------------------------------------------------------------------------------ printing
def _num(x: Optional[float], fmt: str = "+.3f") -> str:
    return "—" if x is None else format(x, fmt)


def _p(x: Optional[float]) -> str:
    return "—" if x is None else f"{x:.2g}"


def effect_cell(v: Verdict) -> str:
    """`+0.050 [−0.007, +0.108] (5)`: mean, 95% interval, seeds (— without a number)."""
    st = v.stat or {}
    if st.get("mean") is None:
        return "—"
    ci = f" [{st['lo']:+.3f}, {st['hi']:+.3f}]" if st.get("lo") is not None else ""
    return f"{st['mean']:+.3f}{ci} ({st['n']})".replace("-", "−")


def rule_text(ctx: Context) -> str:
    role, fam = seed_role(ctx), family(ctx)
    seeds = (f"Seeds' role: **confirm** — the {len(fam)} confirmatory entries are one Holm family, each "
             "decided on its Holm-adjusted p; exploratory entries on their raw p."
             if role == CONFIRM else
             "Seeds' role: **design** — every entry is exploratory here (raw p, no Holm): these are the "
             "design seeds' estimates; the confirmatory entries are decided on a confirmation preset's fresh "
             "seeds.")
    return (f"{seeds} The rule (docs/verdicts.md): yes / no only when p < {S.ALPHA:g}, the {S.LEVEL:.0%} t "
            f"interval over seeds excludes 0 in the claimed direction and |mean| ≥ {S.NOISE_MULTIPLE:g} x "
            "the noise floor (a training metric: its interval alone); otherwise undecided (inconclusive); "
            "not testable here when the world or protocol cannot test it; not run when an arm is absent.")


def noise_line(ctx: Context) -> str:
    nf = ctx.noise_floor
    if not nf:
        return ("Noise floor: not measured (no noise_floor.json beside the results; "
                "protocol.noise_floor_repeats): every entry that needs it is inconclusive.")
    return (f"Noise floor: {nf.get('arm')} seed {nf.get('seed')} at step {nf.get('step')} (θ*) validated "
            f"{len(nf['values'])} times with different sampling seeds on {nf.get('benchmark')} "
            f"{nf.get('metric')}: sd {nf['sd']:.4f}, range {nf['range']:.4f}, mean {nf['mean']:.4f}, "
            f"resolution {nf.get('resolution') or 0:.4f}; an effect counts from {S.NOISE_MULTIPLE:g} x floor "
            f"= {S.NOISE_MULTIPLE * floor_of(ctx):.4f}.")


def checklist_markdown(verdicts: list[Verdict], ctx: Optional[Context] = None) -> str:
    """checklist.md: the rule, the floor, then one row an entry (raw and adjusted p, per-seed values)."""
    lines = []
    if ctx is not None:
        reg = ctx.claims
        if not reg:
            return ("No claims register in the results' record (results.meta.json has no `claims`: results "
                    "collected before the register): nothing is decided.\n")
        if ctx.rehearsal:
            lines += [f"**{ctx.rehearsal['label']}**", ""]
        lines += [f"Claims register — preset `{ctx.preset}`, validation {ctx.val_label}; register "
                  f"`{reg.get('register', '?')}` (sha256 {str(reg.get('sha256', '?'))[:12]}).", "",
                  rule_text(ctx), "", noise_line(ctx), ""]
    lines += ["| # | entry | claim | decided as | class | quantity (per seed) | mean [95% interval] "
              "(seeds) | p raw | p Holm | min effect | numbers |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, v in enumerate(verdicts, 1):
        lines.append(f"| {i} | `{v.key}` | {v.question} | {v.decided_as or '—'} | **{v.verdict}** | "
                     f"{v.quantity or '—'} | {effect_cell(v)} | {_p((v.stat or {}).get('p'))} | "
                     f"{_p(v.p_adjusted)} | {_num(v.min_effect, '.3f')} | "
                     f"{(v.evidence or v.reason).replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def readme_table(verdicts: list[Verdict]) -> str:
    """The README's claims table: one row an entry the preset runs, the confirmatory family first (the
    register's order); the entries it does not run are counted in one line below the table."""
    lines = ["| claim of the paper (entry) | decided as | class | effect [95% interval] (seeds) | p raw | "
             "p Holm |", "|---|---|---|---|---|---|"]
    elsewhere = [v.key for v in verdicts if v.reason == NOT_IN_PRESET]
    for v in verdicts:
        if v.reason == NOT_IN_PRESET:
            continue
        cls = f"**{v.verdict}**" if v.verdict in (S.YES, S.NO) else v.verdict
        if v.verdict in (NOT_RUN, NOT_TESTABLE):
            cls += f": {v.reason}" if v.reason else ""
        lines.append(f"| {v.question} (`{v.key}`) | {v.decided_as or '—'} | {cls.replace('|', '/')} | "
                     f"{effect_cell(v)} | {_p((v.stat or {}).get('p'))} | {_p(v.p_adjusted)} |")
    if elsewhere:
        note = f"Not run in this preset ({len(elsewhere)}): {', '.join(f'`{k}`' for k in elsewhere)}."
        lines += ["", textwrap.fill(note, 110, break_on_hyphens=False)]
    return "\n".join(lines) + "\n"


def sentence(v: Verdict) -> str:
    """One plain sentence: holds here / fails here / undecided here (with its numbers), or why not."""
    st = v.stat or {}
    where = f" ({v.paper})" if v.paper else ""
    head = f"**{PLAIN.get(v.verdict, v.verdict)}** — {v.question}{where}, `{v.key}`, {v.decided_as}"
    if not st:
        return f"{head}: {(v.evidence or v.reason).removeprefix('not run: ')}."
    ci = (f"95% interval [{st['lo']:+.3f}, {st['hi']:+.3f}]" if st.get("lo") is not None
          else "no interval")
    p = (f"raw p {_p(st.get('p'))}" if st.get("p") is not None else "no p") + (
        f", Holm-adjusted p {_p(v.p_adjusted)}" if v.p_adjusted is not None else "")
    return (f"{head}: {v.quantity} = {st['mean']:+.3f}, {ci}, {st['n']} seed{'s' if st['n'] != 1 else ''}, "
            f"{p}.")


def write_checklist(ctx: Context, out_dir) -> list[Verdict]:
    """OUT/checklist.md and .json (every entry with its per-seed values) and the forest plot OUT/claims.png
    and .pdf."""
    from .plots import fig_claims
    verdicts = run_claims(ctx)
    write_verdicts(verdicts, out_dir, "checklist", checklist_markdown(verdicts, ctx))
    fig_claims(verdicts, ctx, out_dir)
    return verdicts


def _context(folder: Path) -> Context:
    path = folder / "results.parquet" if folder.is_dir() else folder
    if not path.is_file():
        raise SystemExit(f"python -m figures.claims: {path} is not a results.parquet (give a results folder)")
    return load_context(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m figures.claims", description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="?", type=Path, help="a results folder (results.parquet + its record)")
    ap.add_argument("--readme-table", type=Path, metavar="DIR", help="print the README's claims table")
    ap.add_argument("--out", type=Path, help="write checklist.md/.json and the forest plot here")
    a = ap.parse_args(argv)
    folder = a.readme_table or a.results
    if folder is None:
        ap.error("give a results folder (or --readme-table DIR)")
    ctx = _context(folder)
    if a.out is not None:
        verdicts = write_checklist(ctx, a.out)
    else:
        verdicts = run_claims(ctx)
    if a.readme_table is not None:
        sys.stdout.write(readme_table(verdicts))
    else:
        from .checklist import verdict_lines
        print("\n".join(verdict_lines(verdicts)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
