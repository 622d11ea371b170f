"""The tiny world's acceptance checks, from the main job's runs: is this a world in which the paper's claims
can be tested? Stage-1 DAPO's dynamics on every seed, the headroom control, clipping in DAPO's stage 2.

    python -m figures.world_checks runs/tiny       # prints the table; --out DIR writes world_checks.md/.json

Checks (validation values are fractions of avg@k; every DAPO check is decided on each seed alone):
- gain:      max validation within the first GAIN_STEPS steps − the base's (step 0) ≥ GAIN_MIN
- fall:      peak − end ≥ FALL_MIN, the peak before the end window (end: mean of the last END_WINDOW points)
- train acc: training accuracy (metrics.jsonl `accuracy`, mean of REWARD_WINDOW steps nearest the peak)
             ≤ TRAIN_ACC_MAX at the peak, and higher at the end than at the peak (the fall is
             over-optimization)
- headroom:  the control `dapo_natural` (DAPO on prompts without the training regularity) ends (the mean of
             its last END_WINDOW points) ≥ the highest DAPO peak + HEADROOM_MIN and above the chain's ceiling
             (world.json: validation split's blind-spot chain ceiling): room for a better skill
- clipping:  over dapo_cont (DAPO's stage 2), Σ clipfrac_and_uncertain / Σ uncertain_frac ≥ CLIP_MIN: the
             share of the tokens with old probability < 0.9 that are clipped; the share of all tokens is
             reported beside it
- regime:    the paper's regime (issue 37): dapo_cont's seed-mean curve declines from θ* (its first point) to
             its end by DECLINE_MIN..DECLINE_MAX of θ*'s value (the paper's DAPO: about −20 % over 220
             steps), ending ≥ FLOOR_MARGIN above the shortcut floor (stage-1 DAPO's seed-mean end value)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

from .checklist import (END_WINDOW, Verdict as WorldCheck, _window_mean, collapse_stats, end_value,
                        write_verdicts)
from .data import Context, load_context

GAIN_STEPS = 50
GAIN_MIN = 0.10
FALL_MIN = 0.05
TRAIN_ACC_MAX = 0.85
HEADROOM_MIN = 0.10
CLIP_MIN = 0.05
DECLINE_MIN, DECLINE_MAX = 0.10, 0.35
FLOOR_MARGIN = 0.10

PASS, FAIL, NOT_RUN = "pass", "FAIL", "not run"


def applies(ctx: Context) -> bool:
    """The preset runs the world item (its headroom control)."""
    listed = ctx.figure_arms or {}
    return "world" in listed or ctx.has_arm("dapo_natural")


def _f(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _per_seed(ctx: Context, key: str, question: str, one) -> WorldCheck:
    """A DAPO check decided on each seed: pass only when it passes on every seed."""
    seeds = ctx.seeds("dapo")
    if not seeds:
        return WorldCheck(key, question, NOT_RUN, "not run: dapo")
    got = {s: one(ctx.for_seed(s)) for s in seeds}
    ok = all(g[0] for g in got.values())
    ev = "; ".join(f"s{s}: {g[1]}" for s, g in got.items())
    return WorldCheck(key, question, PASS if ok else FAIL, ev, {str(s): g[2] for s, g in got.items()})


def _gain(c: Context):
    v = c.val_curve("dapo")
    base = v.at(0) if v.at(0) is not None else v.mean[0]
    early = [m for s, m in zip(v.step, v.mean) if s <= GAIN_STEPS]
    gain = max(early) - base
    return gain >= GAIN_MIN, f"base {_f(base)} → {_f(max(early))} (+{_f(gain)})", {"base": base, "gain": gain}


def _fall(c: Context):
    st = collapse_stats(c.val_curve("dapo"))
    ok = st.drop >= FALL_MIN and st.peak_step < st.end_from
    return ok, f"peak {_f(st.peak)} @ {st.peak_step} → end {_f(st.end)} (−{_f(st.drop)})", \
        {"peak": st.peak, "peak_step": st.peak_step, "end": st.end, "drop": st.drop}


def _train_acc(c: Context):
    st = collapse_stats(c.val_curve("dapo"))
    acc = c.metric_curve("dapo", "accuracy")
    at_peak, at_end = _window_mean(acc, st.peak_step), _window_mean(acc)
    if at_peak is None:
        return False, "training accuracy not logged", {}
    ok = at_peak <= TRAIN_ACC_MAX and at_end > at_peak
    return ok, f"{_f(at_peak)} at the peak → {_f(at_end)} at the end", {"at_peak": at_peak, "end": at_end}


def chain_ceiling(ctx: Context) -> Optional[float]:
    """The blind-spot chain's ceiling on the validation split, as the driver read it from the world the preset
    trains in (results.meta.json `world`; a preset sharing another's world, e.g. tiny-slow, reads tiny's)."""
    v = ctx.world.get("validation_chain_ceiling")
    return float(v) if isinstance(v, (int, float)) else None


def check_headroom(ctx: Context) -> WorldCheck:
    q = (f"Does the headroom control end ≥ {HEADROOM_MIN:.2f} above stage-1 DAPO's peak and above the "
         f"chain's ceiling?")
    ctl = ctx.val_curve("dapo_natural")
    peaks = {s: collapse_stats(ctx.for_seed(s).val_curve("dapo")) for s in ctx.seeds("dapo")}
    peaks = {s: p for s, p in peaks.items() if p is not None}
    if ctl.empty or not peaks:
        return WorldCheck("headroom", q, NOT_RUN, "not run: " + ", ".join(
            n for n, miss in (("dapo_natural", ctl.empty), ("dapo", not peaks)) if miss))
    end = end_value(ctl)
    top = max(p.peak for p in peaks.values())
    ceiling = chain_ceiling(ctx)
    ok = end >= top + HEADROOM_MIN and ceiling is not None and end > ceiling
    ev = (f"control end {_f(end)} (last {END_WINDOW} points to step {ctl.step[-1]}) vs highest DAPO peak "
          f"{_f(top)} (+{_f(end - top)}, needs ≥ {HEADROOM_MIN}); chain ceiling "
          + (_f(ceiling) if ceiling is not None
             else "unknown (no world.json found): not shown"))
    return WorldCheck("headroom", q, PASS if ok else FAIL, ev,
                      {"control_end": end, "dapo_peak_max": top, "chain_ceiling": ceiling})


def check_clipping(ctx: Context) -> WorldCheck:
    q = f"Are ≥ {CLIP_MIN:.0%} of the uncertain tokens (old probability < 0.9) clipped over DAPO's stage 2?"
    m = ctx.metrics("dapo_cont")
    if m.empty or "uncertain_frac" not in m.columns:
        return WorldCheck("clipping", q, NOT_RUN, "not run: dapo_cont (or no uncertain_frac logged)")
    unc, both = m["uncertain_frac"].astype(float).sum(), m["clipfrac_and_uncertain"].astype(float).sum()
    share = both / unc if unc > 0 else 0.0
    allc = float(m["clipfrac"].astype(float).mean())
    ok = share >= CLIP_MIN
    ev = (f"{share:.1%} of uncertain tokens clipped (needs ≥ {CLIP_MIN:.0%}); clipped share of all tokens "
          f"{allc:.2%}; uncertain share {float(m['uncertain_frac'].astype(float).mean()):.1%} "
          f"({len(m)} steps, seeds {sorted(set(m['seed']))})")
    return WorldCheck("clipping", q, PASS if ok else FAIL, ev,
                      {"uncertain_clip_share": share, "clipfrac_all": allc})


def check_regime(ctx: Context) -> WorldCheck:
    q = (f"Does DAPO continued from θ* decline by {DECLINE_MIN:.0%}-{DECLINE_MAX:.0%} of θ* over stage 2, "
         f"ending ≥ {FLOOR_MARGIN:.2f} above the shortcut floor?")
    cont, dapo = ctx.val_curve("dapo_cont"), ctx.val_curve("dapo")
    if cont.empty or dapo.empty:
        return WorldCheck("regime", q, NOT_RUN, "not run: " + ", ".join(
            n for n, c in (("dapo_cont", cont), ("dapo", dapo)) if c.empty))
    theta, end, floor = cont.mean[0], end_value(cont), end_value(dapo)
    decline = (theta - end) / theta if theta > 0 else 0.0
    ok = DECLINE_MIN <= decline <= DECLINE_MAX and end >= floor + FLOOR_MARGIN
    ev = (f"seed means: θ* {_f(theta)} @ {cont.step[0]} → end {_f(end)} (last {END_WINDOW} points to step "
          f"{cont.step[-1]}): −{decline:.1%} (needs {DECLINE_MIN:.0%}-{DECLINE_MAX:.0%}); floor (stage-1 "
          f"DAPO's end) {_f(floor)}, end − floor {_f(end - floor)} (needs ≥ {FLOOR_MARGIN:.2f})")
    return WorldCheck("regime", q, PASS if ok else FAIL, ev,
                      {"theta": theta, "end": end, "decline": decline, "floor": floor})


def run_world_checks(ctx: Context) -> list[WorldCheck]:
    return [
        _per_seed(ctx, "dapo_gain", f"Does stage-1 DAPO gain ≥ {GAIN_MIN:.2f} within its first {GAIN_STEPS} "
                                    f"steps?",
                  _gain),
        _per_seed(ctx, "dapo_fall", f"Does stage-1 DAPO then fall ≥ {FALL_MIN:.2f} from its peak?", _fall),
        _per_seed(ctx, "dapo_train_acc", f"Is DAPO's training accuracy ≤ {TRAIN_ACC_MAX} at the peak and "
                                         f"rising after it?", _train_acc),
        check_headroom(ctx),
        check_clipping(ctx),
        check_regime(ctx),
    ]


def world_checks_markdown(checks: list[WorldCheck]) -> str:
    lines = ["| # | world check | verdict | numbers |", "|---|---|---|---|"]
    for i, c in enumerate(checks, 1):
        lines.append(f"| {i} | {c.question} | **{c.verdict}** | {c.evidence.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def write_world_checks(ctx: Context, out_dir) -> list[WorldCheck]:
    checks = run_world_checks(ctx)
    return write_verdicts(checks, out_dir, "world_checks", world_checks_markdown(checks))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m figures.world_checks", description=__doc__.split("\n")[0])
    ap.add_argument("runs", help="runs/<preset> (holds results.parquet) or a results.parquet")
    ap.add_argument("--out", default=None, help="also write world_checks.md / .json here")
    a = ap.parse_args(argv)
    p = Path(a.runs)
    ctx = load_context(p / "results.parquet" if p.is_dir() else p)
    checks = write_world_checks(ctx, a.out) if a.out else run_world_checks(ctx)
    sys.stdout.write(world_checks_markdown(checks))
    return 0 if all(c.verdict != FAIL for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
