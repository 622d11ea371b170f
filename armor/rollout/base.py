"""The rollout-engine interface: one engine serves the policy and, with swapped weights, the reference."""
from __future__ import annotations

import abc
from dataclasses import dataclass, field

import torch


@dataclass
class SamplingParams:
    n: int = 1                      # responses per prompt
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int | None = None         # same seed + same weights + same prompts -> same responses

    def __post_init__(self):
        if self.n < 1:
            raise ValueError(f"SamplingParams.n: {self.n!r} must be >= 1")
        if self.max_new_tokens < 1:
            raise ValueError(f"SamplingParams.max_new_tokens: {self.max_new_tokens!r} must be >= 1")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p: {self.top_p!r} must be in (0, 1]")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature: {self.temperature!r} must be >= 0 (0 = greedy)")


@dataclass
class Rollout:
    """A flat list of responses; response j answers prompt `prompt_index[j]` of the generate() call.

    Responses of one prompt are contiguous, in sample order. `response_ids` holds the generated tokens
    up to and including EOS (when `finished`), without padding. `logprobs` are the sampling
    distribution's log-probs of those tokens (informational; the trainer recomputes its own)."""
    prompt_index: list[int] = field(default_factory=list)
    prompt_ids: list[list[int]] = field(default_factory=list)
    response_ids: list[list[int]] = field(default_factory=list)
    logprobs: list[list[float]] = field(default_factory=list)
    finished: list[bool] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.response_ids)

    @property
    def num_tokens(self) -> int:
        return sum(len(r) for r in self.response_ids)


class RolloutEngine(abc.ABC):
    """Generates responses for token-id prompts with the weights last given to `sync_weights`."""

    tokenizer = None

    @abc.abstractmethod
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> Rollout: ...

    @abc.abstractmethod
    def sync_weights(self, model: torch.nn.Module) -> None:
        """Serve `model`'s current weights from now on (the policy's, or the reference's for anchors)."""
