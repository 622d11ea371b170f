"""Two checklists side by side (two regimes of one world, or two runs): per claim each one's class, mean and
interval, seeds, and whether the class differs.

    python -m figures.compare reproduce/results/tiny/figures/checklist.json \
        reproduce/results/tiny-slow/figures/checklist.json [--ends dapo_cont,armor]
Each checklist is named by the folder above its figures/ folder (the preset's results folder). --ends also
prints each arm's end value (mean of a seed's last END_WINDOW validation points) in both, from the
results.parquet beside each checklist: mean ± sd over seeds, then each seed's.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from . import stats as S
from .checklist import Verdict, ends, read_verdicts
from .data import load_context


def _cell(v: Verdict | None) -> str:
    """`**class** +0.050 [-0.007, +0.108] (5)`: the class and its deciding interval over seeds."""
    if v is None:
        return "—"
    s = v.stat
    if not s:
        return f"**{v.verdict}**"
    ci = f" [{s['lo']:+.3f}, {s['hi']:+.3f}]" if s.get("lo") is not None else ""
    return f"**{v.verdict}** {s['mean']:+.3f}{ci} ({s['n']})"


def compare_markdown(names: tuple[str, str], a: list[Verdict], b: list[Verdict]) -> str:
    """A Markdown table: one row a claim (in `a`'s order, then claims only `b` has), each checklist's class,
    mean, 95% interval and seeds, and `differs` where the classes differ."""
    by_a, by_b = {v.key: v for v in a}, {v.key: v for v in b}
    keys = [*by_a, *(k for k in by_b if k not in by_a)]
    lines = [f"| claim | {names[0]} | {names[1]} | class |", "|---|---|---|---|"]
    for k in keys:
        va, vb = by_a.get(k), by_b.get(k)
        same = va is not None and vb is not None and va.verdict == vb.verdict
        cls = "same" if same else "differs"
        lines.append(f"| {(va or vb).question} | {_cell(va)} | {_cell(vb)} | {cls} |")
    return "\n".join(lines) + "\n"


def ends_markdown(names: tuple[str, str], results: tuple[Path, Path], arms: list[str]) -> str:
    """A Markdown table: one row an arm, its end value in each results file: mean ± sd (seeds) and each
    seed's."""
    ctxs = [load_context(r) for r in results]
    lines = [f"| arm | {names[0]} | {names[1]} |", "|---|---|---|"]
    for arm in arms:
        cells = []
        for ctx in ctxs:
            v = list(ends(ctx, arm).values())
            sd = S.sample_sd(v)
            cells.append("—" if not v else f"{S.mean(v):.3f}" + (f" ± {sd:.3f}" if sd is not None else "")
                         + " (" + " / ".join(f"{x:.3f}" for x in v) + ")")
        lines.append(f"| `{arm}` | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def _name(path: Path) -> str:
    """reproduce/results/tiny/figures/checklist.json -> tiny."""
    return path.parent.parent.name if path.parent.name == "figures" else path.parent.name


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m figures.compare", description=__doc__.split("\n")[0])
    ap.add_argument("checklists", nargs=2, type=Path, help="two checklist.json files")
    ap.add_argument("--ends", help="comma-separated arms whose end values to print too")
    a = ap.parse_args(argv)
    for p in a.checklists:
        if not p.is_file():
            ap.error(f"checklists: {p} is not a file")
    va, vb = (read_verdicts(p) for p in a.checklists)
    names = (_name(a.checklists[0]), _name(a.checklists[1]))
    print(compare_markdown(names, va, vb), end="")
    if a.ends:
        results = tuple(p.parent.parent / "results.parquet" for p in a.checklists)
        for r in results:
            if not r.is_file():
                ap.error(f"--ends: {r} (the results beside the checklist) is not a file")
        print()
        print(ends_markdown(names, results, a.ends.split(",")), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
