"""The paper's numbers (paper_numbers.yaml) as reference marks on our figures and rows in our tables.

Only the paper presets (qwen25-math-7b, qwen3-8b-base) get the overlay: the read-offs are about those models.
Every mark is grey/black and its legend label starts with "paper:" so it cannot be mistaken for our data.
"""
from __future__ import annotations

from typing import Optional

from .data import paper_numbers, paper_preset

PAPER_COLOR = "0.25"


def figure_marks(preset: str, fig: str, panel: Optional[str] = None) -> list[dict]:
    marks = ((paper_preset(preset).get("figures") or {}).get(fig) or {}).get("marks") or []
    return [m for m in marks if panel is None or str(m.get("panel")) == panel]


def figure_claim(preset: str, fig: str) -> str:
    """The paper's statement for a figure: the preset's own, else the first paper preset that has one
    (prefixed with that model's name)."""
    for p in [preset] + [q for q in all_paper_presets() if q != preset]:
        c = ((paper_preset(p).get("figures") or {}).get(fig) or {}).get("claim")
        if c:
            c = " ".join(str(c).split())
            return c if p == preset else f"({paper_preset(p).get('model', p)}) {c}"
    return ""


def table_rows(preset: str, table: str) -> dict:
    return ((paper_preset(preset).get("tables") or {}).get(table)) or {}


def all_paper_presets() -> list[str]:
    return list((paper_numbers().get("presets") or {}).keys())


def draw_marks(ax, preset: str, fig: str, panel: str) -> list[str]:
    """Draw the paper's read-offs for one panel (line-type marks only; bars are drawn by fig2b).
    Returns the labels drawn."""
    drawn = []
    for m in figure_marks(preset, fig, panel):
        kind, label = m.get("type"), m.get("label", "paper")
        if kind == "point":
            ax.errorbar([m["x"]], [m["y"]], xerr=[m["xerr"]] if m.get("xerr") else None, fmt="*",
                        color=PAPER_COLOR, ms=11, mfc="none", capsize=3, label=label, zorder=5)
        elif kind == "hline":
            x0, x1 = m.get("x", [None, None])
            if x0 is None:
                ax.axhline(m["y"], color=PAPER_COLOR, ls=":", lw=1.2, label=label)
            else:
                ax.hlines(m["y"], x0, x1, colors=PAPER_COLOR, linestyles=":", lw=1.2, label=label)
        elif kind == "band":
            lo, hi = m["y"]
            x0, x1 = m.get("x", ax.get_xlim())
            ax.fill_between([x0, x1], [lo, lo], [hi, hi], color=PAPER_COLOR, alpha=0.12, hatch="//",
                            lw=0, label=label)
        elif kind == "note":
            ax.text(0.01, 0.01, m.get("text", ""), transform=ax.transAxes, fontsize=7, color=PAPER_COLOR,
                    ha="left", va="bottom", style="italic")
        else:
            continue
        drawn.append(label)
    return drawn
