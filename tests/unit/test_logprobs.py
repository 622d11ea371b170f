"""Chunked log-probs (armor.policy.chunked_logprobs): the same values, entropies and gradients as the
full-vocabulary path, with only one chunk of logits alive at a time."""
import pytest
import torch

from armor.policy import chunked_logprobs, forward_logprobs, make_token_batch

from common.models import load_model


@pytest.fixture(scope="module")
def model_and_batch(world):
    model = load_model(str(world / "base_model"))
    g = torch.Generator().manual_seed(0)
    V = model.config.vocab_size
    prompts = [torch.randint(3, V, (n,), generator=g).tolist() for n in (5, 9, 7)]
    responses = [torch.randint(3, V, (n,), generator=g).tolist() for n in (11, 4, 8)]
    return model, make_token_batch(prompts, responses, pad_id=0)


def _grads(model, batch, chunk):
    model.zero_grad(set_to_none=True)
    logp, ent = forward_logprobs(model, batch, temperature=0.7, with_entropy=True, chunk_tokens=chunk)
    # an objective that weighs every token differently
    w = torch.linspace(-1, 1, logp.numel()).view_as(logp)
    (logp * w).sum().backward()
    return logp.detach(), ent, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("chunk", [1, 3, 5, 64])
def test_chunked_equals_full_in_values_entropy_and_gradients(model_and_batch, chunk):
    model, batch = model_and_batch
    lp0, ent0, g0 = _grads(model, batch, None)
    lp1, ent1, g1 = _grads(model, batch, chunk)
    torch.testing.assert_close(lp1, lp0, rtol=1e-6, atol=1e-6)      # fp32 rounding of other matmul shapes
    torch.testing.assert_close(ent1 * batch.response_mask, ent0 * batch.response_mask, rtol=0, atol=1e-5)
    assert set(g1) == set(g0) and len(g0) == len(list(model.parameters()))
    for n in g0:
        err = (g1[n] - g0[n]).abs().max() / g0[n].abs().max()
        assert err < 1e-5, (n, float(err))      # relative to the gradient's scale


def test_chunked_logprobs_by_hand():
    """Two tokens, vocabulary 3, identity head: log-probs and entropy from the softmax formula."""
    hidden = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]]])     # [N=1, R=2, H=3]
    head = torch.nn.Linear(3, 3, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.eye(3))
    ids = torch.tensor([[0, 2]])
    lp, ent = chunked_logprobs(hidden, head, ids, temperature=1.0, with_entropy=True, chunk_tokens=1)
    z1 = torch.log(torch.tensor(torch.e + 2.0))                      # logits (1, 0, 0)
    z2 = torch.log(torch.tensor(torch.e ** 2 + 2.0))                 # logits (0, 2, 0)
    torch.testing.assert_close(lp, torch.stack([1 - z1, 0 - z2]).view(1, 2))
    p1 = torch.tensor([torch.e, 1.0, 1.0]) / (torch.e + 2)
    torch.testing.assert_close(ent[0, 0], -(p1 * p1.log()).sum())
