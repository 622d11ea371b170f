"""`python -m armor.train --config FILE [dotted.key=value ...]`: train one arm (resumes by itself).

    python -m armor.train --config reproduce/presets/tiny.yaml algo.mix.alpha=0.875 output_dir=runs/mine
    python -m armor.train --help                 # every config key: type, default, help
    python -m armor.train --help algo.mix        # one section (or one key)
    python -m armor.train --help-markdown        # the same as Markdown (docs/config.md)
"""
from __future__ import annotations

if __name__ == "__main__":   # a process starts here: pin its CPU numerics before torch loads
    from common import cpu_numerics
    cpu_numerics.pin()

import argparse
import sys
from pathlib import Path

import yaml

from armor.config import ConfigError, RunConfig, load_config
from common.yaml_config import read_yaml

USAGE = "python -m armor.train --config FILE [KEY=VALUE ...]"


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m armor.train", usage=USAGE, add_help=False,
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="YAML preset or run config")
    ap.add_argument("overrides", nargs="*", help="dotted overrides, e.g. algo.mix.alpha=0.875")
    return ap


def print_help(section: str | None, out=None) -> int:
    from armor import config_doc
    out = out or sys.stdout
    try:
        body = config_doc.text(section)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    print(f"usage: {USAGE}\n\n{__doc__.strip()}\n\n"
          f"Config keys{' under ' + section if section else ''} (set them in the YAML file or as KEY=VALUE; "
          f"reference: docs/config.md):\n", file=out)
    print(body, file=out, end="")
    return 0


HINT = "#hint:"   # a preset's lines `#hint: TEXT`: what to do when its model.path does not exist


def preset_hint(path: str | Path) -> list[str]:
    """The `#hint:` lines of a preset file (marker and one space removed), else those of its `base:` file."""
    path = Path(path)
    text = path.read_text()
    lines = [line[len(HINT):].removeprefix(" ") for line in text.splitlines() if line.startswith(HINT)]
    if lines:
        return lines
    base = (yaml.safe_load(text) or {}).get("base")
    return preset_hint(path.parent / base) if isinstance(base, str) else []


def missing_model_hint(config: str | Path, cfg: RunConfig) -> str | None:
    """When model.path does not exist and is the preset's own (not overridden), the preset's `#hint:` lines
    after the missing path (e.g. the command that builds it); None when it exists or the preset has no hint.

    The trainer knows no preset's layout: the file that sets model.path says how to make it."""
    if Path(cfg.model.path).exists():
        return None
    try:
        own = (read_yaml(config).get("model") or {}).get("path")
        hint = preset_hint(config)
    except (OSError, ValueError, yaml.YAMLError):
        return None
    if own != cfg.model.path or not hint:
        return None
    return f"model.path: {cfg.model.path!r} does not exist: " + "\n".join(hint)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--help-markdown" in argv:
        from armor import config_doc
        sys.stdout.write(config_doc.markdown())
        return 0
    for flag in ("--help", "-h"):
        if flag in argv:
            i = argv.index(flag)
            nxt = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("-") else None
            return print_help(nxt if nxt and "=" not in nxt else None)
    args = _parser().parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    hint = missing_model_hint(args.config, cfg)
    if hint:
        print(f"error: {hint}", file=sys.stderr)
        return 2
    from armor.trainer import Trainer
    try:
        trainer = Trainer(cfg)
        trainer.fit()
    except (FileNotFoundError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    # stopped by a signal after saving (armor.stop): exit as a process killed by it reports, for the requeue
    return 128 + trainer.stopped if trainer.stopped is not None else 0


if __name__ == "__main__":
    sys.exit(main())
