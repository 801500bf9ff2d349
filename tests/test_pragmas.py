"""Every coverage pragma in src says why: `# pragma: no cover - <reason>` on its own line.

A line left out of the coverage figure is a claim that it cannot or need not run under
test; the reason lets a reader check that claim. The scan reads comments with `tokenize`,
so a pragma spelled inside a string is not one.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

SRC = Path(__file__).parent.parent / "src" / "tether"

_PRAGMA = re.compile(r"pragma:\s*no\s*(?:cover|branch)\b(?P<rest>.*)", re.IGNORECASE)
_REASON = re.compile(r"^\s*-\s*\w")
"""After the pragma: a dash, then words (`- handled above`)."""


def bare_pragmas(source: str) -> list[int]:
    """Return the lines whose coverage pragma gives no reason."""
    lines: list[int] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        found = _PRAGMA.search(token.string)
        if found and not _REASON.match(found.group("rest")):
            lines.append(token.start[0])
    return lines


@pytest.mark.parametrize(
    ("comment", "bare"),
    [
        ("# pragma: no cover", True),
        ("# pragma: no branch", True),
        ("# pragma: no cover  ", True),
        ("# pragma: no cover -", True),
        ("# pragma: no cover (why)", True),
        ("# pragma: no cover - handled above", False),
        ("# pragma: no branch - the loop always ends by return", False),
        ("# nothing to see", False),
    ],
)
def test_the_scan_tells_a_bare_pragma_from_one_with_a_reason(
    comment: str, bare: bool
) -> None:
    source = f"x = 1  {comment}\ntext = '# pragma: no cover'\n"
    assert bare_pragmas(source) == ([1] if bare else [])


def test_every_pragma_in_src_gives_its_reason() -> None:
    found = [
        f"{path.relative_to(SRC.parent)}:{line}"
        for path in sorted(SRC.rglob("*.py"))
        for line in bare_pragmas(path.read_text(encoding="utf-8"))
    ]
    assert not found, (
        "a coverage pragma without a reason; write `# pragma: no cover - <why>`: "
        + ", ".join(found)
    )
