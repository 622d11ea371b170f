"""Checkpoints: Hugging Face model folders plus the training state beside them, written atomically.

    run_dir/checkpoints/step_000040/
        config.json, model.safetensors, tokenizer files   <- save_pretrained: vLLM/lm-eval load it as is
        trainer_state.pt                                  <- optimizer, scheduler, RNG, data position, step
        reference/model.safetensors                       <- πref's weights, only when they are neither the
                                                             initial model nor this checkpoint's own
        checkpoint.json                                   <- manifest: size and sha256 of every file above,
                                                             written last
That is the one-rank layout with the export in the model's dtype (the tiny and smoke worlds). Several ranks,
or an export dtype other than the masters' (schedule.export_dtype: bf16 for the paper presets), write instead:
        config.json, tokenizer files, trainer_state.pt    <- rank 0
        model-0000R-of-0000N.safetensors                  <- the HF export in the export dtype, one part per
        model.safetensors.index.json                         rank that holds entries, each written by its
                                                             rank
        sharded/                                          <- torch.distributed.checkpoint (any world size
                                                             resumes from it): the fp32 masters, optimizer,
                                                             a differing πref, buffers; rng/rank_N.pt
Each rank hashes only the files it wrote; rank 0 merges the lists into the manifest.
Between them, with schedule.state_every, the training state alone (what a resume needs: sharded/ as above,
trainer_state.pt, checkpoint.json; no HF export) is saved asynchronously (`AsyncStateSaver`):
    run_dir/state/step_000043/                            <- the newest only; gone once a newer state or
                                                             checkpoint is complete
so a preemption, which gives a run only the cluster's grace before SIGKILL, costs at most state_every steps.
A resume takes the newest complete one of checkpoints and states.
A checkpoint is written into `step_NNNNNN.tmp` and renamed when complete, so a folder without the
suffix was whole when written; leftovers of a killed save are removed on the next start. A resume checks
the newest checkpoint against its manifest (a file truncated or changed since, e.g. by a broken copy or
disk) and, if it is damaged, says so by name, moves it aside to `step_NNNNNN.damaged` and takes the
previous complete one.

When a step is saved and which checkpoints stay is the run's CheckpointManager's (the schedule and the
retention); the trainer asks it `due(step)` and hands it the state to save.
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
# re-exported for the trainer and its tests
from common.layout import STATE_FILE, STEP_RE, list_checkpoints, step_dir  # noqa: F401

# torch and numpy are imported inside the functions that need them: the layout helpers (list_checkpoints,
# step_dir) serve the experiment driver, which should not pay for loading torch.

MANIFEST = "checkpoint.json"


class DamagedCheckpointWarning(UserWarning):
    """The newest checkpoint does not match its manifest; the previous complete one is used."""


STATE = "state"   # run_dir/state/step_NNNNNN: the training state saved between checkpoints


def state_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / STATE / f"step_{step:06d}"


def list_states(run_dir: Path) -> list[int]:
    """The steps of the run's complete training states (state/step_NNNNNN holding trainer_state.pt)."""
    root = Path(run_dir) / STATE
    if not root.is_dir():
        return []
    return sorted(int(m.group(1)) for p in root.iterdir() if (m := STEP_RE.match(p.name))
                  and (p / STATE_FILE).is_file())


def resume_dir(run_dir: Path, step: int) -> Path:
    """The folder a resume from `step` reads: the step's checkpoint, else its training state."""
    d = step_dir(run_dir, step)
    return d if (d / STATE_FILE).is_file() else state_dir(run_dir, step)


def is_state(folder: Path) -> bool:
    """Whether a resume folder is a training state (no HF export: the weights are in sharded/ only)."""
    return Path(folder).parent.name == STATE


def clean_partial(run_dir: Path) -> None:
    for root in (Path(run_dir) / "checkpoints", Path(run_dir) / STATE):
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
    return _begin(step_dir(run_dir, step))


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, state: dict, reference=None, weights=None,
                    reference_weights=None, tmp: Path | None = None) -> Path:
    """Write model (HF format), tokenizer, `state` (+ RNG) and optionally the reference's weights.

    weights / reference_weights: full tensors to write instead of the modules' own (gathered from FSDP2
    shards; the module then only supplies its config). tmp: a begun folder that already holds the ranks'
    shards."""
    tmp = tmp or begin_checkpoint(run_dir, step)
    model.save_pretrained(tmp, state_dict=weights)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    if reference is not None:
        reference.save_pretrained(tmp / "reference", state_dict=reference_weights)
    faults.point("checkpoint", step)
    import torch
    torch.save({**state, "rng": rng_state()}, tmp / "trainer_state.pt")
    return _commit(run_dir, step, tmp, {})


def _commit(run_dir: Path, step: int, tmp: Path, hashed: dict) -> Path:
    """The manifest (the ranks' own entries `hashed`, and every other file, which rank 0 wrote, hashed here),
    then the rename that makes the checkpoint complete."""
    return _commit_folder(tmp, step_dir(run_dir, step), step, hashed)


def finish_checkpoint(run_dir: Path, step: int, tmp: Path, config, tokenizer, state: dict, export_dtype,
                      index: dict, hashed: dict, generation_config=None) -> Path:
    """Rank 0 completes a checkpoint whose weights the ranks wrote (save_sharded_state, export_parts): the HF
    config (its dtype: the export's), the generation config, the tokenizer, the parts' index, trainer_state.pt
    (+ RNG), then the manifest and the rename. `hashed`: every rank's own files, hashed by that rank."""
    import copy

    import torch
    config = copy.deepcopy(config)
    config.dtype = export_dtype
    config.save_pretrained(tmp)
    if generation_config is not None:
        generation_config.save_pretrained(tmp)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    write_json_atomic(tmp / INDEX, index, indent=2, sort_keys=True)
    faults.point("checkpoint", step)
    torch.save({**state, "rng": rng_state()}, tmp / "trainer_state.pt")
    return _commit(run_dir, step, tmp, hashed)


INDEX = "model.safetensors.index.json"   # the HF sharded export's index (weight name -> part file)


def _export_entries(model) -> list[tuple[str, object]]:
    """(HF name, tensor or DTensor) of every state-dict entry the HF export holds: a tied alias
    (lm_head.weight = embed_tokens.weight) is left out, as save_pretrained does. The same list on every
    rank."""
    first: dict[int, str] = {}
    alias = {}
    for name, prm in model.named_parameters(remove_duplicate=False):
        alias[name] = first.setdefault(id(prm), name)
    return [(k, v) for k, v in model.state_dict().items() if alias.get(k, k) == k]


def part_owners(nbytes: list[int], world: int) -> list[int]:
    """The rank that writes each entry of the HF export: entries in order, cut into `world` contiguous runs of
    about equal bytes (entry i goes to rank floor(bytes before i · world / total)).
    part_owners([4, 4, 4, 4], 2) = [0, 0, 1, 1]."""
    total = max(1, sum(nbytes))
    out, before = [], 0
    for n in nbytes:
        out.append(min(world - 1, before * world // total))
        before += n
    return out


def export_parts(tmp: Path, model, dtype, rank: int, world: int) -> tuple[dict, dict]:
    """The HF export as sharded safetensors written by several ranks (a collective: all ranks call it). Each
    entry is gathered as a full tensor (one at a time) and kept, cast to `dtype` on CPU, by the rank that owns
    it (part_owners); each rank holding entries writes its part `model-0000R-of-0000N.safetensors` and hashes
    it. Returns (the index every rank computes alike, this rank's {file: {size, sha256}})."""
    import torch
    from safetensors.torch import save_file
    from torch.distributed.tensor import DTensor
    entries = _export_entries(model)
    esize = torch.empty((), dtype=dtype).element_size()
    owners = part_owners([v.numel() * esize for _, v in entries], world)
    used = sorted(set(owners))
    name = {r: f"model-{i + 1:05d}-of-{len(used):05d}.safetensors" for i, r in enumerate(used)}
    mine = {}
    for (k, v), r in zip(entries, owners):
        full = v.full_tensor() if isinstance(v, DTensor) else v
        if r == rank:
            mine[k] = full.detach().to("cpu", dtype).contiguous().clone()
        del full
    index = {"metadata": {"total_size": sum(v.numel() * esize for _, v in entries)},
             "weight_map": {k: name[r] for (k, _), r in zip(entries, owners)}}
    if not mine:
        return index, {}
    save_file(mine, str(tmp / name[rank]), metadata={"format": "pt"})
    return index, _manifest(tmp, only=[tmp / name[rank]])


SHARDED = "sharded"   # the step folder's torch.distributed.checkpoint (several ranks)


def save_sharded_state(tmp: Path, model, optimizer, rank: int, reference=None) -> dict:
    """Every rank writes its shards into tmp/sharded/ with torch.distributed.checkpoint: the policy ("model":
    the fp32 masters), the optimizer state (keyed by parameter name), πref's when it differs from both the
    initial model and this step's policy ("reference"), and the buffers (the non-persistent ones, e.g. the
    rotary inv_freq, are in no state dict); and its RNG into tmp/sharded/rng/rank_N.pt. A collective: all
    ranks. Returns {file: {size, sha256}} of the files this rank wrote (torch.distributed.checkpoint's file
    writer names rank r's data files `__r_*.distcp`; the coordinator, rank 0, writes `.metadata`), hashed by
    this rank."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict
    state = {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, optimizer),
             "buffers": dict(model.named_buffers())}
    if reference is not None:
        state["reference"] = get_model_state_dict(reference)
    d = tmp / SHARDED
    dcp.save(state, checkpoint_id=str(d), no_dist=not torch.distributed.is_initialized())
    (d / "rng").mkdir(parents=True, exist_ok=True)
    torch.save(rng_state(), d / "rng" / f"rank_{rank}.pt")
    own = sorted(d.glob(f"__{rank}_*.distcp")) + [d / "rng" / f"rank_{rank}.pt"]
    own += [d / ".metadata"] if rank == 0 else []
    return _manifest(tmp, only=own)


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
    nd = not torch.distributed.is_initialized()
    msd = get_model_state_dict(model)           # this world's layout, filled in place by load
    dcp.load({key: msd}, checkpoint_id=d, no_dist=nd)
    set_model_state_dict(model, msd)
    with torch.no_grad():
        dcp.load({"buffers": dict(model.named_buffers())}, checkpoint_id=d, no_dist=nd)


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


def _manifest(folder: Path, only: list[Path] | None = None, skip: set[str] = frozenset()) -> dict:
    """{relative path: {"size", "sha256"}} of the files `only` (default: every file under `folder` but the
    manifest itself and the relative paths `skip`, which other ranks hashed)."""
    files = only if only is not None else [p for p in sorted(folder.rglob("*")) if p.is_file()
                                           and p.name != MANIFEST]
    out = {}
    for p in files:
        rel = str(Path(p).relative_to(folder))
        if rel not in skip:
            out[rel] = {"size": p.stat().st_size, "sha256": sha256_file(p)}
    return out


def damage(folder: Path, threads: int = 8) -> str | None:
    """Why the checkpoint folder does not match its manifest (a missing, resized or changed file), or None if
    it does. Sizes are checked first, then the files are hashed `threads` at a time (hashlib and the reads
    release the GIL; a 7B step holds ~100 GB in many files). A folder written before manifests existed (no
    checkpoint.json) is taken as it is."""
    from concurrent.futures import ThreadPoolExecutor
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
    with ThreadPoolExecutor(threads) as pool:
        got = dict(zip(files, pool.map(lambda rel: sha256_file(folder / rel), files)))
    for rel, want in files.items():
        if got[rel] != want["sha256"]:
            return f"{rel} does not match its sha256 in the manifest"
    return None


def latest_complete(run_dir: Path) -> int | None:
    """The newest checkpoint or training state (state/, schedule.state_every) that matches its manifest
    (None: none). Each newer, damaged one is reported with a DamagedCheckpointWarning naming it and why, and
    moved aside to `step_NNNNNN.damaged` (kept, not deleted: nothing is lost; it is no longer listed)."""
    folders = [step_dir(run_dir, s) for s in list_checkpoints(run_dir)]
    folders += [state_dir(run_dir, s) for s in list_states(run_dir) if s not in list_checkpoints(run_dir)]
    for d in sorted(folders, key=lambda f: int(STEP_RE.match(f.name).group(1)), reverse=True):
        step = int(STEP_RE.match(d.name).group(1))
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
                 "param_groups": [{**g, "params": [names[i] for i in g["params"]]}
                                  for g in saved["param_groups"]]}
    set_optimizer_state_dict(model, optimizer, optim_state_dict=saved,
                             options=StateDictOptions(full_state_dict=True))


def load_state(run_dir: Path, step: int) -> dict:
    """trainer_state.pt of the resume point `step` (its checkpoint, else its training state)."""
    import torch
    return torch.load(resume_dir(run_dir, step) / STATE_FILE, weights_only=False)


def prune(run_dir: Path, keep_last: int | None, protected: set[int],
          scheduled=lambda step: True) -> list[int]:
    """Retention, called after a checkpoint is complete: delete every checkpoint but the newest `keep_last`
    (null: all), the `protected` steps and the newest one (never deleted: it is the resume point). A
    checkpoint off the schedule (`scheduled(step)` False: a save on a stop signal) is a resumable state only,
    deleted once a newer one is complete, so the checkpoints that stay are those an uninterrupted run
    keeps."""
    steps = list_checkpoints(run_dir)
    if not steps:
        return []
    recent = set(steps[-keep_last:]) if keep_last is not None else set(steps)
    doomed = [s for s in steps[:-1] if s not in protected and (not scheduled(s) or s not in recent)]
    for s in doomed:
        shutil.rmtree(step_dir(run_dir, s), ignore_errors=True)
    return doomed


def best_candidates(curve: list[tuple[int, float]], saved, window: int) -> set[int]:
    """The saved steps that may still be the argmax of `curve` [(step, value)] smoothed over `window` centred
    points (the driver's θ* rule: a centred moving average, ties to the earliest) once more points arrive: the
    best among those whose smoothed value is final (window // 2 later points exist) and every one not final
    yet. Any other saved step can never be chosen, so deleting it is safe. window 0: none."""
    if window <= 0 or not curve:
        return set()
    lo, hi = (window - 1) // 2, window // 2
    vals, n = [v for _, v in curve], len(curve)
    final, pending = [], set()
    for i, (s, _) in enumerate(curve):
        if s not in saved:
            continue
        if i + hi > n - 1:
            pending.add(s)
            continue
        seg = vals[max(0, i - lo): i + hi + 1]
        final.append((sum(seg) / len(seg), -s))
    return pending | ({-max(final)[1]} if final else set())


class AsyncStateSaver:
    """The training state saved between checkpoints without stopping the run (torchtitan's async
    checkpointing): at a step boundary each rank copies its shards of the policy (the fp32 masters), the
    optimizer, a differing πref and the buffers into CPU memory (torch.distributed.checkpoint.async_save; a
    copy, so the next steps' updates do not reach it) and writes them in a background thread, over a gloo
    group of its own (the step's collectives run beside it on the default group); the trainer's state and
    each rank's RNG are taken at the boundary too. Once every rank has written and hashed its files
    (sharded/done/rank_N.json), rank 0's thread writes trainer_state.pt and the manifest and renames
    state/step_NNNNNN.tmp into place, then deletes the older states. One save in flight at a time: the next
    save, a checkpoint and the run's end wait for it (`wait`), which raises if it failed.

        saver.save(step, policy, optimizer, reference_or_None, trainer_state, dist)
        saver.wait()
    """

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self._group = None
        self._thread = None
        self._step: int | None = None
        self._error: str | None = None

    def save(self, step: int, model, optimizer, reference, state: dict, dist) -> None:
        """Start the state of `step` (a collective: every rank calls it at the same boundary)."""
        import io
        import threading

        import torch
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict
        self.wait()
        if dist.distributed and self._group is None:
            self._group = torch.distributed.new_group(backend="gloo")
        tmp = dist.all_gather_object(_begin(state_dir(self.run_dir, step)) if dist.is_main else None)[0]
        sd = {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, optimizer),
              "buffers": dict(model.named_buffers())}
        if reference is not None:
            sd["reference"] = get_model_state_dict(reference)
        d = tmp / SHARDED
        (d / "rng").mkdir(parents=True, exist_ok=True)
        torch.save(rng_state(), d / "rng" / f"rank_{dist.rank}.pt")
        blob = None
        if dist.is_main:    # the trainer's state as it is now: the run goes on changing it
            buf = io.BytesIO()
            torch.save({**state, "rng": rng_state()}, buf)
            blob = buf.getvalue()
        upload = dcp.async_save(sd, checkpoint_id=str(d), process_group=self._group,
                                no_dist=not dist.distributed)
        self._step = step
        self._thread = threading.Thread(target=self._finish, args=(upload, tmp, step, dist.rank,
                                                                    dist.world_size, blob),
                                        name=f"state-{step}", daemon=True)
        self._thread.start()

    def _finish(self, upload, tmp: Path, step: int, rank: int, world: int, blob: bytes | None) -> None:
        """In the background: this rank's files written, hashed and announced; on rank 0, once every rank's
        are, the state completed and committed."""
        done = tmp / SHARDED / "done"
        try:
            upload.result()
            d = tmp / SHARDED
            own = sorted(d.glob(f"__{rank}_*.distcp")) + [d / "rng" / f"rank_{rank}.pt"]
            own += [d / ".metadata"] if rank == 0 else []
            mine = {"files": _manifest(tmp, only=own)}
        except Exception as e:          # noqa: BLE001 (reported by wait(), on this rank and rank 0)
            mine = {"error": f"{type(e).__name__}: {e}"}
        done.mkdir(parents=True, exist_ok=True)
        write_json_atomic(done / f"rank_{rank}.json", mine)
        if "error" in mine:
            self._error = mine["error"]
        if rank != 0:
            return
        import time
        marks = [done / f"rank_{r}.json" for r in range(world)]
        while not all(m.is_file() for m in marks):    # the others write theirs in their own threads
            time.sleep(0.05)
        got = [json.loads(m.read_text()) for m in marks]
        bad = [f"rank {r}: {g['error']}" for r, g in enumerate(got) if "error" in g]
        if bad:
            self._error = "; ".join(bad)
            return
        (tmp / STATE_FILE).write_bytes(blob)
        shutil.rmtree(done)
        hashed = {k: v for g in got for k, v in g["files"].items()}
        _commit_folder(tmp, state_dir(self.run_dir, step), step, hashed)
        for old in list_states(self.run_dir):
            if old < step:
                shutil.rmtree(state_dir(self.run_dir, old), ignore_errors=True)

    def wait(self) -> None:
        """Until the state in flight is written (and on rank 0 committed); raises if it failed."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            err, self._error = self._error, None
            raise RuntimeError(f"{self.run_dir}: saving the training state of step {self._step} failed: "
                               f"{err}")

    def drop_until(self, step: int) -> None:
        """Delete the states of steps <= `step` (a checkpoint of `step` is complete: it resumes the run),
        and the state folder once empty: a finished run's layout has none."""
        for old in list_states(self.run_dir):
            if old <= step:
                shutil.rmtree(state_dir(self.run_dir, old), ignore_errors=True)
        root = self.run_dir / STATE
        if root.is_dir() and not any(root.iterdir()):
            root.rmdir()


def _begin(final: Path) -> Path:
    """The empty `<final>.tmp` folder a checkpoint or state is written into (rank 0 makes it)."""
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def _commit_folder(tmp: Path, final: Path, step: int, hashed: dict) -> Path:
    """The manifest (the ranks' own entries `hashed`, and every other file, hashed here), then the rename
    that makes the folder complete."""
    files = {**_manifest(tmp, skip=set(hashed)), **hashed}
    write_json_atomic(tmp / MANIFEST, {"step": step, "files": dict(sorted(files.items()))}, indent=1,
                      sort_keys=True)
    if final.exists():  # a rerun of a step whose folder survived a crash before the run went on
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


class CheckpointManager:
    """The run's checkpoint policy, as torchtitan's CheckpointManager owns its schedule and retention: when a
    step is saved (`due`) and which checkpoints stay (`protected`, `prune`). The trainer asks `due` and hands
    `save` the models (armor.models.Models, which write the weights on any world size) and its own state.

        checkpoints = CheckpointManager(run_dir, cfg.schedule)
        if checkpoints.due(step) or stopping:
            checkpoints.save(models, step, optimizer, state)
    """

    def __init__(self, run_dir: Path, schedule):
        self.run_dir, self.schedule = Path(run_dir), schedule
        self.states = AsyncStateSaver(self.run_dir)      # schedule.state_every's saves between checkpoints

    def due(self, step: int) -> bool:
        """Whether the schedule saves `step`: every save_every steps, the last step, schedule.keep_steps."""
        s = self.schedule
        return step % s.save_every == 0 or step == s.total_steps or step in s.keep_steps

    def state_due(self, step: int) -> bool:
        """Whether `step` saves its training state alone (schedule.state_every; not a checkpoint's step)."""
        every = self.schedule.state_every
        return bool(every) and step % every == 0 and not self.due(step)

    def save_state(self, models, step: int, optimizer, state: dict) -> None:
        """Start the step's training state in the background (AsyncStateSaver; a collective on several
        ranks): what models.save writes but the HF export, with πref's shards when it differs from the initial
        model and this step's policy."""
        ref = models.reference_step
        state = {**state, "step": step, "world_size": models.dist.world_size, "reference_step": ref,
                 "reference_source": models.ref_path if ref is None else f"step {ref}", "optimizer": None,
                 "state_only": True}
        self.states.save(step, models.policy, optimizer,
                         models.reference if ref is not None and ref != step else None, state, models.dist)

    def close(self) -> None:
        """The end of the run: the state in flight is complete (raises if it failed)."""
        self.states.wait()

    def protected(self, val_curve: list[tuple[int, float]], best_val: tuple[float, int] | None) -> set[int]:
        """Checkpoints never pruned: schedule.keep_steps, and every saved step that may still be the best
        validation of `val_curve` [(step, value)] (smoothed over schedule.keep_best_window points;
        best_candidates) and the best so far, best_val = (value, step)."""
        s = self.schedule
        saved = {x for x, _ in val_curve if x >= 1 and self.due(x)}     # step 0: no checkpoint
        best = best_candidates(val_curve, saved, s.keep_best_window)
        if s.keep_best_window and best_val is not None:
            best.add(best_val[1])
        return set(s.keep_steps) | best

    def save(self, models, step: int, optimizer, state: dict) -> None:
        """The step's checkpoint, written by models.save (a collective on several ranks) with `state`, the
        trainer's part of trainer_state.pt (its "val_curve" and "best_val" decide the protected steps); then
        rank 0 prunes: the newest schedule.keep_last, the protected steps, this step and the one whose policy
        πref holds (models.reference_step) stay, and an off-schedule save goes once a newer one is
        complete. A state in flight completes first; the states up to this step go (the checkpoint resumes
        the run)."""
        self.states.wait()
        models.save(self.run_dir, step, optimizer, state)
        if models.dist.is_main:
            faults.point("saved", step)
            ref = models.reference_step
            keep = self.protected(state["val_curve"], state["best_val"]) | {step} | (
                {ref} if ref is not None else set())
            prune(self.run_dir, self.schedule.keep_last, keep, self.due)
            self.states.drop_until(step)
        models.dist.barrier()
