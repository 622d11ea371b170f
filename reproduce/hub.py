"""Fetch the hub models and datasets a plan needs into one shared folder, once, before any job reads them.

At 16 nodes x 8 ranks every rank of every job would otherwise read the hub at once. The driver's first job
(`python -m reproduce.jobs fetch --preset P --root R`, added by build_jobs for presets that name hub
ids; none for the toy presets, whose models are built locally) copies them here; the train and evaluate jobs
then read the local copies (their overrides name the fetched paths).

What is fetched: model.path / algo.reference.path / algo.distill.teacher_path when they are hub ids (org/name,
no such local path), and each benchmark of validation.benchmarks / protocol.eval_benchmarks given by name
whose registry entry has a hub dataset and no full local copy (common/benchmarks.py: gpqa_diamond, gated;
mmlu_pro, whose shipped file is a 300-question sample).

Layout of the fetch folder (`--fetch-dir`, else $ARMOR_FETCH_DIR, else <root>/_fetch; shared by presets):
    models/<org>/<name>/              the model repository's files (huggingface_hub.snapshot_download)
    datasets/<benchmark>.jsonl        the benchmark's rows (datasets.load_dataset of the repository's files)
    hub/                              huggingface_hub / datasets caches
    ....fetched.json                  beside each item, written last: the item is whole (fetches are cached)

Source: the hub (gated datasets need a token: $HF_TOKEN or `huggingface-cli login`), or with
$ARMOR_HUB_MIRROR=DIR a local folder laid out like the hub: DIR/<org>/<name>/ for models and
DIR/datasets/<org>/<name>/ for datasets (air-gapped clusters; the offline tests).
"""
from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from common.hashing import sha256_file

FETCH_ENV = "ARMOR_FETCH_DIR"
MIRROR_ENV = "ARMOR_HUB_MIRROR"
TOKEN_ENV = "HF_TOKEN"
MARK = ".fetched.json"
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL_KEYS = ("model.path", "algo.reference.path", "algo.distill.teacher_path")


class FetchError(RuntimeError):
    pass


@dataclass
class Item:
    """One thing to fetch: a hub model or a hub dataset split (one benchmark)."""
    kind: str                      # "model" | "dataset"
    repo_id: str
    dest: Path                     # models/<org>/<name> or datasets/<benchmark>.jsonl
    keys: list[str] = field(default_factory=list)   # the config keys that read it
    benchmark: Optional[str] = None
    config: Optional[str] = None
    split: Optional[str] = None
    gated: bool = False

    @property
    def marker(self) -> Path:
        return self.dest.with_name(self.dest.name + MARK)

    def done(self) -> bool:
        return self.marker.is_file() and self.dest.exists()

    def label(self) -> str:
        if self.kind == "model":
            return self.repo_id
        return f"{self.repo_id} ({', '.join(x for x in (self.config, self.split) if x)})"


def default_fetch_dir(root: str | Path) -> Path:
    return Path(os.environ.get(FETCH_ENV) or Path(root) / "_fetch").resolve()


def is_hub_id(path: str) -> bool:
    """org/name that is not a local path (relative to the cwd or the repository)."""
    if not path or not HUB_ID.match(path):
        return False
    return not (Path(path).exists() or (REPO_ROOT / path).exists())


def _dataset_spec(name: str):
    """The registry entry of a benchmark named without a path, when it must come from the hub."""
    from common.benchmarks import BenchmarkError, get_spec
    try:
        spec = get_spec(name)
    except BenchmarkError:
        return None
    if not spec.hf_id:
        return None
    local = spec.local_path()
    if local is not None and local.exists() and not spec.local_report_name:
        return None          # a full local copy is shipped
    return spec


def items(preset, fetch_dir: Path) -> list[Item]:
    """What a preset (matrix.presets.Preset: run config and protocol) needs from the hub, in a stable
    order (models first)."""
    fetch_dir = Path(fetch_dir)
    cfg = preset.cfg
    items: dict[tuple, Item] = {}
    values = {"model.path": cfg.model.path, "algo.reference.path": cfg.algo.reference.path,
              "algo.distill.teacher_path": cfg.algo.distill.teacher_path}
    for key in MODEL_KEYS:
        rid = values[key]
        if is_hub_id(rid):
            it = items.setdefault(("model", rid), Item("model", rid, fetch_dir / "models" / rid))
            it.keys.append(key)
    for key, specs in (("validation.benchmarks", cfg.validation.benchmarks),
                       ("protocol.eval_benchmarks", preset.protocol.eval_benchmarks)):
        for s in specs:
            if "=" in s:
                continue
            spec = _dataset_spec(s.strip())
            if spec is None:
                continue
            it = items.setdefault(("dataset", spec.name), Item(
                "dataset", spec.hf_id, fetch_dir / "datasets" / f"{spec.name}.jsonl", benchmark=spec.name,
                config=spec.hf_config, split=spec.hf_split, gated=spec.gated))
            it.keys.append(key)
    return list(items.values())


def fetched_benchmarks(specs: list[str], items: list[Item]) -> list[str]:
    """Benchmark specs with the fetched ones as NAME=path (the registry reads them in the benchmark's
    format)."""
    from common.benchmarks import ALIASES
    by = {it.benchmark: it for it in items if it.kind == "dataset"}
    out = []
    for s in specs:
        name = ALIASES.get(s.strip(), s.strip())
        out.append(f"{name}={by[name].dest}" if "=" not in s and name in by else s)
    return out


def fetched_overrides(cfg, items: list[Item], models: bool = True) -> dict[str, object]:
    """{config key: fetched value} for a train job (models=False: stage 2, whose weights are a checkpoint)."""
    out: dict[str, object] = {}
    values = {"model.path": cfg.model.path, "algo.reference.path": cfg.algo.reference.path,
              "algo.distill.teacher_path": cfg.algo.distill.teacher_path}
    for it in items:
        if it.kind == "model" and models:
            for key in it.keys:
                if values[key] == it.repo_id:
                    out[key] = str(it.dest)
    if any(it.kind == "dataset" and "validation.benchmarks" in it.keys for it in items):
        out["validation.benchmarks"] = fetched_benchmarks(list(cfg.validation.benchmarks), items)
    return out


# ------------------------------------------------------------------------------------------- sources
def mirror() -> Optional[Path]:
    m = os.environ.get(MIRROR_ENV)
    return Path(m).expanduser().resolve() if m else None


def _mirror_path(root: Path, it: Item) -> Path:
    return root / it.repo_id if it.kind == "model" else root / "datasets" / it.repo_id


def token() -> Optional[str]:
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV]
    try:
        from huggingface_hub import get_token
        return get_token()
    except Exception:  # noqa: BLE001  (no huggingface_hub, unreadable token file)
        return None


def check_ready(items: list[Item]) -> None:
    """Refuse, before any job is submitted, a plan that cannot be fetched: a mirror lacking an item, a gated
    dataset without a token. The message names what is missing and how to provide it."""
    todo = [it for it in items if not it.done()]
    m = mirror()
    if m is not None:
        lacking = [f"{it.label()} (expected {_mirror_path(m, it)})" for it in todo
                   if not _mirror_path(m, it).exists()]
        if lacking:
            raise FetchError(f"{MIRROR_ENV}={m}: not in the mirror: {'; '.join(lacking)}")
        return
    gated = [it for it in todo if it.gated]
    if gated and not token():
        names = ", ".join(f"{it.benchmark} ({it.repo_id})" for it in gated)
        raise FetchError(f"{names} is gated on the hub and no token was found: set {TOKEN_ENV} to a token of "
                         f"an account that accepted the dataset's terms on its hub page (or run "
                         f"`huggingface-cli login`), or give the file yourself as NAME=path in "
                         f"protocol.eval_benchmarks, e.g. "
                         f"protocol.eval_benchmarks=[...,{gated[0].benchmark}=/path/to/"
                         f"{gated[0].benchmark}.csv]")


def _du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def sizes(items: list[Item], fetch_dir: Path, ask_hub: bool = True) -> dict[str, Optional[int]]:
    """Bytes per item where known: fetched already (on disk), in the mirror, or from the hub's file list
    (one quick metadata request per repository; skipped offline, HF_HUB_OFFLINE=1, or after one failure)."""
    out: dict[str, Optional[int]] = {}
    m = mirror()
    hub_ok = ask_hub and m is None and os.environ.get("HF_HUB_OFFLINE", "0") in ("", "0")
    for it in items:
        key = str(it.dest)
        if it.done():
            out[key] = _du(it.dest)
        elif m is not None:
            out[key] = _du(_mirror_path(m, it)) if _mirror_path(m, it).exists() else None
        elif hub_ok and not (it.gated and not token()):   # a gated repository lists nothing without a token
            try:
                from huggingface_hub import snapshot_download
                files = snapshot_download(it.repo_id, repo_type=it.kind, dry_run=True, etag_timeout=5,
                                          token=token(), cache_dir=str(Path(fetch_dir) / "hub"))
                out[key] = sum(int(f.file_size or 0) for f in files)
            except Exception:  # noqa: BLE001  (offline, gated without token, hub down)
                hub_ok = False
                out[key] = None
        else:
            out[key] = None
    return out


def human(n: Optional[int]) -> str:
    if n is None:
        return "size unknown"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


# -------------------------------------------------------------------------------------------- fetching
def _hub_error(it: Item, e: Exception) -> FetchError:
    hint = f" (gated: set {TOKEN_ENV} to a token of an account that accepted its terms)" if it.gated else ""
    return FetchError(f"{it.label()}: download failed: {type(e).__name__}: {e}{hint}")


def _repo_folder(it: Item, fetch_dir: Path) -> Path:
    """A local folder with a dataset repository's files (the mirror's, or downloaded into the hub cache)."""
    m = mirror()
    if m is not None:
        src = _mirror_path(m, it)
        if not src.exists():
            raise FetchError(f"{it.label()}: not in {MIRROR_ENV}={m} (expected {src})")
        return src
    from huggingface_hub import snapshot_download
    try:
        return Path(snapshot_download(it.repo_id, repo_type=it.kind, cache_dir=str(fetch_dir / "hub"),
                                      token=token()))
    except Exception as e:  # noqa: BLE001
        raise _hub_error(it, e) from e


def _fetch_model(it: Item, part: Path) -> None:
    """The model repository's files into `part`: copied from the mirror, or downloaded from the hub straight
    into it (a download a killed job left there is resumed, not restarted)."""
    m = mirror()
    if m is not None:
        if part.exists():
            shutil.rmtree(part)
        src = _mirror_path(m, it)
        if not src.exists():
            raise FetchError(f"{it.label()}: not in {MIRROR_ENV}={m} (expected {src})")
        shutil.copytree(src, part, symlinks=False, ignore=shutil.ignore_patterns(".git"))
        return
    from huggingface_hub import snapshot_download
    try:
        snapshot_download(it.repo_id, local_dir=str(part), token=token())
    except Exception as e:  # noqa: BLE001
        raise _hub_error(it, e) from e


def fetch_item(it: Item, fetch_dir: Path, log=print) -> None:
    """Copy one item into the fetch folder (atomically: a .partial sibling renamed into place, marker
    last)."""
    if it.done():
        log(f"fetched already: {it.label()} -> {it.dest}")
        return
    it.dest.parent.mkdir(parents=True, exist_ok=True)
    part = it.dest.with_name(it.dest.name + ".partial")
    if it.kind == "model":
        _fetch_model(it, part)
        if not (part / "config.json").is_file():
            raise FetchError(f"{it.label()}: its files have no config.json (not a Hugging Face model)")
        info = {"files": sorted(str(p.relative_to(part)) for p in part.rglob("*")
                                if p.is_file() and ".cache" not in p.relative_to(part).parts)}
    else:
        part.unlink(missing_ok=True)
        src = _repo_folder(it, fetch_dir)
        import datasets
        try:
            ds = datasets.load_dataset(str(src), it.config, split=it.split,
                                       cache_dir=str(fetch_dir / "hub" / "datasets"))
        except Exception as e:  # noqa: BLE001
            raise FetchError(f"{it.label()}: cannot read the dataset files in {src}: "
                             f"{type(e).__name__}: {e}") from e
        with open(part, "w") as f:
            for row in ds:
                f.write(json.dumps(dict(row), default=str, ensure_ascii=False) + "\n")
        info = {"rows": len(ds), "sha256": sha256_file(part)}
    if it.dest.is_dir():
        shutil.rmtree(it.dest)
    os.replace(part, it.dest)
    mark = {"kind": it.kind, "repo_id": it.repo_id, "config": it.config, "split": it.split,
            "benchmark": it.benchmark, "source": str(mirror()) if mirror() else "hub", "bytes": _du(it.dest),
            **info}
    tmp = it.marker.with_name(it.marker.name + ".tmp")
    tmp.write_text(json.dumps(mark, indent=1, sort_keys=True))
    os.replace(tmp, it.marker)
    log(f"fetched {it.label()} -> {it.dest} ({human(mark['bytes'])})")


def fetch_all(items: list[Item], fetch_dir: Path, log=print) -> None:
    check_ready(items)
    for it in items:
        fetch_item(it, Path(fetch_dir), log=log)
