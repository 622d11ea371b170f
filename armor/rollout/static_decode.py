"""Incremental decoding with a preallocated (static) KV cache, for the Llama-family layouts (Qwen2, Qwen3, Llama).

The HF engine's sampling loop asks a *stepper* for next-token logits: `prefill` the left-padded prompts, then
`decode` one token per row at a time, and `keep` only the rows still sampling. Two steppers implement that:

- `HFStepper` calls the model's own `forward` with a `DynamicCache`: any causal LM works.
- `StaticStepper` runs the same decoder layers from the model's own weights and submodules (norms, projections,
  rotary embedding, MLP), with one preallocated KV cache per layer, fused q/k/v and gate/up projections, the
  attention mask built once per call, and a batched-matmul attention for the single new query. A decode step of
  the suite's tiny models is mostly per-op overhead (the generic forward's mask building, cache concatenation
  and wrappers), which this removes: `python -m armor.bench_decode` measures both steppers (on the 2-core CPU
  it was faster up to 128 rows a call and slower at 256). Logits agree with `forward` to float rounding
  (tests/test_rollout.py).

`StaticStepper.supports(model)` says whether a model has the layout this file knows; anything else falls back
to `HFStepper`. Neither stepper keeps gradients: sampling runs under `torch.inference_mode`.
"""
from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from transformers import DynamicCache

# model_type -> the layer layout is: pre-norm attention (q/k/v/o projections, optional per-head q/k RMSNorm)
# with rotary embeddings, then pre-norm MLP; a final norm and lm_head.
_SUPPORTED_TYPES = {"qwen2", "qwen3", "llama"}


class HFStepper:
    """Next-token logits from the model's own forward pass and a DynamicCache (works for any causal LM)."""

    def __init__(self, model):
        self.model = model
        name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        self.cache = DynamicCache()
        self.cache_kw = {name: self.cache}   # transformers >= 5.2x names the argument `cache`

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        """ids, mask, pos: [N, P] (left-padded) -> logits of the next token [N, V]."""
        self.mask = torch.cat([mask, torch.ones(mask.shape[0], max_new_tokens, dtype=mask.dtype,
                                                device=mask.device)], dim=1)
        self.plen = ids.shape[1]
        return self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                          **self.cache_kw).logits[:, -1, :]

    def decode(self, tok: torch.Tensor, pos: torch.Tensor, t: int) -> torch.Tensor:
        """tok, pos: [N] (the t-th new token of each row, t >= 0) -> logits of the token after it [N, V]."""
        return self.model(input_ids=tok[:, None], attention_mask=self.mask[:, :self.plen + t + 1],
                          position_ids=pos[:, None], use_cache=True, **self.cache_kw).logits[:, -1, :]

    def keep(self, rows: torch.Tensor) -> None:
        """Drop every row not in `rows` ([K] indices into the current rows) from the cache and the mask."""
        self.cache.reorder_cache(rows)
        self.mask = self.mask[rows]


class StaticStepper:
    """Next-token logits from the model's decoder layers with a preallocated KV cache per layer."""

    def __init__(self, model):
        self.model = model
        self.body = model.model
        self.layers = list(self.body.layers)

    @staticmethod
    def supports(model) -> bool:
        """True for Qwen2 / Qwen3 / Llama causal LMs with full attention in every layer and a static RoPE."""
        cfg = getattr(model, "config", None)
        body = getattr(model, "model", None)
        if cfg is None or getattr(cfg, "model_type", None) not in _SUPPORTED_TYPES or body is None:
            return False
        if not all(hasattr(body, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb")):
            return False
        if getattr(cfg, "use_sliding_window", False):
            return False
        if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
            return False
        rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
        if rope.get("rope_type", rope.get("type", "default")) == "dynamic":   # its frequencies follow the length
            return False
        return getattr(cfg, "_attn_implementation", "sdpa") in ("sdpa", "eager")

    def _prepare(self, device) -> None:
        """Per layer, one [q; k; v] and one [gate; up] weight matrix, taken once per generate call (the weights
        do not change while sampling): a decode step makes 3 matrix products per layer instead of 7."""
        a0 = self.layers[0].self_attn
        self.head_dim = d = a0.head_dim
        self.q_heads, self.kv_heads = a0.q_proj.out_features // d, a0.k_proj.out_features // d
        self.fused = []
        for layer in self.layers:
            a, mlp = layer.self_attn, layer.mlp
            bias = None
            if a.q_proj.bias is not None:
                bias = torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias])
            self.fused.append((torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]), bias,
                               torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])))
        # rotate_half(x) = x @ R (R has one ±1 per column, so the product is exact): one op instead of three
        half = d // 2
        self.rot = torch.zeros(d, d, device=device, dtype=self.fused[0][0].dtype)
        self.rot[torch.arange(half) + half, torch.arange(half)] = -1.0
        self.rot[torch.arange(half), torch.arange(half) + half] = 1.0

    @staticmethod
    def _rms_norm(norm, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, norm.weight.shape, norm.weight, norm.variance_epsilon)

    def _layer(self, i: int, x: torch.Tensor, cos, sin, attend, slot: slice) -> torch.Tensor:
        """One decoder layer on x [N, S, H]; writes its keys/values for the S new positions into cache slots
        `slot`. cos, sin: [N, S, 1, head_dim]; attend: the prefill's boolean mask [N, 1, S, S], or for a decode
        step (S = 1) the additive key bias already laid out for `_decode_attention`."""
        layer = self.layers[i]
        attn, mlp = layer.self_attn, layer.mlp
        w_qkv, b_qkv, w_gate_up = self.fused[i]
        n, s, _ = x.shape
        hq, hkv = self.q_heads, self.kv_heads
        qkv = F.linear(self._rms_norm(layer.input_layernorm, x), w_qkv, b_qkv).view(n, s, hq + 2 * hkv, -1)
        qk, v = qkv[:, :, :hq + hkv], qkv[:, :, hq + hkv:]
        if getattr(attn, "q_norm", None) is not None:        # Qwen3: per-head RMSNorm before the rotation
            qk = torch.cat([self._rms_norm(attn.q_norm, qk[:, :, :hq]), self._rms_norm(attn.k_norm, qk[:, :, hq:])], 2)
        qk = qk * cos + torch.matmul(qk, self.rot) * sin      # RoPE on queries and keys at once
        q, k = qk[:, :, :hq].transpose(1, 2), qk[:, :, hq:].transpose(1, 2)   # [N, heads, S, head_dim]
        self.k[i][:, :, slot] = k
        self.v[i][:, :, slot] = v.transpose(1, 2)
        keys, values = self.k[i][:, :, :slot.stop], self.v[i][:, :, :slot.stop]
        if s == 1:
            o = _decode_attention(q, keys, values, attend, attn.scaling)
        else:
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=attend, scale=attn.scaling,
                                               enable_gqa=hq != hkv)
        x = x + attn.o_proj(o.transpose(1, 2).reshape(n, s, -1))
        gate, up = F.linear(self._rms_norm(layer.post_attention_layernorm, x), w_gate_up).chunk(2, dim=-1)
        return x + mlp.down_proj(mlp.act_fn(gate) * up)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(self._rms_norm(self.body.norm, x[:, -1, :]))

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        """ids, mask, pos: [N, P] (left-padded) -> logits of the next token [N, V]."""
        n, plen = ids.shape
        dev = ids.device
        x = self.body.embed_tokens(ids)
        self._prepare(dev)
        size = plen + max_new_tokens
        # slots are written before they are read (attention reads only the slots filled so far): no zeroing
        self.k = [x.new_empty(n, self.kv_heads, size, self.head_dim) for _ in self.layers]
        self.v = [x.new_empty(n, self.kv_heads, size, self.head_dim) for _ in self.layers]
        self.filled = plen
        # every position's cos/sin once: row positions never exceed plen + max_new_tokens
        cos, sin = self.body.rotary_emb(x, torch.arange(size, device=dev)[None])
        self.cos, self.sin = cos[0], sin[0]                   # [size, head_dim]
        # keys a row may attend to: its real prompt tokens, then every generated token (slots fill in order)
        key_ok = torch.cat([mask.bool(), torch.ones(n, max_new_tokens, dtype=torch.bool, device=dev)], 1)
        self.key_bias = torch.zeros(key_ok.shape, dtype=x.dtype, device=dev).masked_fill_(~key_ok, float("-inf"))
        self.plen = plen
        causal = torch.ones(plen, plen, dtype=torch.bool, device=dev).tril()
        # a padding position attends to itself only, so its (unused) output is finite, never NaN
        attend = (causal & key_ok[:, None, :plen]) | torch.eye(plen, dtype=torch.bool, device=dev)
        c, s_ = self.cos[pos][:, :, None], self.sin[pos][:, :, None]   # [N, P, 1, head_dim]
        for i in range(len(self.layers)):
            x = self._layer(i, x, c, s_, attend[:, None], slice(0, plen))
        return self._logits(x)

    def decode(self, tok: torch.Tensor, pos: torch.Tensor, t: int) -> torch.Tensor:
        """tok, pos: [N] (the t-th new token of each row, t >= 0) -> logits of the token after it [N, V]."""
        n = tok.shape[0]
        x = self.body.embed_tokens(tok[:, None])
        c, s_ = self.cos[pos][:, None, None], self.sin[pos][:, None, None]   # [N, 1, 1, head_dim]
        end = self.plen + t + 1
        g = self.q_heads // self.kv_heads          # the key bias of every (row, kv head, query head), once a step
        bias = self.key_bias[:, None, :end].expand(n, self.q_heads, end).reshape(n * self.kv_heads, g, end)
        for i in range(len(self.layers)):
            x = self._layer(i, x, c, s_, bias, slice(end - 1, end))
        self.filled = end
        return self._logits(x)

    def keep(self, rows: torch.Tensor) -> None:
        """Drop every row not in `rows` ([K] indices into the current rows) from the cache and the mask."""
        f, kept = self.filled, len(rows)
        for cache in (self.k, self.v):      # compact in place, copying only the filled slots (rows are ascending)
            for i, c in enumerate(cache):
                c[:kept, :, :f] = c[rows, :, :f]
                cache[i] = c[:kept]
        self.key_bias = self.key_bias[rows]


def _decode_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor,
                      scale: float) -> torch.Tensor:
    """Attention of one new query per row: softmax(q·Kᵀ·scale + bias)·V, with grouped-query heads.

    q: [N, Hq, 1, D]; keys, values: [N, Hkv, S, D] (Hq = g·Hkv; query head h reads kv head h // g);
    bias: [N·Hkv, g, S], 0 where a key may be attended and -inf where not -> [N, Hq, 1, D].
    Two batched matrix products: for a single query the CPU flash kernel of scaled_dot_product_attention is
    about 1.5x slower at the tiny models' sizes; the result agrees with it to ~1e-6."""
    n, hq, _, d = q.shape
    hkv, s = keys.shape[1], keys.shape[2]
    scores = torch.baddbmm(bias, q.reshape(n * hkv, hq // hkv, d), keys.reshape(n * hkv, s, d).transpose(1, 2),
                           alpha=scale)
    return torch.bmm(scores.softmax(-1), values.reshape(n * hkv, s, d)).view(n, hq, 1, d)


def make_stepper(model, static: bool = True):
    """The fastest stepper that supports `model` (`static=False` forces the generic one)."""
    return StaticStepper(model) if static and StaticStepper.supports(model) else HFStepper(model)
