"""Per-GPU memory of one training rank, estimated from the config before a job is submitted.

    shape = model_shape("Qwen/Qwen2.5-Math-7B")       # a model folder's config.json, or a known hub id
    est = estimate(cfg, world_size=128, shape=shape)  # GiB per rank, by part
    print(describe(est))

The parts (P parameters, W ranks, T tokens per micro-batch, V vocabulary, H hidden size, L layers, b the bytes
of the compute dtype; N = batch.prompts_per_step x batch.group_size response rows, S = lengths.max_prompt +
lengths.max_response, R = lengths.max_response):
  params      P/W x bytes(model.dtype)            FSDP2 shards: with float32 these are the master weights
  grads       P/W x 4                              reduced in float32 into the shards
  optimizer   P/W x 8                              AdamW's two moments in float32
  reference   P/W x bytes(compute dtype)           the frozen πref shards (and a teacher's, when separate)
  gathered    (root + 2 layers) x bytes(compute)   the root's embeddings, norm and lm_head stay gathered through
                                                   forward and backward; a decoder layer and the prefetched next
  activations T x H x b x L (+ one layer's ~T x (10H + 4I) x b to recompute) with gradient checkpointing,
              else L x T x (10H + 4I) x b
  logprobs    C x V x (b + 12)  with C = batch.logprob_chunk_tokens (the logits, their fp32 copy, log-softmax
              and its gradient: 14 in bf16), else T x V x (b + 12): the whole micro-batch's vocabulary block
  step        the whole step's tensors, which every rank holds for all N rows (step_tensor_bytes): token ids,
              attention mask and positions N x S x 8 each, the response mask N x R x 8, and N x R x 4 for the
              float mask, θold's log-probs and entropy and their copies in the update (4), πref's when a step
              reads them (armor.config.needs_reference_logprobs), a separate teacher's and the token
              advantages with distillation
The rollout engine (vLLM, colocated) sleeps during the update (weights to CPU, KV cache freed) and takes
`rollout.gpu_memory_utilization` of the GPU while it generates, beside the shards above (not the gradients, the
activations or the log-prob block). A rough estimate, to see before submitting whether a job can fit: allocator
fragmentation, NCCL buffers and CUDA context (~1-3 GiB) are not in it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

GIB = 2 ** 30
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class ModelShape:
    """The widths of a decoder-only transformer (a Hugging Face config.json's fields)."""
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    max_positions: int

    @property
    def params(self) -> int:
        """Qwen2/Qwen3/Llama layout: q/k/v (with bias, as Qwen2 has) and o projections, a gated MLP, 2 norms
        per layer; embeddings, a final norm and an lm_head (unless tied)."""
        H, kv = self.hidden, self.kv_heads * self.head_dim
        q = self.heads * self.head_dim
        attn = H * q + q + 2 * (H * kv + kv) + q * H
        layer = attn + 3 * H * self.intermediate + 2 * H
        return self.vocab * H * (1 if self.tied else 2) + self.layers * layer + H

    @property
    def root_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    @property
    def layer_params(self) -> int:
        return (self.params - self.root_params) // self.layers

    @classmethod
    def from_config(cls, c: dict) -> "ModelShape":
        heads = c["num_attention_heads"]
        return cls(hidden=c["hidden_size"], intermediate=c["intermediate_size"], layers=c["num_hidden_layers"],
                   heads=heads, kv_heads=c.get("num_key_value_heads", heads),
                   head_dim=c.get("head_dim") or c["hidden_size"] // heads, vocab=c["vocab_size"],
                   tied=bool(c.get("tie_word_embeddings", False)),
                   max_positions=c.get("max_position_embeddings", 0))


# the paper's two models, from their config.json on the hub (so a dry run needs no download)
KNOWN = {
    "Qwen/Qwen2.5-Math-7B": ModelShape(hidden=3584, intermediate=18944, layers=28, heads=28, kv_heads=4,
                                       head_dim=128, vocab=152064, tied=False, max_positions=4096),
    "Qwen/Qwen3-8B-Base": ModelShape(hidden=4096, intermediate=12288, layers=36, heads=32, kv_heads=8,
                                     head_dim=128, vocab=151936, tied=False, max_positions=32768),
}


def model_shape(path: str) -> ModelShape | None:
    """The shape of a model folder (its config.json), or of a known hub id; None when neither is there."""
    cfg = Path(path) / "config.json"
    if cfg.is_file():
        return ModelShape.from_config(json.loads(cfg.read_text()))
    return KNOWN.get(path)


def micro_batch_tokens(cfg) -> int:
    """T: the tokens of the largest micro-batch (its budget, or rows x the longest allowed sequence)."""
    b, L = cfg.batch, cfg.lengths
    return b.micro_batch_tokens or b.micro_batch_responses * (L.max_prompt + L.max_response)


def step_tensor_bytes(cfg) -> int:
    """Bytes of the step's tensors each rank holds through the update (armor.trainer: UpdateBatch,
    FrozenLogprobs and the update's working copies), for all N = prompts_per_step x group_size rows at the
    longest lengths: the module docstring's `step` part. Host-side lists (responses, engine log-probs) are not
    in it."""
    from armor.config import needs_reference_logprobs
    b, L, a = cfg.batch, cfg.lengths, cfg.algo
    N, R = b.prompts_per_step * b.group_size, L.max_response
    S = L.max_prompt + R
    n_float = 5                          # float mask; θold's log-probs and entropy, and their copies
    n_float += needs_reference_logprobs(cfg)
    if a.distill.mode != "none":
        n_float += 1 + bool(a.distill.teacher_path)   # token advantages; a separate teacher's log-probs
    return 3 * N * S * 8 + N * R * 8 + n_float * N * R * 4


def estimate(cfg, world_size: int, shape: ModelShape) -> dict[str, float]:
    """GiB per rank during the update, by part (see the module docstring), with their sum as `total`."""
    W, P = world_size, shape.params
    compute = BYTES[cfg.parallel.compute_dtype if world_size > 1 else cfg.model.dtype]
    frozen = 1 + (cfg.algo.distill.mode != "none" and bool(cfg.algo.distill.teacher_path))
    T, H, I, L, V = micro_batch_tokens(cfg), shape.hidden, shape.intermediate, shape.layers, shape.vocab
    layer_act = T * (10 * H + 4 * I) * compute
    act = T * H * compute * L + layer_act if cfg.model.gradient_checkpointing else L * layer_act
    chunk = cfg.batch.logprob_chunk_tokens
    out = {"params": P / W * BYTES[cfg.model.dtype], "grads": P / W * 4, "optimizer": P / W * 8,
           "reference": frozen * P / W * compute,
           "gathered": (shape.root_params + 2 * shape.layer_params) * compute if W > 1 else 0.0,
           "activations": act, "logprobs": (chunk if chunk else T) * V * (compute + 12),
           "step": step_tensor_bytes(cfg)}
    out = {k: v / GIB for k, v in out.items()}
    out["total"] = sum(out.values())
    return out


def describe(est: dict[str, float], cfg=None) -> str:
    """One line: `memory/rank ~ 61.2 GiB (params 0.2 + grads 0.2 + ...)`, and the engine's share."""
    parts = " + ".join(f"{k} {v:.1f}" for k, v in est.items() if k != "total")
    line = f"update memory/rank ~{est['total']:.1f} GiB ({parts})"
    if cfg is not None and cfg.rollout.engine == "vllm":
        L = cfg.lengths
        tp = cfg.rollout.tensor_parallel_size
        line += (f"; vllm engine: context {L.max_prompt + L.max_response} tokens (lengths.max_prompt + "
                 f"max_response), {cfg.rollout.gpu_memory_utilization:g} of each GPU while generating"
                 + (f", {tp} GPUs per engine (tensor parallel)" if tp > 1 else ""))
    return line
