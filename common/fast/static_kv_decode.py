"""Incremental decoding with a preallocated (static) KV cache for the Llama-family layouts (Qwen2, Qwen3,
Llama): the HF engine's fast decode stepper (common/rollout/hf.py; `compute.fast`, common/fast/__init__.py).

`StaticStepper` has the interface of the engine's generic `HFStepper` (`prefill` the left-padded prompts,
`expand` the cache to one copy per response, `decode` one token per row, `keep` the rows still sampling) and
computes the same decoder layers from the model's own weights, re-laid-out for decoding: a decode step of the
suite's tiny models costs per operation more than per row, so it is built from few operations. With the
compiled kernel (decode_kernel.py, `compute.fast: native`) everything between the weight products of a CPU
float32 step runs in C, else in torch operations. Logits agree with `forward` to float rounding
(tests/integration/test_rollout.py, test_decode_kernel.py); `python -m bench.decode` times the variants.
`StaticStepper.supports(model)` says whether a model has the layout this file knows. No gradients: sampling
runs under `torch.inference_mode`.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from common.fast import decode_kernel
from common.fast.lean_forward import layout_problem


class StaticStepper:
    """Next-token logits from the model's own weights, re-laid-out once per `generate` call for decoding.

    A decoder layer takes four weight products where the model's forward takes seven: [q; k; v] and [gate; up]
    are fused, each with the RMSNorm weight before it folded in (F.rms_norm without a weight, then the
    product). RoPE's rotate_half is one roll of the heads' halves against a signed sin table, over all heads
    (cos 1 and sin 0 on the value heads); addmm carries the residual additions.
    The cache is preallocated for the whole call: keys transposed [layers, rows, kv heads, head_dim, slots]
    (so q·Kᵀ reads them in place), values [layers, rows, kv heads, slots, head_dim]; finished rows are
    compacted away in place. A decode step reads at least MIN_KEYS slots (those not yet written masked):
    below 400 multiply-adds a matrix torch's CPU batched product runs a scalar loop (records/fast_paths.md).
    The fused matrices are a second copy of the weights while a call runs (at the paper's scale the vLLM
    engine samples instead).

    kernel: decode through the compiled kernel (`kernel_problem(model)` must be None)."""

    def __init__(self, model, workspace: dict | None = None, kernel: bool = False):
        self.model = model
        # reusable CPU cache storage across calls (the engine's): a fresh one is page-faulted in every call
        self.workspace = {} if workspace is None else workspace
        self.body = model.model
        self.layers = list(self.body.layers)
        a0 = self.layers[0].self_attn
        self.head_dim = d = a0.head_dim
        self.q_heads, self.kv_heads = a0.q_proj.out_features // d, a0.k_proj.out_features // d
        self.heads = self.q_heads + 2 * self.kv_heads             # the q, k and v heads of one position
        # Qwen3: per-head RMSNorm before the rotation
        self.qk_norm = getattr(a0, "q_norm", None) is not None
        self.scale = a0.scaling
        act = getattr(model.config, "hidden_act", None)
        self.act = F.silu if act == "silu" else self.layers[0].mlp.act_fn
        # the compiled decode step (decode_kernel.py); None: torch operations
        if kernel and kernel_problem(model) is not None:
            raise ValueError(f"the decode kernel cannot decode this model: {kernel_problem(model)}")
        self.kernel = decode_kernel.kernel() if kernel else None

    @staticmethod
    def supports(model) -> bool:
        """True for Qwen2 / Qwen3 / Llama causal LMs with full attention in every layer and a static RoPE
        (lean_forward.layout_problem)."""
        return layout_problem(model) is None

    # ------------------------------------------------------------------------------------ fused weights
    def _prepare(self) -> None:
        """The fused, transposed weight matrices of every layer (weights do not change while sampling)."""
        self.fused = []
        for layer in self.layers:
            a, mlp = layer.self_attn, layer.mlp
            projs = [a.q_proj, a.k_proj, a.v_proj]
            w = torch.cat([p.weight for p in projs])
            b = torch.cat([p.bias for p in projs]) if a.q_proj.bias is not None else None
            gu_bias = (None if mlp.gate_proj.bias is None
                       else torch.cat([mlp.gate_proj.bias, mlp.up_proj.bias]))
            self.fused.append(_FusedLayer(
                w_in=_fold_norm(w, layer.input_layernorm).t(), b_in=b,
                eps_in=layer.input_layernorm.variance_epsilon, w_o=a.o_proj.weight.t(), b_o=a.o_proj.bias,
                w_gate_up=_fold_norm(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
                                     layer.post_attention_layernorm).t(),
                b_gate_up=gu_bias, eps_post=layer.post_attention_layernorm.variance_epsilon,
                w_down=mlp.down_proj.weight.t(), b_down=mlp.down_proj.bias))
        # the kernel's per-head q / k norm arguments of each layer: weight pointers and eps (Qwen3 gives q and
        # k one eps), or none
        self._qk_norms = [(_f32_ptr(layer.self_attn.q_norm.weight), _f32_ptr(layer.self_attn.k_norm.weight),
                           layer.self_attn.q_norm.variance_epsilon) if self.qk_norm else (None, None, 0.0)
                          for layer in self.layers] if self.kernel is not None else []
        lm = self.model.lm_head
        self.w_lm, self.b_lm = _fold_norm(lm.weight, self.body.norm).t(), lm.bias
        self.eps_final = self.body.norm.variance_epsilon

    # ------------------------------------------------------------------------------------------ layers
    def _qkv(self, i: int, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Normalized, projected and rotated heads of rows x [M, H]: -> [M, q + k + v heads, head_dim].
        cos, sin: [M, heads, head_dim] of each row's position (1 and 0 on the value heads; sin signed:
        rotate_half(y) · sin = swap(y) · signed sin, the halves swapped by one roll)."""
        f = self.fused[i]
        xn = F.rms_norm(x, (x.shape[1],), None, f.eps_in)
        y = _product(xn, f.w_in, f.b_in)
        m, h, d = x.shape[0], self.heads, self.head_dim
        y = y.view(m, h, d)
        if self.qk_norm:                                    # Qwen3: per-head RMSNorm of q and k, before RoPE
            attn, hq, hkv = self.layers[i].self_attn, self.q_heads, self.kv_heads
            y = torch.cat([_rms_norm(attn.q_norm, y[:, :hq]), _rms_norm(attn.k_norm, y[:, hq:hq + hkv]),
                           y[:, hq + hkv:]], 1)
        return torch.addcmul(y * cos, torch.roll(y, d // 2, -1), sin)

    def _mlp(self, i: int, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """The rest of layer i after attention: x [M, H] plus the o-projection of o [M, q heads · head_dim],
        then plus the MLP of that."""
        f = self.fused[i]
        x = torch.addmm(x, o, f.w_o) if f.b_o is None else torch.addmm(x, o, f.w_o).add_(f.b_o)
        xn = F.rms_norm(x, (x.shape[1],), None, f.eps_post)
        gu = _product(xn, f.w_gate_up, f.b_gate_up)
        inter = gu.shape[1] // 2
        h = self.act(gu[:, :inter]).mul_(gu[:, inter:])
        return torch.addmm(x, h, f.w_down) if f.b_down is None else torch.addmm(x, h, f.w_down).add_(f.b_down)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return _product(F.rms_norm(x, (x.shape[1],), None, self.eps_final), self.w_lm, self.b_lm)

    def _buffer(self, name: str, like: torch.Tensor, shape: tuple) -> torch.Tensor:
        """An uninitialised tensor of `shape` (like's dtype and device) on the workspace's storage `name`,
        grown when too small. Only one live tensor per name: the prefill's cache ("*_pre") is read while the
        expanded one is written. CPU only: a GPU's caching allocator reuses memory already, and a cache kept
        between calls would hold GPU memory the trainer needs."""
        if like.device.type != "cpu":
            return like.new_zeros(shape)
        need = 1
        for x in shape:
            need *= x
        key = (name, like.dtype, like.device)
        flat = self.workspace.get(key)
        if flat is None or flat.numel() < need:
            flat = self.workspace[key] = like.new_zeros(need)
        return flat[:need].view(shape)

    # ---------------------------------------------------------------------------------------- stepping
    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor,
                max_new_tokens: int) -> torch.Tensor:
        """ids, mask, pos: [N, P] (left-padded) -> logits of the next token [N, V]."""
        n, plen = ids.shape
        dev = ids.device
        self._prepare()
        x = self.body.embed_tokens(ids)
        size = plen + max_new_tokens
        hq, hkv, d = self.q_heads, self.kv_heads, self.head_dim
        # keys transposed ([.., head_dim, slots]: a decode step's q·Kᵀ then reads them in place), values not;
        # slots not written yet hold finite values (zeros, or an earlier call's), masked where read
        self.keys_t = self._buffer("keys_pre", x, (len(self.layers), n, hkv, d, size))
        self.values = self._buffer("values_pre", x, (len(self.layers), n, hkv, size, d))
        # cos and signed sin (rotate_half(y) = swap(y) · [-1 .. -1, 1 .. 1]) of every position for every head
        # (1 and 0 on the value heads: the rotation leaves v alone)
        cos, sin = self.body.rotary_emb(x, torch.arange(size, device=dev)[None])
        sign = torch.ones(d, dtype=x.dtype, device=dev)
        sign[:d // 2] = -1.0
        self.cs = x.new_zeros(size, 2, self.heads, d)
        self.cs[:, 0] = 1.0
        self.cs[:, 0, :hq + hkv] = cos[0, :, None]
        self.cs[:, 1, :hq + hkv] = (sin[0] * sign)[:, None]
        # keys a row may attend to: its real prompt tokens, then every generated token (slots fill in order);
        # laid out [N, q heads, slots] so that a decode step's [N·kv heads, q heads per kv head, S] bias
        # is a view
        key_ok = torch.cat([mask.bool(), torch.ones(n, max_new_tokens, dtype=torch.bool, device=dev)], 1)
        self.key_bias = (torch.zeros(n, hq, size, dtype=x.dtype, device=dev)
                         .masked_fill_(~key_ok[:, None], float("-inf")))
        self.plen = self.filled = plen
        self._scratch = None              # the native decode's buffers, allocated at its first step
        causal = torch.ones(plen, plen, dtype=torch.bool, device=dev).tril()
        # a padding position attends to itself only, so its (unused) output is finite, never NaN
        attend = ((causal & key_ok[:, None, :plen]) | torch.eye(plen, dtype=torch.bool, device=dev))[:, None]
        cs = self.cs[pos.reshape(-1)]
        cos, sin = cs[:, 0], cs[:, 1]
        x = x.reshape(n * plen, -1)
        for i in range(len(self.layers)):
            r = self._qkv(i, x, cos, sin)
            kv = r[:, hq:].view(n, plen, 2, hkv, d)
            self.keys_t[i, ..., :plen] = kv[:, :, 0].permute(0, 2, 3, 1)
            self.values[i, :, :, :plen] = kv[:, :, 1].transpose(1, 2)
            q = r[:, :hq].view(n, plen, hq, d).transpose(1, 2)
            o = F.scaled_dot_product_attention(q, self.keys_t[i, ..., :plen].transpose(-1, -2),
                                               self.values[i, :, :, :plen], attn_mask=attend,
                                               scale=self.scale, enable_gqa=hq != hkv)
            x = self._mlp(i, x, o.transpose(1, 2).reshape(n * plen, hq * d))
        return self._logits(x.view(n, plen, -1)[:, -1])

    def decode(self, tok: torch.Tensor, pos: torch.Tensor, t: int) -> torch.Tensor:
        """tok, pos: [N] (the t-th new token of each row, t >= 0) -> logits of the token after it [N, V]."""
        if self.kernel is not None:
            return self._decode_native(tok, pos, t)
        n = tok.shape[0]
        hq, hkv, d = self.q_heads, self.kv_heads, self.head_dim
        # query heads per kv head: query head h reads kv head h // g
        g = hq // hkv
        end = self.plen + t + 1
        # keys read: at least MIN_KEYS (the slots after `end` masked): torch's CPU batched product takes a
        # scalar loop below 400 multiply-adds a matrix (16 keys x head_dim 16 here; records/fast_paths.md)
        read = min(max(end, MIN_KEYS), self.keys_t.shape[-1])
        x = F.embedding(tok, self.body.embed_tokens.weight)
        cs = self.cs[pos]
        cos, sin = cs[:, 0], cs[:, 1]
        bias = self.key_bias[:, :, :read]
        if read > end:
            bias = bias.clone()
            bias[:, :, end:] = float("-inf")
        bias = bias.view(n * hkv, g, read)
        # [N, kv heads, d, slots], [.., slots, d]
        for i, (keys_t, values) in enumerate(zip(self.keys_t, self.values)):
            r = self._qkv(i, x, cos, sin)
            keys_t.select(3, end - 1).copy_(r.narrow(1, hq, hkv))
            values.select(2, end - 1).copy_(r.narrow(1, hq + hkv, hkv))
            # softmax(q·Kᵀ·scale + bias)·V for the one new query: two batched products over (row, kv head) on
            # views of the cache (faster on CPU at these sizes than scaled_dot_product_attention's kernel;
            # equal to ~1e-6)
            scores = torch.baddbmm(bias, r.narrow(1, 0, hq).reshape(n * hkv, g, d),
                                   keys_t.narrow(3, 0, read).view(n * hkv, d, read), alpha=self.scale)
            o = torch.bmm(scores.softmax(-1), values.narrow(2, 0, read).view(n * hkv, read, d))
            x = self._mlp(i, x, o.view(n, hq * d))
        self.filled = end
        return self._logits(x)

    def _decode_native(self, tok: torch.Tensor, pos: torch.Tensor, t: int) -> torch.Tensor:
        """`decode` with everything between the weight products in the compiled kernel (decode_kernel.py): per
        layer four products (torch) and four kernel calls (two norms, attention, silu · up), into buffers
        allocated at the first step."""
        k, n = self.kernel, tok.shape[0]
        hq, hkv, d = self.q_heads, self.kv_heads, self.head_dim
        end = self.plen + t + 1
        x = F.embedding(tok, self.body.embed_tokens.weight)
        hid = x.shape[1]
        if self._scratch is None or self._scratch[0].shape[0] < n:
            inter = self.fused[0].w_down.shape[0]
            self._scratch = [x.new_empty(n, c) for c in (hid, self.heads * d, hq * d, 2 * inter, inter)]
            self._work = x.new_empty(hq * d + 2 * d + self.keys_t.shape[-1])
        xn, y, o, gu, h = (b[:n] for b in self._scratch)
        pos = pos.contiguous()
        keys_t, values, bias = self.keys_t, self.values, self.key_bias
        slots = keys_t.shape[-1]
        # the layouts the kernel assumes (keep() and expand() leave them so)
        assert keys_t.stride()[1:] == (hkv * d * slots, d * slots, slots, 1) and bias.is_contiguous()
        assert values.stride()[1:] == (hkv * slots * d, slots * d, d, 1) and pos.dtype == torch.int64
        # each layer's cache: its address from the first layer's, a layer's stride apart (in bytes: float32)
        kp, vp, ks, vs = keys_t.data_ptr(), values.data_ptr(), keys_t.stride(0) * 4, values.stride(0) * 4
        head = (y.data_ptr(), self.cs.data_ptr(), pos.data_ptr())
        tail = (bias.data_ptr(), o.data_ptr(), self._work.data_ptr())
        for i, f in enumerate(self.fused):
            k.rms_rows(n, hid, x.data_ptr(), xn.data_ptr(), f.eps_in)
            _product(xn, f.w_in, f.b_in, out=y)
            k.attend(n, hq, hkv, d, slots, end, self.scale, *head, *self._qk_norms[i], kp + i * ks,
                     vp + i * vs, *tail)
            x.addmm_(o, f.w_o)
            if f.b_o is not None:
                x.add_(f.b_o)
            k.rms_rows(n, hid, x.data_ptr(), xn.data_ptr(), f.eps_post)
            _product(xn, f.w_gate_up, f.b_gate_up, out=gu)
            k.silu_mul(n, h.shape[1], gu.data_ptr(), h.data_ptr())
            x.addmm_(h, f.w_down)
            if f.b_down is not None:
                x.add_(f.b_down)
        self.filled = end
        k.rms_rows(n, hid, x.data_ptr(), xn.data_ptr(), self.eps_final)
        return _product(xn, self.w_lm, self.b_lm)

    def keep(self, rows: torch.Tensor) -> None:
        """Drop every row not in `rows` ([K] indices into the current rows) from the cache and the mask."""
        f, kept = self.filled, len(rows)
        # compact in place, every layer at once, copying only the filled slots (rows are ascending)
        self.keys_t[:, :kept, ..., :f] = self.keys_t[:, rows, ..., :f]
        self.values[:, :kept, :, :f] = self.values[:, rows, :, :f]
        self.keys_t, self.values = self.keys_t[:, :kept], self.values[:, :kept]
        self.key_bias = self.key_bias[rows]

    def expand(self, rows: torch.Tensor) -> None:
        """Row j of the cache and the mask becomes current row rows[j] ([K] indices, repeats allowed): after a
        prefill of each distinct prompt, one copy per response."""
        f, k = self.filled, len(rows)
        keys_t = self._buffer("keys", self.keys_t, (self.keys_t.shape[0], k) + self.keys_t.shape[2:])
        values = self._buffer("values", self.values, (self.values.shape[0], k) + self.values.shape[2:])
        keys_t[..., :f] = self.keys_t[:, rows, ..., :f]        # only the filled slots
        values[:, :, :, :f] = self.values[:, rows, :, :f]
        self.keys_t, self.values = keys_t, values
        self.key_bias = self.key_bias[rows]


# a decode step reads at least this many key slots (StaticStepper.decode)
MIN_KEYS = 25


class _FusedLayer(NamedTuple):
    w_in: torch.Tensor               # [H, (q + k + v heads) · head_dim]: [q; k; v]ᵀ
    b_in: torch.Tensor | None
    eps_in: float
    w_o: torch.Tensor                # [q heads · head_dim, H]
    b_o: torch.Tensor | None
    w_gate_up: torch.Tensor          # [H, 2 · intermediate]
    b_gate_up: torch.Tensor | None
    eps_post: float
    w_down: torch.Tensor             # [intermediate, H]
    b_down: torch.Tensor | None


def _fold_norm(w: torch.Tensor, norm) -> torch.Tensor:
    """W · diag(g): a linear layer after an RMSNorm with weight g, with g moved into the matrix."""
    return (w.float() * norm.weight.float()).to(w.dtype)


def _f32_ptr(w: torch.Tensor) -> int:
    """The address of a contiguous float32 tensor, for the kernel."""
    assert w.dtype == torch.float32 and w.is_contiguous(), (w.dtype, w.stride())
    return w.data_ptr()


def _product(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, out: torch.Tensor | None = None):
    """x · w (+ b): [M, K] x [K, N] -> [M, N], into `out` when given."""
    return torch.mm(x, w, out=out) if b is None else torch.addmm(b, x, w, out=out)


def _rms_norm(norm, x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, norm.weight.shape, norm.weight, norm.variance_epsilon)


def kernel_problem(model) -> str | None:
    """Why the compiled kernel cannot decode `model` (None: it can): the static layout, on the CPU, in
    float32, with SiLU MLPs."""
    if layout_problem(model) is not None:
        return layout_problem(model)
    p = next(model.parameters())
    if p.device.type != "cpu" or p.dtype != torch.float32:
        return f"its weights are {p.dtype} on {p.device.type} (the kernel decodes CPU float32)"
    act = getattr(model.config, "hidden_act", None)
    return None if act == "silu" else f"hidden_act {act!r} (the kernel computes silu)"
