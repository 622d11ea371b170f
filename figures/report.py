"""REPRODUCTION.md: the claims of the paper decided (a forest plot of every register entry, then a sentence
each), our figures and tables beside the paper's, the checklist, and how the run was made.

    write_report("runs/tiny/results.parquet", "REPRODUCTION.md", preset="tiny", command="python -m ...",
                 seeds=[0, 1], wall_time_s=3600.0, figures_dir="artifacts/figures")

    python -m figures.report --results runs/tiny/results.parquet --out REPRODUCTION.md --preset tiny \
        --command "..." --seeds 0,1 --wall-time-s 3600 --figures-dir artifacts/figures
    python -m figures --results runs/tiny/results.parquet --out artifacts/figures --report REPRODUCTION.md

The file is generated, never hand-edited (its header says so): rerun the command to refresh it. Figures are
embedded by path relative to the report; missing figure files are drawn first (draw=True redraws all). Every
path it prints is relative (to the report's folder, else to the repository), so the report reads the same on
any machine; its "Live logs" section links each run's TensorBoard folder and W&B run (logging.backends).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
from pathlib import Path
from typing import Optional, Sequence

from . import paper as paper_mod
from .build import draw_all
from .claims import FOREST, checklist_markdown, rule_text, run_claims, sentence, write_checklist
from .world_checks import applies as world_applies, run_world_checks, world_checks_markdown
from .data import Context, load_context
from .plots import FIGURES
from .tables import TABLES, build_table, paper_table

FIGURE_TITLES = {
    "fig1": "Figure 1 — DAPO over-optimization; anchor-only and ARMOR from θ*",
    "fig2": "Figure 2 — KL penalty (k3) sweep and reverse vs forward KL",
    "fig3": "Figure 3 — ablations: mixed optimization only, anchor variants, start point",
    "fig4": "Figure 4 — reference-reset frequency",
    "fig5": "Figure 5 — KL penalty sweep with the k2 estimator",
    "fig6": "Figure 6 — QAE baseline and ARMOR from the QAE peak",
    "fig7": "Figure 7 — Qwen3 reset schedules",
}
HEADER = ("<!-- GENERATED FILE — written by figures/report.py (python -m figures.report). "
          "Do not edit by hand: rerun the command below to refresh it. -->")


def _wall(s: Optional[float]) -> str:
    if s is None:
        return "n/a"
    s = float(s)
    h, rem = divmod(int(round(s)), 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h {m:02d}m {sec:02d}s ({s:.0f} s)"


REPO_ROOT = Path(__file__).resolve().parents[1]


def _rel(path: Path, base: Path) -> str:
    return Path(os.path.relpath(path.resolve(), base.resolve())).as_posix()


def _portable(path, base: Path) -> str:
    """A path as a report prints it: relative to the report's folder when inside it, else to the repository,
    else its name alone (never the absolute path of the machine that wrote the report)."""
    p = Path(path).resolve()
    for root in (Path(base).resolve(), REPO_ROOT):
        if p == root or root in p.parents:
            return Path(os.path.relpath(p, root)).as_posix()
    return p.name


def _results_text(results_path, base: Path) -> str:
    if not results_path:
        return "n/a"
    paths = results_path if isinstance(results_path, (list, tuple)) else [results_path]
    return ", ".join(_portable(p, base) for p in paths)


def live_logs(ctx, base: Path) -> list[str]:
    """The "Live logs" section: each run's TensorBoard folder and W&B run (armor/logging_backends.py), as the
    driver listed them in results.meta.json, under the runs folder beside the table."""
    runs_dir = getattr(ctx, "runs_dir", None)
    if runs_dir is None or not ctx.live_logs:
        return []
    runs_dir = Path(runs_dir)
    rows = []
    for log in ctx.live_logs:
        run = runs_dir / log["run"]
        tb = runs_dir / log["tensorboard"] if log.get("tensorboard") else None
        wb = log.get("wandb")
        tb_cell = f"[{_portable(tb, base)}]({_rel(tb, base)})" if tb is not None else "—"
        if wb:
            proj = "/".join(x for x in (wb.get("entity"), wb.get("project")) if x)
            wb_cell = f"`{proj}` run `{wb.get('id')}` ({wb.get('mode', 'online')})"
            if wb.get("mode") == "offline":
                wb_cell += f": `wandb sync {_portable(run / 'wandb' / 'latest-run', REPO_ROOT)}`"
        else:
            wb_cell = "—"
        rows.append(f"| `{log['run']}` | {tb_cell} | {wb_cell} |")
    return ["## Live logs", "",
            f"TensorBoard: `tensorboard --logdir {_portable(runs_dir, REPO_ROOT)}` (from the repository "
            "root; x = total RL steps). W&B: the runs below, one per training run (resumes continue the same "
            "run).", "",
            "| run | TensorBoard | W&B |", "|---|---|---|", *rows, ""]


def _missing_summary(fig) -> str:
    miss = {p: m for p, m in (getattr(fig, "armor_info", {}) or {}).get("missing", {}).items() if m}
    if not miss:
        return ""
    return "Not run: " + "; ".join(f"panel {p}: {', '.join(m)}" for p, m in miss.items())


def claims_section(ctx: Context, verdicts, figures_dir: Path, base: Path) -> list[str]:
    """The report's opening: the forest plot of every register entry, then one plain sentence an entry
    (holds here / fails here / undecided here, with its numbers; or why it is not decided)."""
    png = figures_dir / f"{FOREST}.png"
    if not ctx.claims:
        return ["## Claims of the paper", "",
                "_No claims register in the results' record (results.meta.json has no `claims`: results "
                "collected before the register); nothing is decided._", ""]
    return (["## Claims of the paper", "",
             f"![claims]({_rel(png, base)})", "",
             f"PDF: [{FOREST}.pdf]({_rel(figures_dir / f'{FOREST}.pdf', base)}). {rule_text(ctx)}", ""]
            + [f"- {sentence(v)}" for v in verdicts] + [""])


def rehearsal_header(ctx: Context) -> list[str]:
    """A rehearsal's label above everything else (nothing for a real run)."""
    if not ctx.rehearsal:
        return []
    return [f"# {ctx.rehearsal['label']}", "",
            f"**This is a CPU rehearsal of the `{ctx.rehearsal.get('of')}` preset's DAG, not a result: a toy "
            "model, the toy world's training data, scaled-down steps. It tests that every job runs, not what "
            "any number is.**", ""]


def rehearsal_section(ctx: Context) -> list[str]:
    """Every substitution of a rehearsal (results.meta.json `rehearsal`), one line each."""
    if not ctx.rehearsal:
        return []
    subs = ctx.rehearsal.get("substitutions") or []
    return (["## The rehearsal's substitutions", "",
             f"{len(subs)} field(s) of `{ctx.rehearsal.get('of')}` set otherwise (results.meta.json "
             "`rehearsal`); everything else is the paper preset's:", "",
             "| field | paper | rehearsal | why |", "|---|---|---|---|"]
            + [f"| `{s.get('field')}` | `{s.get('paper')!r}` | `{s.get('rehearsal')!r}` | {s.get('why')} |"
               for s in subs] + [""])


def build_report(ctx: Context, out_md: Path, command: str, seeds, wall_time_s, figures_dir: Path,
                 draw: Optional[bool] = None, results_path=None) -> str:
    figures_dir = Path(figures_dir)
    need = [n for n in FIGURES if draw or not (figures_dir / f"{n}.png").exists()]
    if need:
        draw_all(ctx, figures_dir, only=need)
    base = out_md.parent
    seeds = list(seeds) if seeds is not None else ctx.seeds()
    verdicts = run_claims(ctx)
    if draw or not (figures_dir / f"{FOREST}.png").exists():
        write_checklist(ctx, figures_dir)
    lines = [HEADER, ""] + rehearsal_header(ctx) + [f"# ARMOR reproduction — preset `{ctx.preset}`", "",
             "_Generated from the results table by `figures/report.py`; never hand-edited._", ""]
    lines += rehearsal_section(ctx)
    lines += claims_section(ctx, verdicts, figures_dir, base)
    lines += ["## The run", "", "| | |", "|---|---|",
             f"| preset | `{ctx.preset}` (model {ctx.model}) |",
             f"| seeds | {', '.join(str(s) for s in seeds) or 'n/a'} |",
             f"| wall time | {_wall(wall_time_s)} |",
             f"| command | `{command or 'n/a'}` |",
             f"| results | `{_results_text(results_path, base)}` |",
             f"| validation | {ctx.val_label} |",
             f"| θ* (continual start) | step {ctx.theta_star()} |",
             f"| arms in results | {', '.join(f'`{a}`' for a in sorted(ctx.arms)) or 'none'} |",
             f"| generated | {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} |", ""]
    if ctx.is_paper:
        lines += ["Paper preset: the figures carry the paper's read-offs as grey `paper:` marks and the "
                  "tables a `paper` row under each of ours (figures/paper_numbers.yaml).", ""]
    else:
        lines += ["Not a paper preset: the paper's numbers do not apply to this model, so the qualitative "
                  "checklist below is the comparison; the paper's tables are shown for reference.", ""]

    lines += live_logs(ctx, base)
    if world_applies(ctx):
        lines += ["## The world's acceptance checks", "",
                  "Can the paper's claims be tested in this world? (figures/world_checks.py: thresholds and "
                  "rules)", "",
                  world_checks_markdown(run_world_checks(ctx))]
    lines += ["## Checklist of the claims register, entry by entry", "",
              checklist_markdown(verdicts, ctx)]

    steps_png = figures_dir / "steps.png"
    if draw or not steps_png.exists():
        draw_all(ctx, figures_dir, only=["steps"])
    lines += ["## Per-step evidence", "",
              "Anchors and kept prompts, the answer modes' shares (on-policy samples; ARMOR's kept anchors) "
              "and the clip fractions per step, seed means (the runs' metrics; `steps.parquet` beside the "
              "results).", "",
              f"![steps]({_rel(steps_png, base)})", "",
              f"PDF: [steps.pdf]({_rel(figures_dir / 'steps.pdf', base)})", ""]
    lines += ["## Figures", ""]
    for name, fn in FIGURES.items():
        png = figures_dir / f"{name}.png"
        claim = paper_mod.figure_claim(ctx.preset, name) or "—"
        lines += [f"### {FIGURE_TITLES[name]}", "", "| ours | paper |", "|---|---|",
                  f"| ![{name}]({_rel(png, base)}) | {claim} |", ""]
        try:
            note = _missing_summary(fn(ctx))  # cheap re-evaluation (no save) to list the gaps
        except Exception as e:  # noqa: BLE001
            note = f"could not draw: {type(e).__name__}: {e}"
        if note:
            lines += [f"_{note}_", ""]
        lines += [f"PDF: [{name}.pdf]({_rel(figures_dir / f'{name}.pdf', base)})", ""]

    lines += ["## Tables", ""]
    for name in TABLES:
        try:
            t = build_table(ctx, name)
            (figures_dir / f"{name}.md").write_text(t.to_markdown())
            (figures_dir / f"{name}.tex").write_text(t.to_latex())
            lines += [f"### {t.title}", "", t.to_markdown(title=False)]
            if not ctx.is_paper:
                lines += ["Paper's table for reference:", "", paper_table(name).to_markdown(title=False)]
            lines += [f"LaTeX: [{name}.tex]({_rel(figures_dir / f'{name}.tex', base)})", ""]
        except Exception as e:  # noqa: BLE001
            lines += [f"### {name}", "", f"_could not be built: {type(e).__name__}: {e}_", ""]

    card = ctx.driver_meta.get("protocol_card")
    if card:        # what the final evaluation measured (eval/card.py, written by the driver's collection)
        lines += ["## Protocol card of the final evaluation", "", card, ""]

    lines += ["## Method notes", "",
              "- Curves: seed mean, shaded band = min–max over seeds; x = total RL steps since the base "
              "model.",
              "- Table checkpoints: the paper's step on paper presets when evaluated; otherwise the eval "
              "step with the best seed-mean validation score (validation benchmark above); cells = seed-mean "
              "eval values (source = eval) at that step, in percent.",
              "- Missing arms leave a red `not run:` note on a figure panel and a `—` cell with a footnote "
              "in a table.",
              ""]
    return "\n".join(lines)


def write_report(results_path, out_md, preset: Optional[str] = None, command: str = "",
                 seeds: Optional[Sequence[int]] = None, wall_time_s: Optional[float] = None,
                 figures_dir=None, draw: Optional[bool] = None, runs_dir=None) -> Path:
    """Generate REPRODUCTION.md at out_md (figures in figures_dir, default <out_md dir>/figures)."""
    out_md = Path(out_md)
    out_md.parent.mkdir(parents=True, exist_ok=True)
    ctx = load_context(results_path, preset=preset, runs_dir=runs_dir)
    figures_dir = Path(figures_dir) if figures_dir is not None else out_md.parent / "figures"
    out_md.write_text(build_report(ctx, out_md, command, seeds, wall_time_s, figures_dir, draw, results_path))
    return out_md


def _seeds(text: Optional[str]):
    if not text:
        return None
    return [int(s) for s in str(text).replace(" ", "").split(",") if s]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m figures.report", description=__doc__.split("\n")[0])
    ap.add_argument("--results", required=True, nargs="+", help="results.parquet file(s)")
    ap.add_argument("--out", default="REPRODUCTION.md", help="report path")
    ap.add_argument("--preset")
    ap.add_argument("--command", default="")
    ap.add_argument("--seeds", help="comma-separated; default: the seeds in the results")
    ap.add_argument("--wall-time-s", type=float)
    ap.add_argument("--figures-dir")
    ap.add_argument("--runs", help="runs/<preset> folder (default: the results file's folder)")
    ap.add_argument("--redraw", action="store_true", help="redraw every figure (default: only missing ones)")
    a = ap.parse_args(argv)
    results = a.results if len(a.results) > 1 else a.results[0]
    p = write_report(results, a.out, a.preset, a.command, _seeds(a.seeds), a.wall_time_s, a.figures_dir,
                     draw=True if a.redraw else None, runs_dir=a.runs)
    print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
