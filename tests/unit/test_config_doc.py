"""Self-documenting config: every field carries its help (dataclass metadata), `python -m armor.train --help
[SECTION]` prints keys, types, defaults and help, and docs/config.md is the generated reference, up to
date."""
import contextlib
import dataclasses
import io
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest

from armor import config_doc
from armor.config import RunConfig

ROOT = Path(__file__).resolve().parents[2]


def _all_fields(cls=RunConfig, prefix=""):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("foreign"):          # other tools' sections: not keys of the trainer's config
            continue
        yield f"{prefix}{f.name}", f
        if dataclasses.is_dataclass(hints[f.name]):
            yield from _all_fields(hints[f.name], f"{prefix}{f.name}.")


def test_every_field_has_help():
    missing = [k for k, f in _all_fields() if not str(f.metadata.get("help", "")).strip()]
    assert not missing, f"config fields without metadata['help']: {missing}"
    assert len(list(_all_fields())) > 100


def _run(main, *args) -> SimpleNamespace:
    """A command's main in this process (no interpreter start): its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    return SimpleNamespace(returncode=rc, stdout=out.getvalue(), stderr=err.getvalue())


def _help(*args):
    from armor.train import main
    return _run(main, *args)


def test_help_lists_every_key_with_type_default_and_help():
    r = _help("--help")
    assert r.returncode == 0, r.stderr
    for d in config_doc.fields():
        if d.section:
            assert f"{d.key}:  {d.help}" in r.stdout, d.key
        else:
            assert f"{d.key}  ({d.type}; default {d.default})" in r.stdout, d.key
    assert "algo.mix.alpha  (float; default 1.0)\n" in r.stdout
    assert "logging.backends  (list of (jsonl | tensorboard | wandb); default [jsonl])" in r.stdout
    assert "π_mix = α·πθ + (1−α)·πref" in r.stdout                     # the help text itself
    assert "threads  (int or null; default null)" in r.stdout


def test_help_of_one_section_and_of_an_unknown_one():
    r = _help("--help", "algo.mix")
    assert r.returncode == 0, r.stderr
    keys = [line.split()[0] for line in r.stdout.splitlines() if line.strip().startswith("algo.")]
    assert keys == ["algo.mix:", "algo.mix.variant", "algo.mix.alpha"], keys
    r = _help("--help", "algo.mixx")
    assert r.returncode == 2 and "algo.mixx" in r.stderr and "unknown config key or section" in r.stderr
    r = _help("--help", "protocol")            # another tool's section: says whose it is
    assert r.returncode == 2 and "not a trainer section" in r.stderr and "docs/protocol.md" in r.stderr


def test_docs_config_md_is_the_generated_reference():
    committed = (ROOT / "docs" / "config.md").read_text()
    assert committed == config_doc.markdown(), \
        "docs/config.md is stale: python -m armor.train --help-markdown > docs/config.md"
    r = _help("--help-markdown")
    assert r.returncode == 0 and r.stdout == committed
    for key, _ in _all_fields():
        assert f"| `{key}` |" in committed or f"## `{key}`" in committed, key
    assert "| `protocol` | the experiment driver's" in committed and "| `protocol.seeds` |" not in committed


def test_docs_protocol_md_is_the_generated_protocol_reference():
    """The `protocol:` section is reproduce/'s (ProtocolConfig): its reference is generated there, alike."""
    from reproduce.matrix import protocol
    committed = (ROOT / "docs" / "protocol.md").read_text()
    assert committed == protocol.markdown(), \
        "docs/protocol.md is stale: python -m reproduce.matrix.protocol --markdown > docs/protocol.md"
    for key, f in _all_fields(protocol.ProtocolConfig, "protocol."):
        assert f"| `{key}` |" in committed and str(f.metadata.get("help", "")).strip(), key
    r = _run(protocol.main)
    assert r.returncode == 0 and "protocol.seeds  (list of int; default [0])" in r.stdout


@pytest.mark.parametrize("text,expect", [
    ("float", "float"), ("Optional[int]", "int or null"), ("list[float]", "list of float"),
    ("Literal['a', 'b']", "a | b"), ("list[Literal['x', 'y']]", "list of (x | y)")])
def test_type_names(text, expect):
    from typing import Literal, Optional  # noqa: F401  (eval below)
    assert config_doc.type_name(eval(text)) == expect
