"""The fenced code blocks of README.md and docs/*.md, with the marks that say how to run them.

A mark is an HTML comment on the line just before a block's opening fence:

- `<!-- docs-test: skip (why it cannot run offline) -->`: the block is not run; the
  reason in parentheses is required. Keep such marks rare.
- `<!-- docs-test: both-hosts -->`: a python block that holds `host="inprocess"` runs
  once as printed and once with `host="stdio"`.

A block whose first line is a comment naming a file (`# lookup.py`, `# pyproject.toml
(the plugin's)`) is that file: a python one is written into the document's example
folder, where later blocks import it; a TOML one is parsed but not loaded as the
account's config.
"""

from __future__ import annotations

import re
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[2]
"""The repository: README.md and docs/ live here."""

_FENCE = re.compile(r"^(`{3,})\s*([\w+-]*)")
_MARK = re.compile(
    r"^<!--\s*docs-test:\s*(?P<kind>[\w-]+)\s*(?:\((?P<why>.*)\))?\s*-->$"
)
_FILE = re.compile(r"^#\s*([\w./-]+\.(?:py|toml))(?:\s.*)?$")


@attrs.frozen
class Block:
    """One fenced block: where it is, its language, its text and its mark."""

    doc: Path
    line: int
    """Line of the opening fence, 1-based."""
    lang: str
    text: str
    mark: str | None = None
    why: str | None = None

    @property
    def where(self) -> str:
        """`docs/x.md:12`, for messages and test ids."""
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    @property
    def file_name(self) -> str | None:
        """The file this block is, when its first line names one (`# lookup.py`)."""
        first = self.text.split("\n", 1)[0]
        found = _FILE.match(first)
        return found.group(1) if found else None


def documents() -> list[Path]:
    """README.md and every docs/*.md, in a stable order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(doc: Path) -> list[Block]:
    """Return the fenced blocks of one Markdown file, in order."""
    out: list[Block] = []
    lines = doc.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        fence, lang = opened.groups()
        start = i
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        mark = why = None
        if start > 0:
            marked = _MARK.match(lines[start - 1].strip())
            if marked:
                mark, why = marked.group("kind"), marked.group("why")
        out.append(
            Block(doc, start + 1, lang.lower(), "\n".join(body) + "\n", mark, why)
        )
    return out


def all_blocks() -> list[Block]:
    """Every fenced block of every document."""
    return [b for doc in documents() for b in blocks(doc)]
