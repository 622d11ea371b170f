"""The local schedule's priority: the longest remaining path first (slurm.launcher.critical_path_order)."""
from slurm.launcher import Job, critical_path_order


def _job(key, cost, deps=()):
    return Job(key, ["true"], deps=list(deps), cost=cost)


def test_the_job_that_gates_the_longest_chain_starts_first():
    # a (1) -> b (1) -> c (10): rank a = 12; d (5) alone: rank 5; e (5) alone, after d in the caller's order
    jobs = [_job("d", 5), _job("e", 5), _job("a", 1), _job("b", 1, ["a"]), _job("c", 10, ["b"])]
    assert [j.key for j in critical_path_order(jobs)] == ["a", "b", "c", "d", "e"]


def test_without_costs_the_callers_order_holds():
    jobs = [_job("x", 0), _job("y", 0, ["x"]), _job("z", 0)]
    assert [j.key for j in critical_path_order(jobs)] == ["x", "y", "z"]


def test_a_short_job_that_unblocks_long_ones_goes_before_a_long_leaf():
    # the restart point (0.2) unblocks the restart runs (8 each): it goes before a lone 6-unit run
    jobs = [_job("leaf", 6), _job("point", 0.2), _job("r0", 8, ["point"]), _job("r1", 8, ["point"])]
    assert [j.key for j in critical_path_order(jobs)][:2] == ["point", "r0"]
