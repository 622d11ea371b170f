"""What a budget of GPU-hours buys, by the paper's importance: each `--only` item's cost (the plan of that
item alone) and the items a budget covers, taken in IMPORTANCE order (the dry run's `--budget-gpu-hours`; the
per-job estimates are reproduce/sizing/estimates.py's).

    rows = item_costs(preset, root, seeds, res, fetch_dir, throughput(preset))
    print("\n".join(budget_lines(rows, 10_000)))

Each item's added cost is the plan of the items taken so far plus it, minus the plan without it: a run
shared by items counts once, and a run an item lengthens (DAPO to θ* for the headline, to its end for Fig. 1)
counts the steps it adds.
"""
from __future__ import annotations

from typing import Callable

from reproduce.dag.graph import build_jobs
from reproduce.matrix.arms import figure_arms
from reproduce.sizing.estimates import estimate_jobs
from reproduce.sizing.throughput import Throughput

# the paper's items, most important first: the headline (Table 1: DAPO to θ*, then +ARMOR), Fig. 1 (the
# collapse and ARMOR's answer), Fig. 4's authors' restarts (the reset behind the headline), then its in-run
# reset sweep (fig4 adds armor_reset_<τ>), the rest of Tables 1 and 2 (QAE,
# pass@k of the same runs), Fig. 3 (which part of ARMOR does the work), Fig. 2 (the KL baselines), Fig. 7
# (Qwen3's reset schedule), Fig. 6 (QAE's curves), Fig. 5 (the appendix's k2), Table 3 (teacher-guided
# baselines), the toy world's own checks
IMPORTANCE = ("headline", "fig1", "fig4_restarts", "fig4", "table1", "table2", "fig3", "fig2", "fig7", "fig6",
              "fig5", "table3", "world")


def plan_cost(preset, root, seeds, res, fetch_dir, t: Throughput, items: list[str]) -> float:
    """GPU-hours of the plan of these items (none: 0)."""
    if not items:
        return 0.0
    jobs = build_jobs(preset, root, seeds, list(items), res, fetch_dir=fetch_dir)
    return sum(e.gpu_hours for e in estimate_jobs(preset, jobs, t).values())


def item_costs(preset, root, seeds, res, fetch_dir, t: Throughput) -> list[dict]:
    """The preset's `--only` items in IMPORTANCE order, each with the GPU-hours of its plan alone and the cost
    function choose_items adds them with."""
    items = [i for i in IMPORTANCE if i in figure_arms(preset.protocol)]

    def cost(chosen: list[str]) -> float:
        return plan_cost(preset, root, seeds, res, fetch_dir, t, chosen)
    return [{"item": i, "gpu_hours": cost([i]), "cost": cost} for i in items]


def choose_items(rows: list[dict], budget: float, cost: Callable[[list[str]], float] = None) -> list[dict]:
    """The items in the rows' order (importance), each taken when the plan of the items taken so far plus it
    stays within `budget`; an item that does not fit is passed over for the next. Rows with `extra` (the
    GPU-hours it adds), `total` and `covered`."""
    cost = cost or (rows[0]["cost"] if rows else None)
    taken: list[str] = []
    total = 0.0
    out = []
    for r in rows:
        with_it = cost(taken + [r["item"]])
        extra = with_it - total
        ok = with_it <= budget
        if ok:
            taken.append(r["item"])
            total = with_it
        out.append({**r, "extra": extra, "total": total, "covered": ok})
    return out


def budget_lines(rows: list[dict], budget: float) -> list[str]:
    out = [f"budget {budget:,.0f} GPU-hours: the --only items in order of the paper's importance (GPU-hours "
           f"alone; added to the items taken before, shared runs counted once):"]
    chosen = choose_items(rows, budget)
    for r in chosen:
        out.append(f"  {'covered' if r['covered'] else 'over   '}  {r['item']:<13} {r['gpu_hours']:>10,.0f} "
                   f"alone {r['extra']:>10,.0f} added" + (f" -> {r['total']:,.0f} in all" if r["covered"]
                                                          else ""))
    covered = [r["item"] for r in chosen if r["covered"]]
    out.append(f"  -> --only {','.join(covered)}" if covered else "  -> the budget covers no item")
    return out
