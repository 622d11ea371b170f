"""The state of one RL step, typed: what collect() and update() hand each other (no plain dicts).

    step_seed(seed, step, SeedPhase.ANCHOR, rnd, chunk) -> a sampling seed (a 62-bit hash)
    Group            one kept prompt: |G| responses (on-policy first, the anchor last), verdicts, engine log-probs
    PhaseTimes       seconds per phase of the step, tokens sampled
    RolloutStats     what collect() counts: prompts drawn, rounds, correctness and lengths, reference samples
    UpdateBatch      the kept groups as one token batch with rewards' advantages (N = groups x G rows)
    MinibatchPlan    the step's mini-batches and this rank's micro-batches of each
    FrozenLogprobs   θold's / πref's log-probs, entropy and token advantages, fixed for the step
"""
from __future__ import annotations

import dataclasses
import enum
import hashlib
from array import array
from dataclasses import dataclass

import torch


class SeedPhase(enum.IntEnum):
    """What a step's seed is for (its value enters the hash: never renumber)."""
    ON_POLICY = 1         # a round's on-policy samples
    ANCHOR = 2            # a chunk of reference samples for anchors
    MINIBATCH_ORDER = 3   # an epoch's shuffle of the kept prompts into mini-batches
    VALIDATION = 4        # validation samples after the step


def step_seed(seed: int, step: int, phase: SeedPhase, rnd: int = 0, chunk: int = 0) -> int:
    """A distinct, reproducible sampling seed per (run seed, step, phase, round, chunk): a 62-bit hash."""
    digest = hashlib.blake2b(repr((seed, step, int(phase), rnd, chunk)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (2 ** 62)


@dataclass
class PhaseTimes:
    """Seconds per phase of one RL step, and the tokens sampled (collect and update add to them)."""
    generate: float = 0.0
    score: float = 0.0
    logprob: float = 0.0
    update: float = 0.0
    tokens: int = 0


@dataclass
class RolloutStats:
    """What collect() counts in one RL step: prompts drawn, rounds, on-policy correctness and lengths, reference
    samples, and the shortfall below B."""
    prompts_drawn: int = 0
    rounds: int = 0
    correct: list = dataclasses.field(default_factory=list)
    lengths: list = dataclasses.field(default_factory=list)
    ref_samples: int = 0
    shortfall: int = 0


@dataclass
class UpdateBatch:
    """The kept groups as one batch: N = groups x G response rows, R = the longest response.
    batch: TokenBatch; mask [N, R] float (response tokens); is_anchor [N] bool; adv [N] (group advantages)."""
    batch: object
    mask: torch.Tensor
    is_anchor: torch.Tensor
    adv: torch.Tensor
    group_size: int


@dataclass
class MinibatchPlan:
    """minibatches: per epoch, each mini-batch's rows (whole groups); micro[i]: this rank's micro-batches of
    mini-batch i; local[i]: their rows together; need [N] bool: the rows this rank touches; own: the rows it
    accounts for in token metrics (its parts of the first epoch: each row once)."""
    minibatches: list
    micro: list
    local: list
    need: torch.Tensor
    own: torch.Tensor


@dataclass
class FrozenLogprobs:
    """Per-token values fixed for the step, [N, R]: θold's log-probs and entropy (the first mini-batch's rows are
    filled in by their own update pass: `todo` marks the rows computed beforehand), πref's (None when nothing
    reads them) and the token advantages."""
    old_logp: torch.Tensor
    entropy: torch.Tensor
    ref_logp: torch.Tensor | None
    tok_adv: torch.Tensor
    todo: torch.Tensor


@dataclass
class Group:
    """One kept prompt: its |G| responses (on-policy first, the anchor last when present)."""
    prompt_ids: list[int]
    gold: str
    responses: list[list[int]]
    correct: list[bool]
    is_anchor: list[bool]
    # the rollout engine's log-probs of each response's tokens (the sampler's; the anchor's from πref), float32;
    # empty when the engine gave none. The training/inference mismatch metric compares them with θold's
    engine_logprobs: list = dataclasses.field(default_factory=list)


def engine_logprobs(ro) -> list:
    """Each response's engine log-probs as a float32 array (a compact pickle when shards are gathered); empty
    arrays for a rollout without log-probs."""
    if len(ro.logprobs) != len(ro.response_ids):
        return [array("f") for _ in ro.response_ids]
    return [array("f", lp) for lp in ro.logprobs]
