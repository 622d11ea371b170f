"""The job shape's threads: a rank's share of the node's cores (slurm/resources.py) and the threads the job
wrapper sets from the allocation (slurm/jobwrap.py)."""
from slurm import jobwrap
from slurm.resources import Resources


def test_threads_per_rank_from_the_nodes_cores():
    assert Resources(gpus_per_node=8, cpus_per_task=64).threads_per_rank == 8
    assert Resources(gpus_per_node=8, cpus_per_task=4).threads_per_rank == 1
    assert Resources(cpus_per_task=6).threads_per_rank == 6
    env = jobwrap._thread_env({"SLURM_CPUS_PER_TASK": "64"}, ranks=8)
    assert env["ARMOR_THREADS"] == env["OMP_NUM_THREADS"] == "8"
    assert jobwrap._thread_env({"SLURM_CPUS_PER_TASK": "64"})["OMP_NUM_THREADS"] == "64"
    assert jobwrap._thread_env({"SLURM_CPUS_PER_TASK": "64", "ARMOR_THREADS": "3"},
                               8)["OMP_NUM_THREADS"] == "3"
