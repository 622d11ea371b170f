"""What a job holds: the checkpoint volume a run keeps on disk (`checkpoint_volume`, the one formula) and the
host memory a training node needs (`host_memory_gb`; `default_host_memory`: a GPU preset's requests)."""
from __future__ import annotations

import math
from typing import Optional

from reproduce.sizing.step_model import export_bytes_per_param, model_config, step_tokens
from reproduce.sizing.throughput import Throughput, model_params, scenarios, throughput

# host memory of one rank beside vLLM's weight backup: the Python process, torch, CUDA's host side, the data
HOST_RANK_OVERHEAD_GB = 8.0
# host bytes per generated token a rank holds while a step's rollouts are in memory (every rank gathers every
# shard's, armor/spmd.py sharded_map): the token id in a Python list (36 B) and its float32 engine log-prob
# (armor.step_state.engine_logprobs), measured with tracemalloc after a pickle round trip: 44 B
ROLLOUT_BYTES_PER_TOKEN = 44


def checkpoint_volume(n_params: int, saves: int, keep_last: Optional[int] = None, protected: int = 0,
                      export_bytes: int = 2, master_bytes: int = 4, optimizer_bytes: int = 8,
                      reference_bytes: int = 0) -> dict:
    """Bytes on disk of one run's checkpoints under the retention policy: each save holds the HF export in the
    published dtype (bf16: 2 N), the sharded fp32 masters (4 N), AdamW's two moments (8 N) and, in a run
    that resets πref, πref's shards in the compute dtype (bf16: 2 N; armor.checkpoint.save_sharded_state);
    the run keeps its last `keep_last` resumable states (schedule.keep_last; None: every save) plus its
    `protected` steps (θ*, late start, keep_steps, the best validation, the step πref holds), counted as full
    saves (an upper bound)."""
    per_save = n_params * (export_bytes + master_bytes + optimizer_bytes + reference_bytes)
    kept = saves if keep_last is None else min(saves, keep_last + protected)
    return {"per_save": per_save, "saves": saves, "kept": kept, "bytes": kept * per_save}


def host_memory_gb(n_params: int, ranks_per_node: int, nodes: int = 1, engine: str = "vllm",
                   grader_workers: int = 0, export_bytes: int = 2, rollout_tokens: float = 0.0,
                   state_host_copy: bool = False) -> float:
    """Host memory one training node needs (GB, 1e9 bytes): per rank vLLM's sleep-mode weight backup in
    pinned memory (bf16: 2 N), HOST_RANK_OVERHEAD_GB, 0.5 GB per grader worker, the step's rollouts
    (`rollout_tokens` generated tokens, all shards' on every rank, ROLLOUT_BYTES_PER_TOKEN each) and, with
    schedule.state_every (`state_host_copy`), the CPU copy of its shards a background state save writes
    (masters 4N + AdamW 8N + πref 2N, over all ranks); and the node's share of the HF export its ranks hold
    on CPU while they write their parts (armor.checkpoint.export_parts: the parts are even in bytes over all
    ranks, so export_bytes N / nodes)."""
    backup = 2 * n_params / 1e9 if engine == "vllm" else 0.0
    host_copy = 14 * n_params / 1e9 / (ranks_per_node * nodes) if state_host_copy else 0.0
    per_rank = (backup + HOST_RANK_OVERHEAD_GB + 0.5 * grader_workers
                + rollout_tokens * ROLLOUT_BYTES_PER_TOKEN / 1e9 + host_copy)
    return ranks_per_node * per_rank + export_bytes * n_params / 1e9 / nodes


def rollout_tokens(cfg, t: Optional[Throughput] = None) -> float:
    """Generated tokens of one step a rank holds: its on-policy and reference samples (step_tokens' first
    two terms, at `t`; default: the assumed expected throughput)."""
    on, ref, _ = step_tokens(cfg, t or Throughput())
    return on + ref


def train_host_memory_gb(preset, ranks_per_node: int, nodes: int, pilot: bool = False) -> Optional[float]:
    """Host memory (GB) a training node of the preset needs on `nodes` nodes (host_memory_gb of its model,
    engine, graders, export, a step's rollouts at the high end and its background state saves); None when
    the model's size is unknown. pilot: the one-node pilot (reproduce/dag/pilot_graph.py), whose batch is the
    plan's / protocol.nodes (its rollouts too) and which saves no background state (schedule.state_every
    off: it does not measure it)."""
    n = model_params(preset)
    if n is None:
        return None
    cfg = preset.cfg
    tokens = max_rollout_tokens(preset) / (max(1, preset.protocol.nodes) if pilot else 1)
    return host_memory_gb(n, ranks_per_node, nodes, cfg.rollout.engine, cfg.reward.grader_workers,
                          export_bytes_per_param(cfg), tokens, bool(cfg.schedule.state_every) and not pilot)


def default_host_memory(preset) -> dict[str, float]:
    """{kind: GB} a GPU preset's train and evaluate jobs request per node (rounded up to 10 GB)."""
    p = preset.protocol
    n = model_params(preset)
    if not p.gpus_per_node or n is None:
        return {}
    ranks = p.procs_per_node or p.gpus_per_node
    train = train_host_memory_gb(preset, ranks, p.nodes)
    evaluate = p.gpus_per_node * (2 * n / 1e9 + HOST_RANK_OVERHEAD_GB)
    return {"train": round_up_gb(train), "evaluate": round_up_gb(evaluate)}


def round_up_gb(gb: float) -> int:
    """A memory request: GB rounded up to 10."""
    return 10 * math.ceil(gb / 10)


def max_rollout_tokens(preset) -> float:
    """The most generated tokens a step of any arm holds (anchors add πref's samples), at the high end of
    the plan's range (`scenarios`: the longer responses, reference samples for every drawn prompt): a
    memory request covers the long steps, not the expected ones."""
    from reproduce.matrix.arms import build_arms
    high = scenarios(preset, throughput(preset))[-1]
    cfgs = [preset.cfg] + [model_config(str(preset.path), tuple(a.overrides))
                           for a in build_arms(preset).values() if not a.alias_of and a.overrides]
    return max(rollout_tokens(c, high) for c in cfgs)
