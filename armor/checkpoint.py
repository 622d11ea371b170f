"""Checkpoints: Hugging Face model folders plus the training state beside them, written atomically.

    run_dir/checkpoints/step_000040/
        config.json, model.safetensors, tokenizer files      <- save_pretrained: vLLM/lm-eval load it as is
        trainer_state.pt                                     <- optimizer, scheduler, RNG, data position, step
        sharded/                                             <- several ranks: the sharded state instead
                                                                (torch.distributed.checkpoint; loads on any
                                                                world size): policy, optimizer, a differing
                                                                πref, buffers; and rng/rank_N.pt per rank
        reference/model.safetensors                          <- πref's weights, only when they are neither the
                                                                initial model nor this checkpoint's own
        checkpoint.json                                      <- manifest: size and sha256 of every file above,
                                                                written last
A checkpoint is written into `step_NNNNNN.tmp` and renamed when complete, so a folder without the
suffix was whole when written; leftovers of a killed save are removed on the next start. A resume checks
the newest checkpoint against its manifest (a file truncated or changed since, e.g. by a broken copy or
disk) and, if it is damaged, says so by name, moves it aside to `step_NNNNNN.damaged` and takes the
previous complete one.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import warnings
from pathlib import Path

from armor import faults
from common.hashing import sha256_file
from common.jsonl import write_json_atomic
from common.layout import list_checkpoints, step_dir  # noqa: F401  (re-exported for the trainer and its tests)

# torch and numpy are imported inside the functions that need them: the layout helpers (list_checkpoints,
# step_dir) serve the experiment driver, which should not pay for loading torch.

MANIFEST = "checkpoint.json"


class DamagedCheckpointWarning(UserWarning):
    """The newest checkpoint does not match its manifest; the previous complete one is used."""


def clean_partial(run_dir: Path) -> None:
    root = Path(run_dir) / "checkpoints"
    if root.is_dir():
        for p in root.glob("*.tmp"):
            shutil.rmtree(p, ignore_errors=True)


def rng_state() -> dict:
    import numpy as np
    import torch
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(s: dict) -> None:
    import numpy as np
    import torch
    random.setstate(s["python"])
    np.random.set_state(s["numpy"])
    torch.set_rng_state(s["torch"])
    if s.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def begin_checkpoint(run_dir: Path, step: int) -> Path:
    """The empty `step_NNNNNN.tmp` folder a checkpoint is written into (rank 0 makes it)."""
    tmp = step_dir(run_dir, step).with_name(step_dir(run_dir, step).name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, state: dict, reference=None, weights=None,
                    reference_weights=None, tmp: Path | None = None) -> Path:
    """Write model (HF format), tokenizer, `state` (+ RNG) and optionally the reference's weights.

    weights / reference_weights: full tensors to write instead of the modules' own (gathered from FSDP2 shards;
    the module then only supplies its config). tmp: a begun folder that already holds the ranks' shards."""
    final = step_dir(run_dir, step)
    tmp = tmp or begin_checkpoint(run_dir, step)
    model.save_pretrained(tmp, state_dict=weights)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    if reference is not None:
        reference.save_pretrained(tmp / "reference", state_dict=reference_weights)
    faults.point("checkpoint", step)
    import torch
    torch.save({**state, "rng": rng_state()}, tmp / "trainer_state.pt")
    write_json_atomic(tmp / MANIFEST, {"step": step, "files": _manifest(tmp)}, indent=1, sort_keys=True)
    if final.exists():  # a rerun of a step whose checkpoint survived a crash before `DONE`
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


SHARDED = "sharded"   # the step folder's torch.distributed.checkpoint (several ranks)


def save_sharded_state(tmp: Path, model, optimizer, rank: int, reference=None) -> None:
    """Every rank writes its shards into tmp/sharded/ with torch.distributed.checkpoint: the policy ("model":
    the fp32 masters), the optimizer state (keyed by parameter name), πref's when it differs from both the
    initial model and this step's policy ("reference"), and the buffers (the non-persistent ones, e.g. the rotary
    inv_freq, are in no state dict); and its RNG into tmp/sharded/rng/rank_N.pt. A collective: all ranks."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict
    state = {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, optimizer),
             "buffers": dict(model.named_buffers())}
    if reference is not None:
        state["reference"] = get_model_state_dict(reference)
    dcp.save(state, checkpoint_id=str(tmp / SHARDED))
    (tmp / SHARDED / "rng").mkdir(parents=True, exist_ok=True)
    torch.save(rng_state(), tmp / SHARDED / "rng" / f"rank_{rank}.pt")


def sharded_keys(folder: Path) -> set[str]:
    """The top-level entries of a step folder's sharded state ({"model", "optimizer", "buffers",
    "reference"}, or {"optimizer"} from before the weights were sharded too; empty: a one-rank checkpoint)."""
    d = Path(folder) / SHARDED
    if not (d / ".metadata").is_file():
        return set()
    import torch.distributed.checkpoint as dcp
    return {k.split(".", 1)[0] for k in dcp.FileSystemReader(str(d)).read_metadata().state_dict_metadata}


def load_sharded_weights(folder: Path, model, key: str = "model") -> None:
    """Fill a sharded, materialised (to_empty) model from a step folder's sharded state: its `key` entry
    ("model": the policy, "reference": πref; cast to the model's dtype) and the buffers. Each rank reads only
    its own shards; any world size (torch.distributed.checkpoint reshards by name)."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
    d = str(Path(folder) / SHARDED)
    msd = get_model_state_dict(model)           # this world's layout, filled in place by load
    dcp.load({key: msd}, checkpoint_id=d)
    set_model_state_dict(model, msd)
    with torch.no_grad():
        dcp.load({"buffers": dict(model.named_buffers())}, checkpoint_id=d)


def load_sharded_optimizer(folder: Path, model, optimizer) -> None:
    """Restore the optimizer from a step folder's sharded state, on any world size (one process included:
    torch.distributed.checkpoint reshards by name)."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict
    osd = get_optimizer_state_dict(model, optimizer)    # this world's layout, filled in place by load
    dcp.load({"optimizer": osd}, checkpoint_id=str(Path(folder) / SHARDED),
             no_dist=not torch.distributed.is_initialized())
    set_optimizer_state_dict(model, optimizer, optim_state_dict=osd)


def rank_rng_state(folder: Path, rank: int) -> dict | None:
    """Rank `rank`'s RNG saved with a sharded optimizer, or None (another world size, or a one-rank save)."""
    import torch
    p = Path(folder) / SHARDED / "rng" / f"rank_{rank}.pt"
    return torch.load(p, weights_only=False) if p.is_file() else None


def _manifest(folder: Path) -> dict:
    """{relative path: {"size", "sha256"}} of every file under `folder` but the manifest itself."""
    return {str(p.relative_to(folder)): {"size": p.stat().st_size, "sha256": sha256_file(p)}
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST}


def damage(folder: Path) -> str | None:
    """Why the checkpoint folder does not match its manifest (a missing, resized or changed file), or None if
    it does. A folder written before manifests existed (no checkpoint.json) is taken as it is."""
    folder = Path(folder)
    if not (folder / "trainer_state.pt").is_file():
        return "trainer_state.pt is missing"
    mf = folder / MANIFEST
    if not mf.is_file():
        return None
    try:
        files = json.loads(mf.read_text())["files"]
    except (ValueError, KeyError, TypeError) as e:
        return f"{MANIFEST} is unreadable ({e})"
    for rel, want in files.items():
        p = folder / rel
        if not p.is_file():
            return f"{rel} is missing"
        size = p.stat().st_size
        if size != want["size"]:
            return f"{rel} has {size} bytes, the manifest says {want['size']}"
        if sha256_file(p) != want["sha256"]:
            return f"{rel} does not match its sha256 in the manifest"
    return None


def latest_complete(run_dir: Path) -> int | None:
    """The newest checkpoint that matches its manifest (None: none). Each newer, damaged one is reported with
    a DamagedCheckpointWarning naming it and why, and moved aside to `step_NNNNNN.damaged` (kept, not
    deleted: nothing is lost; it is no longer listed)."""
    for step in reversed(list_checkpoints(run_dir)):
        d = step_dir(run_dir, step)
        why = damage(d)
        if why is None:
            return step
        aside = d.with_name(d.name + ".damaged")
        n = 1
        while aside.exists():
            n += 1
            aside = d.with_name(f"{d.name}.damaged{n}")
        os.replace(d, aside)
        warnings.warn(f"{d}: damaged checkpoint ({why}); moved to {aside.name}, resuming from an earlier one",
                      DamagedCheckpointWarning, stacklevel=2)
    return None


def full_optimizer_state(model, optimizer) -> dict:
    """The optimizer's full state keyed by parameter name, on rank 0 (a collective over FSDP2 shards)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict
    return get_optimizer_state_dict(model, optimizer,
                                    options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_optimizer_state(model, optimizer, saved: dict) -> None:
    """Restore an optimizer from a checkpoint written on any world size: `optimizer.state_dict()` of one rank
    (keyed by parameter index) or `full_optimizer_state` of several (keyed by name)."""
    by_index = all(isinstance(k, int) for k in saved.get("state", {}))
    from torch.distributed.fsdp import FSDPModule
    if by_index and not isinstance(model, FSDPModule):
        optimizer.load_state_dict(saved)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict
    if by_index:                       # name the entries: the optimizer's order is model.parameters()'
        names = [n for n, _ in model.named_parameters()]
        saved = {"state": {names[i]: v for i, v in saved["state"].items()},
                 "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in saved["param_groups"]]}
    set_optimizer_state_dict(model, optimizer, optim_state_dict=saved,
                             options=StateDictOptions(full_state_dict=True))


def load_state(run_dir: Path, step: int) -> dict:
    import torch
    return torch.load(step_dir(run_dir, step) / "trainer_state.pt", weights_only=False)


def prune(run_dir: Path, keep_last: int | None, protected: set[int]) -> list[int]:
    """Delete all but the newest `keep_last` checkpoints, never touching `protected` steps."""
    if keep_last is None:
        return []
    steps = list_checkpoints(run_dir)
    doomed = [s for s in steps[:-keep_last] if s not in protected]
    for s in doomed:
        shutil.rmtree(step_dir(run_dir, s), ignore_errors=True)
    return doomed
