"""File checksums (checkpoint manifests, fetched hub files)."""
from __future__ import annotations

import hashlib
import os


def sha256_file(path: str | os.PathLike, block: int = 1 << 24) -> str:
    """Hex sha256 of a file, read in `block`-byte pieces."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for piece in iter(lambda: f.read(block), b""):
            h.update(piece)
    return h.hexdigest()
