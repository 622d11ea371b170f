"""The config reference, generated from the dataclasses of armor/config.py (each field's metadata["help"]).

    python -m armor.train --help                 # every key: type, default, help
    python -m armor.train --help algo.mix        # one section (or one key)
    python -m armor.train --help-markdown > docs/config.md

docs/config.md is this module's `markdown()` output, committed; a test checks that it is up to date. The
sections other tools own (armor.config.FOREIGN_SECTIONS) are named there with their owner, not listed key by
key; `fields`, `text` and `table` also render another tool's config dataclasses
(reproduce/matrix/protocol.py).
"""
from __future__ import annotations

import dataclasses
import textwrap
import types
import typing
from dataclasses import dataclass
from typing import Any, Iterator, Literal, Optional

from armor.config import FOREIGN_SECTIONS, ConfigError, RunConfig


@dataclass
class FieldDoc:
    key: str              # dotted key, e.g. algo.mix.alpha
    type: str             # e.g. "float", "int or null", "plain | mixed"
    default: str          # as YAML would read it, e.g. null, true, [0.9, 0.999], ""
    help: str
    section: bool         # a nested section (its own fields follow)
    doc: str = ""         # a section's class docstring


def type_name(tp) -> str:
    """A field type as a user reads it: `int or null`, `plain | mixed`, `list of float`."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        inner = " | ".join(type_name(a) for a in args)
        return f"{inner} or null" if len(args) < len(typing.get_args(tp)) else inner
    if origin is Literal:
        return " | ".join(str(a) for a in typing.get_args(tp))
    if origin is list:
        (item,) = typing.get_args(tp)
        inner = type_name(item)
        return f"list of ({inner})" if "|" in inner else f"list of {inner}"
    if dataclasses.is_dataclass(tp):
        return "section"
    return getattr(tp, "__name__", str(tp))


def default_text(value: Any) -> str:
    """A default value as YAML text."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '""' if not value else value
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(default_text(v) for v in value) + "]"
    return repr(value)


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def fields(cls=RunConfig, prefix: str = "") -> Iterator[FieldDoc]:
    """Every field of the config, depth first, sections before their fields."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("foreign"):              # not keys of this config (FOREIGN_SECTIONS)
            continue
        key = f"{prefix}{f.name}"
        tp = hints[f.name]
        help_ = f.metadata.get("help", "")
        if dataclasses.is_dataclass(tp):
            yield FieldDoc(key, "section", "", help_, True, (tp.__doc__ or "").strip())
            yield from fields(tp, key + ".")
        elif f.metadata.get("registry"):           # the registered names (armor.registry)
            from armor.config import registry_of
            yield FieldDoc(key, " | ".join(registry_of(f.metadata["registry"]).names()),
                           default_text(_default(f)), help_, False)
        else:
            yield FieldDoc(key, type_name(tp), default_text(_default(f)), help_, False)


def select(prefix: Optional[str]) -> list[FieldDoc]:
    """The fields under a dotted section or key (all for None/""); ConfigError naming an unknown one."""
    docs = list(fields())
    if not prefix:
        return docs
    prefix = prefix.strip().strip(".")
    out = [d for d in docs if d.key == prefix or d.key.startswith(prefix + ".")]
    owner = FOREIGN_SECTIONS.get(prefix.split(".")[0])
    if not out and owner:
        raise ConfigError(f"--help {prefix}: not a trainer section: {owner}; the trainer keeps it unread")
    if not out:
        sections = sorted(d.key for d in docs if d.section and "." not in d.key)
        raise ConfigError(f"--help {prefix}: unknown config key or section (sections: {', '.join(sections)}; "
                          "or --help alone for every key)")
    return out


def text(prefix: Optional[str] = None, width: int = 100, docs: Optional[list[FieldDoc]] = None) -> str:
    """Plain-text reference for `python -m armor.train --help [SECTION]` (or of the given fields)."""
    lines = []
    for d in select(prefix) if docs is None else docs:
        depth = d.key.count(".")
        pad = "  " * depth
        if d.section:
            lines += ["", f"{pad}{d.key}:  {d.help}" + (f" — {d.doc}" if d.doc and d.doc != d.help else "")]
            continue
        lines.append(f"{pad}{d.key}  ({d.type}; default {d.default})")
        lines += textwrap.wrap(d.help, width=width, initial_indent=pad + "      ",
                               subsequent_indent=pad + "      ")
    return "\n".join(lines).lstrip("\n") + "\n"


def _md(s: str, code: bool = False) -> str:
    s = s.replace("|", "\\|").replace("\n", " ")
    return s if code else s.replace("<", "&lt;").replace(">", "&gt;")


def markdown() -> str:
    """docs/config.md: one table per section."""
    out = ["<!-- GENERATED FILE: python -m armor.train --help-markdown > docs/config.md "
           "(from the dataclasses of armor/config.py; tests/unit/test_config_doc.py checks it is "
           "up to date) -->",
           "", "# Config reference", "",
           "Every key of a run config, with its type, default and meaning. Presets (YAML files: the driver's "
           "are listed in the README) set them; the command line overrides them as dotted `key=value` "
           "(`python -m armor.train --config PRESET.yaml algo.mix.alpha=0.875`). "
           "`python -m armor.train --help [SECTION]` prints the same reference in the terminal.", ""]
    docs = list(fields())
    groups: list[tuple[str, str, list[FieldDoc]]] = [("top level", RunConfig.__doc__ or "", [])]
    for d in docs:
        if d.section:
            groups.append((d.key, d.doc or d.help, []))
        else:
            parent = d.key.rsplit(".", 1)[0] if "." in d.key else "top level"
            for g in groups:
                if g[0] == parent:
                    g[2].append(d)
                    break
    for name, doc, items in groups:
        if not items:
            continue
        out += [f"## `{name}`" if name != "top level" else "## Top level", "", doc.strip(), ""] + table(items)
        out.append("")
    out += ["## Sections owned by other tools", "",
            "A preset may hold these top-level sections too. The trainer neither reads nor validates them: "
            "it keeps them verbatim and writes them back into the run's `config.yaml`, where their owners "
            "read them.",
            "", "| section | owner |", "|---|---|"]
    out += [f"| `{name}` | {_md(owner)} |" for name, owner in FOREIGN_SECTIONS.items()]
    out.append("")
    return "\n".join(out)


def table(docs: list[FieldDoc]) -> list[str]:
    """The Markdown table of these (non-section) fields: key, type, default, help."""
    return (["| key | type | default | help |", "|---|---|---|---|"]
            + [f"| `{d.key}` | {_md(d.type)} | `{_md(d.default, code=True)}` | {_md(d.help)} |"
               for d in docs])
