"""Training prompts: a file of problems with gold answers, served in a reproducible, resumable order."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass
class Prompt:
    index: int          # row in the file
    problem: str
    answer: str


def _dig(row: dict, dotted: str, where: str):
    node = row
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(f"{where}: field {dotted!r} missing")
        node = node[part]
    return node


def load_prompts(path: str, problem_field: str = "problem", answer_field: str = "answer") -> list[Prompt]:
    """Read .jsonl or .parquet rows. A problem given as chat messages takes the last message's content."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"data.train: {path!r} does not exist")
    if p.suffix == ".parquet":
        import pandas as pd
        rows = pd.read_parquet(p).to_dict(orient="records")
    elif p.suffix in (".jsonl", ".json"):
        rows = []
        for ln, line in enumerate(p.read_text().splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"data.train: {path}:{ln} is not valid JSON ({e.msg})") from e
    else:
        raise ValueError(f"data.train: {path!r} must be a .jsonl or .parquet file")
    out = []
    for i, row in enumerate(rows):
        where = f"data.train: {path} row {i}"
        prob = _dig(row, problem_field, where)
        if hasattr(prob, "tolist"):
            prob = prob.tolist()
        if isinstance(prob, list):
            prob = prob[-1]["content"]
        ans = _dig(row, answer_field, where)
        out.append(Prompt(i, str(prob), str(ans)))
    if not out:
        raise ValueError(f"data.train: {path!r} has no rows")
    return out


class PromptStream:
    """Endless prompt stream: epoch e visits the prompts in a permutation seeded by (seed, e).

    The state (epoch, offset) is saved in checkpoints, so a resumed run draws the same prompts."""

    def __init__(self, prompts: list[Prompt], seed: int, shuffle: bool = True):
        self.prompts, self.seed, self.shuffle = prompts, seed, shuffle
        self.epoch, self.offset = 0, 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        if not self.shuffle:
            return list(range(len(self.prompts)))
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(len(self.prompts), generator=g).tolist()

    def take(self, n: int) -> list[Prompt]:
        out = []
        while len(out) < n:
            if self.offset >= len(self._order):
                self.epoch, self.offset = self.epoch + 1, 0
                self._order = self._permutation(self.epoch)
            out.append(self.prompts[self._order[self.offset]])
            self.offset += 1
        return out

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "offset": self.offset}

    def load_state_dict(self, s: dict) -> None:
        self.epoch, self.offset = s["epoch"], s["offset"]
        self._order = self._permutation(self.epoch)


def draw_size(need: int, full: int, kept: int, drawn: int, margin: float | None) -> int:
    """Prompts to draw in a step's next round: `full`, or after the first round with refill margin m,
    ceil(m · need / (kept / drawn)) capped at `full` (full again while nothing has been kept).
    draw_size(need=1, full=16, kept=8, drawn=16, margin=2) = 4."""
    if margin is None or drawn == 0 or kept == 0:
        return full
    return max(1, min(full, math.ceil(margin * need * drawn / kept)))


def load_validation_sets(specs: list[str], max_problems: int | None) -> dict:
    """The validation benchmarks {name: problems}: registry names, or NAME=path.jsonl (registered here)."""
    from common.benchmarks import load_benchmark, register_jsonl
    sets = {}
    for spec in specs or []:
        name, _, path = spec.partition("=")
        if path:
            if not Path(path).is_file():
                raise FileNotFoundError(f"validation.benchmarks: {spec!r}: file {path!r} does not exist")
            register_jsonl(name, path)
        sets[name] = load_benchmark(name, limit=max_problems)
    return sets
