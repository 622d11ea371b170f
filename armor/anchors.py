"""Prompt keep rules and ARMOR's Anchor Rollout group assembly (ARMOR paper §3 DAPO, §4).

P = prompts, G = group size including the anchor (G − 1 on-policy responses + 1 anchor),
ref_n = reference responses sampled per prompt from πref.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

Tensor = torch.Tensor

__all__ = ["dynamic_sampling_keep", "anchor_keep", "first_correct_index", "assemble_anchor_groups",
           "AnchorGroups"]


def dynamic_sampling_keep(rewards: Tensor) -> Tensor:
    """DAPO dynamic sampling, rewards [P, G] → keep [P] bool: the group's rewards are not all equal
    (max > min; neither all correct nor all wrong).  A group of size 1 is not kept (verl keeps it).
    Pass the rewards the filter should look at (verl's filter_groups.metric: "acc" or "score").
    """
    return rewards.amax(-1) > rewards.amin(-1)


def anchor_keep(onpolicy_rewards: Tensor, ref_correct: Tensor) -> Tensor:
    """ARMOR keep rule, onpolicy_rewards [P, G−1] float, ref_correct [P, ref_n] bool → keep [P] bool:
        keep = (on-policy rewards not all equal) AND (any reference response correct).
    """
    return dynamic_sampling_keep(onpolicy_rewards) & ref_correct.to(torch.bool).any(-1)


def first_correct_index(ref_correct: Tensor) -> Tensor:
    """Index of the first True along the last dim, ref_correct [P, ref_n] bool → long [P]; −1 if none."""
    c = ref_correct.to(torch.bool)
    n = c.shape[-1]
    idx = torch.arange(n, device=c.device).expand_as(c)
    first = torch.where(c, idx, torch.full_like(idx, n)).amin(-1)
    return torch.where(c.any(-1), first, torch.full_like(first, -1))


@dataclass
class AnchorGroups:
    """keep [P] bool; anchor_index [P] long (index into the ref_n reference responses, −1 = none);
    group_rewards [P, G] (G−1 on-policy rewards, then the anchor's reward in the last column);
    is_anchor [P, G] bool (True exactly in the last column, for every row)."""
    keep: Tensor
    anchor_index: Tensor
    group_rewards: Tensor
    is_anchor: Tensor


def assemble_anchor_groups(onpolicy_rewards: Tensor, ref_rewards: Tensor,
                           ref_correct: Tensor) -> AnchorGroups:
    """Build ARMOR groups: G−1 on-policy responses + the first correct reference response (anchor).

    onpolicy_rewards [P, G−1] float, ref_rewards [P, ref_n] float, ref_correct [P, ref_n] bool.
    Rows with keep = False must be dropped by the caller; their last column holds the reward of
    reference response 0 (meaningless placeholder) and anchor_index = −1 when no reference is correct.

    The anchor is correct, so with outcome rewards (+1/−1, no length shaping) its reward is the
    group maximum.  If the on-policy rewards are not all at that maximum (guaranteed by the keep
    rule: not all equal), the group mean is strictly below it, so under GRPO (and Dr.GRPO) the anchor
    always gets a positive advantage.  Caveats: under QAE the baseline is a quantile and can equal
    the maximum (few wrong on-policy answers), giving the anchor Â = 0 (never < 0); with overlong
    shaping a long correct anchor may score below a short correct on-policy response.
    """
    anchor_index = first_correct_index(ref_correct)
    keep = anchor_keep(onpolicy_rewards, ref_correct)
    anc_r = ref_rewards.gather(-1, anchor_index.clamp(min=0).unsqueeze(-1)).to(onpolicy_rewards.dtype)
    group_rewards = torch.cat([onpolicy_rewards, anc_r], dim=-1)
    is_anchor = torch.zeros(group_rewards.shape, dtype=torch.bool, device=group_rewards.device)
    is_anchor[..., -1] = True
    return AnchorGroups(keep=keep, anchor_index=anchor_index, group_rewards=group_rewards,
                        is_anchor=is_anchor)
