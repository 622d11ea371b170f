"""Micro-batches: which response rows go through one forward (and backward) together, and on which rank.

Two rules, one contract: every rank gets the same number of micro-batches, since each forward and backward of
a sharded model is a collective (a rank with fewer runs a zero-weight one: an empty micro-batch here).

  by rows (batch.micro_batch_responses = m; the default): rank r takes the contiguous part r of the rows
      (common.distributed.shard_indices), cut into micro-batches of m rows in order; each is padded to the
      step's longest prompt and response.
  by tokens (batch.micro_batch_tokens = T): rows are dealt to ranks longest first, each to the rank holding
      the fewest tokens so far (balanced work); on each rank, rows taken longest first fill a micro-batch
      while (its rows x its longest sequence) <= T, and each micro-batch is padded to its own longest prompt
      and response only (policy.TokenBatch.trim), so short responses stop paying for the step's longest one.

Which rows meet in a micro-batch changes no value: the loss is normalised by the whole mini-batch's token
count (objectives.policy_loss `normalizer`), and padding is masked.

    budget = Budget.of(cfg.batch)                  # batch.micro_batch_responses / _tokens, read once
    budget.split(rows, seq_lens)                   # one rank's micro-batches
    budget.rank_micro_batches(rows, seq_lens, world=2)[rank]     # every rank's, equal counts
    UpdateRows.of(orders, G, per_minibatch, seq_lens, budget, world, rank)   # one update's rows on this rank
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from common.distributed import shard_indices


def split(rows: torch.Tensor, seq_lens: torch.Tensor, max_rows: int, max_tokens: int | None = None
          ) -> list[torch.Tensor]:
    """One rank's rows [n] cut into micro-batches (a list of row tensors; [] when there are no rows).

    seq_lens[i]: real tokens (prompt + response) of row i of the whole batch. By rows: contiguous chunks of
    max_rows. By tokens: rows sorted longest first (ties in row order) fill a micro-batch while
    count x longest <= max_tokens; a row longer than max_tokens alone would not fit (config validation
    requires max_tokens >= lengths.max_prompt + lengths.max_response)."""
    if max_tokens is None:
        return [rows[s:s + max_rows] for s in range(0, len(rows), max_rows)]
    lens = seq_lens[rows].tolist()
    order = sorted(range(len(rows)), key=lambda j: (-lens[j], j))
    out, cur, longest = [], [], 0
    for j in order:
        longest_if = max(longest, lens[j])
        if cur and (len(cur) + 1) * longest_if > max_tokens:
            out.append(rows[cur])
            cur, longest_if = [], lens[j]
        if lens[j] > max_tokens:
            raise ValueError(f"batch.micro_batch_tokens: {max_tokens} is less than a sequence of {lens[j]} "
                             "tokens (prompt + response)")
        cur.append(j)
        longest = longest_if
    if cur:
        out.append(rows[cur])
    return out


def deal(rows: torch.Tensor, seq_lens: torch.Tensor, world: int, by_tokens: bool) -> list[torch.Tensor]:
    """The rows of each rank: contiguous parts (by rows), or longest first to the least-loaded rank (by
    tokens; ties go to the lowest rank), each rank's rows kept in row order."""
    if not by_tokens:
        return [rows[shard_indices(len(rows), world, r)] for r in range(world)]
    lens = seq_lens[rows].tolist()
    load, mine = [0] * world, [[] for _ in range(world)]
    for j in sorted(range(len(rows)), key=lambda j: (-lens[j], j)):
        r = min(range(world), key=lambda r: (load[r], r))
        load[r] += lens[j]
        mine[r].append(j)
    return [rows[sorted(m)] if m else rows[:0] for m in mine]


def rank_micro_batches(rows: torch.Tensor, seq_lens: torch.Tensor, world: int, max_rows: int,
                       max_tokens: int | None = None) -> list[list[torch.Tensor]]:
    """Every rank's micro-batches of a mini-batch's rows: rank_micro_batches(...)[r] is rank r's list, all of
    one length (at least 1), the shorter ones filled with empty row tensors.

    rank_micro_batches(arange(10), lens, world=2, max_rows=4) = [[0..3], [4]], [[5..8], [9]]."""
    per_rank = [split(p, seq_lens, max_rows, max_tokens)
                for p in deal(rows, seq_lens, world, max_tokens is not None)]
    n = max(1, max(len(m) for m in per_rank))
    return [m + [rows[:0]] * (n - len(m)) for m in per_rank]


def equalize(micro: list[torch.Tensor], counts: list[int]) -> list[torch.Tensor]:
    """This rank's micro-batches filled with empty ones up to the largest count over ranks (`counts`, one
    per rank, e.g. from all_gather_object(len(micro)))."""
    n = max(1, max(counts))
    empty = micro[0][:0] if micro else torch.zeros(0, dtype=torch.long)
    return micro + [empty] * (n - len(micro))


@dataclass(frozen=True)
class Budget:
    """What one forward (and backward) holds: max_rows rows, or, with max_tokens, rows while
    (rows x longest) <= max_tokens, each micro-batch then padded to its own longest row (by_tokens). Built
    once from the config (`of`, by armor.models.Models): the trainer and the models read
    batch.micro_batch_responses and micro_batch_tokens through it only (armor.memory's estimate reads them
    for its bound)."""
    max_rows: int
    max_tokens: int | None = None

    @classmethod
    def of(cls, batch) -> "Budget":
        """The budget of a BatchConfig."""
        return cls(batch.micro_batch_responses, batch.micro_batch_tokens)

    @property
    def by_tokens(self) -> bool:
        return self.max_tokens is not None

    def split(self, rows: torch.Tensor, seq_lens: torch.Tensor) -> list[torch.Tensor]:
        """One rank's micro-batches of `rows` (`split`)."""
        return split(rows, seq_lens, self.max_rows, self.max_tokens)

    def rank_micro_batches(self, rows: torch.Tensor, seq_lens: torch.Tensor,
                           world: int) -> list[list[torch.Tensor]]:
        """Every rank's micro-batches of a mini-batch's rows, equal counts (`rank_micro_batches`)."""
        return rank_micro_batches(rows, seq_lens, world, self.max_rows, self.max_tokens)


@dataclass(frozen=True)
class UpdateRows:
    """One update's rows as this rank runs them, indexed once; every other row set is derived from it.

    minibatches[i]  the rows of mini-batch i: whole groups, all ranks' (their tokens normalise its loss)
    micro[i]        this rank's micro-batches of mini-batch i, as many as on every other rank (an empty one
                    runs at zero weight)
    per_epoch       mini-batches per epoch: the first epoch's parts hold each row on exactly one rank
    n_rows          N, the update batch's rows
    Derived: local(i) (this rank's rows of mini-batch i), rows() (every row this rank reads, ascending),
    own (the rows it accounts for in the step's token metrics)."""
    minibatches: list
    micro: list
    per_epoch: int
    n_rows: int

    @classmethod
    def of(cls, orders: list[list[int]], group_size: int, per_minibatch: int, seq_lens: torch.Tensor,
           budget: Budget, world: int, rank: int) -> "UpdateRows":
        """orders[e]: epoch e's order of the kept prompts; each mini-batch takes the next per_minibatch of
        them, prompt p as its rows p·G .. p·G + G − 1 (G = group_size); rank `rank`'s micro-batches of each
        follow `budget`. UpdateRows.of([[1, 0]], 2, 1, lens, Budget(4), 1, 0).minibatches = [[2, 3],
        [0, 1]]."""
        G, n = group_size, len(orders[0])
        minibatches = [torch.tensor([p * G + j for p in order[s:s + per_minibatch] for j in range(G)],
                                    device=seq_lens.device)
                       for order in orders for s in range(0, n, per_minibatch)]
        micro = [budget.rank_micro_batches(rows, seq_lens, world)[rank] for rows in minibatches]
        return cls(minibatches, micro, math.ceil(n / per_minibatch), n * G)

    def local(self, i: int) -> torch.Tensor:
        """This rank's rows of mini-batch i (its micro-batches, in order)."""
        return torch.cat(self.micro[i])

    def rows(self, skip_first: bool = False) -> torch.Tensor:
        """Every row this rank reads in the update, ascending; with skip_first, less the first mini-batch's
        (whose θold values its own update pass gives)."""
        read = torch.zeros(self.n_rows, dtype=torch.bool, device=self.minibatches[0].device)
        for i in range(len(self.micro)):
            read[self.local(i)] = True
        if skip_first:
            read[self.local(0)] = False
        return read.nonzero()[:, 0]

    @property
    def own(self) -> torch.Tensor:
        """The rows this rank accounts for in the step's token metrics: its parts of the first epoch (over all
        ranks, each row once)."""
        return torch.cat([self.local(i) for i in range(self.per_epoch)])
