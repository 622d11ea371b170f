"""Qualitative checklist of the paper's claims, computed from our results (for tiny/smoke presets, where
the paper's numbers do not apply; it is computed for every preset).

Each check answers "yes", "no" or "not run" and keeps the numbers that decided it. Curves are seed means of
the validation benchmark's avg@k (fractions); "end" is the mean of the last END_WINDOW validation points.

Thresholds (fractions of avg@k; 0.03 = 3 points):
- COLLAPSE_DROP = 0.03: a curve "collapsed" when its peak is at least this far above its end and the peak
  lies before the end window.
- END_WINDOW = 3: validation points averaged for a curve's end value.
- REWARD_WINDOW = 5: metrics.jsonl steps averaged for the training reward at the peak and at the end.
- REWARD_RISE = 0.02: the training reward "rose" when end - at-peak >= this (reward on the -1..1 scale).
- ARMOR_MARGIN = 0.0: ARMOR "holds" when its end value >= dapo_cont's end value + this.
- STAGNATION_RANGE = 0.03: β = 1 "stagnates" when its stage-2 validation range (max - min) <= this ...
- LOW_KL_RATIO = 0.2: ... and its reverse KL at the end <= this times dapo_cont's (LOW_KL_ABS = 1e-3 when
  dapo_cont logged no KL). KLs are means of the last REWARD_WINDOW metrics steps.
- CEILING_MIN_GAIN = 0.005: resets "raise the ceiling" when the best reset arm's peak >= never's peak + this.
- STABLE_TOL = 0.02: anchor-only is "stable" when it did not collapse and its end >= its start - this.
- MIX_COLLAPSE_FRACTION = 0.5: mix-only "collapsed" when at least this fraction of the mix_a* arms collapsed.
- OPD/MOPD "fall below" ARMOR when every run of them scores lower: score = mean eval avg@k over the eval
  benchmarks at the table checkpoint when all three have eval rows, else the best validation value.

Several seeds: each check is decided on every seed alone (`decide_over_seeds`); the verdict is "yes" when it
holds on every seed that ran the check's arms, "no" when it holds on none, "mixed (k/n seeds)" otherwise. The
evidence is the seed-mean curves' numbers, and every seed's verdict and numbers are kept (`Verdict.per_seed`,
the report's per-seed section).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from .data import Context, Curve

COLLAPSE_DROP = 0.03
END_WINDOW = 3
REWARD_WINDOW = 5
REWARD_RISE = 0.02
ARMOR_MARGIN = 0.0
STAGNATION_RANGE = 0.03
LOW_KL_RATIO = 0.2
LOW_KL_ABS = 1e-3
CEILING_MIN_GAIN = 0.005
STABLE_TOL = 0.02
MIX_COLLAPSE_FRACTION = 0.5

YES, NO, NOT_RUN = "yes", "no", "not run"


@dataclass
class Verdict:
    key: str
    question: str
    verdict: str
    evidence: str
    numbers: dict = field(default_factory=dict)
    per_seed: dict = field(default_factory=dict)     # seed -> {"verdict", "evidence"} (several seeds only)


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


def _concat(a: Curve, b: Curve) -> Curve:
    """Curve a continued by b's points after a's last step."""
    if a.empty:
        return b
    tail = b.after(a.step[-1])
    return Curve(a.step + tail.step, a.mean + tail.mean, a.lo + tail.lo, a.hi + tail.hi, a.n + tail.n)


def _window_mean(c: Curve, center: Optional[int] = None) -> Optional[float]:
    if c.empty:
        return None
    if center is None:
        vals = c.mean[-REWARD_WINDOW:]
    else:
        near = sorted(range(len(c)), key=lambda j: abs(c.step[j] - center))[:REWARD_WINDOW]
        vals = [c.mean[j] for j in near]
    return sum(vals) / len(vals)


# ------------------------------------------------------------------------------------------ checks
def check_baseline_collapse(ctx: Context) -> Verdict:
    q = "Did the baseline collapse (validation peak, then a drop, while training reward rose)?"
    val = _concat(ctx.val_curve("dapo"), ctx.val_curve("dapo_cont"))
    st = collapse_stats(val)
    if st is None:
        return Verdict("baseline_collapse", q, NOT_RUN, "not run: dapo (no validation rows)")
    rew = _concat(ctx.metric_curve("dapo", "reward_mean"), ctx.metric_curve("dapo_cont", "reward_mean"))
    r_peak, r_end = _window_mean(rew, st.peak_step), _window_mean(rew)
    rose = None if r_peak is None else (r_end - r_peak) >= REWARD_RISE
    ok = st.collapsed and rose is not False
    ev = (f"peak {_f(st.peak)} @ step {st.peak_step}, end {_f(st.end)} (mean of last {END_WINDOW} points from "
          f"step {st.end_from}), drop {_f(st.drop)} {'≥' if st.drop >= COLLAPSE_DROP else '<'} {COLLAPSE_DROP}; ")
    ev += ("training reward not logged" if rose is None else
           f"training reward {_f(r_peak)} at peak → {_f(r_end)} at end "
           f"({'+' if r_end >= r_peak else ''}{_f(r_end - r_peak)}, {'≥' if rose else '<'} {REWARD_RISE})")
    return Verdict("baseline_collapse", q, YES if ok else NO, ev,
                   {"peak": st.peak, "peak_step": st.peak_step, "end": st.end, "drop": st.drop,
                    "reward_at_peak": r_peak, "reward_end": r_end})


def check_armor_holds(ctx: Context) -> Verdict:
    q = "Did ARMOR hold or rise relative to dapo_cont at the end?"
    a, d = ctx.val_curve("armor"), ctx.val_curve("dapo_cont")
    missing = [n for n, c in (("armor", a), ("dapo_cont", d)) if c.empty]
    if missing:
        return Verdict("armor_holds", q, NOT_RUN, "not run: " + ", ".join(missing))
    ea, ed = end_value(a), end_value(d)
    ok = ea >= ed + ARMOR_MARGIN
    ev = (f"end armor {_f(ea)} vs dapo_cont {_f(ed)} (gap {_f(ea - ed)}, needs ≥ {ARMOR_MARGIN}); "
          f"armor start {_f(a.mean[0])} @ step {a.step[0]}, peak {_f(max(a.mean))}")
    return Verdict("armor_holds", q, YES if ok else NO, ev,
                   {"armor_end": ea, "dapo_cont_end": ed, "armor_start": a.mean[0]})


def _kl_end(ctx: Context, arm: str) -> Optional[float]:
    return _window_mean(ctx.metric_curve(arm, "kl_reverse"))


def check_beta1_stagnates(ctx: Context) -> Verdict:
    q = "Did the largest KL penalty (β = 1) stagnate (little change in validation, low KL)?"
    arms = [a for a in ctx.expected_arms("kl_k3") if not ctx.val_curve(a).empty] or \
        [a for a in ctx.expected_arms("kl_k2") if not ctx.val_curve(a).empty]
    if not arms:
        return Verdict("beta1_stagnates", q, NOT_RUN, "not run: kl_k3_b1 (no KL-penalty arm)")
    arm = arms[-1]  # sorted by β ascending
    c = ctx.val_curve(arm)
    rng = max(c.mean) - min(c.mean)
    flat = rng <= STAGNATION_RANGE
    kl, kl_ref = _kl_end(ctx, arm), _kl_end(ctx, "dapo_cont")
    if kl is None:
        low, kl_ev = None, "KL not logged"
    elif kl_ref is not None and kl_ref > 0:
        low = kl <= LOW_KL_RATIO * kl_ref
        kl_ev = f"reverse KL {kl:.2e} vs dapo_cont {kl_ref:.2e} (ratio {kl / kl_ref:.3f}, needs ≤ {LOW_KL_RATIO})"
    else:
        low = kl <= LOW_KL_ABS
        kl_ev = f"reverse KL {kl:.2e} (dapo_cont KL not logged; needs ≤ {LOW_KL_ABS:g})"
    ok = flat and low is not False
    ev = f"{arm}: validation range {_f(rng)} ({'≤' if flat else '>'} {STAGNATION_RANGE}); {kl_ev}"
    return Verdict("beta1_stagnates", q, YES if ok else NO, ev,
                   {"arm": arm, "val_range": rng, "kl_reverse_end": kl, "dapo_cont_kl_reverse_end": kl_ref})


def check_resets_raise_ceiling(ctx: Context) -> Verdict:
    q = "Did reference resets raise the ceiling (best reset arm's peak vs never)?"
    never = ctx.val_curve("armor_reset_never")
    resets = {a: ctx.val_curve(a) for a in ctx.expected_arms("reset") if a != "armor_reset_never"}
    resets = {a: c for a, c in resets.items() if not c.empty}
    missing = (["armor_reset_never"] if never.empty else []) + ([] if resets else ["armor_reset_<τ>"])
    if missing:
        return Verdict("resets_raise_ceiling", q, NOT_RUN, "not run: " + ", ".join(missing))
    peaks = {a: max(c.mean) for a, c in resets.items()}
    best = max(peaks, key=peaks.get)
    pn = max(never.mean)
    ok = peaks[best] >= pn + CEILING_MIN_GAIN
    ev = (f"best reset {best} peak {_f(peaks[best])} vs never {_f(pn)} (gain {_f(peaks[best] - pn)}, needs ≥ "
          f"{CEILING_MIN_GAIN}); peaks: " + ", ".join(f"{a} {_f(v)}" for a, v in peaks.items()))
    return Verdict("resets_raise_ceiling", q, YES if ok else NO, ev,
                   {"never_peak": pn, **{f"{a}_peak": v for a, v in peaks.items()}})


def check_anchor_only_stable(ctx: Context) -> Verdict:
    q = "Did anchor-only (Anchor Rollout with plain DAPO) stay stable?"
    st = collapse_stats(ctx.val_curve("anchor_only"))
    if st is None:
        return Verdict("anchor_only_stable", q, NOT_RUN, "not run: anchor_only")
    ok = (not st.collapsed) and st.end >= st.start - STABLE_TOL
    ev = (f"start {_f(st.start)}, peak {_f(st.peak)} @ step {st.peak_step}, end {_f(st.end)}; drop from peak "
          f"{_f(st.drop)} (collapse at ≥ {COLLAPSE_DROP}), end − start {_f(st.end - st.start)} "
          f"(needs ≥ −{STABLE_TOL})")
    return Verdict("anchor_only_stable", q, YES if ok else NO, ev,
                   {"start": st.start, "peak": st.peak, "end": st.end, "drop": st.drop})


def check_mix_collapses(ctx: Context) -> Verdict:
    q = "Did Mixed Optimization alone (mix_a*, no anchors) collapse?"
    stats = {a: collapse_stats(ctx.val_curve(a)) for a in ctx.expected_arms("mix")}
    stats = {a: s for a, s in stats.items() if s is not None}
    if not stats:
        return Verdict("mix_collapses", q, NOT_RUN, "not run: mix_a* arms")
    n = sum(s.collapsed for s in stats.values())
    ok = n / len(stats) >= MIX_COLLAPSE_FRACTION
    ev = f"{n}/{len(stats)} collapsed (needs ≥ {MIX_COLLAPSE_FRACTION:.0%}): " + "; ".join(
        f"{a} peak {_f(s.peak)} @ {s.peak_step} → end {_f(s.end)} (drop {_f(s.drop)})" for a, s in stats.items())
    return Verdict("mix_collapses", q, YES if ok else NO, ev,
                   {a: {"peak": s.peak, "end": s.end, "drop": s.drop, "collapsed": s.collapsed}
                    for a, s in stats.items()})


def _eval_score(ctx: Context, arm: str) -> Optional[float]:
    """The mean over benchmarks of the arm's eval avg@k at the table checkpoints (each seed's own, averaged)."""
    steps, _ = ctx.select_steps(arm)
    if not steps:
        return None
    ev = ctx.eval_rows_at(arm, steps)
    ev = ev[ev["metric"].str.startswith("avg@")]
    if ev.empty:
        return None
    per_bench = ev.groupby(["benchmark", "metric"])["value"].mean().groupby(level=0).last()
    return float(per_bench.mean())


def check_opd_below_armor(ctx: Context) -> Verdict:
    q = "Did OPD / MOPD fall below ARMOR?"
    arms = [a for a in ("armor", "opd", "mopd") if not ctx.val_curve(a).empty or not ctx.eval_rows(a).empty]
    if "armor" not in arms or len(arms) < 2:
        missing = [a for a in ("armor", "opd", "mopd") if a not in arms]
        return Verdict("opd_below_armor", q, NOT_RUN, "not run: " + ", ".join(missing))
    evals = {a: _eval_score(ctx, a) for a in arms}
    if all(v is not None for v in evals.values()):
        scores = dict(evals)
        how = "mean eval avg@k over benchmarks at the table checkpoint"
    else:
        scores = {a: max(ctx.val_curve(a).mean) for a in arms if not ctx.val_curve(a).empty}
        how = "best validation value (not every arm has eval rows)"
        if "armor" not in scores or len(scores) < 2:
            return Verdict("opd_below_armor", q, NOT_RUN, "not run: no comparable scores")
    others = {a: v for a, v in scores.items() if a != "armor"}
    ok = all(v < scores["armor"] for v in others.values())
    ev = f"{how}: armor {_f(scores['armor'])} vs " + ", ".join(f"{a} {_f(v)}" for a, v in others.items())
    return Verdict("opd_below_armor", q, YES if ok else NO, ev, {"measure": how, **scores})


CHECKS = [check_baseline_collapse, check_armor_holds, check_beta1_stagnates, check_resets_raise_ceiling,
          check_anchor_only_stable, check_mix_collapses, check_opd_below_armor]


def _safe(check, ctx: Context) -> Verdict:
    try:
        return check(ctx)
    except Exception as e:  # noqa: BLE001 - a broken input must not stop the report
        return Verdict(check.__name__.removeprefix("check_"), check.__doc__ or check.__name__,
                       NOT_RUN, f"could not be computed: {type(e).__name__}: {e}")


def decide_over_seeds(check, ctx: Context) -> Verdict:
    """One check on several seeds: decided on each seed alone; "yes" if it holds on every seed that ran it, "no"
    if on none, else "mixed (k/n seeds)". Evidence: the seed-mean curves' numbers. One seed: the check as is."""
    seeds = ctx.seeds()
    mean = _safe(check, ctx)
    if len(seeds) <= 1:
        return mean
    per = {s: _safe(check, ctx.for_seed(s)) for s in seeds}
    ran = {s: v for s, v in per.items() if v.verdict != NOT_RUN}
    if ran:
        k = sum(v.verdict == YES for v in ran.values())
        mean.verdict = YES if k == len(ran) else NO if k == 0 else f"mixed ({k}/{len(ran)} seeds)"
        mean.evidence = (f"seed mean: {mean.evidence}; per seed: "
                         + ", ".join(f"s{s} {v.verdict}" for s, v in per.items()))
    mean.per_seed = {s: {"verdict": v.verdict, "evidence": v.evidence} for s, v in per.items()}
    return mean


def run_checklist(ctx: Context) -> list[Verdict]:
    return [decide_over_seeds(check, ctx) for check in CHECKS]


def checklist_markdown(verdicts: list[Verdict], ctx: Optional[Context] = None) -> str:
    lines = []
    if ctx is not None:
        lines.append(f"Qualitative checklist — preset `{ctx.preset}`, validation {ctx.val_label}, "
                     f"seed means (thresholds: figures/checklist.py).")
        lines.append("")
    lines += ["| # | check | verdict | numbers that decided it |", "|---|---|---|---|"]
    for i, v in enumerate(verdicts, 1):
        lines.append(f"| {i} | {v.question} | **{v.verdict}** | {v.evidence.replace('|', '/')} |")
    if any(v.per_seed for v in verdicts):
        lines += ["", "Per seed (each check decided on that seed's curves alone; the verdict above is \"yes\" "
                      "only if it holds on every seed):", "", "| # | seed | verdict | numbers |", "|---|---|---|---|"]
        for i, v in enumerate(verdicts, 1):
            for s, d in v.per_seed.items():
                lines.append(f"| {i} | {s} | {d['verdict']} | {d['evidence'].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


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
    """One line a verdict, for a terminal: `  [verdict] question`."""
    return [f"  [{v.verdict}] {v.question}" for v in verdicts]


def write_checklist(ctx: Context, out_dir) -> list[Verdict]:
    verdicts = run_checklist(ctx)
    return write_verdicts(verdicts, out_dir, "checklist", checklist_markdown(verdicts, ctx))
