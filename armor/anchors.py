"""Prompt keep rules and ARMOR's Anchor Rollout group layout (ARMOR paper §3 DAPO, §4).

P = prompts, G = group size including the anchor (G − 1 on-policy responses + 1 anchor),
ref_n = reference responses sampled per prompt from πref.
"""
from __future__ import annotations

import torch

from armor.step_state import Group, Samples

Tensor = torch.Tensor

__all__ = ["dynamic_sampling_keep", "anchor_keep", "first_correct_index", "assemble_anchor_groups"]


def dynamic_sampling_keep(rewards: Tensor) -> Tensor:
    """DAPO dynamic sampling, rewards [P, G] → keep [P] bool: the group's rewards are not all equal
    (max > min; neither all correct nor all wrong).  A group of size 1 is not kept (verl keeps it).
    Pass the rewards the filter should look at (verl's filter_groups.metric: "acc" or "score").
    """
    return rewards.amax(-1) > rewards.amin(-1)


def anchor_keep(onpolicy_rewards: Tensor, ref_correct: Tensor) -> Tensor:
    """ARMOR keep rule, onpolicy_rewards [P, G−1] float, ref_correct [P, ref_n] bool → keep [P] bool:
        keep = (on-policy rewards not all equal) AND (any reference response correct).
    With algo.anchor.correct_only false pass "sampled" for ref_correct (any reference sample anchors).
    """
    return dynamic_sampling_keep(onpolicy_rewards) & ref_correct.to(torch.bool).any(-1)


def first_correct_index(ref_correct: Tensor) -> Tensor:
    """Index of the first True along the last dim, ref_correct [P, ref_n] bool → long [P]; −1 if none."""
    c = ref_correct.to(torch.bool)
    n = c.shape[-1]
    idx = torch.arange(n, device=c.device).expand_as(c)
    first = torch.where(c, idx, torch.full_like(idx, n)).amin(-1)
    return torch.where(c.any(-1), first, torch.full_like(first, -1))


def assemble_anchor_groups(prompt_ids: list, golds: list, on: list[Samples],
                           ref: list[Samples] | None = None, correct_only: bool = True) -> list[Group]:
    """The groups of K kept prompts, the one place their layout is decided: group k is on[k]'s samples
    (G − 1 with anchors, G without), then, given ref[k] (its ref_n reference samples), the anchor: the first
    correct one (first_correct_index), last, with is_anchor True there only. Each response keeps its own
    verdict, shaped reward and engine log-probs. Without `ref` (no anchors: DAPO, OPD, ...) a group is its
    on-policy samples. A kept prompt's reference samples hold a correct one (anchor_keep). correct_only
    False (the paper's wrong-anchor ablation): the anchor is the first reference sample, right or wrong.

    With outcome rewards (+1/−1, no length shaping) the anchor's reward is the group maximum; the keep rule
    (on-policy rewards not all equal) puts the group mean strictly below it, so under GRPO (and Dr.GRPO) the
    anchor always gets a positive advantage. Caveats: under QAE the baseline is a quantile and can equal the
    maximum (few wrong on-policy answers), giving the anchor Â = 0 (never < 0); with overlong shaping a long
    correct anchor may score below a short correct on-policy response.
    """
    if ref is None:
        return [Group(p, g, o.responses, o.correct, [False] * len(o.responses), o.rewards, o.logprobs)
                for p, g, o in zip(prompt_ids, golds, on)]
    if not on:
        return []
    first = (first_correct_index(torch.tensor([r.correct for r in ref], dtype=torch.bool)).tolist()
             if correct_only else [0] * len(ref))
    if -1 in first:
        raise ValueError(f"kept prompt {first.index(-1)} has no correct reference sample to anchor it")
    groups = []
    for p, g, o, r, j in zip(prompt_ids, golds, on, ref, first):
        groups.append(Group(p, g, o.responses + r.responses[j:j + 1], o.correct + r.correct[j:j + 1],
                            [False] * len(o.responses) + [True], o.rewards + r.rewards[j:j + 1],
                            o.logprobs + r.logprobs[j:j + 1]))
    return groups
