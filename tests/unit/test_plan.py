"""The plan's arithmetic (reproduce/sizing.py): checkpoint volume, host memory, the schedule on a cluster of a
given size, the budget's choice of items; the job shape's threads (slurm/resources.py, slurm/jobwrap.py)."""
import pytest

from reproduce.dag.budget import choose_items
from types import SimpleNamespace

from reproduce.sizing import (ROLLOUT_BYTES_PER_TOKEN, Estimate, checkpoint_volume, host_memory_gb,
                              preemption_steps, simulate)
from slurm import jobwrap
from slurm.launcher import Job
from slurm.resources import Resources


def test_checkpoint_volume_under_retention():
    v = checkpoint_volume(10 ** 9, saves=36)
    assert v["per_save"] == 14 * 10 ** 9 and v["kept"] == 36 and v["bytes"] == 36 * 14 * 10 ** 9
    v = checkpoint_volume(10 ** 9, saves=36, keep_last=2, protected=3)   # last 2 resumable + 3 protected
    assert v["kept"] == 5 and v["bytes"] == 5 * 14 * 10 ** 9
    assert checkpoint_volume(10 ** 9, saves=3, keep_last=2, protected=3)["kept"] == 3
    # a run that resets πref holds its bf16 shards in every save too
    assert checkpoint_volume(10 ** 9, saves=1, reference_bytes=2)["per_save"] == 16 * 10 ** 9


def test_host_memory_counts_the_engines_weight_backup_per_rank():
    n = 7_615_616_512
    got = host_memory_gb(n, 8, 1, "vllm")
    assert got == pytest.approx(8 * (2 * n / 1e9 + 8.0) + 2 * n / 1e9)     # + the node's bf16 export
    # 4 nodes: each node's ranks hold a quarter of the export
    assert host_memory_gb(n, 8, 4, "vllm") == pytest.approx(got - 2 * n / 1e9 * 3 / 4)
    assert host_memory_gb(n, 8, 1, "hf") < got - 100       # no sleep-mode backup without vLLM
    # every rank holds the step's rollouts (all shards gathered): 1e8 generated tokens at 44 B each, 8 ranks
    assert host_memory_gb(n, 8, 1, "vllm", rollout_tokens=1e8) == pytest.approx(got + 8 * 1e8 * 44 / 1e9)
    assert ROLLOUT_BYTES_PER_TOKEN == 44
    # a background state save's CPU copy: masters 4N + AdamW 8N + πref 2N over all 16 x 8 ranks
    assert host_memory_gb(n, 8, 16, "vllm", state_staging=True) == pytest.approx(
        host_memory_gb(n, 8, 16, "vllm") + 8 * 14 * n / 1e9 / 128)


def test_preemption_costs_the_steps_since_the_last_saved_state():
    def sched(state_every, save_every=20):
        return SimpleNamespace(state_every=state_every, save_every=save_every)
    assert preemption_steps(sched(None)) == 20 and preemption_steps(sched(1)) == 1
    assert preemption_steps(sched(5)) == 5 and preemption_steps(sched(50)) == 20   # a checkpoint comes first


def test_threads_per_rank_from_the_nodes_cores():
    assert Resources(gpus_per_node=8, cpus_per_task=64).threads_per_rank == 8
    assert Resources(gpus_per_node=8, cpus_per_task=4).threads_per_rank == 1
    assert Resources(cpus_per_task=6).threads_per_rank == 6
    env = jobwrap._thread_env({"SLURM_CPUS_PER_TASK": "64"}, ranks=8)
    assert env["ARMOR_THREADS"] == env["OMP_NUM_THREADS"] == "8"
    assert jobwrap._thread_env({"SLURM_CPUS_PER_TASK": "64"})["OMP_NUM_THREADS"] == "64"
    assert jobwrap._thread_env({"SLURM_CPUS_PER_TASK": "64", "ARMOR_THREADS": "3"},
                               8)["OMP_NUM_THREADS"] == "3"


def _j(key, deps=()):
    return Job(key, ["x"], deps=list(deps))


def test_schedule_side_by_side_and_checkpoint_ready_jobs():
    jobs = [_j("s1"), _j("ready", []), _j("s2a", ["ready"]), _j("s2b", ["ready"]), _j("eval", ["s2a"])]
    est = {"s1": Estimate(10.0, 128, 16), "ready": Estimate(0.0, watch=("s1", 0.4)),
           "s2a": Estimate(5.0, 128, 16), "s2b": Estimate(5.0, 128, 16), "eval": Estimate(1.0, 8, 1)}
    inf = simulate(jobs, est, None)
    assert inf["end"]["ready"] == pytest.approx(4.0)          # stage 2 starts at 40 % of stage 1
    assert inf["peak_nodes"] == 48                             # s1, s2a and s2b at once (eval after s1 ends)
    assert inf["start"]["s2a"] == pytest.approx(4.0) and inf["makespan"] == pytest.approx(10.0)
    assert inf["path"] == ["s1"]
    one = simulate(jobs, est, 16)                              # one train job at a time
    assert one["start"]["s2a"] == pytest.approx(10.0) and one["start"]["s2b"] == pytest.approx(15.0)
    # the one-node evaluation waits for free nodes: s2b came first in the plan's order and took them
    assert one["start"]["eval"] == pytest.approx(20.0) and one["makespan"] == pytest.approx(21.0)
    two = simulate(jobs, est, 33)        # s1 and s2a side by side; s2b when s2a frees its nodes
    assert two["start"]["s2b"] == pytest.approx(9.0) and two["makespan"] == pytest.approx(14.0)
    three = simulate(jobs, est, 48)      # all three train jobs at once
    assert three["makespan"] == pytest.approx(10.0) and three["end"]["eval"] == pytest.approx(10.0)


def test_budget_takes_items_in_order_of_cost_shared_runs_once():
    est = {"a": Estimate(1.0, 100), "b": Estimate(1.0, 50), "c": Estimate(1.0, 400)}
    rows = [{"item": "fig1", "keys": {"b"}, "gpu_hours": 50.0}, {"item": "fig2", "keys": {"a", "b"},
                                                                  "gpu_hours": 150.0},
            {"item": "fig3", "keys": {"c"}, "gpu_hours": 400.0}]
    got = choose_items(rows, est, 200)
    assert [(r["item"], r["covered"], r["extra"]) for r in got] == [("fig1", True, 50), ("fig2", True, 100),
                                                                     ("fig3", False, 400)]
    assert not any(r["covered"] for r in choose_items(rows, est, 10))
