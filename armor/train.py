"""`python -m armor.train --config FILE [dotted.key=value ...]`: train one arm (resumes by itself).

    python -m armor.train --config reproduce/presets/tiny.yaml algo.mix.alpha=0.875 output_dir=runs/mine
    python -m armor.train --help                 # every config key: type, default, help
    python -m armor.train --help algo.mix        # one section (or one key)
    python -m armor.train --help-markdown        # the same as Markdown (docs/config.md)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from armor.config import ConfigError, RunConfig, load_config

USAGE = "python -m armor.train --config FILE [KEY=VALUE ...]"


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m armor.train", usage=USAGE, add_help=False,
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="YAML preset or run config")
    ap.add_argument("overrides", nargs="*", help="dotted overrides, e.g. algo.mix.alpha=0.875")
    return ap


def print_help(section: str | None, out=sys.stdout) -> int:
    from armor import config_doc
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


def toy_world_hint(cfg: RunConfig) -> str | None:
    """When model.path is a toy world's base model that is not built yet: the command that builds it.

    The toy world layout (reproduce/toy/build.py): WORLD/base_model and WORLD/data/train.jsonl; the smoke
    preset builds it with --quick (a seconds-long SFT)."""
    mp = Path(cfg.model.path)
    if mp.exists() or mp.name != "base_model":
        return None
    world = mp.parent
    if world not in Path(cfg.data.train).parents:
        return None
    quick = " --quick" if cfg.name.split("/")[0] == "smoke" else ""
    # the world design a preset's driver builds (its protocol section, which the trainer otherwise leaves alone)
    version = int(((cfg.foreign or {}).get("protocol") or {}).get("world_version", 1))
    flag = f" --version {version}" if version != 1 else ""
    return (f"model.path: {cfg.model.path!r} does not exist: it is the toy world's base model, not built yet. "
            f"Build it (cached; {'under a minute' if quick else 'a few minutes'} on a CPU) with:\n"
            f"    python -m reproduce.toy.build --out {world}{flag}{quick}\n"
            f"or let the driver build it: python reproduce/run_all.py --preset "
            f"{cfg.name.split('/')[0]}")


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
    hint = toy_world_hint(cfg)
    if hint:
        print(f"error: {hint}", file=sys.stderr)
        return 2
    from armor.trainer import train
    try:
        train(cfg)
    except (FileNotFoundError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
