"""Process-group setup from torchrun's environment and the few collectives the trainer and the harness need.

Every torchrun rank is a trainer (or evaluation) rank; a process started without torchrun (no WORLD_SIZE) is
world size 1 and never touches torch.distributed, so the CPU tests and the tiny preset run the same code
without a group.

    dist = Dist.from_env(timeout_s=600)        # LOCAL_RANK -> device; gloo on CPU, NCCL on GPU
    everyone = dist.all_gather_object(mine)    # [rank 0's, rank 1's, ...] on every rank
    total = dist.all_reduce_sum(x)             # elementwise sum of a float tensor over ranks
A collective has a timeout (`init_process_group(timeout=...)`): a rank that failed makes the others error
instead of waiting forever.
"""
from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Dist:
    """This process's place in the job: rank, world size, local rank, and the device it computes on."""
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that prepares the run folder and writes metrics, validation, DONE and exports."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @classmethod
    def from_env(cls, device: str = "auto", timeout_s: float = 1800.0) -> "Dist":
        """Read RANK / WORLD_SIZE / LOCAL_RANK (set by torchrun) and, when WORLD_SIZE > 1, join the process
        group: NCCL when the device is CUDA, else gloo. `device` is the config's (auto | cpu | cuda)."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        dev = torch.device(f"cuda:{local}") if device == "cuda" else torch.device(device)
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        if world > 1 and not torch.distributed.is_initialized():
            torch.distributed.init_process_group(
                backend="nccl" if dev.type == "cuda" else "gloo",
                timeout=datetime.timedelta(seconds=timeout_s),
                device_id=dev if dev.type == "cuda" else None)
        return cls(rank, world, local, dev)

    # ------------------------------------------------------------------------------------ collectives
    def all_gather_object(self, obj) -> list:
        """Every rank's `obj` (picklable), in rank order, on every rank."""
        if not self.distributed:
            return [obj]
        out = [None] * self.world_size
        torch.distributed.all_gather_object(out, obj)
        return out

    def all_reduce_sum(self, x: torch.Tensor) -> torch.Tensor:
        """Elementwise sum over ranks (a new tensor; `x` is unchanged)."""
        if not self.distributed:
            return x.clone()
        y = x.detach().clone().to(self.device)
        torch.distributed.all_reduce(y)
        return y.to(x.device)

    def barrier(self) -> None:
        if self.distributed:
            torch.distributed.barrier()

    def close(self) -> None:
        if self.distributed and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def shard_indices(n: int, shards: int, shard: int) -> list[int]:
    """The items of shard `shard` when n items are cut into `shards` contiguous, nearly equal pieces
    (the first n % shards pieces one longer): shard_indices(5, 2, 0) = [0, 1, 2], (5, 2, 1) = [3, 4]."""
    base, extra = divmod(n, shards)
    start = shard * base + min(shard, extra)
    return list(range(start, start + base + (1 if shard < extra else 0)))
