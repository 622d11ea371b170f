"""YAML config files with `base:` chains, and the error every config problem raises (naming the key).

Shared by the trainer's config (armor.config), the harness (eval.evaluate reads presets) and the driver."""
from __future__ import annotations

from pathlib import Path

import yaml


class ConfigError(ValueError):
    """A config value is missing, unknown, of the wrong type or impossible. The message names the key."""


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def read_yaml(path: str | Path) -> dict:
    """Read a YAML config, resolving `base:` chains (paths relative to the including file)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config: file not found: {str(path)!r}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"config: {str(path)!r} is not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"config: {str(path)!r} must hold a mapping at top level, "
                          f"got {type(data).__name__}")
    base = data.pop("base", None)
    if base is not None:
        data = _deep_merge(read_yaml(path.parent / base), data)
    return data
