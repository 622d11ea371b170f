"""Draw all (or some) paper items for one preset: figures (PNG + PDF), tables (Markdown + LaTeX), the claims
checklist (Markdown + JSON, and its forest plot).

    from figures.build import draw_all
    produced = draw_all(ctx, "out/", only=["fig4", "table1"])   # {item: [paths]}

An item that fails for an unexpected reason is replaced by a placeholder (a figure saying "could not draw",
a table file saying why) and reported on stderr; drawing never stops half-way.
"""
from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Optional, Sequence

from .claims import FOREST, write_checklist
from .data import Context, ResultsError
from .plots import FIGURES, fig_steps, rehearsal_title, save, watermark
from .tables import TABLES
from .world_checks import applies as world_applies, write_world_checks

# world: the tiny world's acceptance checks; steps: the per-step evidence (anchors, answer modes, clipping)
ITEMS = list(FIGURES) + list(TABLES) + ["checklist", "world", "steps"]


def parse_only(only: Optional[str | Sequence[str]]) -> list[str]:
    if not only:
        return list(ITEMS)
    names = only.split(",") if isinstance(only, str) else list(only)
    names = [n.strip().lower().replace("figure", "fig") for n in names if n.strip()]
    unknown = [n for n in names if n not in ITEMS]
    if unknown:
        raise ValueError(f"unknown items {unknown}; choose from {ITEMS}")
    return names


def _placeholder_figure(name: str, ctx: Context, err: str, out_dir) -> list[Path]:
    from matplotlib.figure import Figure
    fig = Figure(figsize=(6, 3))
    ax = fig.subplots()
    ax.axis("off")
    ax.text(0.5, 0.5, f"{name}: could not draw\n{err}", ha="center", va="center", color="tab:red", wrap=True)
    fig.suptitle(rehearsal_title(ctx, f"{name} [preset {ctx.preset}]"))
    fig.armor_info = {}
    watermark(fig, ctx)
    return save(fig, out_dir, name)


def draw_all(ctx: Context, out_dir, only=None, table_ctxs: Optional[Sequence[Context]] = None,
             kl_step: Optional[int] = None) -> dict[str, list[Path]]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    produced: dict[str, list[Path]] = {}
    for name in parse_only(only):
        if name == "world" and not only and not world_applies(ctx):
            continue                      # a preset without the headroom control has no world checks
        try:
            if name in FIGURES:
                kw = {"n": kl_step} if name == "fig2" and kl_step is not None else {}
                FIGURES[name](ctx, out, **kw)
                produced[name] = [out / f"{name}.png", out / f"{name}.pdf"]
            elif name in TABLES:
                TABLES[name](table_ctxs or ctx, out)
                produced[name] = [out / f"{name}.md", out / f"{name}.tex"]
            elif name == "steps":
                fig_steps(ctx, out)
                produced[name] = [out / "steps.png", out / "steps.pdf"]
            elif name == "world":
                write_world_checks(ctx, out)
                produced[name] = [out / "world_checks.md", out / "world_checks.json"]
            else:
                write_checklist(ctx, out)
                produced[name] = [out / "checklist.md", out / "checklist.json", out / f"{FOREST}.png",
                                  out / f"{FOREST}.pdf"]
        except ResultsError:    # a damaged input file is no item's failure: every item would read it
            raise
        except Exception as e:  # noqa: BLE001 - a broken item must not stop the others
            err = f"{type(e).__name__}: {e}"
            print(f"[figures] {name} failed: {err}\n{traceback.format_exc()}", file=sys.stderr)
            if name in FIGURES or name == "steps":
                produced[name] = _placeholder_figure(name, ctx, err, out)
            else:
                p = out / (f"{name}.md")
                p.write_text(f"**{name}: could not be built** ({err})\n")
                produced[name] = [p]
    return produced
