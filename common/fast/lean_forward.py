"""A lean forward pass of Llama-family causal LMs (Qwen2, Qwen3, Llama) over the HF module's own parameters.

    if lean_forward.supports(model):
        h = lean_forward.hidden_states(model, input_ids, attention_mask, position_ids, select,
                                       prompt_len)                                         # [K, H]

The trainer's log-probs (armor.policy.forward_logprobs) need the last hidden state of a few positions of
left-padded prompt + right-padded response rows. HF's forward pays, per layer, for every padding column, for
seven weight products, a rotary per projection, and CPU attention kernels built for long sequences (at head
width 16 and ~50 positions the flash kernel reaches a few GFLOP/s, and autograd's batched-product backward
copies batch by batch). This forward computes the same function with:

- unpadding: the embeddings, norms, projections and MLPs run on the T real tokens only ([T, H]); attention
  alone sees a padded layout, each row's tokens left-aligned, so that plain causal masking is exact for every
  real query (a padding slot sits after all real ones of its row);
- a prompt that several rows answer (a GRPO group, `prompt_len` given) computed once (`_pack`): its tokens
  attend only to each other, so their states are the same in every row; each row's attention reads them, and
  their gradients are summed over the rows;
- each decoder layer one autograd node (`_DecoderLayer`) with a hand-written backward: one [q; k; v] and one
  [gate; up] product, RoPE in place on the q and k heads, RMSNorm's backward by its formula, what the
  backward reads saved once;
- attention as batched products per (row, kv head) with its own backward, in two causal blocks
  (`_attention_forward`); the query heads that share a kv head are stacked along the product's rows, so GQA
  needs no repeated keys; rows of very different lengths padded in two groups (`_row_groups`);
- the final norm only on the selected positions.

Every operation is deterministic on the CPU. The results equal HF's forward to float rounding (float32:
~1e-6, gradients within 2e-5 of their largest entry; tests/integration/test_lean_forward.py). Anything else
falls back: `supports` is False for other architectures, sliding windows, dynamic RoPE, an activation other
than silu, adapters (a projection that is not a plain Linear), attention dropout while training, FSDP2-sharded
models (their weights are gathered by the layers' own forward hooks). The run takes this path only where its
`compute.fast` says so (common/fast/__init__.py: auto on a one-process CPU float32 run). Why these and not
torch.compile or fewer, larger products: records/fast_paths.md.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

SUPPORTED_TYPES = ("qwen2", "qwen3", "llama")


def layout_problem(model) -> str | None:
    """Why `model` does not have the decoder layout the lean passes compute (None: it has it): pre-norm
    attention with q/k/v/o projections (optional biases, optional per-head q/k RMSNorm), a static RoPE and
    full attention in every layer, then a pre-norm gated MLP; a final norm and an lm_head. Shared with the
    static-KV decoder (static_kv_decode.py)."""
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
    if layout_problem(model) is not None:
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
    if getattr(model.config, "hidden_act", "silu") != "silu":      # the hand-written backward's activation
        return False
    return type(model.get_output_embeddings()) is torch.nn.Linear


# ------------------------------------------------------------------------------------------------ attention
def _attention_forward(q, k, v, bias, scale: float, h: int, g: int):
    """O = softmax(scale · Q Kᵀ + bias) V for a batch of small causal attention problems; returns O and the
    softmax blocks its backward reads.

    q: [B, S·g, d] (the g query heads of each position adjacent: row i·g + j is position i, head j), k, v:
    [B, S, d], bias: [S·g, S] (0 or -inf, the same for every batch entry); -> [B, S·g, d]. Causal blocks: the
    queries of positions < h read only keys < h (every later key is masked for them), the others all keys;
    the result is the same, bit for bit (a masked key adds an exact 0), for ~3/4 of the work at h = S/2."""
    hg = h * g
    pb = torch.baddbmm(bias[hg:], q[:, hg:], k.transpose(1, 2), alpha=scale).softmax(-1)
    ob = torch.bmm(pb, v)
    if not h:
        return ob, (pb,)
    pa = torch.baddbmm(bias[:hg, :h], q[:, :hg], k[:, :h].transpose(1, 2), alpha=scale).softmax(-1)
    return torch.cat([torch.bmm(pa, v[:, :h]), ob], 1), (pb, pa)


def _attention_backward(q, k, v, probs, grad_out, scale: float, h: int, g: int):
    """The gradients (dQ, dK, dV) of `_attention_forward` given dO, per block (P its softmax): dV = Pᵀ dO,
    dP = dO Vᵀ, dS = P ⊙ (dP − Σ_j dP ⊙ P), dQ = scale · dS K, dK = scale · dSᵀ Q, the blocks' dK and dV
    summed."""
    hg = h * g
    pb = probs[0]
    gb = grad_out[:, hg:].contiguous()
    dv = torch.bmm(pb.transpose(1, 2), gb)
    ds = torch._softmax_backward_data(torch.bmm(gb, v.transpose(1, 2)), pb, -1, pb.dtype)
    dq = torch.bmm(ds, k)
    dk = torch.bmm(ds.transpose(1, 2), q[:, hg:])
    if h:
        pa, ga = probs[1], grad_out[:, :hg].contiguous()
        dv[:, :h] += torch.bmm(pa.transpose(1, 2), ga)
        ds = torch._softmax_backward_data(torch.bmm(ga, v[:, :h].transpose(1, 2)), pa, -1, pa.dtype)
        dq = torch.cat([torch.bmm(ds, k[:, :h]), dq], 1)
        dk[:, :h] += torch.bmm(ds.transpose(1, 2), q[:, :hg])
    return dq.mul_(scale), dk.mul_(scale), dv


class _Attention(torch.autograd.Function):
    """`_attention_forward` with `_attention_backward` as its autograd backward (the batched products read
    contiguous operands)."""

    @staticmethod
    def forward(ctx, q, k, v, bias, scale: float, h: int, g: int):
        ctx.scale, ctx.h, ctx.g = scale, h, g
        out, probs = _attention_forward(q, k, v, bias, scale, h, g)
        ctx.save_for_backward(q, k, v, *probs)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, *probs = ctx.saved_tensors
        dq, dk, dv = _attention_backward(q, k, v, probs, grad_out, ctx.scale, ctx.h, ctx.g)
        return dq, dk, dv, None, None, None, None


# attention rows shorter than this are one causal block (see _attention_forward)
MIN_BLOCKED_SLOTS = 16

# attention's slots per row: a multiple of this (CPU products whose key count is a multiple of 8 run faster;
# measured: records/fast_paths.md)
SLOT_ALIGN = 8


def _block_split(S: int) -> int:
    """Where attention's two causal blocks of S slots meet (0: one block): near S/2, on a multiple of
    SLOT_ALIGN."""
    return 0 if S < MIN_BLOCKED_SLOTS else max(SLOT_ALIGN, SLOT_ALIGN * round(S / (2 * SLOT_ALIGN)))


def _rms(x: torch.Tensor, norm) -> torch.Tensor:
    """HF's RMSNorm: w · (x / sqrt(mean(x²) + eps)), the statistics in float32. x: [..., H]. In float32 it is
    F.rms_norm (the same values, one pass less in backward)."""
    if x.dtype == torch.float32 and norm.weight.dtype == torch.float32:
        return F.rms_norm(x, norm.weight.shape, norm.weight, norm.variance_epsilon)
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * h.to(x.dtype)


def _norm_forward(x: torch.Tensor, w: torch.Tensor, eps: float):
    """RMSNorm as HF computes it: r = 1 / sqrt(mean(x²) + eps) and n = x · r in float32, y = w · n in x's
    dtype. x: [..., H], w: [H] -> y [..., H], n (float32, [..., H]), r (float32, [..., 1])."""
    xf = x.float()
    r = xf.pow(2).mean(-1, keepdim=True).add_(eps).rsqrt_()
    n = xf * r
    return w * n.to(x.dtype), n, r


def _norm_backward(dy: torch.Tensor, w: torch.Tensor, n: torch.Tensor, r: torch.Tensor):
    """The gradients of y = w · n, n = x · r (`_norm_forward`) given dy [..., H]: with G = dy · w,
    dx = r · (G − n · mean(G · n)) (the mean over the last dim) and dw = Σ dy · n over every other dim.
    Returns dx (float32) and dw (w's dtype)."""
    dyf = dy.float()
    dw = (dyf * n).reshape(-1, n.shape[-1]).sum(0).to(w.dtype)
    gw = dyf * w.float()
    c = (gw * n).mean(-1, keepdim=True)
    return torch.addcmul(gw, n, c, value=-1.0).mul_(r), dw


class _HeadShape:
    """A model's attention head shape, read once: head size d, query and key-value head counts, scale,
    q/k norms (weights are read each call: they change in place)."""

    def __init__(self, model):
        a0 = model.model.layers[0].self_attn
        self.d = a0.head_dim
        self.hq, self.hkv = a0.q_proj.out_features // self.d, a0.k_proj.out_features // self.d
        self.scale = a0.scaling
        self.qk_norm = getattr(a0, "q_norm", None) is not None


def _head_shape(model) -> _HeadShape:
    hs = getattr(model, "_armor_head_shape", None)
    if hs is None:
        hs = _HeadShape(model)
        object.__setattr__(model, "_armor_head_shape", hs)    # a plain attribute, not a submodule
    return hs


class _Rows(NamedTuple):
    """Rows padded together in attention: n_rows rows of S slots each (S: their longest row's real tokens),
    slots [start, start + n_rows · S) of the layout."""
    n_rows: int
    n_slots: int
    gather: torch.Tensor             # [n_rows · S] each slot's token (T: padding, read from a zero row)
    gather_out: torch.Tensor         # the same, T also where the token's output is another slot's
    bias: torch.Tensor               # [S · g, S] 0 or -inf: causal, the g query heads of a position adjacent
    h: int                           # the causal blocks' split (0: one block)


class _Layout(NamedTuple):
    """Where one forward's T packed tokens sit in attention's padded layout (shared by every layer)."""
    groups: tuple                    # _Rows: the rows in groups of similar length, each padded to its longest
    dest: torch.Tensor               # [T] each token's own slot: its group's start + row · S + place in row
    gather: torch.Tensor             # [all slots] each slot's token (T: padding), the groups' in order
    cos: torch.Tensor                # [T, 1, d] each token's RoPE cos
    sin: torch.Tensor                # [T, 1, d] its sin, signed: rotate_half(x) · sin = swap(x) · this
    shared: bool                     # some tokens fill several slots (a prompt shared by several rows)


# the order of a layer's tensors in _DecoderLayer (None where a layer has no bias / no q/k norm)
WEIGHT_NAMES = ("input_norm", "q", "k", "v", "q_bias", "k_bias", "v_bias", "q_norm", "k_norm", "o", "o_bias",
                "post_norm", "gate", "up", "down", "gate_bias", "up_bias", "down_bias")


def _layer_weights(layer) -> tuple:
    """A decoder layer's tensors in WEIGHT_NAMES' order, and its norms' eps (input, post, q, k)."""
    a, m = layer.self_attn, layer.mlp
    qn, kn = getattr(a, "q_norm", None), getattr(a, "k_norm", None)
    ws = (layer.input_layernorm.weight, a.q_proj.weight, a.k_proj.weight, a.v_proj.weight, a.q_proj.bias,
          a.k_proj.bias, a.v_proj.bias, None if qn is None else qn.weight, None if kn is None else kn.weight,
          a.o_proj.weight, a.o_proj.bias, layer.post_attention_layernorm.weight, m.gate_proj.weight,
          m.up_proj.weight, m.down_proj.weight, m.gate_proj.bias, m.up_proj.bias, m.down_proj.bias)
    eps = (layer.input_layernorm.variance_epsilon, layer.post_attention_layernorm.variance_epsilon,
           None if qn is None else qn.variance_epsilon, None if kn is None else kn.variance_epsilon)
    return ws, eps


def _cat(*ts):
    return None if ts[0] is None else torch.cat(ts)


def _layer_forward(x: torch.Tensor, lay: _Layout, hs: _HeadShape, eps: tuple, ws: tuple, keep: bool):
    """One decoder layer on the packed tokens x [T, H] -> [T, H] (and, with `keep`, what its backward reads):
    x + attn(norm(x)), then h + mlp(norm(h)), computed as
      a = norm₁(x); [q; k; v] = a Wqkvᵀ (+ b) (Qwen3: per-head norms of q and k); RoPE on q and k;
      the heads scattered to the padded slots (each row's tokens left-aligned: plain causal masking is exact
      for every real query); o = attention(q, k, v) gathered back; h = x + o Woᵀ;
      b = norm₂(h); [u_g; u_u] = b [Wg; Wu]ᵀ; m = silu(u_g) · u_u; out = h + m Wdᵀ."""
    (ln1, wq, wk, wv, bq, bk, bv, qn, kn, wo, bo, ln2, wg, wu, wd, bg, bu, bd) = ws
    T, d, hq, hkv = x.shape[0], hs.d, hs.hq, hs.hkv
    g, qk, heads = hq // hkv, hq + hkv, hq + 2 * hkv
    a, n1, r1 = _norm_forward(x, ln1, eps[0])
    w_qkv, b_qkv = torch.cat([wq, wk, wv]), _cat(bq, bk, bv)
    buf = x.new_empty(T + 1, heads, d)                  # the packed heads; row T: the zero row of padding
    buf[T].zero_()
    qkv = buf[:T]
    if b_qkv is None:
        torch.mm(a, w_qkv.t(), out=qkv.view(T, heads * d))
    else:
        torch.addmm(b_qkv, a, w_qkv.t(), out=qkv.view(T, heads * d))
    qk_saved = ()
    if hs.qk_norm:                       # Qwen3: per-head RMSNorm of q and k before the rotation
        yq, nq, rq = _norm_forward(qkv[:, :hq], qn, eps[2])
        yk, nk, rk = _norm_forward(qkv[:, hq:qk], kn, eps[3])
        qkv[:, :hq], qkv[:, hq:qk] = yq, yk
        qk_saved = (nq, rq, nk, rk)
    # RoPE in place on the q and k heads: x · cos + swap(x) · signed sin
    rot = qkv[:, :qk]
    swapped = torch.roll(rot, d // 2, -1)
    rot.mul_(lay.cos).addcmul_(swapped, lay.sin)
    # each group's padded slots [rows, S, heads, d]; batch (kv head, row), the g query heads of a kv head
    # stacked along the rows of its products, position-major
    flat, outs, att = buf.view(T + 1, heads * d), [], []
    for grp in lay.groups:
        N, S = grp.n_rows, grp.n_slots
        slots = flat.index_select(0, grp.gather).view(N, S, heads, d)
        qs = slots[:, :, :hq].reshape(N, S, hkv, g, d).permute(2, 0, 1, 3, 4).reshape(hkv * N, S * g, d)
        ks = slots[:, :, hq:qk].permute(2, 0, 1, 3).reshape(hkv * N, S, d)
        vs = slots[:, :, qk:].permute(2, 0, 1, 3).reshape(hkv * N, S, d)
        o, probs = _attention_forward(qs, ks, vs, grp.bias, hs.scale, grp.h, g)
        outs.append(o.view(hkv, N, S, g, d).permute(1, 2, 0, 3, 4).reshape(N * S, hq * d))
        att += [qs, ks, vs, *probs]
    o = (outs[0] if len(outs) == 1 else torch.cat(outs)).index_select(0, lay.dest)
    h = torch.addmm(x, o, wo.t())
    if bo is not None:
        h = h.add_(bo)
    b, n2, r2 = _norm_forward(h, ln2, eps[1])
    gu = F.linear(b, torch.cat([wg, wu]), _cat(bg, bu))            # [T, 2I]: gate and up in one product
    inter = wg.shape[0]
    s = F.silu(gu[:, :inter])
    m = s * gu[:, inter:]
    out = torch.addmm(h, m, wd.t())
    if bd is not None:
        out = out.add_(bd)
    if not keep:
        return out, None
    return out, (a, n1, r1, w_qkv, *qk_saved, *att, o, n2, r2, b, gu, s, m)


def _layer_backward(lay: _Layout, hs: _HeadShape, ws: tuple, saved: tuple, dout: torch.Tensor):
    """The gradients of `_layer_forward` (dx and every tensor of ws, None where ws has none), by hand: the
    chain rule through each product (dX = dY W, dW = dYᵀ X), silu'(u) = σ(u)(1 + u(1 − σ(u))),
    `_norm_backward`, RoPE's transpose (dx = dy · cos + swap(dy · signed sin)) and `_attention_backward`;
    the padding slots' gradients are dropped by the gather back to the packed tokens."""
    (ln1, wq, wk, wv, bq, bk, bv, qn, kn, wo, bo, ln2, wg, wu, wd, bg, bu, bd) = ws
    saved = list(saved)
    a, n1, r1, w_qkv = saved[:4]
    nq = rq = nk = rk = None
    if hs.qk_norm:
        nq, rq, nk, rk = saved[4:8]
        saved = saved[8:]
    else:
        saved = saved[4:]
    att, (o, n2, r2, b, gu, s, m) = saved[:-7], saved[-7:]
    T, d, hq, hkv = a.shape[0], hs.d, hs.hq, hs.hkv
    g, qk, heads = hq // hkv, hq + hkv, hq + 2 * hkv
    inter = wg.shape[0]
    dout = dout.contiguous()
    # the MLP: out = h + m Wdᵀ, m = silu(u_g) · u_u, [u_g; u_u] = b [Wg; Wu]ᵀ
    d_wd = torch.mm(dout.t(), m)
    dm = torch.mm(dout, wd)
    dgu = torch.empty_like(gu)
    torch.mul(dm, s, out=dgu[:, inter:])
    torch.ops.aten.silu_backward.grad_input(dm.mul_(gu[:, inter:]), gu[:, :inter], grad_input=dgu[:, :inter])
    w_gu = torch.cat([wg, wu])
    d_wgu = torch.mm(dgu.t(), b)
    db = torch.mm(dgu, w_gu)
    dh, d_ln2 = _norm_backward(db, ln2, n2, r2)
    dh = dh.to(dout.dtype).add_(dout)
    # attention: h = x + o Woᵀ
    d_wo = torch.mm(dh.t(), o)
    do = dh.new_empty(T + 1, hq * d)
    do[T].zero_()
    torch.mm(dh, wo, out=do[:T])
    pieces = []
    for grp in lay.groups:
        N, S, n_att = grp.n_rows, grp.n_slots, 5 if grp.h else 4
        qs, ks, vs, *probs = att[:n_att]
        att = att[n_att:]
        dog = do.index_select(0, grp.gather_out).view(N, S, hkv, g, d).permute(2, 0, 1, 3, 4)
        dog = dog.reshape(hkv * N, S * g, d)
        dq, dk, dv = _attention_backward(qs, ks, vs, probs, dog, hs.scale, grp.h, g)
        slots = dq.new_empty(N, S, heads, d)
        slots[:, :, :hq].view(N, S, hkv, g, d).copy_(dq.view(hkv, N, S, g, d).permute(1, 2, 0, 3, 4))
        slots[:, :, hq:qk].copy_(dk.view(hkv, N, S, d).permute(1, 2, 0, 3))
        slots[:, :, qk:].copy_(dv.view(hkv, N, S, d).permute(1, 2, 0, 3))
        pieces.append(slots.view(N * S, heads * d))
    slots = pieces[0] if len(pieces) == 1 else torch.cat(pieces)
    if lay.shared:                         # a shared token's gradient: the sum over every slot it fills
        dqkv = slots.new_zeros(T + 1, heads * d).index_add_(0, lay.gather, slots)[:T].view(T, heads, d)
    else:
        dqkv = slots.index_select(0, lay.dest).view(T, heads, d)
    rot = dqkv[:, :qk]
    swapped = torch.roll(rot * lay.sin, d // 2, -1)
    rot.mul_(lay.cos).add_(swapped)
    d_qn = d_kn = None
    if hs.qk_norm:
        dyq, d_qn = _norm_backward(dqkv[:, :hq], qn, nq, rq)
        dyk, d_kn = _norm_backward(dqkv[:, hq:qk], kn, nk, rk)
        dqkv[:, :hq], dqkv[:, hq:qk] = dyq, dyk
    dqkv = dqkv.view(T, heads * d)
    d_wqkv = torch.mm(dqkv.t(), a)
    da = torch.mm(dqkv, w_qkv)
    dx, d_ln1 = _norm_backward(da, ln1, n1, r1)
    dx = dx.to(dout.dtype).add_(dh)
    d_wq, d_wk, d_wv = d_wqkv.split([hq * d, hkv * d, hkv * d])
    d_bq = d_bk = d_bv = None
    if bq is not None:
        d_bq, d_bk, d_bv = dqkv.sum(0).split([hq * d, hkv * d, hkv * d])
    d_wg, d_wu = d_wgu.split([inter, inter])
    d_bg = d_bu = None
    if bg is not None:
        d_bg, d_bu = dgu.sum(0).split([inter, inter])
    return dx, (d_ln1, d_wq, d_wk, d_wv, d_bq, d_bk, d_bv, d_qn, d_kn, d_wo,
                None if bo is None else dh.sum(0), d_ln2, d_wg, d_wu, d_wd, d_bg, d_bu,
                None if bd is None else dout.sum(0))


class _DecoderLayer(torch.autograd.Function):
    """A whole decoder layer as one autograd node (`_layer_forward`, `_layer_backward`): autograd's per-op
    graph, its saved intermediates and its gradient concatenations replaced by one hand-written backward."""

    @staticmethod
    def forward(ctx, x, lay: _Layout, hs: _HeadShape, eps: tuple, *ws):
        out, saved = _layer_forward(x, lay, hs, eps, ws, keep=True)
        ctx.lay, ctx.hs = lay, hs
        ctx.has = tuple(w is not None for w in ws)
        ctx.save_for_backward(*[w for w in ws if w is not None], *saved)
        return out

    @staticmethod
    def backward(ctx, dout):
        tensors = list(ctx.saved_tensors)
        ws = tuple(tensors.pop(0) if has else None for has in ctx.has)
        dx, dws = _layer_backward(ctx.lay, ctx.hs, ws, tuple(tensors), dout)
        need = ctx.needs_input_grad[4:]
        return (dx, None, None, None, *(dw if n else None for dw, n in zip(dws, need)))


def _layer(x: torch.Tensor, lay: _Layout, hs: _HeadShape, layer) -> torch.Tensor:
    """One decoder layer: through _DecoderLayer when gradients are recorded, else its forward alone."""
    ws, eps = _layer_weights(layer)
    if torch.is_grad_enabled():
        return _DecoderLayer.apply(x, lay, hs, eps, *ws)
    return _layer_forward(x, lay, hs, eps, ws, keep=False)[0]


def _pack(attention_mask: torch.Tensor, keys: torch.Tensor | None, prompt_len: int):
    """Which positions of a padded [N, L] batch are computed: (packed [T] the flat positions computed, in
    order; where [N·L] the packed token each real position reads, -1 at padding). With `keys` ([N, K] one
    row's prompt columns, identity of its prompt), rows whose keys are equal compute their first prompt_len
    columns once, in the first such row: a prompt token attends only to its own prompt's tokens, so its states
    are the same in every row that shares the prompt."""
    N, L = attention_mask.shape
    dev = attention_mask.device
    real = attention_mask != 0
    computed = real
    owner = torch.arange(N, device=dev)                                  # the row computing a row's prompt
    if keys is not None and prompt_len > 0:
        _, group = torch.unique(keys, dim=0, return_inverse=True)
        first = torch.full((int(group.max()) + 1,), N, dtype=torch.long, device=dev)
        first = first.scatter_reduce(0, group, owner, reduce="amin")
        owner = first[group]
        computed = real.clone()
        computed[:, :prompt_len] &= (owner == torch.arange(N, device=dev))[:, None]
    packed = computed.reshape(-1).nonzero().squeeze(1)
    where = torch.full((N * L,), -1, dtype=torch.long, device=dev)
    where[packed] = torch.arange(len(packed), device=dev)
    if keys is not None and prompt_len > 0:                 # a shared prompt token reads its owner's
        mine = where.view(N, L)
        mine[:, :prompt_len] = torch.where(real[:, :prompt_len], mine[owner, :prompt_len], -1)
    return packed, where


# rows are padded in two groups (short, long) when that saves at least this share of attention's work
SPLIT_SAVING = 0.25


def _row_groups(lens: list[int]) -> list[tuple[torch.Tensor, int]]:
    """The rows padded together in attention, as (row indices, slots) groups: all rows at the longest length,
    or, when it saves at least SPLIT_SAVING of attention's work (rows · slots², padding included), the
    shortest rows at their own longest and the rest at theirs (the split that saves most); slots rounded up
    to a multiple of SLOT_ALIGN."""
    order = sorted(range(len(lens)), key=lambda i: (lens[i], i))
    srt = [-(-lens[i] // SLOT_ALIGN) * SLOT_ALIGN for i in order]
    n, full = len(srt), len(srt) * srt[-1] ** 2
    best = min(((k * srt[k - 1] ** 2 + (n - k) * srt[-1] ** 2, k) for k in range(1, n)), default=(full, n))
    if best[0] > (1 - SPLIT_SAVING) * full:
        return [(torch.arange(n), srt[-1])]
    k = best[1]
    return [(torch.tensor(order[:k]), srt[k - 1]), (torch.tensor(order[k:]), srt[-1])]


def hidden_states(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                  select: torch.Tensor, prompt_len: int = 0) -> torch.Tensor:
    """The last hidden states (after the final norm) of the flat positions `select` of a padded batch.

    input_ids, attention_mask, position_ids: [N, L] (any padding; a row's real tokens are those with mask 1,
    attending causally to each other in column order, as HF's forward does); select: [K] indices into the
    N·L flat positions, each a real token -> [K, H], equal to HF's `model.model(...).last_hidden_state`
    at those positions. prompt_len P > 0: rows with equal ids, mask and positions in their first P columns
    (a GRPO group's responses to one prompt) compute those tokens once (`_pack`), their gradients summed over
    the rows that read them. Runs only where `supports(model)`."""
    hs = _head_shape(model)
    body = model.model
    N, L = input_ids.shape
    dev = input_ids.device
    P = min(prompt_len, L)
    keys = (torch.cat([input_ids[:, :P], attention_mask[:, :P].long(), position_ids[:, :P]], 1)
            if P > 0 and N > 1 else None)
    packed, where = _pack(attention_mask, keys, P)
    T = len(packed)
    rank = attention_mask.ne(0).long().cumsum(1) - 1                     # [N, L] a token's place in its row
    lens = (rank[:, -1] + 1).clamp(min=1).tolist()
    groups = _row_groups(lens)
    base = torch.empty(N, dtype=torch.long)                               # each row's first slot
    start = 0
    for rows_g, S in groups:
        base[rows_g] = start + S * torch.arange(len(rows_g))
        start += len(rows_g) * S
    slot = (base.to(dev)[:, None] + rank).reshape(-1)                    # [N·L] each position's slot
    dest = slot.index_select(0, packed)                                  # each computed token's own slot
    real = where >= 0
    gather = torch.full((start,), T, dtype=torch.long, device=dev)
    gather[slot[real]] = where[real]                                     # each slot's token
    shared = int(real.sum()) > T
    gather_out = gather
    if shared:                             # a shared token's output is its own slot's (the first row's)
        gather_out = torch.full_like(gather, T)
        gather_out[dest] = torch.arange(T, device=dev)
    sel = where.index_select(0, select)
    if bool((sel < 0).any()):
        raise ValueError("lean_forward.hidden_states: select names a padding position (attention_mask 0)")
    x = body.embed_tokens(input_ids.reshape(-1).index_select(0, packed))
    cos, sin = body.rotary_emb(x[None], position_ids.reshape(-1).index_select(0, packed)[None])
    sign = torch.ones(hs.d, dtype=x.dtype, device=dev)
    sign[:hs.d // 2] = -1.0
    g = hs.hq // hs.hkv
    rows, start = [], 0
    for rows_g, S in groups:
        causal = torch.ones(S, S, dtype=torch.bool, device=dev).tril()
        bias = torch.zeros(S, S, dtype=x.dtype, device=dev).masked_fill_(~causal, float("-inf"))
        span = slice(start, start + len(rows_g) * S)
        rows.append(_Rows(len(rows_g), S, gather[span], gather_out[span], bias.repeat_interleave(g, 0),
                          _block_split(S)))
        start += len(rows_g) * S
    lay = _Layout(tuple(rows), dest, gather, cos[0][:, None].to(x.dtype),
                  (sin[0] * sign)[:, None].to(x.dtype), shared)
    from torch.utils.checkpoint import checkpoint
    for layer in body.layers:
        if getattr(layer, "gradient_checkpointing", False) and torch.is_grad_enabled():
            x = checkpoint(_layer, x, lay, hs, layer, use_reentrant=False)
        else:
            x = _layer(x, lay, hs, layer)
    return _rms(x.index_select(0, sel), body.norm)
