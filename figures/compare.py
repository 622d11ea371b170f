"""Two checklists side by side (two regimes of one world, or two runs): per claim each one's class, mean and
interval, seeds, and whether the class differs.

    python -m figures.compare reproduce/results/tiny/figures/checklist.json \
        reproduce/results/tiny-slow/figures/checklist.json
Each checklist is named by the folder above its figures/ folder (the preset's results folder).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .checklist import Verdict, read_verdicts


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


def _name(path: Path) -> str:
    """reproduce/results/tiny/figures/checklist.json -> tiny."""
    return path.parent.parent.name if path.parent.name == "figures" else path.parent.name


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m figures.compare", description=__doc__.split("\n")[0])
    ap.add_argument("checklists", nargs=2, type=Path, help="two checklist.json files")
    a = ap.parse_args(argv)
    for p in a.checklists:
        if not p.is_file():
            ap.error(f"checklists: {p} is not a file")
    va, vb = (read_verdicts(p) for p in a.checklists)
    print(compare_markdown((_name(a.checklists[0]), _name(a.checklists[1])), va, vb), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
