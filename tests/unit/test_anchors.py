import pytest
import torch

from armor.advantages import group_advantages, grpo_advantages, qae_advantages
from armor.anchors import (ANCHOR_FILTERS, FilterContext, anchor_eligible, anchor_keep,
                           assemble_anchor_groups, dynamic_sampling_keep, filter_dropped,
                           first_correct_index)
from armor.step_state import Samples


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


def _samples(n, correct, rewards, first_token=0):
    """n responses to each of len(correct) // n prompts; response k is the token list [first_token + k], its
    engine log-probs [-(first_token + k)]."""
    ids = [[first_token + k] for k in range(len(correct))]
    return Samples(n, ids, list(correct), list(rewards), [[-float(i[0])] for i in ids])


def test_assemble_anchor_groups_lays_out_the_groups_the_update_trains_on():
    """The trainer's one layout (Trainer.collect calls it once a round): G-1 on-policy samples, then the first
    correct reference sample with its own verdict, shaped reward and engine log-probs, is_anchor only there;
    without reference samples a group is its on-policy samples."""
    on = _samples(3, [True, False, False, False, True, False], [1.0, -1.0, -1.0, -1.0, 0.5, -1.0])
    ref = _samples(3, [False, True, True, True, False, False], [-1.0, 0.75, 1.0, 1.0, -1.0, -1.0], 10)
    groups = assemble_anchor_groups([[5, 6], [7]], ["a", "b"], [on.prompt(0), on.prompt(1)],
                                    [ref.prompt(0), ref.prompt(1)])
    g0, g1 = groups
    assert (g0.prompt_ids, g0.gold, g1.prompt_ids, g1.gold) == ([5, 6], "a", [7], "b")
    # prompt 0: reference samples [wrong, right (reward 0.75: overlong-shaped), right] -> anchor = ref 1
    assert g0.responses == [[0], [1], [2], [11]] and g0.correct == [True, False, False, True]
    assert g0.rewards == [1.0, -1.0, -1.0, 0.75] and g0.is_anchor == [False, False, False, True]
    assert g0.engine_logprobs == [[0.0], [-1.0], [-2.0], [-11.0]]
    # prompt 1: its first reference sample is the correct one
    assert g1.responses == [[3], [4], [5], [13]] and g1.rewards == [-1.0, 0.5, -1.0, 1.0]
    plain = assemble_anchor_groups([[5, 6]], ["a"], [on.prompt(0)])
    assert plain[0].responses == [[0], [1], [2]] and plain[0].is_anchor == [False] * 3
    assert assemble_anchor_groups([], [], [], []) == []
    with pytest.raises(ValueError, match="no correct reference sample"):
        assemble_anchor_groups([[1]], ["a"], [on.prompt(0)], [_samples(2, [False, False], [-1.0, -1.0])])


def test_anchor_advantage_positive_grpo_nonnegative_qae():
    """On the rewards of assembled groups, as the update reads them (one row per group): the anchor's GRPO
    advantage is positive for every mixed on-policy pattern, its QAE advantage never negative."""
    for bits in range(1, 7):
        correct = [bool((bits >> i) & 1) for i in range(3)]
        on = _samples(3, correct, [1.0 if c else -1.0 for c in correct])
        assert anchor_keep(torch.tensor([on.rewards]), torch.tensor([[True]])).item()
        (g,) = assemble_anchor_groups([[1]], ["x"], [on], [_samples(1, [True], [1.0], 9)])
        rewards = torch.tensor([g.rewards])
        assert group_advantages(rewards, "grpo")[0, -1] > 0
        assert group_advantages(rewards, "qae", k=0.45)[0, -1] >= 0
    # [1,-1,-1,1]: mean 0, unbiased std = sqrt(4/3) -> anchor 1/1.1547 = 0.866
    assert torch.allclose(grpo_advantages(torch.tensor([[1.0, -1.0, -1.0, 1.0]]))[0, -1],
                          torch.tensor(3 ** 0.5 / 2), atol=1e-5)
    # QAE, 2 of 3 on-policy correct: [1,1,-1,1] sorted [-1,1,1,1], pos 0.45*3 = 1.35 -> Q = 1 -> anchor Â = 0
    assert qae_advantages(torch.tensor([[1.0, 1.0, -1.0, 1.0]]))[0, -1] == 0


def test_a_wrong_reference_sample_anchors_when_correct_only_is_off():
    """The paper's §4 ablation (algo.anchor.correct_only false): the first reference sample anchors the group,
    right or wrong; with correct_only (the paper) the first correct one."""
    on = Samples(2, [[1], [2]], [True, False], [1.0, -1.0], [[-0.1], [-0.2]])
    ref = Samples(2, [[7], [8]], [False, True], [-1.0, 1.0], [[-0.3], [-0.4]])
    right = assemble_anchor_groups([[0]], ["5"], [on], [ref])[0]
    wrong = assemble_anchor_groups([[0]], ["5"], [on], [ref], correct_only=False)[0]
    assert right.responses[-1] == [8] and right.rewards[-1] == 1.0 and right.is_anchor == [False, False, True]
    assert wrong.responses[-1] == [7] and wrong.correct[-1] is False and wrong.rewards[-1] == -1.0


# ---- anchor filters (algo.anchor.filter): hand-built groups, the expected keep / anchor / drop by hand
ON = torch.tensor([[1.0, -1.0, -1.0],    # p0 mixed: correct refs 1, 2; the filter rejects 1 -> anchor 2
                   [1.0, -1.0, 1.0],     # p1 mixed: correct ref 0 only, rejected -> dropped by the filter
                   [1.0, 1.0, 1.0],      # p2 all correct: never kept, never counted as dropped
                   [-1.0, 1.0, -1.0]])   # p3 mixed: no correct ref -> not kept with or without the filter
CORRECT = torch.tensor([[False, True, True], [True, False, False], [True, True, True], [False, False, False]])
PASS = torch.tensor([[True, False, True], [False, True, True], [False, False, False], [True, True, True]])


def test_a_filter_narrows_which_correct_samples_may_anchor():
    assert anchor_eligible(CORRECT, PASS).tolist() == [[False, False, True], [False, False, False],
                                                       [False, False, False], [False, False, False]]
    assert anchor_eligible(CORRECT).tolist() == CORRECT.tolist()            # no filter: correct is eligible
    assert anchor_keep(ON, CORRECT).tolist() == [True, True, False, False]   # the paper's rule
    assert anchor_keep(ON, CORRECT, PASS).tolist() == [True, False, False, False]
    assert anchor_keep(ON, CORRECT, torch.ones_like(PASS)).tolist() == anchor_keep(ON, CORRECT).tolist()
    # dropped = kept by the paper's rule AND not with the filter: p1 only (p2 and p3 the paper drops too)
    assert filter_dropped(ON, CORRECT, PASS).tolist() == [False, True, False, False]
    assert not filter_dropped(ON, CORRECT).any()
    assert not filter_dropped(ON, CORRECT, torch.ones_like(PASS)).any()
    assert first_correct_index(anchor_eligible(CORRECT, PASS)).tolist() == [2, -1, -1, -1]


def test_the_anchor_is_the_first_correct_sample_that_passes():
    on = _samples(3, [True, False, False], [1.0, -1.0, -1.0])
    ref = _samples(3, [False, True, True], [-1.0, 1.0, 0.5], 10)       # tokens [10], [11], [12]
    (paper,) = assemble_anchor_groups([[1]], ["a"], [on], [ref])
    (passing,) = assemble_anchor_groups([[1]], ["a"], [on], [ref], ref_pass=[[True, False, True]])
    (all_pass,) = assemble_anchor_groups([[1]], ["a"], [on], [ref], ref_pass=[[True, True, True]])
    assert paper.responses[-1] == [11] and all_pass == paper                    # `none` = every sample passes
    assert passing.responses[-1] == [12] and passing.rewards[-1] == 0.5 and passing.correct[-1] is True
    assert passing.engine_logprobs[-1] == [-12.0] and passing.is_anchor == [False] * 3 + [True]
    # correct_only false: the first sample that passes, right or wrong
    (wrong,) = assemble_anchor_groups([[1]], ["a"], [on], [ref], correct_only=False,
                                      ref_pass=[[False, True, True]])
    assert wrong.responses[-1] == [11]
    with pytest.raises(ValueError, match="passes the anchor filter"):
        assemble_anchor_groups([[1]], ["a"], [on], [ref], ref_pass=[[True, False, False]])


def test_the_registered_filters():
    """none passes everything; exclude_modes rejects the named modes of the world's classifier (the toy
    world's: its shortcut, \\boxed{last operand}, is rejected; a chain and another direct answer pass)."""
    from reproduce.toy.task import classify
    ctx = FilterContext(classify, ("shortcut",))
    none, oracle = ANCHOR_FILTERS["none"].fn, ANCHOR_FILTERS["exclude_modes"].fn
    problem = "7+2+4-3+5=?"
    chain = "7+2=9,9+4=3,3-3=0,0+5=5.\\boxed{5}"
    assert classify(problem, "\\boxed{5}") == "shortcut" and classify(problem, chain) == "chain"
    assert none(problem, "\\boxed{5}", ctx) and none(problem, chain, FilterContext())
    assert not oracle(problem, "\\boxed{5}", ctx)
    assert oracle(problem, chain, ctx) and oracle(problem, "\\boxed{3}", ctx)
    assert not oracle(problem, chain, FilterContext(classify, ("chain", "shortcut")))
    assert ANCHOR_FILTERS["exclude_modes"].needs == {"anchors", "modes"}
