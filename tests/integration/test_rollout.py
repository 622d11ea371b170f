"""The HF rollout engine: the static-KV-cache stepper must give the model's own logits;
weight sync is versioned."""
import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

from common.fast import OFF, choose
from common.fast.static_kv_decode import StaticStepper
from common.rollout import SamplingParams
from common.rollout.hf import HFEngine, HFStepper, cache_arg, make_stepper

AUTO = choose("auto", "cpu", "float32")          # the static decoder with torch operations

SMALL = dict(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=64, attn_implementation="sdpa")


def _model(cfg_cls, **kw):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg_cls(**{**SMALL, **kw})).eval()
    with torch.no_grad():   # HF initialises biases and norm weights to constants: make every one count
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


MODELS = {
    "qwen2": lambda: _model(Qwen2Config, num_key_value_heads=4),
    "qwen2-gqa": lambda: _model(Qwen2Config, num_key_value_heads=2),      # 2 query heads per kv head
    "qwen3": lambda: _model(Qwen3Config, num_key_value_heads=2, head_dim=8),   # per-head q/k RMSNorm
    "llama": lambda: _model(LlamaConfig, num_key_value_heads=1),         # no q/k/v bias, one kv head
    "llama-bias": lambda: _model(LlamaConfig, num_key_value_heads=2, attention_bias=True, mlp_bias=True),
}


def _left_pad(prompts, pad=0):
    plen = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (plen - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (plen - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


@pytest.fixture(params=["native", "torch"])
def decode_path(request):
    """The static stepper's two decode paths: the compiled kernel (common/fast/decode_kernel.py; a C
    compiler is needed), torch operations."""
    return request.param


@pytest.mark.parametrize("name", sorted(MODELS))
def test_static_stepper_gives_the_models_logits(name, decode_path):
    """Prefill + 5 decode steps on left-padded prompts, one row dropped midway,
    against a full forward pass."""
    model = MODELS[name]()
    assert StaticStepper.supports(model)
    kernel = decode_path == "native"
    assert (StaticStepper(model, kernel=kernel).kernel is not None) == kernel
    prompts = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15, 16]]
    ids, mask, pos = _left_pad(prompts)
    seqs = [list(p) for p in prompts]
    rows = list(range(len(prompts)))
    with torch.inference_mode():
        st = StaticStepper(model, kernel=kernel)
        logits = st.prefill(ids, mask, pos, max_new_tokens=6)
        nxt = pos[:, -1] + 1
        for t in range(6):
            for j, r in enumerate(rows):   # the model's own forward on the unpadded sequence so far
                full = model(input_ids=torch.tensor([seqs[r]])).logits[0, -1]
                torch.testing.assert_close(logits[j], full, atol=2e-5, rtol=1e-4)
            if t == 5:
                break
            tok = logits.argmax(-1)
            for j, r in enumerate(rows):
                seqs[r].append(int(tok[j]))
            if t == 2:                    # the engine drops finished rows: keep rows 0 and 2
                keep = torch.tensor([0, 2])
                st.keep(keep)
                rows, tok, nxt = [rows[0], rows[2]], tok[keep], nxt[keep]
            logits = st.decode(tok, nxt, t)
            nxt = nxt + 1


@pytest.mark.parametrize("static", [True, False])
@pytest.mark.parametrize("name", ["qwen2-gqa", "qwen3"])
def test_prefill_once_then_expand_gives_each_rows_logits(name, static, decode_path):
    """The engine prefills each distinct prompt once and copies its cache to the prompt's responses: after
    expand([0, 0, 1, 2, 2, 2]) and decoding different tokens per copy, every row has its own sequence's
    logits."""
    model = MODELS[name]()
    prompts = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15, 16]]
    ids, mask, pos = _left_pad(prompts)
    rows = [0, 0, 1, 2, 2, 2]
    with torch.inference_mode():
        fast = choose("native" if decode_path == "native" else "auto", "cpu", "float32") if static else OFF
        st = make_stepper(model, fast)
        st.prefill(ids, mask, pos, max_new_tokens=4)
        st.expand(torch.tensor(rows))
        nxt = pos[rows, -1] + 1
        seqs = [list(prompts[r]) for r in rows]
        for t in range(3):
            tok = torch.tensor([(7 * j + 3 * t) % 50 for j in range(len(rows))])   # a different token per row
            for j in range(len(rows)):
                seqs[j].append(int(tok[j]))
            logits = st.decode(tok, nxt, t)
            nxt = nxt + 1
            for j in range(len(rows)):
                full = model(input_ids=torch.tensor([seqs[j]])).logits[0, -1]
                torch.testing.assert_close(logits[j], full, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("name", ["qwen2-gqa", "qwen3", "llama-bias"])
def test_static_stepper_runs_in_bfloat16(name):
    """The GPU dtype on the CPU: norms in float32 as HF computes them, everything else in bfloat16; logits
    agree with the bfloat16 forward to bfloat16 rounding, and a decode step keeps the dtype."""
    model = MODELS[name]().to(torch.bfloat16)
    ids, mask, pos = _left_pad([[5, 6, 7, 8], [9, 10]])
    with torch.inference_mode():
        st = StaticStepper(model)
        logits = st.prefill(ids, mask, pos, max_new_tokens=2)
        assert logits.dtype == torch.bfloat16
        for j, p in enumerate([[5, 6, 7, 8], [9, 10]]):
            full = model(input_ids=torch.tensor([p])).logits[0, -1]
            torch.testing.assert_close(logits[j].float(), full.float(), atol=2e-2, rtol=2e-2)
        assert st.decode(logits.argmax(-1), pos[:, -1] + 1, 0).dtype == torch.bfloat16


def test_unsupported_layouts_fall_back_to_the_generic_stepper():
    sliding = _model(Qwen2Config, num_key_value_heads=4, use_sliding_window=True, sliding_window=4,
                     max_window_layers=0)
    assert not StaticStepper.supports(sliding)
    assert isinstance(make_stepper(sliding, AUTO), HFStepper)
    assert isinstance(make_stepper(MODELS["qwen2"](), OFF), HFStepper)
    assert isinstance(make_stepper(MODELS["qwen2"](), AUTO), StaticStepper)


class _Wrapper(torch.nn.Module):   # torch.compile / DDP style: forward(*args, **kwargs) around `module`
    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


def test_generic_stepper_passes_the_cache_by_the_name_forward_takes():
    """`cache` (transformers >= 5.24) or `past_key_values` (before): a wrong name lands in forward's **kwargs
    and the model silently runs without a cache. Read through a wrapper too; a cache left empty raises."""
    model = MODELS["qwen2"]()
    ids, mask, pos = _left_pad([[5, 6, 7], [8, 9]])
    with torch.inference_mode():
        for m in (model, _Wrapper(model)):
            st = HFStepper(m)
            assert list(st.cache_kw) == [cache_arg(model)]
            st.prefill(ids, mask, pos, max_new_tokens=2)
            assert st.cache.get_seq_length() == ids.shape[1]
        st = HFStepper(model)
        st.cache_kw = {"not_the_cache": st.cache}
        with pytest.raises(RuntimeError, match="did not fill the KV cache"):
            st.prefill(ids, mask, pos, max_new_tokens=2)


class _Tok:
    eos_token_id = 3
    pad_token_id = 0

    def batch_decode(self, ids, skip_special_tokens=True):
        return [" ".join(map(str, r)) for r in ids]


def test_engine_samples_the_same_with_either_decoder():
    """Same seed, same weights: the static and the generic decoder draw the same tokens (EOS = 3 ends rows at
    different steps, so finished rows are dropped) with the same sampling log-probs."""
    model = MODELS["qwen2-gqa"]()
    prompts = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16]]
    params = SamplingParams(n=4, temperature=1.0, top_p=0.9, max_new_tokens=12, seed=7)
    a = HFEngine(model, _Tok(), fast=AUTO).generate(prompts, params)
    b = HFEngine(model, _Tok(), fast=OFF).generate(prompts, params)
    assert a.response_ids == b.response_ids
    assert any(a.finished) and not all(a.finished)       # some rows stopped at EOS before the others
    for la, lb in zip(a.logprobs, b.logprobs):
        torch.testing.assert_close(torch.tensor(la), torch.tensor(lb), atol=1e-5, rtol=0)


def test_small_cpu_decodes_run_on_one_thread_and_restore_the_count(monkeypatch):
    """Decode steps below SINGLE_THREAD_DECODE_BELOW (rows x hidden) run on one thread; generate() restores
    the caller's thread count afterwards, and larger batches keep it."""
    import common.rollout.hf as hf
    model = MODELS["qwen2"]()                      # hidden 32
    seen = []

    def spy(m, fast=OFF, workspace=None):
        st = make_stepper(m, fast, workspace)
        decode = st.decode
        st.decode = lambda *a: (seen.append(torch.get_num_threads()), decode(*a))[1]
        return st

    monkeypatch.setattr(hf, "make_stepper", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        params = SamplingParams(n=2, temperature=1.0, max_new_tokens=4, seed=0)
        HFEngine(model, _Tok(), fast=AUTO).generate([[5, 6], [7, 8]], params)     # 4 rows x 32 < threshold
        assert seen and set(seen) == {1}
        assert torch.get_num_threads() == 2
        seen.clear()
        big = hf.SINGLE_THREAD_DECODE_BELOW // 32 + 8                         # rows x 32 above the threshold
        HFEngine(model, _Tok(), fast=AUTO, max_batch=big).generate(
            [[5, 6]] * big, SamplingParams(n=1, max_new_tokens=2, seed=0))
        assert seen and seen[0] == 2
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_hf_engine_sync_is_versioned():
    """sync_weights(model, version): a version the engine holds costs nothing (no push counted), another one
    points the engine at its module; unnamed weights (version None) always move. Swapping to a reference and
    back samples exactly what the policy sampled before."""
    policy, reference = MODELS["qwen2"](), MODELS["qwen2-gqa"]()
    eng = HFEngine(policy, _Tok(), fast=AUTO)
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=3)
    assert eng.sync_weights(policy, ("policy", 0)) is True and eng.pushes == 1
    before = eng.generate([[5, 6, 7]], params)
    assert eng.sync_weights(policy, ("policy", 0)) is False and eng.pushes == 1
    assert eng.sync_weights(reference, ("reference", 0)) is True and eng.model is reference
    assert eng.sync_weights(reference, ("reference", 0)) is False
    assert eng.generate([[5, 6, 7]], params).logprobs != before.logprobs      # the reference's distribution
    assert (eng.sync_weights(policy, ("policy", 1)) is True and eng.model is policy
            and eng.version == ("policy", 1))
    again = eng.generate([[5, 6, 7]], params)
    assert (again.response_ids, again.logprobs) == (before.response_ids, before.logprobs)
    assert eng.sync_weights(policy) is True and eng.sync_weights(policy) is True and eng.pushes == 5


def test_kept_cache_storage_changes_no_sample():
    """The static decoder keeps its KV-cache storage between generate calls (CPU): a call after a larger one,
    on the reused storage, samples exactly what a fresh engine samples."""
    model = MODELS["qwen2-gqa"]()
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=8, seed=5)
    small = [[5, 6, 7], [8, 9]]
    fresh = HFEngine(model, _Tok(), fast=AUTO).generate(small, params)
    eng = HFEngine(model, _Tok(), fast=AUTO)
    eng.generate([[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16]] * 3, SamplingParams(n=4, max_new_tokens=12,
                                                                                      seed=1))
    assert eng._workspace                                     # storage kept from the larger call
    again = eng.generate(small, params)
    assert (again.response_ids, again.logprobs, again.finished) == (fresh.response_ids, fresh.logprobs,
                                                                    fresh.finished)
    # each response is cut after its first EOS (3); one without EOS ran all max_new_tokens
    for r, lp, f in zip(again.response_ids, again.logprobs, again.finished):
        assert len(lp) == len(r) and (3 in r) == f
        assert (r.index(3) == len(r) - 1) if f else len(r) == params.max_new_tokens


def test_static_decoder_samples_a_training_model_as_is(monkeypatch):
    """The static decoder reads no training flag: a policy in training mode (attention dropout set) samples
    exactly what it samples in eval mode, and is not switched (HF's train() re-kernelizes: ~0.3 ms a call);
    the generic decoder still runs HF's forward in eval mode and restores training mode."""
    model = _model(Qwen2Config, num_key_value_heads=2, attention_dropout=0.5)
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=8, seed=4)
    prompts = [[5, 6, 7], [8, 9]]
    ref = HFEngine(model.eval(), _Tok(), fast=AUTO).generate(prompts, params)
    switches = []
    real_train = type(model).train
    def train(m, mode=True):
        switches.append(mode)
        return real_train(m, mode)
    monkeypatch.setattr(type(model), "train", train)
    model.train()
    switches.clear()
    got = HFEngine(model, _Tok(), fast=AUTO).generate(prompts, params)
    assert (got.response_ids, got.logprobs) == (ref.response_ids, ref.logprobs)
    assert switches == [] and model.training
    generic = HFEngine(model, _Tok(), fast=OFF).generate(prompts, params)
    assert generic.response_ids == ref.response_ids and switches == [False, True] and model.training


def test_rows_sampled_together_by_default():
    """max_batch None: CPU_MAX_BATCH rows at a time for the static decoder on the CPU (its KV cache stays in
    the caches), 256 for HF's forward; a given max_batch is kept."""
    import common.rollout.hf as hf
    model = MODELS["qwen2"]()
    assert HFEngine(model, _Tok(), fast=AUTO).batch_rows() == hf.CPU_MAX_BATCH == 128
    assert HFEngine(model, _Tok(), fast=OFF).batch_rows() == 256
    assert HFEngine(model, _Tok(), fast=AUTO, max_batch=7).batch_rows() == 7


def test_decode_texts_equals_batch_decode(world):
    """The engine's texts through the fast tokenizer's own batch decode are batch_decode's, special tokens
    (EOS, padding, BOS) dropped alike; a tokenizer that cleans up spaces goes through batch_decode."""
    from transformers import AutoTokenizer
    from common.rollout.hf import decode_texts
    tok = AutoTokenizer.from_pretrained(world / "base_model")
    assert not tok.clean_up_tokenization_spaces and tok.backend_tokenizer is not None
    g = torch.Generator().manual_seed(0)
    ids = [torch.randint(0, len(tok), (int(n),), generator=g).tolist()
           for n in torch.randint(0, 40, (200,), generator=g)]
    ids.append(sorted({tok.eos_token_id, tok.pad_token_id, tok.bos_token_id or 0}))
    assert decode_texts(tok, ids) == tok.batch_decode(ids, skip_special_tokens=True)
    tok.clean_up_tokenization_spaces = True
    calls = []
    tok.batch_decode = lambda ids, **kw: calls.append(kw) or ["x"] * len(ids)
    assert decode_texts(tok, ids[:2]) == ["x", "x"] and calls == [{"skip_special_tokens": True}]
