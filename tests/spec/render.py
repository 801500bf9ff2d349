"""Write `docs/rules.md` from the manifest: `python -m tests.spec.render`.

The page defines every id the code cites, each under an anchor of its own: the spec's
chapters (`spec-02`), the rules of the manifest (`s13b`, `folder-rule`), the rows of the
stop folder's checklist (`row-d9`) and the style points (`style-18`). Its rule lines are
the manifest's own (`_rules.py`); the rest comes from `_requires.py`, `_chapters.py`,
`_checklist.py` and `_style.py`. `test_rules_doc.py` fails when the page on disk differs from this output.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from ._chapters import CHAPTERS
from ._checklist import ROWS
from ._requires import REQUIRES
from ._rules import RULES
from ._style import STYLE

PAGE = Path(__file__).resolve().parents[2] / "docs" / "rules.md"
COMMAND = "python -m tests.spec.render"

_HEAD = f"""\
# The rules the code cites

Comments, docstrings and tests of tether cite the rules they keep. This page defines every
id they cite, each under an anchor of its own:

| cited as | defined at |
|---|---|
| `S5`, `S13b` (spec 01's rules) | [S5](#s5), [S13b](#s13b) |
| `spec 02` (a chapter of the spec) | [spec 02](#spec-02) |
| `@pytest.mark.rule("hold")` (a named rule) | [hold](#hold) |
| `row D9` (the stop folder's checklist of bad inputs) | [row D9](#row-d9) |
| `style 18`, `style point 18` (the code style) | [style 18](#style-18) |

A citation keeps its short form in the code (`S13b`, `spec 02`): it is unambiguous, and
this page resolves it. Each rule's line in bold is the manifest's (`tests/spec/_rules.py`),
where every rule needs a test marked `@pytest.mark.rule(id)`.

This page is generated: edit the modules beside `tests/spec/_rules.py` (`_requires.py`,
`_chapters.py`, `_checklist.py`, `_style.py`), then run `{COMMAND}`.
`tests/spec/test_rules_doc.py` fails while the page is out of date, and when the code
cites an id defined nowhere here.
"""


def _wrap(text: str) -> str:
    """A paragraph wrapped as the other pages are, at 90 columns."""
    return textwrap.fill(text, 90, break_long_words=False, break_on_hyphens=False)


def _check_both_ways() -> None:
    """Every rule of the manifest has its paragraph, and every paragraph its rule."""
    unexplained = sorted(set(RULES) - set(REQUIRES))
    stray = sorted(set(REQUIRES) - set(RULES))
    if unexplained or stray:
        raise ValueError(
            f"tests/spec/_requires.py: rules without a paragraph {unexplained}, "
            f"paragraphs of no rule {stray}"
        )
    chapters = {chapter for chapter, _ in REQUIRES.values()}
    if not chapters <= set(CHAPTERS):
        raise ValueError(f"unknown chapters: {sorted(chapters - set(CHAPTERS))}")


def _rule(rule: str) -> list[str]:
    _, requires = REQUIRES[rule]
    return [
        f'### <a id="{rule.lower()}"></a>{rule}',
        "",
        _wrap(f"**{RULES[rule]}.**"),
        "",
        _wrap(requires),
        "",
    ]


def _chapter(number: str) -> list[str]:
    title, covers = CHAPTERS[number]
    lines = [
        f'## <a id="spec-{number}"></a>spec {number}: {title}',
        "",
        _wrap(covers),
        "",
    ]
    for rule in RULES:
        if REQUIRES[rule][0] == number:
            lines += _rule(rule)
    return lines


def _cell(text: str) -> str:
    if "|" in text:
        raise ValueError(f"a table cell cannot hold `|`: {text!r}")
    return text


def _rows() -> list[str]:
    lines = [
        '## <a id="checklist"></a>The stop folder\'s checklist of bad inputs',
        "",
        _wrap(
            "The bad inputs and attacks the recorded stop (spec 02) is tested against, "
            "by row: A the shared folder and its parents, B the uid directory, C the "
            "stop entry, D time, configuration, process and environment. `tests/stop/` "
            "builds them for real (`test_read_table.py`, `test_checklist_rows.py`)."
        ),
        "",
        "| row | the bad input | what tether does |",
        "|---|---|---|",
    ]
    for row, (bad, does) in ROWS.items():
        anchor = f'<a id="row-{row.lower()}"></a>{row}'
        lines.append(f"| {anchor} | {_cell(bad)} | {_cell(does)} |")
    return [*lines, ""]


def _style() -> list[str]:
    lines = [
        '## <a id="style"></a>Points of the code style',
        "",
        "The numbered points of the project's code style, each in a line:",
        "",
        "| point | what it asks |",
        "|---|---|",
    ]
    for number, asks in STYLE.items():
        anchor = f'<a id="style-{number}"></a>{number}'
        lines.append(f"| {anchor} | {_cell(asks)} |")
    return [*lines, ""]


def render() -> str:
    """The whole page, as `docs/rules.md` must read."""
    _check_both_ways()
    lines = [_HEAD]
    for number in CHAPTERS:
        lines += _chapter(number)
    lines += _rows() + _style()
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE}")
