"""Every relative link of the README, docs/, records/ and slurm/README.md names a file that exists: a doc
moved without its links fixed fails here."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def relative_links(text: str) -> list[str]:
    """link targets that are repository paths (no scheme, no pure anchor), without their #anchor."""
    out = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        out.append(target.split("#")[0])
    return out


def test_every_relative_link_of_the_docs_resolves():
    pages = [ROOT / "README.md", ROOT / "slurm" / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "records").glob("*.md"))]
    broken = [f"{p.relative_to(ROOT)}: {t}" for p in pages for t in relative_links(p.read_text())
              if not (p.parent / t).exists()]
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)


def test_the_link_parser_keeps_paths_and_drops_urls_and_anchors():
    text = "[a](docs/x.md) [b](https://e.org/y) [c](#here) [d](../r/z.md#sec) ![i](f.png)"
    assert relative_links(text) == ["docs/x.md", "../r/z.md", "f.png"]
