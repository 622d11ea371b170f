"""Variants registered by name, each declaring what it needs (verl core_algos style, plus the needs).

    RATIOS = Registry("ratio variant", "algo.mix.variant")

    @RATIOS.register("mixed", needs={"reference"})
    def _mixed(logp, old_logp, ref_logp, alpha, eps_low, eps_high, is_anchor, clamp): ...

    RATIOS["mixed"].fn(...)           # the function; an unknown name raises naming the config key
    "reference" in RATIOS["mixed"].needs

The generic registry is common.registry (the leaf layer, so common's answer modes use it too); this is that
class with the trainer's vocabulary of needs. NEEDS: "reference" (πref's log-probs of the step's responses),
"anchors" (anchor rollout, algo.anchor.enabled), "teacher" (a distillation teacher), "modes" (the world's
mode classifier, logging.answer_modes). Config validation (armor.config.validate) refuses a value its
registry does not hold and a variant whose needs the config does not meet, before any work; the trainer
asks the registry whether πref's log-probs are needed.
tests/unit/test_registry.py ties every config choice to its registry, so a variant added to one but not the
other fails there.
"""
from __future__ import annotations

from common.registry import Entry
from common.registry import Registry as _Registry

__all__ = ["NEEDS", "Entry", "Registry"]

NEEDS = frozenset({"reference", "anchors", "teacher", "modes"})


class Registry(_Registry):
    """common.registry.Registry whose entries may declare NEEDS."""

    vocabulary = NEEDS
