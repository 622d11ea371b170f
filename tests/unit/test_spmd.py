"""Rollout shards over engines (armor.spmd.sharded_map) and the world checks of a tensor-parallel engine."""
import threading
from pathlib import Path

import pytest

from armor.config import load_config
from armor.parallel import check_world_size
from armor.spmd import sharded_map

ROOT = Path(__file__).resolve().parents[2]


class ThreadDist:
    """One rank of a W-rank world played by a thread: all_gather_object meets the others at a barrier."""

    def __init__(self, rank: int, world_size: int, board: list, barrier: threading.Barrier):
        self.rank, self.world_size, self.board, self.barrier = rank, world_size, board, barrier

    def all_gather_object(self, obj) -> list:
        self.board[self.rank] = obj
        self.barrier.wait()
        out = list(self.board)
        self.barrier.wait()              # nobody overwrites the board before everyone has read it
        return out


def run_world(world_size: int, shards: int, n_items: int, ranks_per_engine: int):
    """Every rank's sharded_map result and the work calls it made ((shard, indices) in order)."""
    board, barrier = [None] * world_size, threading.Barrier(world_size, timeout=60)
    results, calls = [None] * world_size, [[] for _ in range(world_size)]

    def rank(r):
        def work(idx, s):
            calls[r].append((s, idx))
            return [f"shard{s}:item{i}" for i in idx]      # a function of the shard alone, as sampling is
        results[r] = sharded_map(ThreadDist(r, world_size, board, barrier), shards, n_items, work,
                                 ranks_per_engine)
    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, calls


def test_a_tensor_parallel_engine_runs_its_shards_on_all_its_ranks():
    """W = 4 ranks, engines of 2 ([0, 1], [2, 3]), 3 shards of 7 items: both ranks of an engine make the same
    calls (vLLM's external launcher needs the same prompts on every rank of a tensor-parallel group); every
    rank gets every shard's result once, in shard order, the same as one rank per engine would get."""
    results, calls = run_world(4, 3, 7, 2)
    assert calls[0] == calls[1] == [(0, [0, 1, 2]), (2, [5, 6])] and calls[2] == calls[3] == [(1, [3, 4])]
    one_per_rank, _ = run_world(2, 3, 7, 1)
    expected = [[f"shard{s}:item{i}" for i in idx] for s, idx in ((0, [0, 1, 2]), (1, [3, 4]), (2, [5, 6]))]
    assert all(r == expected for r in results) and all(r == expected for r in one_per_rank)
    results, calls = run_world(4, 2, 1, 2)          # an empty shard: no call on its engine's ranks, None
    assert calls[2] == calls[3] == [] and all(r == [["shard0:item0"], None] for r in results)


def test_world_checks_of_a_tensor_parallel_engine():
    """Engines of rollout.tensor_parallel_size consecutive ranks must divide the ranks per node and the world;
    rollout shards must divide over the engines. Each error names the key and value."""
    cfg = load_config(ROOT / "reproduce" / "presets" / "smoke.yaml",
                      ["rollout.engine=vllm", "rollout.tensor_parallel_size=2", "batch.prompts_per_step=6",
                       "batch.mini_batch_prompts=6"])
    check_world_size(cfg, 8, 4, ranks_per_node=8)           # 4 engines, 4 shards
    with pytest.raises(ValueError, match="rollout.shards: 3 is not a multiple of the number of engines 4"):
        check_world_size(cfg, 8, 3, ranks_per_node=8)
    with pytest.raises(ValueError, match="tensor_parallel_size: 2 does not divide the ranks per node 3"):
        check_world_size(cfg, 12, 6, ranks_per_node=3)
    with pytest.raises(ValueError, match="rollout.tensor_parallel_size: 2 needs rollout.engine=vllm"):
        load_config(ROOT / "reproduce" / "presets" / "smoke.yaml", ["rollout.tensor_parallel_size=2"])
