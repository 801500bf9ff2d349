"""Find the rule ids that source text cites, and the ids `docs/rules.md` defines.

One pattern per citation form, each giving the anchor the id has in `docs/rules.md`:

- a rule of spec 01: `S5`, `S13b` -> `s5`, `s13b`;
- a chapter of the spec: `spec 02`, `Spec 02`, `spec/02` -> `spec-02`;
- checklist rows: `row D9`, `Row D12`, `rows C16 and C18`, and a row id alone in
  parentheses, `(A16)` (the checklist's letters are A to D) -> `row-d9`, ...;
- style points: `style 18`, `style point 4` -> `style-18`, `style-4`.

Named rules are cited through `pytest.mark.rule(...)`, which `test_rules_coverage.py`
reads; a bare row id in running text (`D9`) is no citation, since it could be anything.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

_ROW = r"[A-Z]\d{1,2}"
_FORMS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bS(\d{1,3}[a-z]?)\b"), "s{}"),
    (re.compile(r"\bspec[ /](\d{2})\b", re.IGNORECASE), "spec-{}"),
    (
        re.compile(rf"\brows? ({_ROW}(?:(?:, | and | or |/){_ROW})*)\b", re.IGNORECASE),
        "row-{}",
    ),
    (re.compile(r"\(([A-D]\d{1,2})\)"), "row-{}"),
    (
        re.compile(r"\bstyle(?: points?)? (\d+(?:(?:, | and )\d+)*)\b", re.IGNORECASE),
        "style-{}",
    ),
)
_SPLIT = re.compile(r", | and | or |/")
_ANCHOR = re.compile(r'<a id="([^"]+)"></a>')
_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache"}


def cited(text: str) -> set[str]:
    """The anchors that the citations in `text` point at."""
    found: set[str] = set()
    for pattern, anchor in _FORMS:
        for match in pattern.finditer(text):
            for one in _SPLIT.split(match.group(1)):
                found.add(anchor.format(one.lower()))
    return found


def citations(*roots: Path) -> dict[str, list[str]]:
    """Each anchor cited by a text file under `roots`, with the files that cite it."""
    where: dict[str, list[str]] = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if not path.is_file() or _SKIP_DIRS & set(path.parts):
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue  # not text: cites nothing
            for anchor in cited(text):
                where.setdefault(anchor, []).append(str(path.relative_to(root.parent)))
    return where


def defined(page: str) -> set[str]:
    """The anchors of a page: every `<a id="..."></a>` in it."""
    return set(_ANCHOR.findall(page))
