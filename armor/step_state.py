"""The state of one RL step, typed: what collect() and update() hand each other (no plain dicts).

    step_seed(seed, step, SeedPhase.ANCHOR, rnd, chunk) -> a sampling seed (a 62-bit hash)
    Samples          n graded responses to each of some prompts (a round, or a chunk of reference samples)
    Group            one kept prompt: |G| responses (on-policy first, the anchor last) with their verdicts,
                     shaped rewards and engine log-probs
    PhaseTimes       seconds per phase of the step, tokens sampled; `with timed(tm, "update"): ...` adds one
    RolloutStats     what collect() counts: prompts drawn, rounds, correctness, rewards and lengths, reference
                     samples, the mismatch probe, the kept anchors' lengths, formats and modes, the prompts
                     the anchor filter dropped
    UpdateBatch      the kept groups as one token batch with rewards' advantages (N = groups x G rows)
    FrozenLogprobs   θold's / πref's / the engine's log-probs, entropy, token advantages, fixed for the step
    mode_classifier  logging.answer_modes -> the classifier; mode_shares: the step's mode_<m> metrics
"""
from __future__ import annotations

import contextlib
import dataclasses
import enum
import hashlib
import importlib
import time
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
    """Seconds per phase of one RL step (`timed` adds to them), tokens sampled, and when the step began."""
    generate: float = 0.0
    score: float = 0.0
    logprob: float = 0.0
    update: float = 0.0
    tokens: int = 0
    started: float = dataclasses.field(default_factory=time.perf_counter)

    def metrics(self) -> dict:
        """The step's time_* columns and tokens_generated; time_step runs until now."""
        return {"time_generate": self.generate, "time_score": self.score, "time_logprob": self.logprob,
                "time_update": self.update, "tokens_generated": self.tokens,
                "time_step": time.perf_counter() - self.started}


@contextlib.contextmanager
def timed(tm: PhaseTimes, phase: str):
    """`with timed(tm, "update"): ...` adds the block's wall-clock seconds to tm.<phase> (as verl's
    marked_timer)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        setattr(tm, phase, getattr(tm, phase) + time.perf_counter() - t0)


@dataclass
class Samples:
    """n responses to each of P prompts, prompt-major (P·n of each field): token ids, verdicts, shaped rewards
    (+1/-1 and overlong shaping, computed once when graded) and the engine's log-probs of the tokens."""
    n: int
    responses: list
    correct: list
    rewards: list
    logprobs: list

    def prompt(self, i: int) -> "Samples":
        """The n responses to prompt i."""
        sl = slice(i * self.n, (i + 1) * self.n)
        return Samples(self.n, self.responses[sl], self.correct[sl], self.rewards[sl], self.logprobs[sl])


@dataclass
class RolloutStats:
    """What collect() counts in one RL step: prompts drawn, rounds, on-policy correctness, rewards and
    lengths, reference samples, the shortfall below B, and the mismatch probe: the first round's first
    PROBE_ROWS on-policy samples, (prompt ids, response ids, engine log-probs) each, on which a step that
    keeps nothing still measures logprob_mismatch (armor.health)."""
    prompts_drawn: int = 0
    rounds: int = 0
    correct: list = dataclasses.field(default_factory=list)
    rewards: list = dataclasses.field(default_factory=list)
    lengths: list = dataclasses.field(default_factory=list)
    ref_samples: int = 0
    shortfall: int = 0
    probe: list = dataclasses.field(default_factory=list)
    # on-policy samples' modes (logging.answer_modes)
    modes: list = dataclasses.field(default_factory=list)
    anchor_modes: list = dataclasses.field(default_factory=list)   # kept anchors' modes
    anchor_lengths: list = dataclasses.field(default_factory=list)   # kept anchors' response tokens
    anchor_formats: list = dataclasses.field(default_factory=list)   # kept anchors: [has format m] per m
    # prompts the anchor filter dropped (kept by the paper's rule, not with it), and the prompts the paper's
    # rule keeps among those the reference sampled (the drop share's denominator)
    filter_dropped: int = 0
    filter_candidates: int = 0

    def add(self, on: Samples, prompt_ids: list, probe_rows: int = 0) -> None:
        """Count a round's on-policy samples (and keep its first `probe_rows` as the probe)."""
        self.correct += on.correct
        self.rewards += on.rewards
        self.lengths += [len(r) for r in on.responses]
        self.probe += [(prompt_ids[j // on.n], on.responses[j], on.logprobs[j])
                       for j in range(min(probe_rows, len(on.responses)))]

    def metrics(self) -> dict:
        """The step's rollout metrics over its on-policy samples (the metrics row's first keys)."""
        n = len(self.correct)
        return {"reward_mean": float(torch.tensor(self.rewards, dtype=torch.float32).mean()) if n else 0.0,
                "accuracy": sum(self.correct) / max(1, n),
                "response_length": float(torch.tensor(self.lengths, dtype=torch.float32).mean()) if n
                else 0.0,
                "prompts_drawn": self.prompts_drawn}

    def anchor_metrics(self, formats) -> dict:
        """The step's anchor diagnostics: anchor_length (mean response tokens of the kept anchors),
        anchor_format_<m> (share of them in which answer format m is found, for m in `formats`; None
        without anchors), anchor_filter_dropped (prompts the anchor filter dropped) and
        anchor_filter_drop_share (their share of the prompts the paper's rule keeps among those the reference
        sampled; None when there were none)."""
        n = len(self.anchor_lengths)
        out = {"anchor_length": sum(self.anchor_lengths) / n if n else None}
        out.update({f"anchor_format_{m}": (sum(f[j] for f in self.anchor_formats) / n if n else None)
                    for j, m in enumerate(formats)})
        out["anchor_filter_dropped"] = self.filter_dropped
        out["anchor_filter_drop_share"] = (self.filter_dropped / self.filter_candidates
                                           if self.filter_candidates else None)
        return out


PROBE_ROWS = 16


def mode_classifier(spec: str):
    """The classifier logging.answer_modes names ("module:function"): (problem, response) -> a mode name, with
    a `modes` attribute (the names it returns, in logging order)."""
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise ValueError("is not \"module:function\"")
    fn = getattr(importlib.import_module(module), name)
    modes = getattr(fn, "modes", None)
    if not callable(fn) or not modes or not all(isinstance(m, str) and m.isidentifier() for m in modes):
        raise ValueError("is not a callable with a `modes` attribute of names")
    return fn


def mode_shares(labels: list, modes, prefix: str) -> dict:
    """{prefix + m: share of m among labels} for every m of modes (a label outside them raises); None shares
    when there are no labels (a step without anchors)."""
    unknown = set(labels) - set(modes)
    if unknown:
        raise ValueError(f"mode classifier returned {sorted(unknown)}, not in its modes {list(modes)}")
    n = len(labels)
    return {f"{prefix}{m}": (labels.count(m) / n if n else None) for m in modes}


@dataclass
class UpdateBatch:
    """The kept groups as one batch: N = groups x G response rows, R = the longest response.
    batch: TokenBatch; mask [N, R] float (response tokens); is_anchor [N] bool; adv [N] (group advantages)."""
    batch: object
    mask: torch.Tensor
    is_anchor: torch.Tensor
    adv: torch.Tensor
    group_size: int
    engine_logprobs: list       # [N] the engine's log-probs of each row's tokens (empty: none given)


@dataclass(frozen=True)
class FrozenLogprobs:
    """Per-token values fixed for the step, [N, R]: θold's log-probs and entropy, πref's (None when nothing
    reads them) and the token advantages. `first_from_update`: the first mini-batch's θold values are not
    here yet but come from its own update pass (θold = θ until the first optimizer step); the optimizer
    returns a copy with them added. `rollout_logp`: the engine's log-probs of the sampled tokens (0 where it
    gave none), `rollout_mask`: the on-policy response tokens that have one (the mismatch metric's and the
    rollout correction's tokens)."""
    old_logp: torch.Tensor
    entropy: torch.Tensor
    ref_logp: torch.Tensor | None
    tok_adv: torch.Tensor
    first_from_update: bool
    rollout_logp: torch.Tensor | None = None
    rollout_mask: torch.Tensor | None = None


@dataclass
class Group:
    """One kept prompt: its |G| responses, on-policy first, the anchor last when present (laid out by
    armor.anchors.assemble_anchor_groups)."""
    prompt_ids: list[int]
    gold: str
    responses: list[list[int]]
    correct: list[bool]
    is_anchor: list[bool]
    # the shaped reward of each response (+1/-1 and overlong shaping)
    rewards: list = dataclasses.field(default_factory=list)
    # the rollout engine's log-probs of each response's tokens (the sampler's; the anchor's from πref),
    # float32; empty when the engine gave none. The training/inference mismatch metric compares them with
    # θold's
    engine_logprobs: list = dataclasses.field(default_factory=list)


def engine_logprobs(ro) -> list:
    """Each response's engine log-probs as a float32 array (a compact pickle when shards are gathered); empty
    arrays for a rollout without log-probs."""
    if len(ro.logprobs) != len(ro.response_ids):
        return [array("f") for _ in ro.response_ids]
    return [array("f", lp) for lp in ro.logprobs]
