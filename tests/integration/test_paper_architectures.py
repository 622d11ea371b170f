"""The paper models' layouts at toy width (reproduce.toy.model QWEN2_ARCH, QWEN3_ARCH: untied lm_head, GQA, a
vocabulary padded above the tokenizer's, Qwen3's per-head q/k RMSNorm and explicit head_dim) through the HF
engine: its static-KV-cache decoder takes them, and the log-probs it returns for its samples are the trainer's
(armor.policy.forward_logprobs, HF forward) to float rounding, as the generic decoder's are. The real-vLLM
tier (tests/vllm_real/test_arch_real.py) trains and evaluates on them through vLLM."""
import pytest
import torch

from armor.policy import forward_logprobs, make_token_batch
from common.fast import OFF, choose
from common.fast.static_kv_decode import StaticStepper
from common.rollout import SamplingParams
from common.rollout.hf import HFEngine, HFStepper, make_stepper
from reproduce.toy.model import (QWEN2_ARCH, QWEN3_ARCH, ArchConfig, ModelConfig, build_arch_model,
                                 build_model, padded_vocab)
from reproduce.toy.tokenizer import build_tokenizer

ARCHS = {"qwen2": QWEN2_ARCH, "qwen3": QWEN3_ARCH}


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def test_padded_vocab_rounds_up_to_the_multiple():
    assert [padded_vocab(n, 128) for n in (1, 103, 128, 129)] == [128, 128, 128, 256]
    assert padded_vocab(151665, 128) == 151680 and padded_vocab(151665, 256) == 151808
    with pytest.raises(ValueError, match="n_tokens 0"):
        padded_vocab(0, 128)


@pytest.mark.parametrize("kw, field", [
    (dict(family="llama"), "ArchConfig.family: 'llama'"),
    (dict(family="qwen3"), "ArchConfig.head_dim: None"),
    (dict(family="qwen2", head_dim=32), "ArchConfig.head_dim: 32"),
    (dict(num_attention_heads=4, num_key_value_heads=3), "ArchConfig.num_key_value_heads: 3"),
])
def test_bad_layouts_name_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        ArchConfig(**kw)


@pytest.mark.parametrize("family", sorted(ARCHS))
def test_the_models_have_the_paper_layouts(family, tok):
    arch = ARCHS[family]
    model = build_model(tok, arch)              # the world builder's entry point dispatches on the config
    cfg, attn = model.config, model.model.layers[0].self_attn
    assert cfg.model_type == family and cfg.tie_word_embeddings is False
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    assert cfg.vocab_size == model.lm_head.out_features == 128 > len(tok) == 103
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, attn.head_dim) == (4, 2, 32)
    assert arch.attention_head_dim == 32
    if family == "qwen3":
        assert cfg.hidden_size // cfg.num_attention_heads == 16 and attn.q_norm.weight.shape == (32,)
    else:
        assert cfg.hidden_size // cfg.num_attention_heads == 32 and attn.q_proj.bias is not None
    assert type(build_model(tok, ModelConfig())).__name__ == "Qwen2ForCausalLM"   # the toy world's, unchanged


def _engine_gap(model, tok, static: bool):
    """The HF engine's samples (3 per prompt, T = 1) and the largest |its log-prob - forward's| over them."""
    prompts = [[3, 5, 7, 9, 11, 13], [3, 12, 13], [3, 40, 41, 42]]
    # static: the static-KV decoder with its compiled kernel (compute.fast native), else HF's forward
    eng = HFEngine(model, tok, fast=choose("native", "cpu", "float32") if static else OFF)
    ro = eng.generate(prompts, SamplingParams(n=3, temperature=1.0, max_new_tokens=24, seed=1))
    batch = make_token_batch(ro.prompt_ids, ro.response_ids, tok.pad_token_id)
    with torch.no_grad():
        lp, _ = forward_logprobs(model, batch)
    gap = max(float((lp[j, :len(r)] - torch.tensor(ro.logprobs[j])).abs().max())
              for j, r in enumerate(ro.response_ids))
    return ro, gap


@pytest.mark.parametrize("family", sorted(ARCHS))
def test_hf_engine_logprobs_are_the_forward_pass_on_the_paper_layouts(family, tok):
    model = build_arch_model(tok, ARCHS[family], seed=0).eval()
    assert StaticStepper.supports(model) and isinstance(make_stepper(model, choose("auto", "cpu", "float32")),
                                                        StaticStepper)
    assert isinstance(make_stepper(model, OFF), HFStepper)
    static, gap_static = _engine_gap(model, tok, static=True)
    generic, gap_generic = _engine_gap(model, tok, static=False)
    assert gap_static < 2e-5 and gap_generic < 2e-5, (gap_static, gap_generic)
    assert static.response_ids == generic.response_ids
    # random weights sample the padded rows too: both decoders score ids past the tokenizer's alike
    assert max(max(r) for r in static.response_ids) >= len(tok)
