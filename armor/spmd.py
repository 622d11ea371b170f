"""How one RL step is split over ranks so that every rank takes the same decisions as one process would.

Rollouts: each generation call (a round of on-policy prompts, a chunk of anchor candidates, a validation set)
is cut into S contiguous shards (`rollout.shards`, default the number of engines); shard s is sampled with its
own seed `shard_seed(seed, s)` by engine s mod E, and the shards' responses and verdicts are gathered, in
shard order, on every rank. An engine is one rank, or `k` consecutive ranks with a tensor-parallel vLLM engine
(rollout.tensor_parallel_size; E = W / k): its ranks all make the same calls with the same prompts and seeds,
as vLLM's external launcher needs, and its first rank's results are the ones gathered. So a prompt's samples
depend on its shard, never on the rank or the world size that drew it, and every rank computes the same keep
rule, the same lazy-anchor chunks and the same kept groups, in stream order. With S = 1 a call is one generate
with the step's own seed: exactly the single-process trainer.

Updates: every rank holds the step's kept groups; each mini-batch's response rows are cut into W contiguous
parts (`row_parts`) and rank r computes log-probs and gradients of part r only. The loss normaliser stays the
global token count of the mini-batch, and FSDP2's mean over ranks is undone by scaling each rank's loss by W.
Every rank runs the same number of micro-batches (a rank short of rows runs a zero-weight one), since each
backward is a collective.
"""
from __future__ import annotations

import hashlib
import math

import torch

from common.distributed import Dist, shard_indices


def shard_seed(seed: int, shard: int) -> int:
    """The sampling seed of shard `shard` of a call seeded `seed` (a 62-bit hash; shard 0 of 1 is never
    asked)."""
    digest = hashlib.blake2b(repr(("shard", seed, shard)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (2 ** 62)


def call_seed(seed: int, shard: int, shards: int) -> int:
    """The sampling seed of shard `shard` of a call seeded `seed`: the call's own seed when it is one shard
    (the single-process trainer's generate call), else shard_seed."""
    return seed if shards == 1 else shard_seed(seed, shard)


def sharded_map(dist: Dist, shards: int, n_items: int, work, ranks_per_engine: int = 1):
    """Run `work(indices, shard)` for this rank's engine's shards of n_items items and gather every shard's
    result, in shard order, on every rank: returns [result of shard 0, result of shard 1, ...] (empty shards
    included, as work([], s) is not called: their result is None). With ranks_per_engine k > 1, ranks
    k*e .. k*e + k - 1 are engine e: each of them runs engine e's shards (the same calls), and rank k*e's
    results are gathered."""
    k = ranks_per_engine
    engine, engines = dist.rank // k, dist.world_size // k
    mine = [(s, work(idx, s) if (idx := shard_indices(n_items, shards, s)) else None)
            for s in range(engine, shards, engines)]
    parts = dist.all_gather_object(mine if dist.rank % k == 0 else [])
    return [res for _, res in sorted((x for part in parts for x in part), key=lambda t: t[0])]


def row_parts(rows: torch.Tensor, world: int, micro_batch: int) -> tuple[list[torch.Tensor], int]:
    """The W contiguous parts of a mini-batch's rows, and the micro-batch count every rank runs (the largest
    part's). row_parts(tensor(range(10)), 2, 4) = ([0..4], [5..9]), 2."""
    parts = [rows[shard_indices(len(rows), world, r)] for r in range(world)]
    return parts, max(1, max(math.ceil(len(p) / micro_batch) for p in parts))


def global_masked_mean(dist: Dist, x: torch.Tensor, mask: torch.Tensor, own: torch.Tensor) -> float:
    """Σ mask·x / Σ mask over all rows, when this rank holds the values of rows `own` only: the numerator
    summed over ranks, the count (every rank has the whole mask) taken locally. All ranks must call it."""
    m = mask[own].float()
    num = dist.all_reduce_sum((x[own].float() * m).sum().reshape(1).double())
    return float(num[0] / mask.float().sum().clamp(min=1e-8))
