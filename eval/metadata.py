"""Where a checkpoint comes from, for the results table: its run folder, and the preset / arm / seed / model /
step_offset of its rows, read from the run's layout ``runs/<preset>/<arm>/seed<s>`` and config."""
from __future__ import annotations

import os
import re
from pathlib import Path

from common.layout import STEP_RE
from eval.settings import EvalError, read_yaml_file

__all__ = ["run_dir_of", "run_metadata", "check_meta_for_results"]


def run_dir_of(ckpt: Path) -> Path | None:
    """The run folder of DIR/checkpoints/step_NNNNNN (when it has a config.yaml)."""
    if ckpt.parent.name == "checkpoints" and (ckpt.parent.parent / "config.yaml").is_file():
        return ckpt.parent.parent
    return None


def _hub_or_folder_name(path: str, depth: int = 0) -> str:
    p = Path(path)
    if depth < 8 and STEP_RE.match(p.name) and p.parent.name == "checkpoints" and \
            (p.parent.parent / "config.yaml").is_file():
        try:
            cfg = read_yaml_file(p.parent.parent / "config.yaml")
            parent_model = ((cfg.get("model") or {}).get("path"))
            if parent_model:
                return _hub_or_folder_name(str(parent_model), depth + 1)
        except EvalError:
            pass
    if not p.exists() and path.count("/") == 1:
        return path.split("/")[1]                       # hub id org/name -> name
    name = p.name or str(p)
    if name == "base_model" and p.parent.name:
        name = p.parent.name
    return name


def run_metadata(run_dir: Path | None, cfg: dict | None, ckpt: Path, preset: dict | None = None,
                 overrides: dict | None = None) -> dict:
    """preset / model / arm / seed / step_offset for results rows (overrides win when not None)."""
    meta = {"preset": None, "model": None, "arm": None, "seed": None, "step_offset": 0}
    cfg = cfg or {}
    layouts = []
    if cfg.get("output_dir"):
        layouts.append(Path(str(cfg["output_dir"])))
    if run_dir is not None:
        layouts.append(Path(os.path.abspath(run_dir)))
    for lay in layouts:
        m = re.match(r"^seed(\d+)$", lay.name)
        if m and lay.parent.name and lay.parent.parent.name:
            meta.update(preset=lay.parent.parent.name, arm=lay.parent.name, seed=int(m.group(1)))
            break
    if meta["preset"] is None and isinstance(cfg.get("name"), str) and "/" in cfg["name"]:
        pr, _, arm = cfg["name"].partition("/")
        meta.update(preset=pr, arm=arm.split("/")[0])
    if meta["seed"] is None and isinstance(cfg.get("seed"), int):
        meta["seed"] = cfg["seed"]
    if meta["preset"] is None and preset:
        meta["preset"] = preset.get("name")
    try:
        meta["step_offset"] = int(cfg.get("step_offset") or 0)
    except (TypeError, ValueError):
        meta["step_offset"] = 0
    model_path = (cfg.get("model") or {}).get("path") if cfg else None
    meta["model"] = _hub_or_folder_name(str(model_path)) if model_path else _hub_or_folder_name(str(ckpt))
    for k, v in (overrides or {}).items():
        if v is not None:
            meta[k] = v
    return meta


def check_meta_for_results(meta: dict) -> None:
    """EvalError unless `meta` has the preset / arm / seed a results row needs (naming the flags to pass)."""
    missing = [k for k in ("preset", "arm", "seed") if meta.get(k) in (None, "")]
    if missing:
        flags = {"preset": "--preset-name", "arm": "--arm", "seed": "--run-seed"}
        raise EvalError(f"--results needs {', '.join(missing)} for the table rows: not found in a run config "
                        f"(runs/<preset>/<arm>/seed<s>); pass {', '.join(flags[m] for m in missing)}")
