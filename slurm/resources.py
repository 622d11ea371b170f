"""Resources per job kind, from a preset's protocol (nodes, gpus_per_node), a user YAML file and flags.

Kinds: `stage` (copy the hub models and datasets a plan needs into the shared stage folder; reproduce/stage.py),
`world` (build the tiny world), `train` (one RL run), `select_peak`, `evaluate` (one task of the evaluation job
array), `collect`, `figures`. Only `train` and `evaluate` use GPUs.

A user YAML file (``--resources FILE``) may set cluster-wide keys and per-kind keys:

    partition: gpu          # cluster-wide: partition, account, qos, constraint, exclude, extra
    account: my-project
    train:   {nodes: 2, gpus_per_node: 8, time_min: 2880, mem_gb: 900}
    evaluate: {gpus_per_node: 1, partition: eval}
    extra: {reservation: armor}          # any further sbatch option (--reservation=armor)

Precedence (later wins): defaults from the protocol < YAML file < flags.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

KINDS = ("stage", "world", "train", "select_peak", "evaluate", "collect", "figures")
CLUSTER_KEYS = ("partition", "account", "qos", "constraint", "exclude")


class ResourceError(ValueError):
    pass


@dataclass
class Resources:
    nodes: int = 1
    gpus_per_node: int = 0
    procs_per_node: int = 0               # ranks per node (torchrun jobs); 0 = one per GPU, or 1 without GPUs
    cpus_per_task: int = 1
    mem_gb: Optional[float] = None        # None: the cluster's default
    time_min: int = 60
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    constraint: Optional[str] = None
    exclude: Optional[str] = None
    array_parallelism: int = 64           # evaluate: array tasks running at once
    extra: dict = field(default_factory=dict)  # further sbatch options, e.g. {"reservation": "x"}

    @property
    def ranks_per_node(self) -> int:
        return self.procs_per_node or max(1, self.gpus_per_node)

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    def short(self) -> str:
        """One line for plans: `16x8gpu 64cpu 24h00 p=gpu` (nodes x GPUs per node), `1node 1cpu 2GB 0h10`."""
        where = f"{self.nodes}x{self.gpus_per_node}gpu" if self.gpus_per_node else f"{self.nodes}node"
        if self.procs_per_node and self.procs_per_node != self.gpus_per_node:
            where += f" {self.world_size}ranks"
        mem = f" {self.mem_gb:g}GB" if self.mem_gb is not None else ""
        h, m = divmod(self.time_min, 60)
        opts = "".join(f" {k[0]}={getattr(self, k)}" for k in ("partition", "account", "qos")
                       if getattr(self, k))
        return f"{where} {self.cpus_per_task}cpu{mem} {h}h{m:02d}{opts}"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def default_resources(nodes: int = 1, gpus_per_node: int = 0, procs_per_node: int = 0) -> dict[str, Resources]:
    """Defaults for every kind. CPU presets (gpus_per_node == 0) get one-core jobs (the tiny world), or one
    core per rank when `procs_per_node` asks for several CPU ranks; GPU presets get full nodes for training
    (8 CPU cores per GPU) and one GPU per evaluation task."""
    if gpus_per_node <= 0:
        return {
            "stage": Resources(cpus_per_task=1, mem_gb=2, time_min=60),
            "world": Resources(cpus_per_task=2, mem_gb=4, time_min=60),
            "train": Resources(nodes=nodes, procs_per_node=procs_per_node, cpus_per_task=max(1, procs_per_node),
                               mem_gb=4 * max(1, procs_per_node), time_min=240),
            "select_peak": Resources(cpus_per_task=1, mem_gb=1, time_min=10),
            "evaluate": Resources(cpus_per_task=1, mem_gb=4, time_min=120),
            "collect": Resources(cpus_per_task=1, mem_gb=2, time_min=15),
            "figures": Resources(cpus_per_task=1, mem_gb=2, time_min=15),
        }
    return {
        "stage": Resources(cpus_per_task=4, mem_gb=32, time_min=4 * 60),   # downloads tens of GB once
        "world": Resources(cpus_per_task=4, mem_gb=16, time_min=60),
        "train": Resources(nodes=nodes, gpus_per_node=gpus_per_node, procs_per_node=procs_per_node,
                           cpus_per_task=8 * gpus_per_node,
                           mem_gb=None, time_min=24 * 60),
        "select_peak": Resources(cpus_per_task=1, mem_gb=2, time_min=10),
        "evaluate": Resources(nodes=1, gpus_per_node=1, cpus_per_task=8, mem_gb=64, time_min=8 * 60),
        "collect": Resources(cpus_per_task=2, mem_gb=8, time_min=30),
        "figures": Resources(cpus_per_task=2, mem_gb=8, time_min=30),
    }


_FIELDS = {f.name for f in dataclasses.fields(Resources)}


def _apply(res: Resources, values: dict, where: str) -> Resources:
    values = dict(values)
    unknown = set(values) - _FIELDS
    if unknown:
        raise ResourceError(f"{where}: unknown key(s) {sorted(unknown)} (known: {sorted(_FIELDS)})")
    if "extra" in values:
        extra = dict(res.extra)
        extra.update(values.pop("extra") or {})
        values["extra"] = extra
    out = dataclasses.replace(res, **values)
    for k in ("nodes", "cpus_per_task", "time_min", "array_parallelism"):
        if not isinstance(getattr(out, k), int) or getattr(out, k) < 1:
            raise ResourceError(f"{where}: {k} must be an integer >= 1, got {getattr(out, k)!r}")
    if not isinstance(out.gpus_per_node, int) or out.gpus_per_node < 0:
        raise ResourceError(f"{where}: gpus_per_node must be an integer >= 0, got {out.gpus_per_node!r}")
    if out.mem_gb is not None and (not isinstance(out.mem_gb, (int, float)) or out.mem_gb < 0):
        raise ResourceError(f"{where}: mem_gb must be a number >= 0 or null, got {out.mem_gb!r}")
    return out


def load_resources(nodes: int = 1, gpus_per_node: int = 0, user_file: str | Path | None = None,
                   flags: dict[str, Any] | None = None, procs_per_node: int = 0) -> dict[str, Resources]:
    """Resources per kind. `flags`: cluster-wide keys (partition, account, qos, constraint, exclude) and
    train overrides (`nodes`, `gpus_per_node`, `time_min` ...) given on the command line; None values
    are ignored."""
    table = default_resources(nodes, gpus_per_node, procs_per_node)
    if user_file:
        data = yaml.safe_load(Path(user_file).read_text()) or {}
        if not isinstance(data, dict):
            raise ResourceError(f"{user_file}: expected a mapping")
        common = {k: data[k] for k in (*CLUSTER_KEYS, "extra") if k in data}
        unknown = set(data) - set(common) - set(KINDS)
        if unknown:
            raise ResourceError(f"{user_file}: unknown key(s) {sorted(unknown)} "
                                f"(cluster-wide: {list(CLUSTER_KEYS) + ['extra']}; kinds: {list(KINDS)})")
        for kind in KINDS:
            table[kind] = _apply(table[kind], common, f"{user_file}")
            if kind in data:
                table[kind] = _apply(table[kind], data[kind] or {}, f"{user_file}: {kind}")
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    common = {k: flags.pop(k) for k in list(flags) if k in CLUSTER_KEYS}
    for kind in KINDS:
        table[kind] = _apply(table[kind], common, "flags")
    if flags:
        table["train"] = _apply(table["train"], flags, "flags (train)")
    return table
