"""The budget's choice of items by importance (reproduce/dag/budget.py)."""
from reproduce.dag.budget import IMPORTANCE, choose_items


def test_budget_takes_items_by_importance_passing_over_those_that_do_not_fit():
    runs = {"a": 40.0, "b": 30.0, "c": 300.0, "d": 30.0}        # GPU-hours of a plan's runs
    needs = {"headline": "a", "fig1": "ab", "fig4": "c", "table1": "ad"}

    def plan(items):     # the plan of these items: the runs they need, shared ones once
        return sum(runs[r] for r in set("".join(needs[i] for i in items)))
    rows = [{"item": i, "gpu_hours": plan([i])} for i in needs]
    got = choose_items(rows, 110, plan)
    assert [(r["item"], r["covered"], r["extra"], r["total"]) for r in got] == [
        ("headline", True, 40.0, 40.0), ("fig1", True, 30.0, 70.0), ("fig4", False, 300.0, 70.0),
        ("table1", True, 30.0, 100.0)]                      # fig4 passed over, table1 still fits
    assert [r["covered"] for r in choose_items(rows, 80, plan)] == [True, True, False, False]
    assert not any(r["covered"] for r in choose_items(rows, 10, plan))
    # each model's headline first; Fig. 4's authors' restarts before its in-run reset sweep
    assert IMPORTANCE[:4] == ("headline", "fig1", "fig4_restarts", "fig4")
