import torch

from armor.advantages import grpo_advantages, qae_advantages
from armor.anchors import (AnchorGroups, anchor_keep, assemble_anchor_groups, dynamic_sampling_keep,
                           first_correct_index)


def test_dynamic_sampling_keep():
    r = torch.tensor([[1.0, 1.0, 1.0],     # all correct -> drop
                      [-1.0, -1.0, -1.0],  # all wrong -> drop
                      [1.0, -1.0, -1.0]])  # mixed -> keep
    assert dynamic_sampling_keep(r).tolist() == [False, False, True]
    assert dynamic_sampling_keep(torch.tensor([[1.0]])).tolist() == [False]


def test_anchor_keep_rules():
    on = torch.tensor([[1.0, 1.0, 1.0],     # all correct on-policy
                       [-1.0, -1.0, -1.0],  # all wrong on-policy
                       [1.0, -1.0, -1.0],   # mixed, but no correct reference
                       [1.0, -1.0, -1.0]])  # mixed and a correct reference -> keep
    ref = torch.tensor([[True, True], [True, False], [False, False], [False, True]])
    assert anchor_keep(on, ref).tolist() == [False, False, False, True]


def test_first_correct_index():
    ref = torch.tensor([[False, True, True, False], [False, False, False, False],
                        [True, False, False, False], [False, False, False, True]])
    idx = first_correct_index(ref)
    assert idx.dtype == torch.long
    assert idx.tolist() == [1, -1, 0, 3]


def test_assemble_anchor_groups():
    on = torch.tensor([[1.0, -1.0, -1.0], [1.0, 1.0, 1.0], [-1.0, -1.0, 1.0]])
    ref_r = torch.tensor([[-1.0, 1.0, 0.5], [1.0, 1.0, -1.0], [-1.0, -1.0, -1.0]])
    ref_c = torch.tensor([[False, True, True], [True, True, False], [False, False, False]])
    g = assemble_anchor_groups(on, ref_r, ref_c)
    assert isinstance(g, AnchorGroups)
    assert g.keep.tolist() == [True, False, False]          # row 1 all correct, row 2 no correct ref
    assert g.anchor_index.tolist() == [1, 0, -1]
    # anchor = ref 1 (first correct)
    assert torch.equal(g.group_rewards[0], torch.tensor([1.0, -1.0, -1.0, 1.0]))
    assert g.group_rewards.shape == (3, 4)
    assert g.is_anchor.tolist() == [[False, False, False, True]] * 3
    # the anchor gets a positive advantage on a kept group:
    # [1,-1,-1,1]: mean 0, unbiased std = sqrt(4/3) -> anchor 1/1.1547 = 0.866
    adv = grpo_advantages(g.group_rewards[g.keep])
    assert torch.allclose(adv[0, -1], torch.tensor(3 ** 0.5 / 2), atol=1e-5)


def test_anchor_advantage_positive_grpo_nonnegative_qae():
    # every mixed on-policy pattern of 3 binary rewards, anchor = +1
    for bits in range(1, 7):
        on = torch.tensor([[1.0 if (bits >> i) & 1 else -1.0 for i in range(3)]])
        g = assemble_anchor_groups(on, torch.tensor([[1.0]]), torch.tensor([[True]]))
        assert g.keep.item()
        assert grpo_advantages(g.group_rewards)[0, -1] > 0
        assert qae_advantages(g.group_rewards)[0, -1] >= 0
    # QAE, 2 of 3 on-policy correct: [1,1,-1,1] sorted [-1,1,1,1], pos 0.45*3 = 1.35 -> Q = 1 -> anchor Â = 0
    assert qae_advantages(torch.tensor([[1.0, 1.0, -1.0, 1.0]]))[0, -1] == 0
