"""The checklist of the paper's claims, computed from our results with stated statistics (docs/verdicts.md).

Each claim names the quantity it compares, per seed (the unit: a paired difference of two arms that start from
the same θ* on that seed, or one arm's change from θ*), Student's t interval of its mean over seeds
(figures/stats.py) and the evaluation noise floor (noise_floor.json beside the table: one checkpoint validated
k times with different sampling seeds; reproduce/jobs/noise.py). Its class is figures.stats.classify's:
- yes / no only when the interval excludes 0 and |mean| >= stats.NOISE_MULTIPLE x the floor (a "no change"
  claim: yes when the interval lies inside ± that);
- inconclusive otherwise, with its numbers (always without a measured floor, or with one seed);
- not testable here, with the reason, when the world or protocol cannot test it (OPD whose weights are θ*'s;
  a reset arm without a validation point after its first reset); never "no".

Quantities (fractions of the validation benchmark's avg@k; "end" = mean of a seed's last END_WINDOW points,
"start" = the stage-2 start's validation, at θ*):
1. baseline_collapse   start - end of stage-1 DAPO (its value at θ* minus its end), and the training reward's
                       rise (end - at θ*, REWARD_WINDOW steps each; interval only: the floor is the
                       validation's)
2. armor_holds         end(armor) - end(dapo_cont)
3. beta1_stagnates     end(kl_k3_b1) - start ("no change"), and its reverse KL at the end <= LOW_KL_RATIO x
                       dapo_cont's on every seed
4. resets_raise_ceiling  per reset arm τ: peak after its first reset (steps > θ* + τ) minus
                       armor_reset_never's peak on the same steps; yes when some τ says yes
4b. restart_raises_ceiling  the authors' reset (armor_restart: a new run from never's best checkpoint, πref =
                       it): its peak after the restart point minus armor_reset_never's on the same steps
5. anchor_only_stable  end(anchor_only) - start ("no drop")
6. mix_collapses       start - end(mix_a*) for each mix arm with >= 2 seeds; end(mix) - end(dapo_cont) is
                       shown beside it (every unregularised arm collapses in this world: the control)
7. opd_below_armor     score(armor) - score(opd | mopd), score = mean eval avg@k over the eval benchmarks at
                       each seed's table checkpoint (else the best validation value); OPD whose eval rows
                       equal θ*'s (its teacher is its start) is not testable
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
LOW_KL_RATIO = 0.2        # β = 1's reverse KL at the end, at most this x dapo_cont's, on every seed
MIN_SEEDS = 2             # a per-arm comparison needs this many seeds (an interval)

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


def _decide(key: str, question: str, quantity: str, per_seed: dict[int, float], floor: Optional[float],
            kind: str = S.GREATER, extra: str = "", numbers: Optional[dict] = None,
            interval_only: bool = False) -> Verdict:
    """One quantity's verdict: its t interval over seeds, classified against the floor (interval_only: a
    training metric, whose noise is not the validation's: decided on the interval alone)."""
    if not per_seed:
        return Verdict(key, question, NOT_RUN, f"not run: no seed has {quantity}", quantity=quantity,
                       floor=floor)
    iv = S.t_interval(list(per_seed.values()))
    cls, why = S.classify(iv, 0.0 if interval_only else floor, kind)
    desc = (describe(iv, None).split(", noise floor")[0] + " (interval only)" if interval_only
            else describe(iv, floor))
    ev = f"{quantity}: {desc}; per seed {_seeds_str(per_seed)}" + (f"; {extra}" if extra else "")
    return Verdict(key, question, cls, ev, {"per_seed": per_seed, **(numbers or {})}, quantity=quantity,
                   stat=iv.asdict(), floor=floor, reason=why)


def describe(iv: S.Interval, floor: Optional[float]) -> str:
    """`mean +0.052, 95% t interval [-0.079, +0.182], 3 seeds, p 0.23, noise floor 0.011 (x2 = 0.022)`."""
    ci = (f"{iv.level:.0%} t interval [{iv.lo:+.3f}, {iv.hi:+.3f}]" if iv.lo is not None else "no interval")
    p = f", p {iv.p:.2g}" if iv.p is not None else ""
    fl = (f"noise floor {floor:.3f} (x{S.NOISE_MULTIPLE:g} = {S.NOISE_MULTIPLE * floor:.3f})"
          if floor is not None
          else "noise floor not measured")
    return f"mean {iv.mean:+.3f}, {ci}, {iv.n} seed{'s' if iv.n != 1 else ''}{p}, {fl}"


def _merge(key: str, question: str, parts: list[Verdict], how=S.combine) -> Verdict:
    """A claim made of sub-claims: the class of `how` over theirs; evidence and numbers of each."""
    ran = [p for p in parts if p.verdict != NOT_RUN]
    if not ran:
        return Verdict(key, question, NOT_RUN, "; ".join(p.evidence for p in parts))
    cls = how([p.verdict for p in ran])
    main = next((p for p in ran if p.verdict == cls and p.stat), next((p for p in ran if p.stat), ran[0]))
    return Verdict(key, question, cls, " | ".join(f"[{p.verdict}] {p.evidence}" for p in parts),
                   {p.quantity or p.key: p.numbers for p in parts}, quantity=main.quantity, stat=main.stat,
                   floor=main.floor,
                   reason="; ".join(f"{p.quantity or p.key}: {p.reason}" for p in ran if p.reason))


def _any_yes(classes: list[str]) -> str:
    """Some sub-claim holds: yes if any is yes, no if all testable ones are no."""
    testable = [c for c in classes if c != NOT_TESTABLE]
    if not testable:
        return NOT_TESTABLE
    if YES in testable:
        return YES
    return NO if all(c == NO for c in testable) else INCONCLUSIVE


# ------------------------------------------------------------------------------------------ checks
def check_baseline_collapse(ctx: Context) -> Verdict:
    q = "Did the baseline collapse (validation falls from θ* to the end while training reward rises)?"
    key = "baseline_collapse"
    fl = floor_of(ctx)
    theta = {}
    for s in ctx.seeds("dapo"):
        t = ctx.for_seed(s).start_of(["dapo_cont", "armor"], "peak_step") or ctx.for_seed(s).theta_star()
        c = _seed_curve(ctx, "dapo", s)
        if t is not None and c.at(t) is not None:
            theta[s] = (t, c.at(t))
    if not theta:
        return Verdict(key, q, NOT_RUN, "not run: dapo (no validation rows at θ*)")
    drop = {s: v - end_value(_seed_curve(ctx, "dapo", s)) for s, (t, v) in theta.items()}
    fall = _decide(key, q, "dapo value at θ* − its end", drop, fl,
                   numbers={"theta_star": {s: t for s, (t, _) in theta.items()}})
    rise = {}
    for s, (t, _) in theta.items():
        rew = ctx.for_seed(s).metric_curve("dapo", "reward_mean")
        if not rew.empty:
            rise[s] = _window_mean(rew) - _window_mean(rew, t)
    if rise:
        rv = _decide(key, q, "dapo training reward end − at θ*", rise, 0.0, interval_only=True)
    else:
        rv = Verdict(key, q, NOT_TESTABLE, "training reward not logged (no metrics rows)",
                     quantity="reward rise")
    return _merge(key, q, [fall, rv])


def check_armor_holds(ctx: Context) -> Verdict:
    q = "Did ARMOR end above dapo_cont?"
    a, d = ends(ctx, "armor"), ends(ctx, "dapo_cont")
    missing = [n for n, x in (("armor", a), ("dapo_cont", d)) if not x]
    if missing:
        return Verdict("armor_holds", q, NOT_RUN, "not run: " + ", ".join(missing))
    return _decide("armor_holds", q, "end(armor) − end(dapo_cont)", S.paired_differences(a, d), floor_of(ctx))


def _kl_end(ctx: Context, arm: str, seed: int) -> Optional[float]:
    return _window_mean(ctx.for_seed(seed).metric_curve(arm, "kl_reverse"))


def check_beta1_stagnates(ctx: Context) -> Verdict:
    q = "Did the largest KL penalty (β = 1) stagnate (stay at θ*'s validation, with a low KL)?"
    key = "beta1_stagnates"
    arms = [a for a in ctx.expected_arms("kl_k3") if not ctx.val_curve(a).empty] or \
        [a for a in ctx.expected_arms("kl_k2") if not ctx.val_curve(a).empty]
    if not arms:
        return Verdict(key, q, NOT_RUN, "not run: kl_k3_b1 (no KL-penalty arm)")
    arm = arms[-1]  # sorted by β ascending
    change = S.paired_differences(ends(ctx, arm), starts(ctx, arm))
    moved = _decide(key, q, f"end({arm}) − θ*", change, floor_of(ctx), kind=S.NO_CHANGE)
    ratios = {}
    for s in change:
        kl, ref = _kl_end(ctx, arm, s), _kl_end(ctx, "dapo_cont", s)
        if kl is not None and ref:
            ratios[s] = kl / ref
    if ratios:
        low = [r <= LOW_KL_RATIO for r in ratios.values()]
        # a condition without an interval: it can hold a "yes" back, never decide a "no"
        cls = YES if all(low) else INCONCLUSIVE
        klv = Verdict(key, q, cls,
                      f"reverse KL at the end / dapo_cont's (needs ≤ {LOW_KL_RATIO} on every seed): "
                      + ", ".join(f"s{s} {r:.3f}" for s, r in ratios.items()), {"kl_ratio": ratios},
                      quantity="KL ratio",
                      reason="low on every seed" if cls == YES else "not low on every seed")
    else:
        klv = Verdict(key, q, NOT_TESTABLE, "reverse KL not logged", quantity="KL ratio")
    return _merge(key, q, [moved, klv])


def _peaks_after(ctx: Context, arm: str, never: str, offset: int) -> tuple[dict, dict]:
    """Per seed: peak(arm) − peak(never) over their common validation steps after arm's start + offset, and
    those steps ({seed: diff}, {seed: steps}); seeds without such a step are left out."""
    diffs, windows = {}, {}
    for s in ctx.seeds(arm):
        r, n = _seed_curve(ctx, arm, s), _seed_curve(ctx, never, s)
        start = ctx.for_seed(s).arm_start(arm)
        if r.empty or n.empty or start is None:
            continue
        ra, na = r.after(start + offset), n.after(start + offset)
        common = sorted(set(ra.step) & set(na.step))
        if common:
            diffs[s] = max(ra.at(x) for x in common) - max(na.at(x) for x in common)
            windows[s] = common
    return diffs, windows


def check_resets_raise_ceiling(ctx: Context) -> Verdict:
    q = "Did reference resets raise the ceiling (peak after the first reset vs never, same steps)?"
    key = "resets_raise_ceiling"
    never = "armor_reset_never"
    resets = [a for a in ctx.expected_arms("reset") if a != never and not ctx.val_curve(a).empty]
    missing = ([never] if ctx.val_curve(never).empty else []) + ([] if resets else ["armor_reset_<τ>"])
    if missing:
        return Verdict(key, q, NOT_RUN, "not run: " + ", ".join(missing))
    parts = []
    for arm in resets:
        tau = int(ctx.arm_facts(arm)["sweep"]["value"])         # τ, as the driver recorded it
        # the first reset's step: both arms are the same weights up to it
        diffs, windows = _peaks_after(ctx, arm, never, tau)
        quantity = f"peak({arm}) − peak(never) after step θ*+{tau}"
        if not diffs:
            parts.append(Verdict(key, q, NOT_TESTABLE, f"{arm}: no validation point after its first reset "
                                 f"(θ* + {tau}): before it the arm is never's weights", quantity=quantity))
        else:
            parts.append(_decide(key, q, quantity, diffs, floor_of(ctx), numbers={"windows": windows}))
    return _merge(key, q, parts, how=_any_yes)


def check_restart_raises_ceiling(ctx: Context) -> Verdict:
    q = ("Did the authors' reset (armor_restart: a new run from armor_reset_never's best checkpoint, "
         "πref = it, a fresh optimizer) raise the ceiling (peak after the restart point vs never, "
         "same steps)?")
    key, arm, never = "restart_raises_ceiling", "armor_restart", "armor_reset_never"
    missing = [a for a in (arm, never) if ctx.val_curve(a).empty]
    if missing:
        return Verdict(key, q, NOT_RUN, "not run: " + ", ".join(missing))
    # at the restart point both are the same checkpoint: compare the steps after it
    diffs, windows = _peaks_after(ctx, arm, never, 0)
    quantity = f"peak({arm}) − peak(never) after the restart point"
    if not diffs:
        return Verdict(key, q, NOT_TESTABLE, f"{arm}: no validation point after its restart point",
                       quantity=quantity)
    return _decide(key, q, quantity, diffs, floor_of(ctx), numbers={"windows": windows})


def check_anchor_only_stable(ctx: Context) -> Verdict:
    q = "Did anchor-only (Anchor Rollout with plain DAPO) stay at or above θ*?"
    change = S.paired_differences(ends(ctx, "anchor_only"), starts(ctx, "anchor_only"))
    if not change:
        return Verdict("anchor_only_stable", q, NOT_RUN, "not run: anchor_only")
    return _decide("anchor_only_stable", q, "end(anchor_only) − θ*", change, floor_of(ctx), kind=S.NO_DROP)


def check_mix_collapses(ctx: Context) -> Verdict:
    q = "Did Mixed Optimization alone (mix_a*, no anchors) fall from θ*?"
    key = "mix_collapses"
    arms = [a for a in ctx.expected_arms("mix") if not ctx.val_curve(a).empty]
    if not arms:
        return Verdict(key, q, NOT_RUN, "not run: mix_a* arms")
    parts, dc = [], ends(ctx, "dapo_cont")
    for arm in arms:
        drop = S.paired_differences(starts(ctx, arm), ends(ctx, arm))
        if len(drop) < MIN_SEEDS:
            parts.append(_decide(key, q, f"θ* − end({arm})", drop, floor_of(ctx)))
            continue
        vs = S.paired_differences(ends(ctx, arm), dc)
        ctl = (f"control end({arm}) − end(dapo_cont): "
               f"{describe(S.t_interval(list(vs.values())), floor_of(ctx))}"
               if len(vs) >= MIN_SEEDS else "")
        parts.append(_decide(key, q, f"θ* − end({arm})", drop, floor_of(ctx), extra=ctl))
    several = [p for p in parts if p.stat and p.stat.get("n", 0) >= MIN_SEEDS]
    return _merge(key, q, several or parts)


def _eval_scores(ctx: Context, arm: str) -> dict[int, float]:
    """{seed: mean over benchmarks of the arm's eval avg@k at that seed's table checkpoint}."""
    steps, _ = ctx.select_steps(arm)
    out = {}
    for s, st in steps.items():
        ev = ctx.eval_rows_at(arm, {s: st})
        ev = ev[ev["metric"].str.startswith("avg@")]
        if not ev.empty:
            out[s] = float(ev.groupby(["benchmark", "metric"])["value"].mean().groupby(level=0).last().mean())
    return out


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


def check_opd_below_armor(ctx: Context) -> Verdict:
    q = "Did OPD / MOPD fall below ARMOR?"
    key = "opd_below_armor"
    arms = [a for a in ("armor", "opd", "mopd") if not ctx.val_curve(a).empty or not ctx.eval_rows(a).empty]
    if "armor" not in arms or len(arms) < 2:
        missing = [a for a in ("armor", "opd", "mopd") if a not in arms]
        return Verdict(key, q, NOT_RUN, "not run: " + ", ".join(missing))
    use_eval = all(_eval_scores(ctx, a) for a in arms)
    score = (_eval_scores if use_eval else
             lambda c, a: _by_seed(c, a, lambda cv, s: max(cv.mean)))
    how = "eval avg@k at the table checkpoint" if use_eval else "best validation value"
    parts = []
    for other in (a for a in arms if a != "armor"):
        quantity = f"{how}: armor − {other}"
        why = theta_star_copy(ctx, other)
        if why:
            parts.append(Verdict(key, q, NOT_TESTABLE, f"{other}: {why}", quantity=quantity))
        else:
            parts.append(_decide(key, q, quantity,
                                 S.paired_differences(score(ctx, "armor"), score(ctx, other)),
                                 floor_of(ctx)))
    return _merge(key, q, parts)


CHECKS = [check_baseline_collapse, check_armor_holds, check_beta1_stagnates, check_resets_raise_ceiling,
          check_restart_raises_ceiling, check_anchor_only_stable, check_mix_collapses, check_opd_below_armor]


def _safe(check, ctx: Context) -> Verdict:
    try:
        return check(ctx)
    except Exception as e:  # noqa: BLE001 - a broken input must not stop the report
        return Verdict(check.__name__.removeprefix("check_"), check.__doc__ or check.__name__,
                       NOT_RUN, f"could not be computed: {type(e).__name__}: {e}")


def run_checklist(ctx: Context) -> list[Verdict]:
    return [_safe(check, ctx) for check in CHECKS]


def _noise_line(ctx: Context) -> str:
    nf = ctx.noise_floor
    if not nf:
        return ("Noise floor: not measured (no noise_floor.json beside the results; "
                "protocol.noise_floor_repeats): every verdict that needs it is inconclusive.")
    return (f"Noise floor: {nf.get('arm')} seed {nf.get('seed')} at step {nf.get('step')} (θ*) validated "
            f"{len(nf['values'])} times with different sampling seeds on {nf.get('benchmark')} "
            f"{nf.get('metric')}: sd {nf['sd']:.4f}, range {nf['range']:.4f}, mean {nf['mean']:.4f}, "
            f"resolution {nf.get('resolution') or 0:.4f}; an effect counts from {S.NOISE_MULTIPLE:g} x floor "
            f"= {S.NOISE_MULTIPLE * floor_of(ctx):.4f}.")


def checklist_markdown(verdicts: list[Verdict], ctx: Optional[Context] = None) -> str:
    lines = []
    if ctx is not None:
        lines += [f"Checklist — preset `{ctx.preset}`, validation {ctx.val_label}. The rule "
                  f"(docs/verdicts.md): yes / no only when the {S.LEVEL:.0%} t interval over seeds of the "
                  f"per-seed quantity excludes 0 and |mean| ≥ {S.NOISE_MULTIPLE:g} x the noise floor; "
                  "otherwise inconclusive; not testable here when the world or protocol cannot test it.", "",
                  _noise_line(ctx), ""]
    lines += ["| # | claim | class | quantity (per seed) | mean | interval | seeds | p | noise floor | "
              "numbers |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for i, v in enumerate(verdicts, 1):
        st = v.stat or {}
        ci = f"[{st['lo']:+.3f}, {st['hi']:+.3f}]" if st.get("lo") is not None else "—"
        mean = f"{st['mean']:+.3f}" if st.get("mean") is not None else "—"
        p = f"{st['p']:.2g}" if st.get("p") is not None else "—"
        lines.append(f"| {i} | {v.question} | **{v.verdict}** | {v.quantity or '—'} | {mean} | {ci} | "
                     f"{st.get('n', '—')} | {p} | {_f(v.floor) if v.floor is not None else 'not measured'} | "
                     f"{v.evidence.replace('|', '/')} |")
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
    """One line a verdict, for a terminal: `  [class] question`, and for a stated statistic `: quantity: mean,
    interval, seeds, p, noise floor` (a not-testable one: its reason)."""
    out = []
    for v in verdicts:
        line = f"  [{v.verdict}] {v.question}"
        if v.stat:
            line += f" — {v.quantity}: {describe(S.Interval(**v.stat), v.floor)}"
        elif v.verdict in (NOT_TESTABLE, NOT_RUN) and v.evidence:
            line += f" — {v.evidence}"
        out.append(line)
    return out


def write_checklist(ctx: Context, out_dir) -> list[Verdict]:
    verdicts = run_checklist(ctx)
    return write_verdicts(verdicts, out_dir, "checklist", checklist_markdown(verdicts, ctx))
