"""bench.profile's FLOP counts, by hand on a model small enough to add up on paper."""
import pytest

from bench.profile import ModelShapes, decode_flops, forward_flops, rollout_flops

# H 4, I 6, 2 layers, 2 query heads sharing 1 kv head of width 2, vocabulary 5
S = ModelShapes(hidden=4, intermediate=6, layers=2, q_heads=2, kv_heads=1, head_dim=2, vocab=5)


def test_linear_params():
    # per layer: [q; k; v] 4·(2 + 2)·2 = 32, o 2·2·4 = 16, gate + up + down 3·4·6 = 72 -> 120; 2 layers
    assert S.linear_params == 240
    assert sum(i * o for i, o in S.linears()) == 240


def test_forward_flops_by_hand():
    # sequences of 3 and 1 tokens, logits at 2 positions
    f = forward_flops(S, [3, 1], 2)
    assert f["linear"] == 2 * 4 * 240
    # (query, key) pairs: 1 + 2 + 3 and 1 = 7; 4·d·hq = 16 FLOPs each (Q·Kᵀ and P·V); 2 layers
    assert f["attention"] == 7 * 16 * 2
    assert f["lm_head"] == 2 * 4 * 5 * 2
    assert f["total"] == 1920 + 224 + 80


def test_decode_flops_by_hand():
    f = decode_flops(S, [3, 5])                 # 2 rows attending to 3 and 5 keys
    assert (f["linear"], f["attention"], f["lm_head"]) == (2 * 2 * 240, 8 * 16 * 2, 2 * 2 * 4 * 5)


def test_rollout_flops_by_hand():
    # one prompt of 2 tokens, n = 2 responses of 3 and 1 tokens: the prefill (logits at its last position),
    # then row 0's tokens 1 and 2 decoded with 3 and 4 keys; row 1's only token came from the prefill
    f = rollout_flops(S, [2], [3, 1], 2)
    pre = forward_flops(S, [2], 1)
    dec = decode_flops(S, [3, 4])
    assert f["total"] == pre["total"] + dec["total"] == 1096 + 1264
    assert f["decode_steps"] == 2


def test_shapes_from_an_hf_config():
    from transformers import Qwen3Config
    cfg = Qwen3Config(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=12)
    s = ModelShapes.of(cfg)
    assert (s.head_dim, s.q_heads, s.kv_heads) == (12, 4, 2)            # explicit head_dim, not 32 / 4
    assert s.linear_params == 2 * (32 * 8 * 12 + 4 * 12 * 32 + 3 * 32 * 48)


@pytest.mark.parametrize("lens", [[1], [5, 2, 7]])
def test_attention_count_is_the_causal_pair_count(lens):
    pairs = sum(sum(i + 1 for i in range(n)) for n in lens)
    assert forward_flops(S, lens, 0)["attention"] == pairs * 4 * S.head_dim * S.q_heads * S.layers


def test_shared_prompt_tokens_leave_the_linear_layers_only():
    # rows of 3 and 1 tokens, 1 token each row's prompt shares with an earlier row: 3 tokens through the
    # linear layers, attention as counted per row
    f, once = forward_flops(S, [3, 1], 2), forward_flops(S, [3, 1], 2, shared=1)
    assert once["linear"] == 2 * 3 * 240 and once["attention"] == f["attention"]
    assert once["lm_head"] == f["lm_head"] and f["total"] - once["total"] == 2 * 240


def test_lengths_count_a_repeated_prompt_once():
    import torch
    from armor.policy import make_token_batch
    from bench.profile import _lengths
    b = make_token_batch([[5, 6], [7], [5, 6], [5, 6]], [[8], [9, 9], [8, 8, 8], [1]], pad_id=0)
    lens, resp, shared = _lengths(b, torch.tensor([0, 1, 2, 3]))
    assert (lens, resp, shared) == ([3, 3, 5, 3], 7, 4)                  # rows 2 and 3 reuse row 0's prompt
    assert _lengths(b, torch.tensor([1, 3]))[2] == 0
