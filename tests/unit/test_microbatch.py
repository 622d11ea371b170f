"""Micro-batches (armor.microbatch): by rows they are the contiguous parts and chunks the trainer always
used; by tokens every row lands exactly once, no micro-batch exceeds the budget, ranks are balanced and get
equal counts. Values through the trainer: tests/integration/test_trainer.py and
tests/integration/test_distributed.py."""
import pytest
import torch

from armor import microbatch
from armor.policy import make_token_batch


def _rows(parts):
    return sorted(int(x) for rank in parts for m in rank for x in m)


def test_by_rows_is_contiguous_parts_cut_in_chunks():
    rows, lens = torch.arange(10), torch.ones(10, dtype=torch.long)
    assert [m.tolist() for m in microbatch.split(rows, lens, 4)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    parts = microbatch.rank_micro_batches(rows, lens, world=2, max_rows=4)
    assert [[m.tolist() for m in r] for r in parts] == [[[0, 1, 2, 3], [4]], [[5, 6, 7, 8], [9]]]
    parts = microbatch.rank_micro_batches(torch.arange(3), lens, world=2, max_rows=4)
    assert [[m.tolist() for m in r] for r in parts] == [[[0, 1]], [[2]]]


def test_by_tokens_packs_longest_first_under_the_budget():
    lens = torch.tensor([5, 9, 2, 9, 3, 4])
    micro = microbatch.split(torch.arange(6), lens, max_rows=99, max_tokens=20)
    # longest first: 9, 9 (2 x 9 = 18 <= 20; a third would be 27), then 5, 4, 3 (3 x 5 = 15; a 4th: 20), 2
    assert [m.tolist() for m in micro] == [[1, 3], [0, 5, 4, 2]]
    for m in micro:
        assert len(m) * int(lens[m].max()) <= 20
    with pytest.raises(ValueError, match="batch.micro_batch_tokens"):
        microbatch.split(torch.arange(6), lens, 99, max_tokens=8)


def test_by_tokens_balances_ranks_and_equalises_counts():
    torch.manual_seed(0)
    lens = torch.randint(3, 40, (37,))
    rows = torch.randperm(37)[:30]
    parts = microbatch.rank_micro_batches(rows, lens, world=3, max_rows=99, max_tokens=64)
    assert _rows(parts) == sorted(rows.tolist())
    assert len({len(r) for r in parts}) == 1
    loads = [int(lens[torch.cat(r)].sum()) for r in parts]
    assert max(loads) - min(loads) <= int(lens.max())     # greedy longest-first: within one row's length
    for r in parts:
        for m in r:
            assert len(m) == 0 or len(m) * int(lens[m].max()) <= 64


def test_equalize_fills_with_empty_micro_batches():
    micro = [torch.tensor([1, 2])]
    out = microbatch.equalize(micro, [1, 3])
    assert len(out) == 3 and out[0].tolist() == [1, 2] and all(len(m) == 0 for m in out[1:])


def test_trim_keeps_positions_and_drops_unused_padding():
    b = make_token_batch([[1, 2, 3], [4], [5, 6]], [[7, 8], [9], [10, 11, 12]], pad_id=0)
    sub = b.rows(torch.tensor([1, 2])).trim()
    assert sub.prompt_len == 2 and sub.response_mask.shape == (2, 3)
    assert sub.input_ids.tolist() == [[0, 4, 9, 0, 0], [5, 6, 10, 11, 12]]
    full = b.rows(torch.tensor([1, 2]))
    keep = full.attention_mask.bool()
    assert torch.equal(sub.position_ids[sub.attention_mask.bool()], full.position_ids[keep])
    assert b.seq_lens.tolist() == [5, 2, 5]


def test_budget_is_read_from_the_batch_config_once():
    from types import SimpleNamespace
    rows, lens = torch.arange(6), torch.tensor([5, 9, 2, 9, 3, 4])
    by_rows = microbatch.Budget.of(SimpleNamespace(micro_batch_responses=4, micro_batch_tokens=None))
    assert by_rows == microbatch.Budget(4, None) and not by_rows.by_tokens
    assert [m.tolist() for m in by_rows.split(rows, lens)] == [[0, 1, 2, 3], [4, 5]]
    by_tokens = microbatch.Budget.of(SimpleNamespace(micro_batch_responses=4, micro_batch_tokens=20))
    assert by_tokens.by_tokens
    assert [m.tolist() for m in by_tokens.split(rows, lens)] == [[1, 3], [0, 5, 4, 2]]
    assert [[m.tolist() for m in r] for r in by_tokens.rank_micro_batches(rows, lens, 2)] == \
        [[m.tolist() for m in r] for r in microbatch.rank_micro_batches(rows, lens, 2, 4, 20)]


def test_update_rows_indexes_an_update_once_and_derives_every_row_set():
    """3 prompts of G = 2 rows, 2 epochs in the orders [1, 0, 2] and [2, 1, 0], 2 prompts a mini-batch, 1 row
    a micro-batch, 2 ranks: mini-batches [2, 3, 0, 1], [4, 5] | [4, 5, 2, 3], [0, 1]; each rank takes its
    contiguous half of each."""
    lens = torch.ones(6, dtype=torch.long)
    updates = [microbatch.UpdateRows.of([[1, 0, 2], [2, 1, 0]], 2, 2, lens, microbatch.Budget(1), 2, rank)
             for rank in (0, 1)]
    assert [m.tolist() for m in updates[0].minibatches] == [[2, 3, 0, 1], [4, 5], [4, 5, 2, 3], [0, 1]]
    assert updates[0].per_epoch == 2 and updates[0].n_rows == 6
    assert [[m.tolist() for m in mb] for mb in updates[0].micro] == [[[2], [3]], [[4]], [[4], [5]], [[0]]]
    assert [[m.tolist() for m in mb] for mb in updates[1].micro] == [[[0], [1]], [[5]], [[2], [3]], [[1]]]
    assert [len(mb) for mb in updates[0].micro] == [len(mb) for mb in updates[1].micro]   # equal counts
    assert updates[0].local(0).tolist() == [2, 3] and updates[1].local(2).tolist() == [2, 3]
    assert updates[0].rows().tolist() == [0, 2, 3, 4, 5] and updates[1].rows().tolist() == [0, 1, 2, 3, 5]
    # less the first mini-batch's rows (θold from its own pass), even where a later epoch reads them again
    assert updates[0].rows(skip_first=True).tolist() == [0, 4, 5]
    assert updates[1].rows(skip_first=True).tolist() == [2, 3, 5]
    # the token metrics' rows: the first epoch's parts, every row on exactly one rank
    assert updates[0].own.tolist() == [2, 3, 4] and updates[1].own.tolist() == [0, 1, 5]
    one = microbatch.UpdateRows.of([[1, 0]], 2, 1, lens[:4], microbatch.Budget(4), 1, 0)
    assert [m.tolist() for m in one.minibatches] == [[2, 3], [0, 1]] and one.own.tolist() == [2, 3, 0, 1]
