"""The colocated vLLM engine (common.rollout.vllm_engine) against the real vLLM CPU build, in float32: a dummy
start, pushes, swaps and log-probs compared with the HF model's. One engine serves the whole module (vLLM's
external_launcher joins this process to a one-rank process group, torn down at the end)."""
import json

import pytest
import torch

from common.models import load_model, load_tokenizer
from common.rollout import SamplingParams, build_engine
from common.rollout.hf import top_p_filter
from reproduce.toy.build import prompt_ids


@pytest.fixture(scope="module")
def setup(vllm_world):
    import torch.distributed as dist
    path = str(vllm_world / "base_model")
    tok = load_tokenizer(path)
    eng = build_engine("vllm", None, tok, model_path=path, max_model_len=96, dtype="float32", seed=0,
                       enforce_eager=True)
    policy = load_model(path).eval()
    reference = load_model(path).eval()
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * 0.05)
    recs = [json.loads(x) for x in (vllm_world / "data" / "validation.jsonl").read_text().splitlines()[:16]]
    yield eng, policy, reference, [prompt_ids(tok, r["problem"]) for r in recs]
    del eng
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
    cleanup_dist_env_and_memory()
    if dist.is_initialized():
        dist.destroy_process_group()


@torch.no_grad()
def hf_logprobs(model, ro, temperature: float = 1.0, top_p: float = 1.0) -> list[torch.Tensor]:
    """The HF model's log-probs of each sampled token under the sampling distribution (temperature, then the
    nucleus renormalised: what vLLM's processed_logprobs are)."""
    out = []
    for p, r in zip(ro.prompt_ids, ro.response_ids):
        ids = torch.tensor([p + r])
        logits = model(input_ids=ids).logits[0, len(p) - 1:-1].float() / temperature
        out.append(torch.log_softmax(top_p_filter(logits, top_p), -1).gather(-1, ids[0, len(p):, None])[:, 0])
    return out


# the largest |HF - vLLM| log-prob of a sampled token, both float32: it depends on which tokens are drawn
# (seeds 1, 2, 3, 7 of this module's call, one seed a call and each prompt's own: 1.7e-6 to 2.2e-5); a
# push of other weights, or the wrong distribution, is off by 1e-2 and more
GAP = 5e-5


def max_gap(model, ro, **kw) -> float:
    return max(float((hf - torch.tensor(lp)).abs().max()) for hf, lp in zip(hf_logprobs(model, ro, **kw),
                                                                           ro.logprobs))


def test_dummy_start_then_push_gives_the_models_logprobs(setup):
    eng, policy, _, prompts = setup
    assert eng.version is None and eng.sleep_mode is False        # random weights; the CPU build has no sleep
    assert eng.sync_weights(policy, ("policy", 0)) is True
    ro = eng.generate(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=40, seed=1))
    assert len(ro) == 2 * len(prompts) and all(len(r) == len(lp)
                                               for r, lp in zip(ro.response_ids, ro.logprobs))
    assert max_gap(policy, ro) < GAP
    again = eng.generate(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=40, seed=1))
    assert again.response_ids == ro.response_ids                  # the call's seed: the same samples


def test_one_seed_a_call_reaches_vllms_sampler_and_seed_each_prompt_replays_a_prompt(setup):
    """The default: requests without seeds, the call's seed on this process's RNG, which the in-process
    engine's sampler draws from (the same call and seed: the same samples; another seed: others; the
    caller's RNG untouched). rollout.seed_each_prompt: a prompt's samples whatever else shares its call."""
    eng, policy, _, prompts = setup
    eng.sync_weights(policy, ("policy", 0))
    p = SamplingParams(n=2, temperature=1.0, max_new_tokens=40, seed=7)
    torch.manual_seed(99)
    before = torch.get_rng_state()
    a, b = eng.generate(prompts, p), eng.generate(prompts, p)
    assert torch.equal(torch.get_rng_state(), before)
    assert a.response_ids == b.response_ids and len(set(map(tuple, a.response_ids))) > len(prompts)
    other = eng.generate(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=40, seed=8))
    assert other.response_ids != a.response_ids
    assert max_gap(policy, a) < GAP
    eng.seed_each_prompt = True
    try:
        alone = eng.generate(prompts[:1], p)
        shared = eng.generate(prompts, p)
    finally:
        eng.seed_each_prompt = False
    assert shared.response_ids[:2] == alone.response_ids


def test_top_p_logprobs_are_the_renormalised_nucleus(setup):
    eng, policy, _, prompts = setup
    eng.sync_weights(policy, ("policy", 0))
    ro = eng.generate(prompts, SamplingParams(n=2, temperature=0.8, top_p=0.7, max_new_tokens=40, seed=2))
    assert max_gap(policy, ro, temperature=0.8, top_p=0.7) < GAP
    assert max_gap(policy, ro, temperature=0.8) > 1e-3            # not the plain softmax's


def test_swap_to_the_reference_and_back(setup):
    eng, policy, reference, prompts = setup
    greedy = SamplingParams(n=1, temperature=0.0, max_new_tokens=40, seed=0)
    eng.sync_weights(policy, ("policy", 0))
    first = eng.generate(prompts, greedy)
    pushes = eng.pushes
    assert eng.sync_weights(policy, ("policy", 0)) is False and eng.pushes == pushes   # unchanged: no push
    assert eng.sync_weights(reference, ("reference", 0)) is True
    ref = eng.generate(prompts, SamplingParams(n=1, temperature=1.0, max_new_tokens=40, seed=3))
    assert ref.response_ids != first.response_ids and max_gap(reference, ref) < GAP
    assert eng.sync_weights(policy, ("policy", 0)) is True
    assert eng.generate(prompts, greedy).response_ids == first.response_ids           # the same tokens back
    assert eng.pushes == pushes + 2
