"""A job's resources (`Resources`, what sbatch is asked for) and a table of them per job kind, overlaid with a
user YAML file and flags.

The kinds and their defaults are the caller's (the driver's: reproduce/dag/resources.py); this module knows
none.
A user YAML file (``--resources FILE``) may set cluster-wide keys and per-kind keys:

    partition: gpu          # cluster-wide: partition, account, qos, constraint, exclude, extra
    account: my-project
    KIND: {nodes: 2, gpus_per_node: 8, time_min: 2880, mem_gb: 900}   # any kind of the table
    extra: {reservation: x}              # any further sbatch option (--reservation=x)
    env: {NCCL_SOCKET_IFNAME: ib0}       # environment of every job (cluster-wide or per kind)

Precedence (later wins): the caller's defaults < YAML file < flags.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

CLUSTER_KEYS = ("partition", "account", "qos", "constraint", "exclude")
# the network interfaces NCCL / Gloo / torchrun's rendezvous use, and NCCL's transport choices: passed from
# the driver's environment into every job (slurm/README.md "Network"); a resources file's `env:` sets them too
NET_ENV = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_DISABLE",
           "NCCL_IB_GID_INDEX", "NCCL_NET_GDR_LEVEL", "NCCL_P2P_LEVEL", "NCCL_DEBUG", "NCCL_CROSS_NIC",
           "NCCL_NET", "FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA")


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
    array_parallelism: int = 64           # job arrays: tasks running at once
    extra: dict = field(default_factory=dict)  # further sbatch options, e.g. {"reservation": "x"}
    env: dict = field(default_factory=dict)    # environment variables of the job (e.g. NCCL_SOCKET_IFNAME)
    # seconds a command that reads jobwrap's stop file ($ARMOR_STOP_FILE: armor.train) has after SLURM's
    # time-limit warning to finish its step and save, before SIGTERM; the warning comes that much + 60 s
    # before the limit. None: no stop file, SIGTERM at once and SIGKILL after the launcher's grace_s
    stop_grace_s: Optional[float] = None

    @property
    def ranks_per_node(self) -> int:
        return self.procs_per_node or max(1, self.gpus_per_node)

    @property
    def threads_per_rank(self) -> int:
        """Torch/BLAS threads of each rank: the node's CPUs (cpus_per_task: one SLURM task per node) /
        ranks."""
        return max(1, self.cpus_per_task // self.ranks_per_node)

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


_FIELDS = {f.name for f in dataclasses.fields(Resources)}


def apply(res: Resources, values: dict, where: str) -> Resources:
    """`res` with `values` (Resources fields) set and checked; ResourceError names `where` and the key."""
    values = dict(values)
    unknown = set(values) - _FIELDS
    if unknown:
        raise ResourceError(f"{where}: unknown key(s) {sorted(unknown)} (known: {sorted(_FIELDS)})")
    for k in ("extra", "env"):
        if k in values:
            if not isinstance(values[k] or {}, dict):
                raise ResourceError(f"{where}: {k} must be a mapping, got {values[k]!r}")
            merged = dict(getattr(res, k))
            merged.update(values.pop(k) or {})
            values[k] = merged
    out = dataclasses.replace(res, **values)
    for k in ("nodes", "cpus_per_task", "time_min", "array_parallelism"):
        if not isinstance(getattr(out, k), int) or getattr(out, k) < 1:
            raise ResourceError(f"{where}: {k} must be an integer >= 1, got {getattr(out, k)!r}")
    if not isinstance(out.gpus_per_node, int) or out.gpus_per_node < 0:
        raise ResourceError(f"{where}: gpus_per_node must be an integer >= 0, got {out.gpus_per_node!r}")
    if out.mem_gb is not None and (not isinstance(out.mem_gb, (int, float)) or out.mem_gb < 0):
        raise ResourceError(f"{where}: mem_gb must be a number >= 0 or null, got {out.mem_gb!r}")
    return out


def resolve_resources(defaults: dict[str, Resources], user_file: str | Path | None = None,
                      flags: dict[str, Any] | None = None,
                      flags_kind: Optional[str] = None) -> dict[str, Resources]:
    """Resources per kind: `defaults` (the caller's kinds) < `user_file` (cluster-wide keys, then per-kind
    keys) < `flags` (cluster-wide keys for every kind; the other keys for the kind `flags_kind`). None values
    in `flags` are ignored; an unknown kind or key raises ResourceError naming it."""
    table = dict(defaults)
    if user_file:
        data = yaml.safe_load(Path(user_file).read_text()) or {}
        if not isinstance(data, dict):
            raise ResourceError(f"{user_file}: expected a mapping")
        common = {k: data[k] for k in (*CLUSTER_KEYS, "extra", "env") if k in data}
        unknown = set(data) - set(common) - set(table)
        if unknown:
            raise ResourceError(f"{user_file}: unknown key(s) {sorted(unknown)} "
                                f"(cluster-wide: {list(CLUSTER_KEYS) + ['extra', 'env']}; kinds: "
                                f"{list(table)})")
        for kind in table:
            table[kind] = apply(table[kind], common, f"{user_file}")
            if kind in data:
                table[kind] = apply(table[kind], data[kind] or {}, f"{user_file}: {kind}")
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    common = {k: flags.pop(k) for k in list(flags) if k in CLUSTER_KEYS}
    for kind in table:
        table[kind] = apply(table[kind], common, "flags")
    if flags:
        if flags_kind not in table:
            raise ResourceError(f"flags {sorted(flags)}: no kind takes them (flags_kind={flags_kind!r})")
        table[flags_kind] = apply(table[flags_kind], flags, f"flags ({flags_kind})")
    return table
