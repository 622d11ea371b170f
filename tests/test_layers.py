"""The packages' import directions, function-level imports included (an AST walk of every module).

Allowed: reproduce -> {armor, eval, slurm, figures, common}; bench (tools) -> {armor, eval, reproduce, common};
armor, eval, slurm, figures -> common, the leaf layer (rollout engines, grading, benchmark registry and prompt
templates, sampling, metrics, model loading, run-folder layout, YAML presets, JSONL I/O); common -> nothing of
the repo."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "armor", "eval", "reproduce", "slurm", "figures", "bench")
ALLOWED = {
    "common": set(),
    "armor": {"common"},
    "eval": {"common"},
    "slurm": {"common"},
    "figures": {"common"},
    "reproduce": {"common", "armor", "eval", "slurm", "figures"},
    "bench": {"common", "armor", "eval", "reproduce"},
}
def imports():
    """(package, file, imported module) for every import of a repo package by another one."""
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(f.read_text(), str(f))):
                if isinstance(node, ast.Import):
                    mods = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    mods = [node.module]
                else:
                    continue
                for m in mods:
                    if m.split(".")[0] in PACKAGES and m.split(".")[0] != pkg:
                        yield pkg, f.relative_to(ROOT), m


def test_imports_point_the_allowed_way():
    bad = [(str(f), m) for pkg, f, m in imports() if m.split(".")[0] not in ALLOWED[pkg]]
    assert not bad, bad


def test_armor_imports_nothing_from_reproduce_or_bench():
    assert not [(str(f), m) for pkg, f, m in imports() if pkg == "armor" and m.split(".")[0] in ("reproduce", "bench")]
