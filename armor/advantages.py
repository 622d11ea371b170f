"""Group (outcome) advantage estimators: GRPO, Dr.GRPO (no std), QAE (ARMOR paper §3).

rewards : [P, G] float, P prompts × G group members (one scalar reward per response).
mask    : [P, G] bool, True = valid group member (default: all valid).
Output  : [P, G] float, one advantage per response (the trainer broadcasts it over the tokens).
Invalid members, groups with < 2 valid members and groups whose valid rewards are all equal
get exactly 0 (never NaN).  The group std is the *unbiased* sample std (torch.std default,
divide by n − 1), as in verl's compute_grpo_outcome_advantage.  Deviation from verl: verl gives a
singleton group mean 0 / std 1, i.e. Â = R/(1 + eps); here a singleton gets 0.
"""
from __future__ import annotations

from typing import Optional

import torch

Tensor = torch.Tensor

from armor.registry import Registry

__all__ = ["grpo_advantages", "qae_advantages", "group_advantages", "masked_quantile", "ADVANTAGES"]

ADVANTAGES = Registry("advantage estimator", "algo.advantage")   # registered below (armor.registry)


def _prep(rewards: Tensor, mask: Optional[Tensor]):
    r = rewards.detach().float() if not rewards.is_floating_point() else rewards.detach()
    valid = (torch.ones_like(r, dtype=torch.bool) if mask is None
             else mask.to(device=r.device, dtype=torch.bool))
    zero = torch.zeros((), dtype=r.dtype, device=r.device)
    r = torch.where(valid, r, zero)
    n = valid.sum(-1, keepdim=True)                                               # [P, 1]
    big = torch.finfo(r.dtype).max
    rmax = torch.where(valid, r, torch.full_like(r, -big)).amax(-1, keepdim=True)
    rmin = torch.where(valid, r, torch.full_like(r, big)).amin(-1, keepdim=True)
    live = valid & (n > 1) & (rmax > rmin)                                        # members that get Â ≠ 0
    return r, valid, n, live


def _group_std(r: Tensor, valid: Tensor, n: Tensor) -> Tensor:
    """Unbiased std over valid members, [P, 1]: sqrt(Σ (R − mean)² / (n − 1))."""
    nf = n.to(r.dtype)
    mean = r.sum(-1, keepdim=True) / nf.clamp(min=1)
    dev = torch.where(valid, r - mean, torch.zeros((), dtype=r.dtype, device=r.device))
    return (dev.square().sum(-1, keepdim=True) / (nf - 1).clamp(min=1)).sqrt()


def _finish(adv: Tensor, r: Tensor, valid: Tensor, n: Tensor, live: Tensor, norm_by_std: bool, eps: float):
    if norm_by_std:
        adv = adv / (_group_std(r, valid, n) + eps)
    return torch.where(live, adv, torch.zeros((), dtype=adv.dtype, device=adv.device))


def grpo_advantages(rewards: Tensor, mask: Optional[Tensor] = None, norm_by_std: bool = True,
                    eps: float = 1e-6) -> Tensor:
    """GRPO group advantage, [P, G] → [P, G]:
        Â_i = (R_i − mean_j R_j) / (std_j R_j + eps)     (std unbiased, over valid members j)
    norm_by_std=False: Â_i = R_i − mean_j R_j (Dr.GRPO).
    """
    r, valid, n, live = _prep(rewards, mask)
    mean = r.sum(-1, keepdim=True) / n.to(r.dtype).clamp(min=1)
    return _finish(r - mean, r, valid, n, live, norm_by_std, eps)


def masked_quantile(values: Tensor, q: float, mask: Optional[Tensor] = None) -> Tensor:
    """Per-row q-quantile of the valid entries with linear interpolation, [P, G] → [P, 1].

    torch.quantile(..., interpolation='linear') semantics on the n valid values sorted ascending
    v_0 ≤ … ≤ v_{n−1}: pos = q·(n − 1), Q = v_⌊pos⌋ + (pos − ⌊pos⌋)·(v_⌈pos⌉ − v_⌊pos⌋).
    Rows with no valid entry give 0.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    v = values if values.is_floating_point() else values.float()
    valid = (torch.ones_like(v, dtype=torch.bool) if mask is None
             else mask.to(device=v.device, dtype=torch.bool))
    n = valid.sum(-1, keepdim=True)
    s = torch.where(valid, v, torch.full_like(v, float("inf"))).sort(-1).values    # invalid go last
    idx = torch.arange(v.shape[-1], device=v.device)
    s = torch.where(idx < n, s, torch.zeros((), dtype=v.dtype, device=v.device))  # drop the infs
    pos = q * (n - 1).clamp(min=0).to(v.dtype)
    lo = pos.floor().long()
    hi = pos.ceil().long()
    v_lo, v_hi = s.gather(-1, lo), s.gather(-1, hi)
    out = v_lo + (pos - lo.to(v.dtype)) * (v_hi - v_lo)
    return torch.where(n > 0, out, torch.zeros((), dtype=v.dtype, device=v.device))


def qae_advantages(rewards: Tensor, k: float = 0.45, mask: Optional[Tensor] = None, norm_by_std: bool = True,
                   eps: float = 1e-6) -> Tensor:
    """QAE (quantile advantage estimation) group advantage, [P, G] → [P, G]:
        Â_i = (R_i − Q_k(R_1..R_G)) / (std_j R_j + eps)
    Q_k = k-quantile of the group's valid rewards, linear interpolation (see masked_quantile);
    std unbiased as in grpo_advantages.  Binary rewards {lo, hi}, w wrong out of n, pos = k(n − 1):
    Q = lo if w ≥ ⌈pos⌉ + 1 (hard prompt: wrong answers get 0, correct ones Â > 0),
    Q = hi if w ≤ ⌊pos⌋ (easy prompt: correct answers get 0, wrong ones Â < 0), else interpolated.
    """
    r, valid, n, live = _prep(rewards, mask)
    return _finish(r - masked_quantile(r, k, valid), r, valid, n, live, norm_by_std, eps)


def group_advantages(rewards: Tensor, estimator: str, mask: Optional[Tensor] = None, **kw) -> Tensor:
    """Dispatch: "grpo" (mean/std), "grpo_no_std" (mean only, Dr.GRPO), "qae" (k-quantile/std, kw k=0.45).

    Extra keywords (eps, k, norm_by_std) go to the estimator; `k` only means something to QAE and is ignored
    by the mean baselines, so callers can pass one set of settings whatever the estimator.
    """
    return ADVANTAGES[estimator].fn(rewards, mask, **kw)


@ADVANTAGES.register("grpo")
def _grpo(rewards, mask, k=None, **kw):
    return grpo_advantages(rewards, mask=mask, **kw)


@ADVANTAGES.register("grpo_no_std")
def _grpo_no_std(rewards, mask, k=None, **kw):
    return grpo_advantages(rewards, mask=mask, **{**kw, "norm_by_std": False})


@ADVANTAGES.register("qae")
def _qae(rewards, mask, **kw):
    return qae_advantages(rewards, mask=mask, **kw)
