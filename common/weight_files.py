"""A model folder's weight files checked before anything loads them: a truncated or damaged `*.safetensors`
file is one error naming it and the key it came from, not the loader's traceback after minutes of set-up.
Light (no torch): the harness checks its inputs with it before it loads a model."""
from __future__ import annotations

import json
import struct
from pathlib import Path


class ModelFileError(ValueError):
    """A weight file of a model folder that cannot be read (truncated, damaged); the message names it."""


def check_weights(path: str | Path, key: str) -> None:
    """Fail naming `key` and the file when a `*.safetensors` file of the folder is damaged: its header (an
    8-byte little-endian length, then that much JSON) unreadable, or its size not 8 + the header's length +
    the bytes its tensors span (a truncated copy). Reads the headers only."""
    for f in sorted(Path(path).glob("*.safetensors")):
        size = f.stat().st_size
        try:
            with open(f, "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                if n > size - 8:
                    raise ValueError(f"its header says {n:,} bytes of {size:,}")
                header = json.loads(fh.read(n))
            end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"),
                      default=0)
        except (struct.error, ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            raise ModelFileError(f"{key}: {f} is not a readable safetensors file ({e}): damaged or "
                                 f"truncated, copy it again") from None
        if size != 8 + n + end:
            raise ModelFileError(f"{key}: {f} has {size:,} bytes, its header describes {8 + n + end:,}: "
                                 f"truncated or damaged, copy it again")
