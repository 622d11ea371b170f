"""FSDP2 for the policy, the reference and a teacher: sharding, loading from rank 0, full-tensor gathering,
local-shard copies.

    shard_model(model, compute_dtype=torch.bfloat16)   # fully_shard per decoder layer, then the root
    load_from_rank0(model, full_or_None, device)       # a meta-device build filled from rank 0's copy
    full_state_dict(model)                             # {HF name: full tensor} on every rank, same order
    copy_local_shards(dst, src)                        # θref <- θ without communication (same mesh)
The parameters `fully_shard` keeps are the module's own dtype: load the policy in float32 and they are the fp32
master weights, while `MixedPrecisionPolicy(param_dtype=compute_dtype)` all-gathers them in the compute dtype for
forward and backward and reduces gradients in float32 (verl's layout). Facts this relies on, checked on CPU
with gloo by tests/integration/test_distributed.py (2 ranks equal one process, weights within 1e-6): FSDP2 averages
gradients over ranks (a loss normalised by a global token count is multiplied by the world size); a no-grad
forward leaves the root unsharded (`reshard` after it).
"""
from __future__ import annotations

import torch


def decoder_layers(model) -> list[torch.nn.Module]:
    """The transformer blocks of a Hugging Face causal LM (Qwen2, Qwen3, Llama, ...: `model.model.layers`)."""
    layers = getattr(model.base_model, "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__}: no base_model.layers to shard per decoder layer")
    return list(layers)


def shard_model(model, compute_dtype: torch.dtype = torch.float32, offload: bool = False, frozen: bool = False):
    """fully_shard each decoder layer, then the root (in place; returns the model).

    compute_dtype: the dtype parameters are gathered in for compute (bf16 on GPU); gradients are reduced in
    float32. offload: keep the shards in CPU memory (CPUOffloadPolicy; pinned only when CUDA is there).
    frozen: a reference or teacher (no gradients; its shards may be stored in the compute dtype)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
    if frozen:
        model.requires_grad_(False)
    kw = {"mp_policy": MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32),
          "offload_policy": CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if offload else OffloadPolicy()}
    from torch.distributed.fsdp import register_fsdp_forward_method

    from armor.policy import attach_chunked_logprobs
    for layer in decoder_layers(model):
        fully_shard(layer, **kw)
    fully_shard(model, **kw)
    # the chunked log-probs call the backbone and the lm_head, not forward: FSDP2 must gather the root's weights
    register_fsdp_forward_method(model, attach_chunked_logprobs(model))
    return model


@torch.no_grad()
def load_from_rank0(model, full, device) -> None:
    """Materialise a sharded meta-device `model` on `device` and fill it from `full`: the same architecture with
    its weights, held by rank 0 alone (None on the other ranks). Every state-dict entry is broadcast from rank 0
    one tensor at a time (cast to the shard's dtype first) and each rank keeps its shard; so are the buffers,
    whose non-persistent ones (the rotary inv_freq) are not in the state dict and hold garbage after to_empty.
    No rank but 0 ever holds the full model: at 7B that is one fp32 copy per node instead of one per GPU."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    rank0 = torch.distributed.get_rank() == 0
    if rank0 and full is None:
        raise ValueError("load_from_rank0: rank 0 must hold the full model")
    model.to_empty(device=device)
    sd = {}
    if rank0:
        local = model.state_dict()
        sd = {k: v.to(local[k].dtype) for k, v in full.state_dict().items()}
    set_model_state_dict(model, sd, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True,
                                                             strict=True))
    nccl = torch.distributed.get_backend() == "nccl"
    for name, buf in model.named_buffers():
        if rank0:
            buf.copy_(full.get_buffer(name))
        t = buf.cuda() if nccl and not buf.is_cuda else buf     # NCCL moves CUDA tensors only (CPU offload)
        torch.distributed.broadcast(t, src=0)
        if t is not buf:
            buf.copy_(t)


def is_sharded(model) -> bool:
    from torch.distributed.fsdp import FSDPModule
    return isinstance(model, FSDPModule)


def reshard(model) -> None:
    """After a no-grad forward the root stays unsharded: put it back (a no-op for a plain module)."""
    if is_sharded(model):
        model.reshard()


def full_state_dict(model, rank0_cpu: bool = False) -> dict[str, torch.Tensor]:
    """Every state-dict entry as a full tensor, gathered in the same order (a collective: all ranks must call
    it). rank0_cpu: only rank 0 receives them, in CPU memory (others get {}), as a checkpoint export needs; else
    every rank gets them on its device. For a plain module, its own state dict."""
    from torch.distributed.tensor import DTensor
    # tied entries (lm_head.weight = embed_tokens.weight) are one parameter: gathered once and kept one tensor,
    # so save_pretrained writes it once, as it does for the unsharded model
    first_name: dict[int, str] = {}
    alias = {}
    for name, prm in model.named_parameters(remove_duplicate=False):
        alias[name] = first_name.setdefault(id(prm), name)
    out: dict[str, torch.Tensor] = {}
    seen: set[str] = set()             # the same on every rank, so every rank makes the same collectives
    rank0 = not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0
    for k, v in model.state_dict().items():
        src = alias.get(k, k)
        seen.add(k)
        if src != k and src in seen:
            if src in out:
                out[k] = out[src]
            continue
        full = v.full_tensor() if isinstance(v, DTensor) else v
        if rank0_cpu:                  # one entry at a time: no rank holds more than one full tensor on device
            if rank0:
                out[k] = full.detach().cpu()
            del full
        else:
            out[k] = full
    if rank0_cpu and not rank0:
        return {}
    return out


@torch.no_grad()
def copy_local_shards(dst, src) -> None:
    """dst's parameters and buffers <- src's, shard by shard (both sharded alike, or both plain): the reference
    reset θref <- θ, with no communication."""
    from torch.distributed.tensor import DTensor
    local = lambda t: t.to_local() if isinstance(t, DTensor) else t   # noqa: E731
    sd, ss = dst.state_dict(), src.state_dict()
    if list(sd) != list(ss):
        raise ValueError("copy_local_shards: the two models have different state-dict keys")
    for k in sd:
        local(sd[k]).copy_(local(ss[k]))


def ranks_per_engine(cfg) -> int:
    """Consecutive ranks that are one rollout engine: rollout.tensor_parallel_size with vLLM, else 1."""
    return cfg.rollout.tensor_parallel_size if cfg.rollout.engine == "vllm" else 1


def check_world_size(cfg, world_size: int, rollout_shards: int, ranks_per_node: int | None = None) -> None:
    """What several ranks need of a run's config (before any work): float32 master weights, mini-batches that
    divide over the ranks, engines (rollout.tensor_parallel_size consecutive ranks, within a node) that divide
    the ranks per node and the world, rollout shards that divide over the engines. Each failure names the key
    and its value."""
    if world_size > 1 and cfg.model.dtype != "float32":
        raise ValueError(f"model.dtype: {cfg.model.dtype!r}: with several ranks the policy's sharded parameters "
                         "are its master weights and must be float32; parallel.compute_dtype: bfloat16 "
                         "computes in bf16")
    per_mini = cfg.batch.mini_batch_prompts * cfg.batch.group_size
    if per_mini % world_size:
        raise ValueError(f"batch.mini_batch_prompts: {cfg.batch.mini_batch_prompts} prompts x batch.group_size "
                         f"{cfg.batch.group_size} = {per_mini} responses per mini-batch, not divisible by the "
                         f"world size {world_size}")
    k = ranks_per_engine(cfg)
    from common.rollout.vllm_engine import check_tensor_parallel     # no vllm import: a plain check
    check_tensor_parallel(k, world_size, world_size if ranks_per_node is None else ranks_per_node)
    if rollout_shards % (world_size // k):
        raise ValueError(f"rollout.shards: {rollout_shards} is not a multiple of the number of engines "
                         f"{world_size // k} (world size {world_size} / rollout.tensor_parallel_size {k})")
