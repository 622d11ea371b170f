"""Figures 1-7 of the ARMOR paper, drawn from our results (one function per figure).

Each `figN(ctx, out_dir=None)` returns the matplotlib Figure (Agg, no pyplot state) and, given out_dir, writes
figN.png and figN.pdf there. Curves are the seed mean with a shaded min-max band over seeds; the x axis is
total RL steps since the base model; the y axis names the validation benchmark and metric found in the data.
Each panel draws the arms the driver lists for it (results.meta.json `figure_panels`, owned by
reproduce/matrix/arms.py figure_panels); the titles, colours and line styles are this module's.
An arm that is not in the data leaves a red "not run: <arm>" note on its panel (a panel with nothing to draw
says so in its middle); nothing raises for missing inputs. The paper presets also get the paper's read-offs
as grey "paper: ..." marks (figures/paper.py).

Panels carry gids "figN:<panel>" (fig1: reward, length, validation; others: a, b, c) and each figure has
`fig.armor_info = {"panels": [...], "missing": {panel: [arms]}, "series": {panel: [labels]}}` for tests.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Sequence

import matplotlib

matplotlib.use("Agg")  # noqa: E402 - before any backend is touched
from matplotlib.figure import Figure  # noqa: E402

from . import paper as paper_mod  # noqa: E402
from . import stats as S  # noqa: E402
from .data import Context, Curve  # noqa: E402

STEP_LABEL = "total RL steps (since base model)"
FIXED_COLORS = {"dapo": "C0", "dapo_cont": "C0", "armor": "C3", "anchor_only": "C2", "qae": "C4",
                "qae_cont": "C4", "dapo_late": "C9", "armor_late": "C1"}
PALETTE = ["C1", "C4", "C6", "C8", "C9", "C5", "C2", "C3", "C0"]  # tab10 without the grey (C7)
CONTEXT_COLOR = "0.7"
MISSING_COLOR = "tab:red"
DPI = 110
LEGEND_INSIDE_MAX = 7
NO_PANELS = "(results.meta.json lists no figure_panels: collect again)"


# ------------------------------------------------------------------------------------------ helpers
def seeds_label(seeds) -> str:
    """A title's seeds: the list up to 8, else the count and the range ("26 (100-125)", or with "..." when
    the seeds are not consecutive)."""
    seeds = list(seeds or [])
    if not seeds:
        return "-"
    if len(seeds) <= 8:
        return str(seeds)
    gap = "-" if seeds == list(range(seeds[0], seeds[0] + len(seeds))) else ", ..., "
    return f"{len(seeds)} ({seeds[0]}{gap}{seeds[-1]})"


def _figure(ncols: int, title: str, ctx: Context, width: float = 5.0) -> tuple[Figure, list]:
    fig = Figure(figsize=(width * ncols, 4.0), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0].tolist()
    fig.suptitle(rehearsal_title(ctx, f"{title}\npreset {ctx.preset} · model {ctx.model} · seeds "
                                      f"{seeds_label(ctx.seeds())}"), fontsize=10)
    fig.armor_info = {"panels": [], "missing": {}, "series": {}}
    watermark(fig, ctx)
    return fig, axes


def rehearsal_title(ctx: Context, title: str) -> str:
    """A figure's title, under a rehearsal's label (results.meta.json `rehearsal`) where it is one."""
    return f"{ctx.rehearsal['label']}\n{title}" if ctx.rehearsal else title


def watermark(fig: Figure, ctx: Context) -> None:
    """A rehearsal's label across the whole figure (nothing for a real run): no panel of it reads as a
    result."""
    if ctx.rehearsal:
        fig.armor_info["rehearsal"] = ctx.rehearsal["label"]
        fig.text(0.5, 0.5, ctx.rehearsal["label"], ha="center", va="center", rotation=20, fontsize=13,
                 color="tab:red", alpha=0.35, zorder=1000)


def _register(fig: Figure, ax, name: str, panel: str) -> None:
    ax.set_gid(f"{name}:{panel}")
    fig.armor_info["panels"].append(panel)
    fig.armor_info["missing"].setdefault(panel, [])
    fig.armor_info["series"].setdefault(panel, [])


def plot_curve(ax, curve: Curve, label: str, color=None, ls: str = "-", lw: float = 1.6, band: bool = True):
    (line,) = ax.plot(curve.step, curve.mean, ls=ls, lw=lw, color=color, label=label,
                      marker="o" if len(curve) <= 3 else None, ms=3)
    if band and any(n > 1 for n in curve.n):
        ax.fill_between(curve.step, curve.lo, curve.hi, color=line.get_color(), alpha=0.18, lw=0)
    return line


def _missing_note(fig: Figure, ax, panel: str, missing: Sequence[str], plotted: int, what: str = "") -> None:
    if not missing:
        return
    fig.armor_info["missing"][panel].extend(missing)
    text = "not run: " + ", ".join(missing) + (f" {what}" if what else "")
    if plotted == 0:
        ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color=MISSING_COLOR,
                fontsize=9, wrap=True, gid="not-run")
    else:
        ax.text(0.01, 0.99, text, transform=ax.transAxes, ha="left", va="top", color=MISSING_COLOR,
                fontsize=7, wrap=True, gid="not-run")


def _vline(ax, x: Optional[int], label: str, ls: str = "--") -> None:
    if x is not None:
        ax.axvline(x, color="k", ls=ls, lw=0.9, label=label)


def _finish(ax, ylabel: str, title: str) -> None:
    ax.set_xlabel(STEP_LABEL)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    n = len(ax.get_legend_handles_labels()[0])
    if n > LEGEND_INSIDE_MAX:  # many series / paper marks: keep the curves visible
        ax.legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    elif n:
        ax.legend(fontsize=6.5, loc="best", framealpha=0.75)


def _color(arm: str, i: int):
    return FIXED_COLORS.get(arm, PALETTE[i % len(PALETTE)])


def panel_arms(ctx: Context, name: str, panel: str, armor_role: bool = False) -> Optional[list[str]]:
    """The arms a panel draws (results.meta.json `figure_panels`, the driver's): with `armor_role`, the
    claims register's ARMOR in place of `armor` where it has a curve; the authors' restarts (start
    "restart") only where run. None for results collected without the panels."""
    arms = ctx.panel_arms(name, panel)
    if arms is None:
        return None
    role = ctx.role_curve_arms("ARMOR") if armor_role else []
    arms = [x for a in arms for x in (role if a == "armor" and role else [a])]
    return [a for a in arms if ctx.arm_facts(a).get("start") != "restart" or not ctx.val_curve(a).empty]


def val_panel(fig: Figure, ax, ctx: Context, name: str, panel: str, title: str,
              context: Optional[str] = "dapo", starts: Sequence[tuple[Optional[int], str]] = (),
              styles: Optional[dict] = None, armor_role: bool = False) -> None:
    """Validation curves of the panel's arms (`panel_arms`) vs total steps; `context` is a stage-1 arm drawn
    in grey behind them."""
    _register(fig, ax, name, panel)
    styles = styles or {}
    listed = panel_arms(ctx, name, panel, armor_role)
    arms = listed or []
    plotted, missing = 0, []
    if context and not ctx.val_curve(context).empty:
        plot_curve(ax, ctx.val_curve(context), f"{context} (stage 1)", color=CONTEXT_COLOR, lw=1.2)
        fig.armor_info["series"][panel].append(f"{context} (stage 1)")
    for i, arm in enumerate(arms):
        c = ctx.val_curve(arm)
        if c.empty:
            missing.append(arm)
            continue
        plot_curve(ax, c, arm, color=_color(arm, i), ls=styles.get(arm, "-"))
        fig.armor_info["series"][panel].append(arm)
        plotted += 1
    for j, (x, label) in enumerate(starts):
        _vline(ax, x, label, ls="--" if j == 0 else "-.")
    if ctx.is_paper:
        paper_mod.draw_marks(ax, ctx.preset, name, panel)
    _missing_note(fig, ax, panel, missing, plotted)
    if listed is None:
        _missing_note(fig, ax, panel, [NO_PANELS], 0)
    elif not arms:
        _missing_note(fig, ax, panel, ["(no arms of this sweep in the preset)"], 0)
    _finish(ax, ctx.val_label, title)


def _theta(ctx: Context) -> tuple[Optional[int], str]:
    t = ctx.theta_star()
    return t, f"θ* (step {t})"


def save(fig: Figure, out_dir: str | Path | None, name: str) -> list[Path]:
    if out_dir is None:
        return []
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    label = getattr(fig, "armor_info", {}).get("rehearsal")
    meta = {"Title": label} if label else None       # a rehearsal's label in the files' metadata too
    fig.savefig(paths[0], dpi=DPI, metadata=meta)
    fig.savefig(paths[1], metadata=meta)
    return paths


# ------------------------------------------------------------------------------------------ figures
def fig1(ctx: Context, out_dir=None) -> Figure:
    """Baseline training reward and response length (metrics.jsonl of `dapo`), and validation of DAPO
    (stage 1, continued by dapo_cont), anchor_only and armor, with θ* marked."""
    fig, (a_rew, a_len, a_val) = _figure(3, "Fig. 1 — DAPO over-optimization and ARMOR", ctx, width=4.6)
    for ax, key, panel, ylabel in ((a_rew, "reward_mean", "reward", "training reward (mean, -1..1)"),
                                   (a_len, "response_length", "length", "response length (tokens)")):
        _register(fig, ax, "fig1", panel)
        baseline = panel_arms(ctx, "fig1", panel)
        if baseline is None:
            _missing_note(fig, ax, panel, [NO_PANELS], 0)
        for arm in baseline or []:
            c = ctx.metric_curve(arm, key)
            if c.empty:
                _missing_note(fig, ax, panel, [arm], 0, "(no metrics.jsonl)")
            else:
                plot_curve(ax, c, arm, color=_color(arm, 0))
                fig.armor_info["series"][panel].append(arm)
        _vline(ax, *_theta(ctx))
        if ctx.is_paper:
            paper_mod.draw_marks(ax, ctx.preset, "fig1", panel)
        _finish(ax, ylabel, f"baseline (dapo) {key}")
    val_panel(fig, a_val, ctx, "fig1", "validation",
              "validation: DAPO (stage 1 → dapo_cont), anchor_only, ARMOR", context=None, armor_role=True,
              starts=[_theta(ctx)], styles={"dapo_cont": "--"})
    save(fig, out_dir, "fig1")
    return fig


def kl_readoff(ctx: Context, arms: Sequence[str], n: Optional[int] = None) -> tuple[Optional[int], str, dict]:
    """Stage-2 step N at which Fig. 2b reads the KLs, how it was chosen, and {arm: {"reverse": (mean, lo,
    hi), "forward": (...)}} for the arms that have both KLs at N (mean over seeds, min-max)."""
    steps = {}
    for arm in arms:
        m = ctx.metrics(arm)
        if m.empty or "kl_reverse" not in m.columns or "kl_forward" not in m.columns:
            continue
        steps[arm] = set(m.dropna(subset=["kl_reverse", "kl_forward"])["local_step"].astype(int))
    common = set.intersection(*steps.values()) if steps else set()
    proto_n = ctx.protocol.get("kl_after_steps") if ctx.protocol else None
    if n is not None:
        how = "argument"
    elif proto_n is not None and int(proto_n) in common:
        n, how = int(proto_n), "protocol kl_after_steps"
    elif common:
        n = max(common)
        how = "last common step" + (f" (protocol's {proto_n} not reached by all arms)" if proto_n else "")
    else:
        return None, "no common step with both KLs", {}
    vals = {}
    for arm in steps:
        m = ctx.metrics(arm)
        row = m[m["local_step"] == n]
        if row.empty:
            continue
        vals[arm] = {d: (float(row[f"kl_{d}"].mean()), float(row[f"kl_{d}"].min()),
                         float(row[f"kl_{d}"].max()))
                     for d in ("reverse", "forward")}
    return n, how, vals


def fig2(ctx: Context, out_dir=None, n: Optional[int] = None) -> Figure:
    """(a) k3 KL-penalty sweep + dapo_cont; (b) reverse vs forward KL after N stage-2 steps, per arm."""
    fig, (a, b) = _figure(2, "Fig. 2 — KL penalty (k3) from θ*", ctx, width=5.6)
    val_panel(fig, a, ctx, "fig2", "a", "(a) KL penalty β sweep, k3", starts=[_theta(ctx)])
    _kl_bars(fig, b, ctx, "fig2", "b", panel_arms(ctx, "fig2", "b") or [], n)
    save(fig, out_dir, "fig2")
    return fig


def _kl_bars(fig: Figure, ax, ctx: Context, name: str, panel: str, arms: Sequence[str], n=None) -> None:
    _register(fig, ax, name, panel)
    n, how, vals = kl_readoff(ctx, arms, n)
    xs = list(range(len(arms)))
    w = 0.38
    plotted = 0
    positive = True
    for off, d, color in ((-w / 2, "reverse", "C0"), (w / 2, "forward", "C1")):
        x = [i + off for i, a in enumerate(arms) if a in vals]
        if not x:
            continue
        mean = [vals[a][d][0] for a in arms if a in vals]
        err = [[vals[a][d][0] - vals[a][d][1] for a in arms if a in vals],
               [vals[a][d][2] - vals[a][d][0] for a in arms if a in vals]]
        positive &= all(v > 0 for v in mean)
        ax.bar(x, mean, width=w, color=color, label=f"{d} KL " + ("KL(πθ‖πref)" if d == "reverse"
                                                                  else "KL(πref‖πθ)"),
               yerr=err, capsize=2)
        plotted += 1
    fig.armor_info["series"][panel] = [a for a in arms if a in vals]
    if ctx.is_paper:
        for m in paper_mod.figure_marks(ctx.preset, name, panel):
            if m.get("type") != "bars":
                continue
            first = True
            for i, a in enumerate(arms):
                if a in m["values"]:
                    r, f = m["values"][a]
                    ax.plot([i - w / 2, i + w / 2], [r, f], ls="none", marker="_", ms=16, mew=2.2,
                            color=paper_mod.PAPER_COLOR, label="paper: reverse / forward" if first else None)
                    first = False
    if positive and plotted:
        ax.set_yscale("log")
    ax.set_xticks(xs, arms, rotation=30, ha="right", fontsize=7)
    _missing_note(fig, ax, panel, [a for a in arms if a not in vals], plotted,
                  f"(no KL at stage-2 step {n})" if n is not None else "(no kl_reverse/kl_forward)")
    ax.set_ylabel("KL to πref (per token, metrics.jsonl)")
    ax.set_title(f"({panel}) KL after {n} stage-2 steps [{how}]" if n is not None else f"({panel}) KL",
                 fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6.5, loc="best")


def fig3(ctx: Context, out_dir=None) -> Figure:
    """(a) Mixed Optimization alone, α sweep; (b) anchor variants; (c) start-point ablation."""
    fig, (a, b, c) = _figure(3, "Fig. 3 — ARMOR ablations", ctx, width=4.6)
    th = _theta(ctx)
    val_panel(fig, a, ctx, "fig3", "a", "(a) Mixed Optimization only (α sweep)", starts=[th])
    val_panel(fig, b, ctx, "fig3", "b", "(b) Anchor Rollout variants", starts=[th])
    late_arms = [x for x in panel_arms(ctx, "fig3", "c") or [] if ctx.arm_facts(x).get("start") == "late"]
    late = ctx.start_of(late_arms, "late_start_step")
    val_panel(fig, c, ctx, "fig3", "c", "(c) start point: θ* vs a later checkpoint",
              starts=[th, (late, f"late start (step {late})")],
              styles={"dapo_cont": "--", "dapo_late": "--"})
    save(fig, out_dir, "fig3")
    return fig


def fig4(ctx: Context, out_dir=None) -> Figure:
    """Reference resets, both protocols: in-run every τ steps (armor_reset_never vs armor_reset_<τ>) and the
    authors' restart from never's best checkpoint (armor_restart), when run."""
    fig, (a,) = _figure(1, "Fig. 4 — reference reset: every τ steps, and the authors' restart", ctx,
                        width=6.0)
    # the restarts (dotted): from never's best checkpoint, and (armor_restart_<τ>) from its checkpoint at τ
    restart = [x for x in panel_arms(ctx, "fig4", "a") or [] if ctx.arm_facts(x).get("start") == "restart"]
    val_panel(fig, a, ctx, "fig4", "a", "(a) reset sweep and restart", starts=[_theta(ctx)],
              styles={x: ":" for x in restart})
    save(fig, out_dir, "fig4")
    return fig


def fig5(ctx: Context, out_dir=None) -> Figure:
    """Fig. 2a with the k2 KL estimator."""
    fig, (a,) = _figure(1, "Fig. 5 — KL penalty (k2) from θ*", ctx, width=6.0)
    val_panel(fig, a, ctx, "fig5", "a", "(a) KL penalty β sweep, k2", starts=[_theta(ctx)])
    save(fig, out_dir, "fig5")
    return fig


def fig6(ctx: Context, out_dir=None) -> Figure:
    """QAE baseline: stage 1 `qae`, `qae_cont` and the `qae_armor_*` variants from the QAE peak."""
    fig, (a,) = _figure(1, "Fig. 6 — QAE baseline and ARMOR from the QAE peak", ctx, width=6.0)
    stage2 = [x for x in panel_arms(ctx, "fig6", "a") or [] if ctx.arm_facts(x).get("stage") == 2]
    start = ctx.start_of(stage2, "qae_peak_step")
    val_panel(fig, a, ctx, "fig6", "a", "(a) QAE from its peak",
              context=None, starts=[(start, f"θ*_QAE (step {start})")], styles={"qae_cont": "--"})
    save(fig, out_dir, "fig6")
    return fig


def fig7(ctx: Context, out_dir=None) -> Figure:
    """Qwen3 reset schedules: armor_tau1, armor_tau1_until*, clip_expand, dapo_cont."""
    fig, (a,) = _figure(1, "Fig. 7 — reset schedules (τ = 1, then frozen)", ctx, width=6.0)
    val_panel(fig, a, ctx, "fig7", "a", "(a) τ = 1 throughout / until N steps / clip expansion only",
              starts=[_theta(ctx)])
    save(fig, out_dir, "fig7")
    return fig


FIGURES: dict[str, Callable] = {"fig1": fig1, "fig2": fig2, "fig3": fig3, "fig4": fig4, "fig5": fig5,
                                "fig6": fig6, "fig7": fig7}


# ------------------------------------------------------------------------------------- per-step evidence
# the toy world's modes grouped for the plot (common.results' mode_* columns; reproduce/toy/task.py: classify)
MODE_GROUPS = {"chain (all forms)": ("chain", "correct_chain", "sloppy", "chain_other"),
               "direct": ("direct",), "shortcut": ("shortcut",), "malformed": ("malformed",)}
MODE_COLORS = {"chain (all forms)": "C0", "direct": "C2", "shortcut": "C3", "malformed": "0.5"}


def _mode_curve(ctx: Context, arm: str, prefix: str, modes: Sequence[str]) -> Curve:
    """The seed mean per step of the summed shares of `modes` (columns prefix + mode)."""
    m = ctx.metrics(arm)
    cols = [prefix + x for x in modes if prefix + x in m.columns]
    if m.empty or not cols:
        return Curve([], [], [], [], [])
    d = m[["step", "seed"]].copy()
    d["v"] = m[cols].apply(lambda c: c.astype(float)).sum(axis=1, min_count=len(cols))
    return Curve.from_frame(d.dropna(), "v")


def _ratio_curve(ctx: Context, arm: str, num: str, den: str) -> Curve:
    m = ctx.metrics(arm)
    if m.empty or num not in m.columns or den not in m.columns:
        return Curve([], [], [], [], [])
    d = m[["step", "seed"]].copy()
    den_v = m[den].astype(float)
    d["v"] = (m[num].astype(float) / den_v).where(den_v > 0)
    return Curve.from_frame(d.dropna(), "v")


def fig_steps(ctx: Context, out_dir=None) -> Figure:
    """Per-step evidence, DAPO continued from θ* (dapo_cont; dapo when it did not run) beside ARMOR (and the
    positive control's ARMOR with oracle-clean anchors, the role CLEAN_ARMOR, where it ran): anchors
    and prompts kept; the answer modes' shares among on-policy samples (solid) and among ARMOR's kept anchors
    (dashed); clip fractions (low, high, and the clipped share of the uncertain tokens). Seed means per step
    (bands: min-max over seeds), from the runs' metrics (steps.parquet for committed results)."""
    base = "dapo_cont" if not ctx.metrics("dapo_cont").empty else "dapo"
    # ARMOR: the in-run `armor` arm, else (a confirmation runs only the register's arms) the role's arm
    armor = "armor" if not ctx.metrics("armor").empty else (ctx.role_arm("ARMOR") or "armor")
    cols = [base, armor]
    # the positive control's ARMOR (oracle-clean anchors), where it ran: its anchors' modes beside the rule's
    clean = ctx.role_arm("CLEAN_ARMOR")
    if clean and not ctx.metrics(clean).empty:
        cols.append(clean)
    fig = Figure(figsize=(5.5 * len(cols), 10.0), layout="constrained")
    grid = fig.subplots(3, len(cols), squeeze=False)
    title = (f"Per-step evidence — {' vs '.join(cols)}\npreset {ctx.preset} · model {ctx.model} · seeds "
             f"{seeds_label(ctx.seeds())}"
             + (f"\n{cols[2]}: oracle-clean anchors, an oracle the paper's ARMOR does not have"
                if len(cols) > 2 else ""))
    fig.suptitle(rehearsal_title(ctx, title), fontsize=10)
    fig.armor_info = {"panels": [], "missing": {}, "series": {}}
    watermark(fig, ctx)
    for j, arm in enumerate(cols):
        has = not ctx.metrics(arm).empty
        rows = [("counts", "prompts per step",
                 [("anchors", "anchors", "C3"), ("prompts_kept", "prompts kept", "C0"),
                                                 ("shortfall", "shortfall", "0.5")]),
                ("clip", "fraction of tokens", [("clipfrac_low", "clipped low", "C0"),
                                                ("clipfrac_high", "clipped high", "C1")])]
        for i, (panel, ylabel, series) in ((0, rows[0]), (2, rows[1])):
            ax = grid[i][j]
            name = f"{panel}-{arm}"
            _register(fig, ax, "steps", name)
            plotted = 0
            for key, label, color in series:
                c = ctx.metric_curve(arm, key)
                if not c.empty:
                    plot_curve(ax, c, label, color=color)
                    fig.armor_info["series"][name].append(label)
                    plotted += 1
            if panel == "clip":
                c = _ratio_curve(ctx, arm, "clipfrac_and_uncertain", "uncertain_frac")
                if not c.empty:
                    plot_curve(ax, c, "clipped among uncertain (p<0.9)", color="C3")
                    fig.armor_info["series"][name].append("clipped among uncertain")
                    plotted += 1
            _missing_note(fig, ax, name, [] if plotted else [arm], plotted, "(no per-step metrics)")
            _finish(ax, ylabel, f"{arm}: "
                                f"{'anchors and kept prompts' if panel == 'counts' else 'clip fractions'}")
        ax = grid[1][j]
        name = f"modes-{arm}"
        _register(fig, ax, "steps", name)
        plotted = 0
        for group, modes in MODE_GROUPS.items():
            for prefix, ls, tag in (("mode_", "-", "on-policy"), ("anchor_mode_", "--", "anchors")):
                c = _mode_curve(ctx, arm, prefix, modes)
                if not c.empty:
                    plot_curve(ax, c, f"{group} ({tag})", color=MODE_COLORS[group], ls=ls,
                               band=prefix == "mode_")
                    fig.armor_info["series"][name].append(f"{group} ({tag})")
                    plotted += 1
        _missing_note(fig, ax, name, [] if plotted else [arm], plotted,
                      "(no answer-mode shares: logging.answer_modes not set, or runs older than it)" if has
                      else "")
        ax.set_ylim(-0.02, 1.02)
        _finish(ax, "share", f"{arm}: answer modes (solid: on-policy samples, dashed: kept anchors)")
    save(fig, out_dir, "steps")
    return fig


# ------------------------------------------------------------------------------------------ claims
CLASS_COLORS = {"yes": "tab:green", "no": "tab:red", "inconclusive": "0.35",
                "not testable here": "tab:purple", "not run": "0.7"}


def oracle_keys(ctx: Context) -> set[str]:
    """The register entries that read an arm with oracle-clean anchors (arm facts `oracle`): labelled as an
    oracle the paper's ARMOR does not have wherever they are drawn."""
    return {e["key"] for e in (ctx.claims or {}).get("entries") or []
            if any(ctx.arm_facts(a["arm"]).get("oracle") for a in e.get("arms") or [])}


def _forest_rows(ax, rows, min_effect: Optional[float], oracle: frozenset = frozenset()) -> None:
    """One row a verdict, top to bottom: mean and 95% interval in its class's colour, the p's at the right;
    an entry in `oracle` is labelled so."""
    n = len(rows)
    if min_effect:
        ax.axvspan(-min_effect, min_effect, color="0.85", alpha=0.6, lw=0,
                   label=f"± minimum effect ({min_effect:.3f})")
    ax.axvline(0.0, color="k", lw=0.9)
    for i, v in enumerate(rows):
        y = n - 1 - i
        color = CLASS_COLORS.get(v.verdict, "k")
        st = v.stat or {}
        if st.get("mean") is not None:
            lo, hi = st.get("lo"), st.get("hi")
            xerr = [[st["mean"] - lo], [hi - st["mean"]]] if lo is not None else None
            ax.errorbar([st["mean"]], [y], xerr=xerr, fmt="o", color=color, ms=4, capsize=2, lw=1.2)
        else:
            ax.text(0.0, y, f" {v.verdict}", color=color, fontsize=6.5, va="center", ha="left")
        p = st.get("p")
        holm = f" · Holm {v.p_adjusted:.2g}" if v.p_adjusted is not None else ""
        txt = v.verdict if p is None else f"{v.verdict} · p {p:.2g}{holm}"
        ax.annotate(txt, xy=(1.01, y), xycoords=("axes fraction", "data"), fontsize=6.5, va="center",
                    color=color)
    k = sum(1 for v in rows if v.confirmatory)
    if 0 < k < n:                              # the confirmatory family above, the exploratory entries below
        ax.axhline(n - k - 0.5, color="0.4", ls="--", lw=0.8)
    ticks = [("★ " if v.confirmatory else "") + v.key + (" [oracle]" if v.key in oracle else "")
             for v in reversed(rows)]
    ax.set_yticks(range(n), ticks, fontsize=6.5)
    ax.set_ylim(-0.7, n - 0.3)
    ax.grid(alpha=0.3, axis="x")


def fig_claims(verdicts: Sequence, ctx: Context, out_dir=None) -> Figure:
    """The forest plot of the claims register (figures/claims.py verdicts): every entry, its mean and 95% t
    interval over seeds, coloured by its class, with raw p and (confirmatory family, confirmation seeds) the
    Holm-adjusted p at the right; the confirmatory entries (★) first; a line at 0 and shading at ± the
    minimum effect (NOISE_MULTIPLE x the noise floor). Training-metric and dose-response (Spearman ρ over
    seeds) entries (their own units, decided on their interval alone) get a panel of their own; entries that
    read oracle-clean anchors are labelled [oracle]."""
    rows = sorted(verdicts, key=lambda v: not v.confirmatory)     # stable: the register's order within
    train = [v for v in rows if v.split == "train" or S.is_rho(v.stat)]     # own units
    score = [v for v in rows if v not in train]
    panels = [(score, "validation / test: fraction of the score"),
              (train, "own units: training metrics; Spearman ρ over seeds (dose-response)"
               if any(S.is_rho(v.stat) for v in train) else "training metrics (own units)")]
    panels = [(r, t) for r, t in panels if r] or [([], "no claims register in the results")]
    fig = Figure(figsize=(8.5, 1.2 + 0.22 * max(len(rows), 1) + 0.6 * len(panels)), layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False,
                        height_ratios=[max(len(r), 1) for r, _ in panels])[:, 0].tolist()
    role = (ctx.claims or {}).get("role", "—")
    title = (f"Claims of the paper — preset {ctx.preset} · seeds' role {role} · seeds "
             f"{seeds_label(ctx.seeds())}\n★ confirmatory; colour: class (green yes, red no, grey "
             "inconclusive, purple not testable, light grey not run)")
    fig.suptitle(rehearsal_title(ctx, title), fontsize=9)
    oracle = frozenset(oracle_keys(ctx))
    fig.armor_info = {"panels": [], "missing": {}, "series": {}, "rows": [v.key for v in rows],
                      "classes": {v.key: v.verdict for v in rows}, "oracle": sorted(oracle)}
    watermark(fig, ctx)
    min_effects = [v.min_effect for v in score if v.min_effect]
    for ax, (group, title) in zip(axes, panels):
        name = "train" if group is train and train else "score"
        _register(fig, ax, "claims", name)
        fig.armor_info["series"][name] = [v.key for v in group]
        if not group:
            ax.text(0.5, 0.5, title, transform=ax.transAxes, ha="center", va="center", color=MISSING_COLOR,
                    gid="not-run")
            ax.set_axis_off()
            continue
        _forest_rows(ax, group, max(min_effects) if min_effects and group is score else None, oracle)
        ax.set_xlabel("per-seed quantity: mean and 95% t interval over seeds")
        ax.set_title(title, fontsize=8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6.5, loc="lower right")
    save(fig, out_dir, "claims")
    return fig
