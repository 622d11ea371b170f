"""Prompt keep rules, anchor filters and ARMOR's Anchor Rollout group layout (ARMOR paper §3 DAPO, §4).

P = prompts, G = group size including the anchor (G − 1 on-policy responses + 1 anchor),
ref_n = reference responses sampled per prompt from πref.

Anchor filters (algo.anchor.filter, the ANCHOR_FILTERS registry): a predicate on (problem, response) text
that a reference sample must also pass to anchor a group. `none` (the paper's rule) passes every sample;
`exclude_modes` (an oracle, for a world with a mode classifier: logging.answer_modes) rejects the modes named
in algo.anchor.exclude_modes. A new filter is one registered function
`(problem: str, response: str, ctx: FilterContext) -> bool`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from armor.registry import Registry
from armor.step_state import Group, Samples

Tensor = torch.Tensor

__all__ = ["ANCHOR_FILTERS", "FilterContext", "dynamic_sampling_keep", "anchor_eligible", "anchor_keep",
           "filter_dropped", "first_correct_index", "assemble_anchor_groups"]

ANCHOR_FILTERS = Registry("anchor filter", "algo.anchor.filter")


@dataclass(frozen=True)
class FilterContext:
    """What a filter may read besides (problem, response): the world's mode classifier (logging.answer_modes;
    None without one) and the modes algo.anchor.exclude_modes names."""
    classify: Optional[Callable[[str, str], str]] = None
    exclude_modes: tuple = ()


@ANCHOR_FILTERS.register("none")
def _no_filter(problem: str, response: str, ctx: FilterContext) -> bool:
    """The paper's rule: every reference sample passes (the trainer then decodes and calls nothing)."""
    return True


@ANCHOR_FILTERS.register("exclude_modes", needs={"anchors", "modes"})
def _exclude_modes(problem: str, response: str, ctx: FilterContext) -> bool:
    """An oracle: the sample passes unless the world's classifier puts it in one of ctx.exclude_modes (e.g.
    the toy world's `shortcut`). Not available to the paper's ARMOR: it reads what the reward cannot see."""
    return ctx.classify(problem, response) not in ctx.exclude_modes


def dynamic_sampling_keep(rewards: Tensor) -> Tensor:
    """DAPO dynamic sampling, rewards [P, G] → keep [P] bool: the group's rewards are not all equal
    (max > min; neither all correct nor all wrong).  A group of size 1 is not kept (verl keeps it).
    Pass the rewards the filter should look at (verl's filter_groups.metric: "acc" or "score").
    """
    return rewards.amax(-1) > rewards.amin(-1)


def anchor_eligible(ref_correct: Tensor, ref_pass: Optional[Tensor] = None) -> Tensor:
    """Which reference samples may anchor, ref_correct [P, ref_n] bool, ref_pass [P, ref_n] bool (the anchor
    filter's verdicts; None: every sample passes, the paper's rule) → [P, ref_n] bool:
        eligible = correct AND passes the filter.
    """
    c = ref_correct.to(torch.bool)
    return c if ref_pass is None else c & ref_pass.to(torch.bool)


def anchor_keep(onpolicy_rewards: Tensor, ref_correct: Tensor, ref_pass: Optional[Tensor] = None) -> Tensor:
    """ARMOR keep rule, onpolicy_rewards [P, G−1] float, ref_correct [P, ref_n] bool, ref_pass [P, ref_n] bool
    or None → keep [P] bool:
        keep = (on-policy rewards not all equal) AND (any reference response correct and passing the filter).
    With algo.anchor.correct_only false pass "sampled" for ref_correct (any reference sample anchors). Without
    ref_pass (filter none) this is the paper's rule.
    """
    return dynamic_sampling_keep(onpolicy_rewards) & anchor_eligible(ref_correct, ref_pass).any(-1)


def filter_dropped(onpolicy_rewards: Tensor, ref_correct: Tensor,
                   ref_pass: Optional[Tensor] = None) -> Tensor:
    """The prompts the anchor filter drops, same shapes as anchor_keep → [P] bool: kept by the paper's rule,
    not with the filter (every correct reference sample rejected):
        dropped = anchor_keep(on, correct) AND NOT anchor_keep(on, correct, pass).
    All False without ref_pass.
    """
    return anchor_keep(onpolicy_rewards, ref_correct) & ~anchor_keep(onpolicy_rewards, ref_correct, ref_pass)


def first_correct_index(ref_correct: Tensor) -> Tensor:
    """Index of the first True along the last dim, ref_correct [P, ref_n] bool → long [P]; −1 if none."""
    c = ref_correct.to(torch.bool)
    n = c.shape[-1]
    idx = torch.arange(n, device=c.device).expand_as(c)
    first = torch.where(c, idx, torch.full_like(idx, n)).amin(-1)
    return torch.where(c.any(-1), first, torch.full_like(first, -1))


def assemble_anchor_groups(prompt_ids: list, golds: list, on: list[Samples],
                           ref: list[Samples] | None = None, correct_only: bool = True,
                           ref_pass: list[list[bool]] | None = None) -> list[Group]:
    """The groups of K kept prompts, the one place their layout is decided: group k is on[k]'s samples
    (G − 1 with anchors, G without), then, given ref[k] (its ref_n reference samples), the anchor: the first
    correct one that passes the anchor filter (ref_pass[k], its samples' verdicts; None: all pass) (first
    index of anchor_eligible), last, with is_anchor True there only. Each response keeps its own verdict,
    shaped reward and engine log-probs. Without `ref` (no anchors: DAPO, OPD, ...) a group is its on-policy
    samples. A kept prompt's reference samples hold an eligible one (anchor_keep). correct_only False (the
    paper's wrong-anchor ablation): the anchor is the first reference sample that passes, right or wrong.

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
    if ref_pass is None:         # the paper's rule, as it always was
        first = (first_correct_index(torch.tensor([r.correct for r in ref], dtype=torch.bool)).tolist()
                 if correct_only else [0] * len(ref))
    else:
        ok = (torch.tensor([r.correct for r in ref], dtype=torch.bool) if correct_only
              else torch.ones(len(ref), ref[0].n, dtype=torch.bool))
        first = first_correct_index(anchor_eligible(ok, torch.tensor(ref_pass, dtype=torch.bool))).tolist()
    if -1 in first:
        raise ValueError(f"kept prompt {first.index(-1)} has no correct reference sample that passes the "
                         "anchor filter to anchor it")
    groups = []
    for p, g, o, r, j in zip(prompt_ids, golds, on, ref, first):
        groups.append(Group(p, g, o.responses + r.responses[j:j + 1], o.correct + r.correct[j:j + 1],
                            [False] * len(o.responses) + [True], o.rewards + r.rewards[j:j + 1],
                            o.logprobs + r.logprobs[j:j + 1]))
    return groups
