"""python -m figures --results runs/<preset>/results.parquet --out DIR [--only fig4,table1] [--preset NAME]

Redraws all (or the listed) paper items from the tidy results table: fig1..fig7 (PNG + PDF), table1..table3
(Markdown + LaTeX), checklist (the claims register decided: Markdown + JSON, forest plot claims.png/.pdf).
With several presets in the results and no --preset, each preset's figures go to DIR/<preset>/ and the
tables (spanning all presets) to DIR. --report PATH also writes REPRODUCTION.md (figures/report.py).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .build import ITEMS, draw_all, parse_only
from .data import ResultsError, load_context, load_contexts, load_results
from .report import _seeds, write_report
from .world_checks import applies as world_applies


def main(argv=None) -> int:
    try:
        return _main(argv)
    except ResultsError as e:       # a damaged results file: one line naming it
        print(f"error: {e}", file=sys.stderr)
        return 2


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m figures", description=__doc__.split("\n")[0])
    ap.add_argument("--results", required=True, nargs="+", help="results.parquet file(s)")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--only", help=f"comma-separated subset of {','.join(ITEMS)}")
    ap.add_argument("--preset", help="preset to draw (default: every preset in the results)")
    ap.add_argument("--runs", help="runs/<preset> folder with metrics.jsonl (default: the results file's "
                                   "folder)")
    ap.add_argument("--kl-step", type=int, help="Fig. 2b: stage-2 step N of the KL read-off")
    ap.add_argument("--report", help="also write REPRODUCTION.md here")
    ap.add_argument("--command", default="", help="for the report: the command that produced the runs")
    ap.add_argument("--seeds", help="for the report: comma-separated seeds")
    ap.add_argument("--wall-time-s", type=float, help="for the report: wall time of the runs")
    a = ap.parse_args(argv)

    missing = [p for p in a.results if not Path(p).exists()]
    if missing:
        print(f"results file(s) not found: {missing}", file=sys.stderr)
        return 2
    try:
        only = parse_only(a.only)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    results = a.results if len(a.results) > 1 else a.results[0]
    out = Path(a.out)
    presets = [a.preset] if a.preset else sorted(load_results(results)["preset"].unique())
    if not presets:
        print("results table is empty", file=sys.stderr)
        return 2
    all_ctxs = load_contexts(results, runs_dir=a.runs)
    table_ctxs = [c for c in all_ctxs if c.preset in presets]
    for preset in presets:
        ctx = load_context(results, preset=preset, runs_dir=a.runs if a.runs else None)
        if len(a.results) > 1 and a.runs is None:  # the runs folder of the file that holds this preset
            ctx.runs_dir = next((c.runs_dir for c in all_ctxs if c.preset == preset), ctx.runs_dir)
            ctx.results_path = next((c.results_path for c in all_ctxs if c.preset == preset),
                                    ctx.results_path)
        d = out / preset if len(presets) > 1 else out
        # the world's acceptance checks only where the preset runs them (its headroom control), unless asked
        # for
        fig_items = [n for n in only
                     if not n.startswith("table") and (n != "world" or a.only or world_applies(ctx))]
        produced = draw_all(ctx, d, fig_items, kl_step=a.kl_step) if fig_items else {}
        for name, paths in produced.items():
            print(f"{preset} {name}: " + " ".join(str(p) for p in paths))
    tab_items = [n for n in only if n.startswith("table")]
    if tab_items:
        # tables span the chosen presets; draw_all only needs a context for the non-table items
        if not table_ctxs:
            table_ctxs = [load_context(results, preset=presets[0], runs_dir=a.runs)]
        produced = draw_all(table_ctxs[0], out, tab_items, table_ctxs=table_ctxs)
        for name, paths in produced.items():
            print(f"{name}: " + " ".join(str(p) for p in paths))
    if a.report:
        if len(presets) > 1:
            print("--report needs one preset (--preset)", file=sys.stderr)
            return 2
        runs = a.runs or next((c.runs_dir for c in all_ctxs if c.preset == presets[0]), None)
        p = write_report(results, a.report, presets[0], a.command, _seeds(a.seeds), a.wall_time_s,
                         figures_dir=out, runs_dir=runs)
        print(f"report: {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
