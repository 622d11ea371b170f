"""The driver's job kinds and their resources, from a preset's protocol (nodes, gpus_per_node), a user YAML
file and flags (the table's mechanics and checks: slurm/resources.py).

Kinds: `fetch` (copy the hub models and datasets a plan needs into the shared fetch folder;
reproduce/hub.py), `world` (build the tiny world), `train` (one RL run), `select_peak`, `evaluate` (one task
of the evaluation job array), `collect`, `figures`. Only `train` and `evaluate` use GPUs.

A user YAML file (``--resources FILE``) may set cluster-wide keys and per-kind keys:

    partition: gpu          # cluster-wide: partition, account, qos, constraint, exclude, extra, env
    account: my-project
    train:   {nodes: 2, gpus_per_node: 8, time_min: 2880, mem_gb: 900}
    evaluate: {gpus_per_node: 1, partition: eval}
    extra: {reservation: armor}          # any further sbatch option (--reservation=armor)
    env: {NCCL_SOCKET_IFNAME: ib0, GLOO_SOCKET_IFNAME: ib0}   # every job's environment (slurm/README.md)

Precedence (later wins): defaults from the protocol < YAML file < flags (the non-cluster-wide flags size
`train`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from reproduce.sizing.footprint import default_host_memory

# a GPU evaluate job's default time limit; the driver raises it to the job's estimate
# (reproduce/sizing/estimates.py fit_eval_limits)
EVAL_TIME_MIN = 8 * 60
from slurm.resources import Resources, resolve_resources

KINDS = ("fetch", "world", "train", "select_peak", "evaluate", "collect", "figures")


def default_resources(nodes: int = 1, gpus_per_node: int = 0, procs_per_node: int = 0, cpus_per_node: int = 0,
                      host_mem_gb: Optional[dict] = None) -> dict[str, Resources]:
    """Defaults for every kind. CPU presets (gpus_per_node == 0) get one-core jobs (the tiny world), or one
    core per rank when `procs_per_node` asks for several CPU ranks; GPU presets get full nodes for training
    and one full node per evaluation (its ranks split the checkpoint's benchmarks), with `cpus_per_node` cores
    (0: 8 per GPU) and the host memory `host_mem_gb` gives per kind (reproduce/sizing/footprint.py's estimate;
    none: the cluster's default)."""
    if gpus_per_node <= 0:
        return {
            "fetch": Resources(cpus_per_task=1, mem_gb=2, time_min=60),
            "world": Resources(cpus_per_task=2, mem_gb=4, time_min=60),
            "train": Resources(nodes=nodes, procs_per_node=procs_per_node,
                               cpus_per_task=max(1, procs_per_node), mem_gb=4 * max(1, procs_per_node),
                               time_min=240),
            "select_peak": Resources(cpus_per_task=1, mem_gb=1, time_min=10),
            "evaluate": Resources(cpus_per_task=1, mem_gb=4, time_min=120),
            "collect": Resources(cpus_per_task=1, mem_gb=2, time_min=15),
            "figures": Resources(cpus_per_task=1, mem_gb=2, time_min=15),
        }
    cpus = cpus_per_node or 8 * gpus_per_node
    mem = host_mem_gb or {}
    return {
        "fetch": Resources(cpus_per_task=4, mem_gb=32, time_min=4 * 60),   # downloads tens of GB once
        "world": Resources(cpus_per_task=4, mem_gb=16, time_min=60),
        # stop_grace_s: a step and its save after the time-limit warning (reproduce/sizing/checks.py checks)
        "train": Resources(nodes=nodes, gpus_per_node=gpus_per_node, procs_per_node=procs_per_node,
                           cpus_per_task=cpus, mem_gb=mem.get("train"), time_min=24 * 60,
                           stop_grace_s=1800.0),
        "select_peak": Resources(cpus_per_task=1, mem_gb=2, time_min=10),
        "evaluate": Resources(nodes=1, gpus_per_node=gpus_per_node, cpus_per_task=cpus,
                              mem_gb=mem.get("evaluate", 64), time_min=EVAL_TIME_MIN),
        "collect": Resources(cpus_per_task=2, mem_gb=8, time_min=30),
        "figures": Resources(cpus_per_task=2, mem_gb=8, time_min=30),
    }


def load_resources(nodes: int = 1, gpus_per_node: int = 0, user_file: str | Path | None = None,
                   flags: dict[str, Any] | None = None, procs_per_node: int = 0, cpus_per_node: int = 0,
                   host_mem_gb: Optional[dict] = None) -> dict[str, Resources]:
    """Resources per kind. `flags`: cluster-wide keys (partition, account, qos, constraint, exclude) and
    train overrides (`nodes`, `gpus_per_node`, `time_min` ...) given on the command line; None values
    are ignored."""
    return resolve_resources(default_resources(nodes, gpus_per_node, procs_per_node, cpus_per_node,
                                               host_mem_gb),
                             user_file, flags, flags_kind="train")


def preset_resources(preset, user_file: str | Path | None = None,
                     flags: dict[str, Any] | None = None) -> dict[str, Resources]:
    """Resources per kind of a preset: its protocol's sizes, the host memory reproduce/sizing/footprint.py
    estimates for its model (GPU presets), a user YAML file and flags."""
    p = preset.protocol
    return load_resources(p.nodes, p.gpus_per_node, user_file, flags, procs_per_node=p.procs_per_node,
                          cpus_per_node=p.cpus_per_node, host_mem_gb=default_host_memory(preset))
