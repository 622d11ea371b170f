"""Experiment logging backends (`logging.backends`), all fed the same rows the trainer appends to
metrics.jsonl and validation.jsonl.

    jsonl        metrics.jsonl / validation.jsonl (the trainer writes them; always on, the source of truth)
    tensorboard  event files in <run folder>/tensorboard (or logging.tensorboard_dir); offline
    wandb        a Weights & Biases run (online, or offline under <run folder>/wandb);
                 needs `pip install wandb`

Scalars: every number of a metrics row as `train/<key>`, each validation row as `val/<benchmark>` (its value)
and `val/<benchmark>/response_length`, at x = the row's `total_step` (step_offset + step: stage-2 arms line
up after their stage-1 baseline, as in the paper's figures).

Resume. The trainer resumes from its newest checkpoint and drops the JSONL rows logged after it (they are
recomputed), so the backends start from the rows it keeps:
- TensorBoard: the run's event files are rewritten from the JSONL rows kept, in one new file that opens with a
  purge marker at the first step (a TensorBoard already watching the folder discards what it had); the run
  goes on in the same folder, so every step appears once, with the values of metrics.jsonl.
- W&B: the run id is kept in <run folder>/wandb.json and a resumed process continues that W&B run
  (resume="allow"). A killed process loses what W&B had not yet written (its service buffers), so the resumed
  one sends again the kept rows from the run's next step on: online, W&B knows that step (it refuses lower
  ones; steps it already had keep their first values, which the exact resume recomputes alike except the
  timings); offline, the next step is 0, and the superseded offline-run folders of the id are removed, so
  `wandb sync <run folder>/wandb/latest-run` uploads every step once.
Only rank 0 (env RANK) logs to TensorBoard and W&B.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import secrets
from pathlib import Path
from typing import Optional

from common.jsonl import read_jsonl, write_json_atomic

PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}
WANDB_STATE = "wandb.json"
TB_PREFIX = "events.out.tfevents."
SKIP_KEYS = {"step", "total_step"}


def check(logging_cfg) -> None:
    """Refuse, before any work is spent, a backend whose package is not installed (names key and value)."""
    for b in logging_cfg.backends:
        pkg = PACKAGES.get(b)
        if pkg and importlib.util.find_spec(pkg) is None:
            extra = " (or pip install -e '.[wandb]')" if b == "wandb" else ""
            raise ValueError(f"logging.backends: {list(logging_cfg.backends)!r} names {b!r}, but the {pkg!r} "
                             f"package is not installed: pip install {pkg}{extra}, or leave {b!r} out")


def tensorboard_dir(cfg) -> Path:
    """<run folder>/tensorboard, or <logging.tensorboard_dir>/<name> (a root shared by runs, one folder
    each)."""
    root = cfg.logging.tensorboard_dir
    return Path(root) / cfg.name if root else cfg.run_dir / "tensorboard"


def scalars(row: dict, kind: str) -> dict[str, float]:
    """The scalars of one JSONL row: kind "train" (a metrics row) or "val" (a validation row)."""
    if kind == "val":
        out = {f"val/{row['benchmark']}": float(row["value"])}
        if isinstance(row.get("response_length"), (int, float)):
            out[f"val/{row['benchmark']}/response_length"] = float(row["response_length"])
        return out
    out = {}
    for k, v in row.items():
        if k in SKIP_KEYS or not isinstance(v,
                                            (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
            continue
        out[f"train/{k}"] = float(v)
    return out


def x_of(row: dict) -> int:
    return int(row.get("total_step", row["step"]))


class TensorBoardBackend:
    def __init__(self, cfg, replay: list[tuple[str, dict]]):
        from torch.utils.tensorboard import SummaryWriter
        self.dir = tensorboard_dir(cfg)
        self.dir.mkdir(parents=True, exist_ok=True)
        for old in self.dir.glob(TB_PREFIX + "*"):   # rewritten below from the rows the run keeps
            old.unlink()
        first = min((x_of(r) for _, r in replay), default=0)
        self.writer = SummaryWriter(log_dir=str(self.dir), purge_step=first)
        for kind, row in replay:
            self.log(kind, row, flush=False)
        self.writer.flush()

    def log(self, kind: str, row: dict, flush: bool = True) -> None:
        step = x_of(row)
        for tag, v in scalars(row, kind).items():
            self.writer.add_scalar(tag, v, step)
        if flush:
            self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbBackend:
    def __init__(self, cfg, run_dir: Path, replay: list[tuple[str, dict]]):
        import shutil

        import wandb
        from armor.config import to_dict
        lg = cfg.logging
        self.state_path = run_dir / WANDB_STATE
        old = json.loads(self.state_path.read_text()) if self.state_path.is_file() else {}
        run_id = old.get("id") or secrets.token_hex(4)
        write_json_atomic(self.state_path, {"id": run_id, "project": lg.wandb_project,
                                            "entity": lg.wandb_entity or None, "mode": lg.wandb_mode},
                          indent=1, sort_keys=True)
        if lg.wandb_mode == "offline":   # superseded: this process sends again every row the run keeps
            for d in (run_dir / "wandb").glob(f"offline-run-*-{run_id}"):
                shutil.rmtree(d, ignore_errors=True)
        self.run = wandb.init(project=lg.wandb_project, entity=lg.wandb_entity or None,
                              group=lg.wandb_group or cfg.name.split("/")[0], name=cfg.name, id=run_id,
                              resume="allow", dir=str(run_dir), config=to_dict(cfg), mode=lg.wandb_mode,
                              settings=wandb.Settings(console="off", silent=True))
        self.first = int(self.run.step)   # the W&B run's next step (0 offline; online: after what it has)
        for kind, row in replay:
            self.log(kind, row)

    def log(self, kind: str, row: dict, flush: bool = True) -> None:
        step = x_of(row)
        if step >= self.first:   # W&B refuses steps below the run's current one
            self.run.log(scalars(row, kind), step=step)

    def close(self) -> None:
        self.run.finish()


class Backends:
    """What the trainer calls: `metrics(row)` and `validation(row)` after each JSONL append, `close()`."""

    def __init__(self, cfg, run_dir: Optional[Path] = None):
        run_dir = Path(run_dir or cfg.run_dir)
        self.backends = []
        names = [b for b in cfg.logging.backends if b != "jsonl"]
        if not names or int(os.environ.get("RANK", "0")) != 0:
            return
        check(cfg.logging)
        # the rows a resumed run keeps (the trainer has dropped those past its checkpoint), in step order
        replay = ([("val", r) for r in read_jsonl(run_dir / "validation.jsonl")]
                  + [("train", r) for r in read_jsonl(run_dir / "metrics.jsonl")])
        replay.sort(key=lambda kr: (x_of(kr[1]), kr[0] == "val"))   # a step's metrics before its validation
        if "tensorboard" in names:
            self.backends.append(TensorBoardBackend(cfg, replay))
        if "wandb" in names:
            self.backends.append(WandbBackend(cfg, run_dir, replay))

    def metrics(self, row: dict) -> None:
        for b in self.backends:
            b.log("train", row)

    def validation(self, row: dict) -> None:
        for b in self.backends:
            b.log("val", row)

    def close(self) -> None:
        while self.backends:
            self.backends.pop().close()
