"""A lean forward pass of Llama-family causal LMs (Qwen2, Qwen3, Llama) over the HF module's own parameters.

    if fastmodel.supports(model):
        h = fastmodel.hidden_states(model, input_ids, attention_mask, position_ids, select)   # [K, H]

The trainer's log-probs (armor.policy.forward_logprobs) need the last hidden state of a few positions of
left-padded prompt + right-padded response rows. HF's forward pays, per layer, for every padding column, for
seven weight products, a rotary per projection, and CPU attention kernels built for long sequences (at head
width 16 and ~50 positions the flash kernel reaches a few GFLOP/s, and autograd's batched-product backward
copies batch by batch). This forward computes the same function with:

- unpadding: the embeddings, norms, projections and MLPs run on the T real tokens only ([T, H]); attention
  alone sees a padded layout, each row's tokens left-aligned ([rows, Lm], Lm = the longest row), so that plain
  causal masking is exact for every real query (a padding slot sits after all real ones of its row);
- one fused [q; k; v] product (the weights concatenated each call: autograd splits the gradient);
- one rotary table for all layers, applied to the q and k heads together;
- attention as batched products per (row, kv head) with its own backward, in two causal blocks
  (`_Attention`); the query heads that share a kv head are stacked along the product's rows, so GQA needs no
  repeated keys;
- the final norm only on the selected positions.

Every operation is deterministic on the CPU. The results equal HF's forward to float rounding (other product
shapes: ~1e-6 in float32; tests/integration/test_fastmodel.py). Anything else falls back: `supports` is False
for other architectures, sliding windows, dynamic RoPE, adapters (a projection that is not a plain Linear),
attention dropout while training, FSDP2-sharded models (their weights are gathered by the layers' own forward
hooks), and when ARMOR_FAST_FORWARD=0 is set.

What decided it (this machine: 2 shared AMD EPYC cores, torch 2.13 CPU, 1 thread, the tiny world's model;
medians of CPU time on a loaded machine, so +-20 %): torch.compile of one layer (inductor, dynamic shapes,
gcc) took 55 s to compile in each process and then ran a 64-row update batch's forward + backward in 131 ms
against 85 ms eager; attention forward + backward of 64 rows x 4 heads x 47 positions at head width 16 took
5.7-8.0 ms in CPU SDPA (the flash kernel), 4.6-6.8 ms as autograd of the same two batched products, and
2.7-3.0 ms in `_Attention`'s two causal blocks. Rows of equal length (no padding) gain nothing over HF's
forward (32 x 45 tokens: 35.7 ms forward + backward against 35.6): the gain is unpadding and attention.
"""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F

SUPPORTED_TYPES = ("qwen2", "qwen3", "llama")
ENV_SWITCH = "ARMOR_FAST_FORWARD"


def enabled() -> bool:
    """ARMOR_FAST_FORWARD: "1" (default) uses the lean forward where supported, "0" always HF's (and the
    trainer the loop AdamW, not the fused one: the reference numerics, as FSDP2 computes)."""
    v = os.environ.get(ENV_SWITCH, "1")
    if v not in ("0", "1"):
        raise ValueError(f"{ENV_SWITCH}: {v!r} must be 0 (HF's forward) or 1 (the lean forward where "
                         "supported)")
    return v == "1"


def layout_problem(model) -> str | None:
    """Why `model` does not have the decoder layout the lean passes compute (None: it has it): pre-norm
    attention with q/k/v/o projections (optional biases, optional per-head q/k RMSNorm), a static RoPE and
    full attention in every layer, then a pre-norm gated MLP; a final norm and an lm_head. Shared with the
    static decoder (common.rollout.static_decode)."""
    cfg, body = getattr(model, "config", None), getattr(model, "model", None)
    if cfg is None or getattr(cfg, "model_type", None) not in SUPPORTED_TYPES or body is None:
        return f"model_type {getattr(cfg, 'model_type', None)!r} is not one of {SUPPORTED_TYPES}"
    if not all(hasattr(body, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb")):
        return "no model.embed_tokens / layers / norm / rotary_emb"
    if getattr(cfg, "use_sliding_window", False):
        return "sliding-window attention"
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
        return f"layer_types {cfg.layer_types!r} (not all full_attention)"
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) == "dynamic":   # frequencies follow the length
        return "dynamic RoPE"
    if getattr(cfg, "_attn_implementation", "sdpa") not in ("sdpa", "eager"):
        return f"attention implementation {cfg._attn_implementation!r}"
    return None


def _plain_linears(layer) -> bool:
    a, m = layer.self_attn, layer.mlp
    mods = (a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj)
    return all(type(x) is torch.nn.Linear for x in mods)


def supports(model) -> bool:
    """Whether `hidden_states` computes `model`'s forward exactly (see the module docstring)."""
    if not enabled() or layout_problem(model) is not None:
        return False
    try:
        from torch.distributed.fsdp import FSDPModule
        if isinstance(model, FSDPModule):
            return False
    except ImportError:                    # a torch without FSDP2: no sharded model either
        pass
    layers = list(model.model.layers)
    if not layers or not all(_plain_linears(layer) for layer in layers):
        return False
    if model.training and float(getattr(model.config, "attention_dropout", 0.0) or 0.0) > 0:
        return False
    return type(model.get_output_embeddings()) is torch.nn.Linear


# ------------------------------------------------------------------------------------------------ attention
class _Attention(torch.autograd.Function):
    """O = softmax(scale · Q Kᵀ + bias) V for a batch of small causal attention problems, with a hand-written
    backward whose batched products read contiguous operands.

    q: [B, S·g, d] (the g query heads of each position adjacent: row i·g + j is position i, head j), k, v:
    [B, S, d], bias: [S·g, S] (0 or -inf, the same for every batch entry); -> [B, S·g, d]. Causal blocks: the
    queries of positions < h read only keys < h (every later key is masked for them), the others all keys;
    the result is the same, bit for bit (a masked key adds an exact 0), for ~3/4 of the work at h = S/2.
    Backward per block (P its softmax, dO the output's gradient): dV = Pᵀ dO, dP = dO Vᵀ,
    dS = P ⊙ (dP − Σ_j dP ⊙ P), dQ = scale · dS K, dK = scale · dSᵀ Q, the blocks' dK and dV summed."""

    @staticmethod
    def forward(ctx, q, k, v, bias, scale: float, h: int, g: int):
        ctx.scale, ctx.h, ctx.g = scale, h, g
        hg = h * g
        pb = torch.baddbmm(bias[hg:], q[:, hg:], k.transpose(1, 2), alpha=scale).softmax(-1)
        ob = torch.bmm(pb, v)
        if not h:
            ctx.save_for_backward(q, k, v, pb)
            return ob
        pa = torch.baddbmm(bias[:hg, :h], q[:, :hg], k[:, :h].transpose(1, 2), alpha=scale).softmax(-1)
        ctx.save_for_backward(q, k, v, pb, pa)
        return torch.cat([torch.bmm(pa, v[:, :h]), ob], 1)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, pb, *pa = ctx.saved_tensors
        scale, h, hg = ctx.scale, ctx.h, ctx.h * ctx.g
        gb = grad_out[:, hg:].contiguous()
        dv = torch.bmm(pb.transpose(1, 2), gb)
        ds = torch._softmax_backward_data(torch.bmm(gb, v.transpose(1, 2)), pb, -1, pb.dtype)
        dq = torch.bmm(ds, k)
        dk = torch.bmm(ds.transpose(1, 2), q[:, hg:])
        if h:
            pa, ga = pa[0], grad_out[:, :hg].contiguous()
            dv[:, :h] += torch.bmm(pa.transpose(1, 2), ga)
            ds = torch._softmax_backward_data(torch.bmm(ga, v[:, :h].transpose(1, 2)), pa, -1, pa.dtype)
            dq = torch.cat([torch.bmm(ds, k[:, :h]), dq], 1)
            dk[:, :h] += torch.bmm(ds.transpose(1, 2), q[:, :hg])
        return dq.mul_(scale), dk.mul_(scale), dv, None, None, None, None


# attention rows shorter than this are one causal block (see _Attention)
MIN_BLOCKED_SLOTS = 16


def _rms(x: torch.Tensor, norm) -> torch.Tensor:
    """HF's RMSNorm: w · (x / sqrt(mean(x²) + eps)), the statistics in float32. x: [..., H]. In float32 it is
    F.rms_norm (the same values, one pass less in backward)."""
    if x.dtype == torch.float32 and norm.weight.dtype == torch.float32:
        return F.rms_norm(x, norm.weight.shape, norm.weight, norm.variance_epsilon)
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * h.to(x.dtype)


def _swap_halves(x: torch.Tensor) -> torch.Tensor:
    """[x2, x1] of x = [x1, x2] along the last dim (its sign goes into the sin table: rotate_half(x) =
    swap(x) · [-1, +1])."""
    return torch.roll(x, x.shape[-1] // 2, -1)


class _Plan:
    """A model's static shape facts, read once (weights are read each call: they change in place)."""

    def __init__(self, model):
        a0 = model.model.layers[0].self_attn
        self.d = a0.head_dim
        self.hq, self.hkv = a0.q_proj.out_features // self.d, a0.k_proj.out_features // self.d
        self.scale = a0.scaling
        self.qk_norm = getattr(a0, "q_norm", None) is not None


def _plan(model) -> _Plan:
    plan = getattr(model, "_armor_fast_plan", None)
    if plan is None:
        plan = _Plan(model)
        object.__setattr__(model, "_armor_fast_plan", plan)     # a plain attribute, not a submodule
    return plan


def _layer(layer, plan: _Plan, x, rope, dest, n_rows: int, n_slots: int, bias):
    """One decoder layer on the packed tokens x [T, H]. rope: (cos, signed sin) [T, q + k + v heads, d] (1 and
    0 on the value heads); dest [T]: each token's attention slot, row · n_slots + its place in the row."""
    a, mlp = layer.self_attn, layer.mlp
    T, d, hq, hkv = x.shape[0], plan.d, plan.hq, plan.hkv
    g, heads = hq // hkv, hq + 2 * hkv
    w = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
    b = None if a.q_proj.bias is None else torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias])
    qkv = F.linear(_rms(x, layer.input_layernorm), w, b).view(T, heads, d)
    if plan.qk_norm:                       # Qwen3: per-head RMSNorm of q and k before the rotation
        q, k, v = qkv.split([hq, hkv, hkv], 1)
        qkv = torch.cat([_rms(q, a.q_norm), _rms(k, a.k_norm), v], 1)
    qkv = torch.addcmul(qkv * rope[0], _swap_halves(qkv), rope[1])   # RoPE on q and k, v unchanged
    # heads first, each row's tokens left-aligned: [q + k + v heads, rows · slots, d]
    slots = qkv.new_zeros(heads, n_rows * n_slots, d).index_copy(1, dest, qkv.transpose(0, 1))
    # batch (kv head, row); the g query heads of a kv head stacked along the product's rows, position-major
    # split, not sliced: a slice's backward fills a whole zero gradient per slice, a split's is one cat
    qs, ks, vs = slots.split([hq, hkv, hkv], 0)
    qs = qs.view(hkv, g, n_rows, n_slots, d).permute(0, 2, 3, 1, 4).reshape(hkv * n_rows, n_slots * g, d)
    ks, vs = ks.view(hkv * n_rows, n_slots, d), vs.view(hkv * n_rows, n_slots, d)
    h = n_slots // 2 if n_slots >= MIN_BLOCKED_SLOTS else 0
    o = _Attention.apply(qs, ks, vs, bias, plan.scale, h, g)
    o = (o.view(hkv, n_rows, n_slots, g, d).permute(1, 2, 0, 3, 4).reshape(n_rows * n_slots, hq * d)
         .index_select(0, dest))
    x = x + F.linear(o, a.o_proj.weight, a.o_proj.bias)
    # gate and up as two products: a fused one's backward concatenates their gradients along the columns
    h = _rms(x, layer.post_attention_layernorm)
    h = mlp.act_fn(F.linear(h, mlp.gate_proj.weight, mlp.gate_proj.bias)) * F.linear(h, mlp.up_proj.weight,
                                                                                      mlp.up_proj.bias)
    return x + F.linear(h, mlp.down_proj.weight, mlp.down_proj.bias)


def hidden_states(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                  select: torch.Tensor) -> torch.Tensor:
    """The last hidden states (after the final norm) of the flat positions `select` of a padded batch.

    input_ids, attention_mask, position_ids: [N, L] (any padding; a row's real tokens are those with mask 1,
    attending causally to each other in column order, as HF's forward does); select: [K] indices into the
    N·L flat positions, each a real token -> [K, H], equal to HF's `model.model(...).last_hidden_state`
    at those positions. Runs only where `supports(model)`."""
    plan = _plan(model)
    body = model.model
    N, L = input_ids.shape
    mask = attention_mask.reshape(-1) != 0
    packed = mask.nonzero().squeeze(1)                                  # [T] flat index of each real token
    rank = attention_mask.ne(0).long().cumsum(1) - 1                     # [N, L] a token's place in its row
    n_slots = int(rank[:, -1].max()) + 1
    rows = torch.arange(N, device=input_ids.device)[:, None]
    dest = (rows * n_slots + rank).reshape(-1).index_select(0, packed)
    where = torch.full((N * L,), -1, dtype=torch.long, device=input_ids.device)
    where[packed] = torch.arange(len(packed), device=input_ids.device)
    sel = where.index_select(0, select)
    if bool((sel < 0).any()):
        raise ValueError("fastmodel.hidden_states: select names a padding position (attention_mask 0)")
    x = body.embed_tokens(input_ids.reshape(-1).index_select(0, packed))
    cos, sin = body.rotary_emb(x[None], position_ids.reshape(-1).index_select(0, packed)[None])
    heads, half = plan.hq + 2 * plan.hkv, plan.d // 2
    qk = plan.hq + plan.hkv
    sign = torch.ones(plan.d, dtype=x.dtype, device=x.device)
    sign[:half] = -1.0
    rope = (x.new_ones(len(packed), heads, plan.d), x.new_zeros(len(packed), heads, plan.d))
    rope[0][:, :qk] = cos[0][:, None]
    rope[1][:, :qk] = (sin[0] * sign)[:, None]
    g = plan.hq // plan.hkv
    causal = torch.ones(n_slots, n_slots, dtype=torch.bool, device=x.device).tril()
    bias = torch.zeros(n_slots, n_slots, dtype=x.dtype, device=x.device).masked_fill_(~causal, float("-inf"))
    bias = bias.repeat_interleave(g, 0)                                 # [slots · g, slots]
    from torch.utils.checkpoint import checkpoint
    for layer in body.layers:
        args = (layer, plan, x, rope, dest, N, n_slots, bias)
        if getattr(layer, "gradient_checkpointing", False) and torch.is_grad_enabled():
            x = checkpoint(_layer, *args, use_reentrant=False)
        else:
            x = _layer(*args)
    return _rms(x.index_select(0, sel), body.norm)
