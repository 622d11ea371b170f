import pytest
import torch

from armor.advantages import group_advantages, grpo_advantages, masked_quantile, qae_advantages


def test_grpo_by_hand():
    # [1,-1,-1,-1]: mean -0.5; deviations 1.5,-0.5,-0.5,-0.5; Σdev² = 2.25+3*0.25 = 3; unbiased var 3/3 = 1
    r = torch.tensor([[1.0, -1.0, -1.0, -1.0]])
    assert torch.allclose(grpo_advantages(r, eps=0.0), torch.tensor([[1.5, -0.5, -0.5, -0.5]]))
    # eps is added to the std: 1.5 / (1 + 1e-6)
    assert torch.allclose(grpo_advantages(r), torch.tensor([[1.5, -0.5, -0.5, -0.5]]) / (1 + 1e-6))
    # unbiased (torch.std default), not population std: [1,0]: mean .5, std = sqrt(.5/1) = .7071 -> ±0.7071
    assert torch.allclose(grpo_advantages(torch.tensor([[1.0, 0.0]]), eps=0.0),
                          torch.tensor([[0.5, -0.5]]) / 0.5 ** 0.5)


def test_grpo_no_std_and_dispatch():
    r = torch.tensor([[1.0, -1.0, -1.0, -1.0], [0.0, 2.0, 4.0, 6.0]])
    # Dr.GRPO: subtract mean only. row 2 mean 3
    want = torch.tensor([[1.5, -0.5, -0.5, -0.5], [-3.0, -1.0, 1.0, 3.0]])
    assert torch.allclose(grpo_advantages(r, norm_by_std=False), want)
    assert torch.allclose(group_advantages(r, "grpo_no_std"), want)
    assert torch.equal(group_advantages(r, "grpo"), grpo_advantages(r))
    assert torch.equal(group_advantages(r, "qae", k=0.3), qae_advantages(r, k=0.3))
    with pytest.raises(ValueError, match="bogus"):
        group_advantages(r, "bogus")


def test_degenerate_groups_zero_not_nan():
    r = torch.tensor([[1.0, 1.0, 1.0], [0.1, 0.1, 0.1], [5.0, 2.0, 3.0]])
    m = torch.tensor([[True, True, True], [True, True, True], [True, False, False]])  # row 2: singleton
    for est in ("grpo", "grpo_no_std", "qae"):
        a = group_advantages(r, est, mask=m)
        assert torch.equal(a, torch.zeros(3, 3)), est
    # fully invalid group
    a = grpo_advantages(torch.tensor([[1.0, 2.0]]), mask=torch.tensor([[False, False]]))
    assert torch.equal(a, torch.zeros(1, 2))
    assert torch.equal(grpo_advantages(torch.tensor([[7.0]])), torch.zeros(1, 1))


def test_invalid_members_ignored():
    # valid [1,-1,-1] (member 3 invalid, value 100 ignored): mean -1/3; dev 4/3,-2/3,-2/3;
    # Σdev² = 16/9+4/9+4/9 = 24/9; unbiased var 12/9 -> std = 2/sqrt(3) = 1.1547
    r = torch.tensor([[1.0, -1.0, -1.0, 100.0]])
    m = torch.tensor([[True, True, True, False]])
    s = 2 / 3 ** 0.5
    want = torch.tensor([[4 / 3 / s, -2 / 3 / s, -2 / 3 / s, 0.0]])
    assert torch.allclose(grpo_advantages(r, mask=m, eps=0.0), want)
    assert torch.allclose(grpo_advantages(r[:, :3], eps=0.0), want[:, :3])


def test_qae_binary_by_hand():
    r = torch.tensor([[1.0, -1.0, -1.0, -1.0],   # sorted [-1,-1,-1,1], pos .45*3 = 1.35 -> Q = -1
                      # sorted [-1,-1,1,1], pos 1.35: v1=-1, v2=1 -> Q = -1+.35*2 = -0.3
                      [1.0, 1.0, -1.0, -1.0],
                      [1.0, 1.0, 1.0, -1.0]])    # sorted [-1,1,1,1], pos 1.35 -> Q = 1
    # stds (unbiased): row0 1 (see grpo test); row1 mean 0, Σdev² 4, var 4/3 -> 1.1547; row2 1
    s1 = (4 / 3) ** 0.5
    want = torch.tensor([[2.0, 0.0, 0.0, 0.0],
                         [1.3 / s1, 1.3 / s1, -0.7 / s1, -0.7 / s1],
                         [0.0, 0.0, 0.0, -2.0]])
    assert torch.allclose(qae_advantages(r, eps=0.0), want, atol=1e-6)
    # {0,1} rewards: [1,0,0,0] -> Q = 0; adv [1,0,0,0]/std, std = sqrt((.5625+3*.0625)/3) = 0.5
    assert torch.allclose(qae_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), eps=0.0),
                          torch.tensor([[2.0, 0.0, 0.0, 0.0]]))
    # norm_by_std False: [1,-1,-1,-1] -> R - (-1) = [2,0,0,0]
    assert torch.allclose(qae_advantages(r[:1], norm_by_std=False), torch.tensor([[2.0, 0.0, 0.0, 0.0]]))


def test_qae_interpolated_g16():
    # 7 wrong (-1), 9 right (+1): pos = .45*15 = 6.75 between v6 = -1 and v7 = +1 -> Q = -1 + .75*2 = 0.5
    r = torch.tensor([[-1.0] * 7 + [1.0] * 9])
    q = masked_quantile(r, 0.45)
    assert torch.allclose(q, torch.tensor([[0.5]]))
    assert torch.allclose(q, torch.quantile(r, 0.45, dim=-1, keepdim=True, interpolation="linear"))
    # mean 2/16 = .125; Σdev² = 7*1.125² + 9*.875² = 8.859375 + 6.890625 = 15.75; var 15.75/15 = 1.05
    s = 1.05 ** 0.5
    a = qae_advantages(r, eps=0.0)
    assert torch.allclose(a[0, 0], torch.tensor(-1.5 / s)) and torch.allclose(a[0, -1], torch.tensor(0.5 / s))


def test_masked_quantile_matches_torch():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 7, generator=g)
    m = torch.rand(5, 7, generator=g) > 0.3
    m[:, 0] = True
    for q in (0.0, 0.2, 0.45, 0.5, 1.0):
        got = masked_quantile(x, q, m)
        for i in range(5):
            ref = torch.quantile(x[i][m[i]], q, interpolation="linear")
            assert torch.allclose(got[i, 0], ref, atol=1e-6)
    assert masked_quantile(x, 0.45, torch.zeros(5, 7, dtype=torch.bool)).abs().sum() == 0
