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

    split(rows, seq_lens, max_rows=4)                       # one rank's micro-batches
    plan(rows, seq_lens, world=2, max_rows=4)[rank]         # every rank's, equal counts
"""
from __future__ import annotations

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


def plan(rows: torch.Tensor, seq_lens: torch.Tensor, world: int, max_rows: int, max_tokens: int | None = None
         ) -> list[list[torch.Tensor]]:
    """Every rank's micro-batches of a mini-batch's rows: plan(...)[r] is rank r's list, all of one length
    (at least 1), the shorter ones filled with empty row tensors.

    plan(arange(10), lens, world=2, max_rows=4) = [[0..3], [4]], [[5..8], [9]]."""
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
