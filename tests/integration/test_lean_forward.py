"""The lean forward (common.fast.lean_forward) against HF's own forward: the same log-probs, entropies and
gradients on every layout it claims (Qwen2 with and without GQA, Qwen3's q/k norms and explicit head_dim,
Llama with one kv head or with biases, an untied lm_head, activation checkpointing), and HF's forward wherever
it does not or where the run's compute.fast does not choose it."""
import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

from armor.policy import forward_logprobs, make_token_batch
from common.fast import lean_forward

SMALL = dict(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=64, attn_implementation="sdpa")


def _model(cfg_cls, **kw):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg_cls(**{**SMALL, **kw}))
    with torch.no_grad():   # HF initialises biases and norm weights to constants: make every one count
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model.train()


MODELS = {
    "qwen2": lambda: _model(Qwen2Config, num_key_value_heads=4),
    "qwen2-gqa-untied": lambda: _model(Qwen2Config, num_key_value_heads=2, tie_word_embeddings=False),
    "qwen3": lambda: _model(Qwen3Config, num_key_value_heads=2, head_dim=12),   # q/k norms, head_dim ≠ H/h
    "llama": lambda: _model(LlamaConfig, num_key_value_heads=1),
    "llama-bias": lambda: _model(LlamaConfig, num_key_value_heads=2, attention_bias=True, mlp_bias=True),
}


def _batch(vocab=50):
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (5, 9, 2, 7)]
    responses = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (11, 4, 8, 1)]
    return make_token_batch(prompts, responses, pad_id=0)


def _ragged_batch(vocab=50):
    """Rows of 16, 29, 3 and 9 tokens: attention in two groups of rows."""
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (5, 9, 2, 7)]
    responses = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (11, 20, 1, 2)]
    return make_token_batch(prompts, responses, pad_id=0)


def _even_batch(vocab=50):
    """Rows of near-equal length (17-19 tokens): attention in one group of rows, in two causal blocks."""
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (9, 8, 10)]
    responses = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (9, 10, 8)]
    return make_token_batch(prompts, responses, pad_id=0)


def _run(model, batch, fast: bool, monkeypatch, chunk=None):
    model.zero_grad(set_to_none=True)
    logp, ent = forward_logprobs(model, batch, temperature=0.7, with_entropy=True, chunk_tokens=chunk,
                                 lean=fast)
    w = torch.linspace(-1, 1, logp.numel()).view_as(logp)      # every token weighted differently
    (logp * w).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp.detach(), ent * batch.response_mask, grads


def _assert_same(a, b, grad_tol=2e-5):
    """Log-probs and entropies within 2e-5, each gradient within 2e-5 of its largest entry: float32 rounding
    (against float64, HF's own gradients err by up to 7.8e-6 on llama-bias, the lean forward's by 1.1e-5;
    every other layout ~1e-6)."""
    torch.testing.assert_close(a[0], b[0], rtol=0, atol=2e-5)
    torch.testing.assert_close(a[1], b[1], rtol=0, atol=2e-5)
    assert set(a[2]) == set(b[2])
    for n in a[2]:
        err = float((a[2][n] - b[2][n]).abs().max() / b[2][n].abs().max().clamp(min=1e-12))
        assert err < grad_tol, (n, err)


def test_rows_of_similar_length_are_padded_together():
    """_row_groups by hand, slots rounded up to 8: lengths 5, 17, 2, 8 (8, 24, 8, 8 slots) cost 4·24² = 2304
    padded together; rows {2, 0, 3} at 8 and {1} at 24 cost 3·8² + 24² = 768 (the best split, ≥ 25% less):
    two groups. 9, 17, 20 (16, 24, 24): 1728 against 1408 at best (19% less): one group."""
    groups = lean_forward._row_groups([5, 17, 2, 8])
    assert [(g.tolist(), s) for g, s in groups] == [([2, 0, 3], 8), ([1], 24)]
    assert [(g.tolist(), s) for g, s in lean_forward._row_groups([9, 17, 20])] == [([0, 1, 2], 24)]
    # the causal blocks meet near S / 2 on a multiple of 8; short rows are one block
    assert [lean_forward._block_split(S) for S in (8, 16, 24, 48, 56)] == [0, 8, 16, 24, 32]


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("chunk", [None, 5])
@pytest.mark.parametrize("layout", ["ragged", "even"])
def test_lean_forward_equals_hf(name, chunk, layout, monkeypatch):
    """Two groups of rows in attention (ragged lengths), or one in two causal blocks (even lengths)."""
    model = MODELS[name]()
    assert lean_forward.supports(model)
    calls = []
    real = lean_forward.hidden_states
    monkeypatch.setattr(lean_forward, "hidden_states", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    batch = _ragged_batch() if layout == "ragged" else _even_batch()
    lens = batch.attention_mask.sum(-1).tolist()
    assert len(lean_forward._row_groups(lens)) == (2 if layout == "ragged" else 1) and min(lens) >= (
        0 if layout == "ragged" else lean_forward.MIN_BLOCKED_SLOTS)
    fast = _run(model, batch, True, monkeypatch, chunk)
    assert calls, "the lean forward was not taken"
    n = len(calls)
    hf = _run(model, batch, False, monkeypatch, chunk)
    assert len(calls) == n                                      # HF's forward when switched off
    _assert_same(fast, hf)
    assert float(fast[0].abs().sum()) > 0 and bool((fast[0][batch.response_mask == 0] == 0).all())


def _group_batch(vocab=50):
    """Two prompts with 3 responses each (GRPO groups: equal prompt columns), one with a single response."""
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (6, 3, 8)]
    rows = [0, 0, 0, 1, 2, 1, 1]
    responses = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (5, 9, 1, 4, 7, 2, 6)]
    return make_token_batch([prompts[i] for i in rows], responses, pad_id=0)


@pytest.mark.parametrize("name", ["qwen2-gqa-untied", "qwen3", "llama-bias"])
def test_shared_prompts_are_computed_once_with_the_same_result(name, monkeypatch):
    """Rows answering one prompt compute its tokens once: 6 + 3 + 8 prompt tokens instead of 3·6 + 3·3 + 8,
    with HF's log-probs, entropies and gradients (the shared tokens' gradients summed over their rows)."""
    model = MODELS[name]()
    batch = _group_batch()
    computed = []
    real = lean_forward._pack
    def spy(*a):
        out = real(*a)
        computed.append(len(out[0]))
        return out
    monkeypatch.setattr(lean_forward, "_pack", spy)
    fast = _run(model, batch, True, monkeypatch)
    responses = int(batch.response_mask.sum())
    assert computed == [6 + 3 + 8 + responses]
    _assert_same(fast, _run(model, batch, False, monkeypatch))
    packed, where = real(batch.attention_mask, None, 0)                 # no keys: every real token computed
    assert len(packed) == int(batch.attention_mask.sum()) and int((where >= 0).sum()) == len(packed)


def test_activation_checkpointing_gives_the_same(monkeypatch):
    from common.models import enable_activation_checkpointing
    model = MODELS["qwen2-gqa-untied"]()
    batch = _batch()
    plain = _run(model, batch, True, monkeypatch)
    enable_activation_checkpointing(model)
    assert all(getattr(layer, "gradient_checkpointing", False) for layer in model.model.layers)
    _assert_same(_run(model, batch, True, monkeypatch), plain)


def test_bfloat16_agrees_with_hf_to_its_rounding(monkeypatch):
    model = MODELS["qwen3"]().to(torch.bfloat16).eval()
    batch = _batch()
    with torch.no_grad():
        fast = forward_logprobs(model, batch, lean=True)[0]
        hf = forward_logprobs(model, batch)[0]
    assert fast.dtype == torch.float32
    torch.testing.assert_close(fast, hf, rtol=0, atol=0.1)


def test_unsupported_models_fall_back_to_hf(monkeypatch):
    sliding = _model(Qwen2Config, num_key_value_heads=4, use_sliding_window=True, sliding_window=4,
                     max_window_layers=0)
    assert not lean_forward.supports(sliding)
    adapted = MODELS["qwen2"]()

    class LoRALike(torch.nn.Linear):       # an adapter's projection: not a plain Linear
        pass
    q = adapted.model.layers[0].self_attn.q_proj
    adapted.model.layers[0].self_attn.q_proj = LoRALike(q.in_features, q.out_features)
    assert not lean_forward.supports(adapted)
    dropout = _model(Qwen2Config, num_key_value_heads=4, attention_dropout=0.1)
    assert not lean_forward.supports(dropout) and lean_forward.supports(dropout.eval())
    # without `lean` (compute.fast off, or auto on a GPU) a supported model takes HF's forward too
    model = MODELS["qwen2"]()
    assert lean_forward.supports(model)
    calls = []
    monkeypatch.setattr(lean_forward, "hidden_states", lambda *a, **k: calls.append(1))
    forward_logprobs(model, _batch())
    assert calls == []
    monkeypatch.undo()
    # a fallback model still computes its log-probs (HF's forward)
    logp, _ = forward_logprobs(sliding, _batch(), lean=True)
    assert logp.shape == (4, 11)


def test_selecting_a_padding_position_is_refused():
    model = MODELS["qwen2"]()
    b = _batch()
    pad = int((b.attention_mask.reshape(-1) == 0).nonzero()[0])
    with pytest.raises(ValueError, match="padding position"):
        lean_forward.hidden_states(model, b.input_ids, b.attention_mask, b.position_ids, torch.tensor([pad]))


def test_attention_backward_matches_autograd():
    """_Attention's hand-written backward (one block and causal blocks, GQA-stacked queries) against autograd
    of softmax(scale·QKᵀ + bias)·V (float64), and its forward against the formula on a 1 x 2 x 1 case by hand:
    scores 0.5·[1·1, 1·3] = [0.5, 1.5] → weights
    [1/(1+e), e/(1+e)] over values [2, 4]."""
    g = torch.Generator().manual_seed(0)
    S = 5
    causal = torch.zeros(S, S, dtype=torch.float64).masked_fill_(~torch.ones(S, S, dtype=torch.bool).tril(),
                                                                 float("-inf"))
    for heads in (1, 2):          # query heads per kv head, stacked position-major
        q = torch.randn(3, S * heads, 2, dtype=torch.float64, generator=g, requires_grad=True)
        k, v = (torch.randn(3, S, 2, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(2))
        bias = causal.repeat_interleave(heads, 0)
        ref = torch.softmax(0.7 * q @ k.transpose(1, 2) + bias, -1) @ v
        for block in (0, 2, 3):   # one block, then causal blocks split after 2 and 3 positions
            fn = lambda a, b, c: lean_forward._Attention.apply(  # noqa: E731
                a, b, c, bias, 0.7, block, heads)
            assert torch.autograd.gradcheck(fn, (q, k, v))
            torch.testing.assert_close(fn(q, k, v), ref)
    one = lean_forward._Attention.apply(torch.tensor([[[1.0]]]), torch.tensor([[[1.0], [3.0]]]),
                                     torch.tensor([[[2.0], [4.0]]]), torch.zeros(1, 2), 0.5, 0, 1)
    e = torch.e
    assert abs(float(one) - (2 / (1 + e) + 4 * e / (1 + e))) < 1e-6
