"""The rollout-engine interface: one engine serves the policy and, with swapped weights, the reference.

Weights are versioned: the trainer names what it hands over, ("policy", optimizer steps so far) or
("reference", resets so far), and an engine that already holds that version does nothing. So asking before
every generate call is free, and a round with anchors costs at most one policy -> reference -> policy swap.
"""
from __future__ import annotations

import abc
import contextlib
import hashlib
from dataclasses import dataclass, field
from typing import Hashable

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


def prompt_seed(seed: int, index: int) -> int:
    """The sampling seed of prompt `index` of a generate call seeded `seed` (a 62-bit hash): engines that seed
    each request (vLLM) give every prompt its own stream, so a prompt's samples do not depend on which other
    prompts share its call or how the engine batches them."""
    digest = hashlib.blake2b(repr(("prompt", seed, index)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (2 ** 62)


class RolloutEngine(abc.ABC):
    """Generates responses for token-id prompts with the weights last given to `sync_weights`."""

    tokenizer = None
    version: Hashable | None = None   # the weights held: what the last sync was told (None: unknown)
    pushes: int = 0                   # syncs that moved weights (the others found the version held already)
    ranks_per_engine: int = 1         # consecutive ranks that are one engine (tensor parallel): they make the
                                      # same generate calls together (armor.spmd.sharded_map)

    @abc.abstractmethod
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> Rollout: ...

    def sync_weights(self, model: torch.nn.Module, version: Hashable | None = None) -> bool:
        """Serve `model`'s current weights from now on (the policy's, or the reference's for anchors).

        `version` names those weights, e.g. ("policy", optimizer_step) or ("reference", reset_count): when the
        engine holds that version already nothing is done. None means "unnamed": always push. Returns whether
        weights were pushed."""
        if version is not None and version == self.version:
            return False
        self.version = None                  # a push that fails half-way leaves weights no version names
        self._push(model)
        self.version = version
        self.pushes += 1
        return True

    def awake_through(self):
        """A context in which the engine stays ready between generate calls (a collection phase: rounds,
        anchors, swaps; a validation): an engine that frees its GPU memory between calls (vLLM's sleep
        mode) frees it once, when the context ends. Nothing for an engine that never frees it (HF)."""
        return contextlib.nullcontext()

    @abc.abstractmethod
    def _push(self, model: torch.nn.Module) -> None:
        """Make the engine sample from `model`'s current weights (called by sync_weights when they
        changed)."""
