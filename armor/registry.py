"""Variants registered by name, each declaring what it needs (verl core_algos style, plus the needs).

    RATIOS = Registry("ratio variant", "algo.mix.variant")

    @RATIOS.register("mixed", needs={"reference"})
    def _mixed(logp, old_logp, ref_logp, alpha, eps_low, eps_high, is_anchor, clamp): ...

    RATIOS["mixed"].fn(...)           # the function; an unknown name raises naming the config key
    "reference" in RATIOS["mixed"].needs

NEEDS is the vocabulary: "reference" (πref's log-probs of the step's responses), "anchors" (anchor rollout,
algo.anchor.enabled), "teacher" (a distillation teacher). Config validation (armor.config.validate) refuses a
value its registry does not hold and a variant whose needs the config does not meet, before any work; the
trainer asks the registry whether πref's log-probs are needed. tests/test_registry.py ties every config choice
to its registry, so a variant added to one but not the other fails there.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

NEEDS = frozenset({"reference", "anchors", "teacher"})


@dataclass(frozen=True)
class Entry:
    name: str
    fn: Callable
    needs: frozenset


class Registry:
    """Name -> Entry for one kind of variant; `key` is the config field that chooses it (for messages)."""

    def __init__(self, kind: str, key: str):
        self.kind, self.key = kind, key
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, *, needs=()):
        unknown = set(needs) - NEEDS
        if unknown:
            raise ValueError(f"{self.kind} {name!r}: unknown needs {sorted(unknown)} (known: {sorted(NEEDS)})")
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice")

        def deco(fn):
            self._entries[name] = Entry(name, fn, frozenset(needs))
            return fn
        return deco

    def alias(self, name: str, of: str) -> None:
        """Another name for a registered entry (e.g. verl's names of the KL estimators)."""
        self._entries[name] = self._entries[of]

    def __getitem__(self, name: str) -> Entry:
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(f"{self.key}: unknown {self.kind} {name!r}; registered: {self.names()}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def names(self) -> tuple[str, ...]:
        """The registered names, aliases excluded, in registration order."""
        return tuple(n for n, e in self._entries.items() if e.name == n)
