"""`python -m armor.train --config FILE [dotted.key=value ...]`: train one arm (resumes by itself)."""
from __future__ import annotations

import argparse
import sys

from armor.config import ConfigError, load_config


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m armor.train", description=__doc__)
    ap.add_argument("--config", required=True, help="YAML preset or run config")
    ap.add_argument("overrides", nargs="*", help="dotted overrides, e.g. algo.mix.alpha=0.875")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
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
