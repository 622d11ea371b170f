"""What a budget of GPU-hours buys: the cost of each `--only` item (the jobs it needs, alone) and the items a
budget covers (the dry run's `--budget-gpu-hours`; the per-job estimates are reproduce/sizing.py's).

    rows = item_costs(preset, root, seeds, res, stage_dir, est, throughput(preset))
    print("\n".join(budget_lines(rows, est, 50_000)))
"""
from __future__ import annotations

from reproduce.dag.graph import build_jobs
from reproduce.matrix.arms import figure_arms
from reproduce.sizing import Estimate, Throughput, estimate_jobs


def item_costs(preset, root, seeds, res, stage_dir, est: dict[str, Estimate], t: Throughput) -> list[dict]:
    """The `--only` items in order of their own cost (GPU-hours of the jobs each needs, alone)."""
    rows = []
    for item in figure_arms(preset.protocol):
        jobs = build_jobs(preset, root, seeds, [item], res, stage_dir=stage_dir)
        est.update(estimate_jobs(preset, [j for j in jobs if j.key not in est], t))
        keys = {j.key for j in jobs}
        rows.append({"item": item, "keys": keys, "gpu_hours": sum(est[k].gpu_hours for k in keys)})
    return sorted(rows, key=lambda r: r["gpu_hours"])


def choose_items(rows: list[dict], est: dict[str, Estimate], budget: float) -> list[dict]:
    """Items in order of cost, each taken when the runs it adds (those shared with items already taken count
    once) keep the total within `budget`: rows with `extra` (its added GPU-hours), `total` and `covered`."""
    seen: set[str] = set()
    total = 0.0
    out = []
    for r in rows:
        extra = sum(est[k].gpu_hours for k in r["keys"] - seen)
        ok = total + extra <= budget
        if ok:
            seen |= r["keys"]
            total += extra
        out.append({**r, "extra": extra, "total": total, "covered": ok})
    return out


def budget_lines(rows: list[dict], est: dict[str, Estimate], budget: float) -> list[str]:
    out = [f"budget {budget:,.0f} GPU-hours: the --only items in order of cost (GPU-hours alone; added to "
           f"the items taken before, shared runs counted once):"]
    chosen = choose_items(rows, est, budget)
    for r in chosen:
        out.append(f"  {'covered' if r['covered'] else 'over   '}  {r['item']:<7} {r['gpu_hours']:>10,.0f} "
                   f"alone {r['extra']:>10,.0f} added" + (f" -> {r['total']:,.0f} in all" if r["covered"]
                                                          else ""))
    covered = [r["item"] for r in chosen if r["covered"]]
    out.append(f"  -> --only {','.join(covered)}" if covered else "  -> the budget covers no item")
    return out
