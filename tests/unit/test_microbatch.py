"""Micro-batch plans (armor.microbatch): by rows they are the contiguous parts and chunks the trainer always
used; by tokens every row lands exactly once, no micro-batch exceeds the budget, ranks are balanced and get
equal counts. Values through the trainer: tests/integration/test_trainer.py and
tests/integration/test_distributed.py."""
import pytest
import torch

from armor import microbatch
from armor.policy import make_token_batch


def _rows(plan):
    return sorted(int(x) for rank in plan for m in rank for x in m)


def test_by_rows_is_contiguous_parts_cut_in_chunks():
    rows, lens = torch.arange(10), torch.ones(10, dtype=torch.long)
    assert [m.tolist() for m in microbatch.split(rows, lens, 4)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    plan = microbatch.plan(rows, lens, world=2, max_rows=4)
    assert [[m.tolist() for m in r] for r in plan] == [[[0, 1, 2, 3], [4]], [[5, 6, 7, 8], [9]]]
    plan = microbatch.plan(torch.arange(3), lens, world=2, max_rows=4)
    assert [[m.tolist() for m in r] for r in plan] == [[[0, 1]], [[2]]]


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
    plan = microbatch.plan(rows, lens, world=3, max_rows=99, max_tokens=64)
    assert _rows(plan) == sorted(rows.tolist())
    assert len({len(r) for r in plan}) == 1
    loads = [int(lens[torch.cat(r)].sum()) for r in plan]
    assert max(loads) - min(loads) <= int(lens.max())     # greedy longest-first: within one row's length
    for r in plan:
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
