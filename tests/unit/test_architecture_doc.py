"""docs/architecture.md names every module of the packages under its folder's heading, and nothing else: a
module added without a line there, or a line left for a module that is gone, fails here."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "armor", "eval", "reproduce", "slurm", "figures", "bench")
HEADING = re.compile(r"^#+ `([\w/]+/)`\s*$")
ITEM = re.compile(r"^- `([\w.]+\.py)`")


def documented(text: str) -> set[str]:
    """repo-relative module paths the doc lists: `- `name.py`` items under a `## `folder/`` heading."""
    out, folder = set(), None
    for line in text.splitlines():
        m = HEADING.match(line)
        if m:
            folder = m.group(1)
        elif line.startswith("#"):
            folder = None
        elif folder and (m := ITEM.match(line)):
            out.add(folder + m.group(1))
    return out


def modules() -> set[str]:
    return {str(f.relative_to(ROOT)) for pkg in PACKAGES for f in (ROOT / pkg).rglob("*.py")
            if f.name != "__init__.py"}


def test_every_module_is_in_the_architecture_doc_and_every_listed_one_exists():
    doc = documented((ROOT / "docs" / "architecture.md").read_text())
    missing = sorted(modules() - doc)
    assert not missing, f"modules missing from docs/architecture.md: {missing}"
    gone = sorted(doc - modules())
    assert not gone, f"docs/architecture.md lists modules that do not exist: {gone}"


def test_the_parser_reads_folders_and_items():
    text = ("## `a/`\nintro `x.py` not an item\n- `m.py`: what\n### `a/b/`\n- `n.py`: x\n## Other\n"
            "- `o.py`: no")
    assert documented(text) == {"a/m.py", "a/b/n.py"}
