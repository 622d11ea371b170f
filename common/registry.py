"""Entries registered by name, each declaring what it needs: the generic registry (verl core_algos style).

    MODES = Registry("answer mode", "reward.answer_mode")

    @MODES.register("boxed")
    def _boxed(text): ...

    MODES["boxed"].fn(text)           # the function; an unknown name raises naming the config key
    "boxed" in MODES, MODES.names()

A config field whose choices a registry holds names it in its metadata (``registry="module:NAME"``); config
validation (armor.config.validate) refuses a value the registry does not hold. An entry may declare needs
from its registry's ``vocabulary`` (empty here: nothing may be declared); armor.registry's Registry is this
class with the trainer's vocabulary (πref, anchors, a teacher, a mode classifier). It lives in the leaf layer
so that ``common`` (the answer modes of common.grading) registers with it too.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["Entry", "Registry"]


@dataclass(frozen=True)
class Entry:
    name: str
    fn: Callable
    needs: frozenset


class Registry:
    """Name -> Entry for one kind of variant; `key` is the config field that chooses it (for messages)."""

    #: the needs an entry may declare (a subclass names its own)
    vocabulary: frozenset = frozenset()

    def __init__(self, kind: str, key: str):
        self.kind, self.key = kind, key
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, *, needs=()):
        unknown = set(needs) - self.vocabulary
        if unknown:
            raise ValueError(f"{self.kind} {name!r}: unknown needs {sorted(unknown)} "
                             f"(known: {sorted(self.vocabulary)})")
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
            raise ValueError(f"{self.key}: unknown {self.kind} {name!r}; "
                             f"registered: {self.names()}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def names(self) -> tuple[str, ...]:
        """The registered names, aliases excluded, in registration order."""
        return tuple(n for n, e in self._entries.items() if e.name == n)
