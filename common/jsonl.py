"""JSON Lines and JSON files: one policy for reading back what a killed process may have half-written.

The owner of every JSONL read in the suite (metrics.jsonl, validation.jsonl, the driver's logs, result files):
- a torn last line (a write cut short: unparsable, or not ending in a newline) is dropped with a
  `TornLineWarning` that names the file; that row is recomputed by whoever resumes;
- an unparsable line anywhere else is damage, not a torn write: `ValueError` naming the file and line number;
- appends are flushed and fsynced, whole files are written to a temporary name and renamed.
Input files the suite did not write (benchmark data, responses to grade) are read strictly instead
(`numbered_objects`): any bad line is an error naming the file and line, since nothing will recompute it.
"""
from __future__ import annotations

import json
import os
import socket
import warnings
from pathlib import Path
from typing import Any, Iterable


class TornLineWarning(UserWarning):
    """The last line of a JSONL file was cut short and has been dropped."""


def read_jsonl(path: str | os.PathLike, *, missing_ok: bool = True) -> list[dict]:
    """Rows of a JSONL file (blank lines skipped); a torn last line is dropped with a warning naming `path`.

    `missing_ok`: a file that does not exist reads as no rows (else FileNotFoundError)."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        if missing_ok:
            return []
        raise
    lines = text.split("\n")
    # the last element is "" when the file ends in a newline; otherwise it is a line whose write may be
    # unfinished
    complete, tail = lines[:-1], lines[-1]
    rows: list[dict] = []
    numbered = [(i + 1, ln) for i, ln in enumerate(complete) if ln.strip()]
    for n, (lineno, ln) in enumerate(numbered):
        try:
            rows.append(json.loads(ln))
        except ValueError as e:
            if n == len(numbered) - 1 and not tail.strip():
                warnings.warn(f"{p}: dropped a torn last line (line {lineno}: {e})", TornLineWarning,
                              stacklevel=2)
                break
            raise ValueError(f"{p}: line {lineno} is not valid JSON ({e}); the file is damaged") from None
    if tail.strip():
        try:
            rows.append(json.loads(tail))   # a complete row that only lacks its newline
        except ValueError as e:
            warnings.warn(f"{p}: dropped a torn last line (line {len(lines)}: {e})", TornLineWarning,
                          stacklevel=2)
    return rows


def numbered_objects(path: str | os.PathLike):
    """(line number, row) for each non-blank line of an input JSONL file, each a JSON object; ValueError
    `<path> line N: invalid JSON (...)` / `... expected a JSON object, got list` otherwise."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path} line {lineno}: invalid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path} line {lineno}: expected a JSON object, got {type(row).__name__}")
            yield lineno, row


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    """Replace `path` atomically with `rows`, one JSON object a line."""
    write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in rows))


def append_jsonl(path: str | os.PathLike, row: dict) -> None:
    """Append one row, flushed and fsynced (a kill can tear only this row, never an earlier one)."""
    append_text(path, json.dumps(row) + "\n")


def append_text(path: str | os.PathLike, text: str) -> None:
    """Append `text` (whole JSONL lines) with one write, flushed and fsynced."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename: readers see the old or the new file.
    The parent folder is created; the temporary name is hidden (`.<name>.<host>.<pid>.tmp`), so globs skip it."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{socket.gethostname()}.{os.getpid()}.tmp")   # unique across nodes too
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, p)


def write_json_atomic(path: str | os.PathLike, obj: Any, **dump_kw) -> None:
    """`json.dump(obj)` to `path` atomically (a trailing newline; `dump_kw` go to json.dumps)."""
    write_text_atomic(path, json.dumps(obj, **dump_kw) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    """The JSON value in `path`, or None if the file is missing, unreadable or not JSON (a marker or state
    file whose absence and damage both mean "not there yet")."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
