"""Outcome reward and DAPO overlong reward shaping (ARMOR paper §3).  All tensors are [N] (one per
response)."""
from __future__ import annotations

import torch

Tensor = torch.Tensor

__all__ = ["outcome_reward", "overlong_penalty", "shaped_reward"]


def outcome_reward(correct: Tensor) -> Tensor:
    """R = +1 if correct else −1, bool [N] → float [N]."""
    c = correct.to(torch.bool)
    return torch.where(c, torch.ones(c.shape, device=c.device), -torch.ones(c.shape, device=c.device))


def overlong_penalty(lengths: Tensor, max_len: int, buffer: int, factor: float = 1.0) -> Tensor:
    """DAPO soft overlong punishment, lengths [N] (response tokens) → float [N]:
        R_len(L) = min(0, −(L − (L_max − L_buf)) / L_buf · factor)
    0 up to L_max − L_buf, then linear down to −factor at L = L_max.  buffer = 0 disables it (all 0).
    """
    L = lengths.float()
    if buffer <= 0:
        return torch.zeros_like(L)
    exceed = L - (max_len - buffer)
    return torch.clamp(-exceed / buffer * factor, max=0.0)


def shaped_reward(correct: Tensor, lengths: Tensor, max_len: int, buffer: int, factor: float = 1.0,
                  enable: bool = True) -> Tensor:
    """R = outcome_reward(correct) + (overlong_penalty(lengths, …) if enable else 0), float [N]."""
    r = outcome_reward(correct).to(lengths.device)
    return r + overlong_penalty(lengths, max_len, buffer, factor) if enable else r
