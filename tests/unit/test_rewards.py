import torch

from armor.rewards import outcome_reward, overlong_penalty, shaped_reward


def test_outcome_reward():
    r = outcome_reward(torch.tensor([True, False, True]))
    assert r.dtype == torch.float32
    assert torch.equal(r, torch.tensor([1.0, -1.0, 1.0]))


def test_overlong_penalty_by_hand():
    # L_max = 100, L_buf = 40 -> threshold 60; penalty = min(0, -(L - 60)/40 * factor)
    L = torch.tensor([10, 60, 70, 80, 100])
    # 10: -(−50)/40 = +1.25 -> 0 ; 60: 0 ; 70: -10/40 = -0.25 ; 80: -0.5 ; 100: -1
    assert torch.allclose(overlong_penalty(L, 100, 40), torch.tensor([0.0, 0.0, -0.25, -0.5, -1.0]))
    # factor 0.5 halves it: 80 -> -0.25
    assert torch.allclose(overlong_penalty(L, 100, 40, factor=0.5),
                          torch.tensor([0.0, 0.0, -0.125, -0.25, -0.5]))
    # buffer disabled
    assert torch.equal(overlong_penalty(L, 100, 0), torch.zeros(5))


def test_shaped_reward():
    c = torch.tensor([True, False, True])
    L = torch.tensor([50, 100, 90])
    # +1 + 0 ; -1 + -1 ; +1 + -(90-60)/40 = 1 - 0.75 = 0.25
    assert torch.allclose(shaped_reward(c, L, 100, 40, 1.0), torch.tensor([1.0, -2.0, 0.25]))
    assert torch.equal(shaped_reward(c, L, 100, 40, 1.0, enable=False), torch.tensor([1.0, -1.0, 1.0]))
