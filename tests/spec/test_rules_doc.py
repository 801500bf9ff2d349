"""`docs/rules.md` is the manifest's page, up to date, and defines every id the code cites.

A tether choice: a reader who clones the repository can open every rule, chapter,
checklist row and style point that a comment, docstring or test names.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ._citations import citations, cited, defined
from ._rules import RULES
from .render import COMMAND, PAGE, render
from .test_rules_coverage import marked_rules

pytestmark = pytest.mark.slow


ROOT = Path(__file__).resolve().parents[2]


def test_the_rules_page_is_up_to_date_with_the_manifest() -> None:
    """The page on disk is what the manifest renders to."""
    assert PAGE.read_text(encoding="utf-8") == render(), (
        f"docs/rules.md is out of date with tests/spec: run `{COMMAND}`"
    )


def test_every_rule_of_the_manifest_has_its_anchor() -> None:
    """Each rule id of the manifest is an anchor of the page, under its own name."""
    missing = {rule.lower() for rule in RULES} - defined(render())
    assert not missing, f"rules without an anchor in docs/rules.md: {sorted(missing)}"


def test_the_scan_finds_citations_in_every_form() -> None:
    """Each citation form gives its anchor; lists give one anchor per id; a bare row id,
    a word that only starts like one, a parenthesised id of no checklist letter (X1) and
    a rule name in prose cite nothing."""
    text = (
        "S5 and S13b (S1-S12); spec 02, Spec 01 and spec/03-runs.md; "
        "Row D9, row C17 and rows A16, A17 and C18; ACLs (B6); style 18, style point 4, "
        "style points 4 and 17. Bare D12, (X1), PS1, S_IFDIR, arrows B2, the hold rule."
    )
    assert cited(text) == {
        "s5",
        "s13b",
        "s1",
        "s12",
        "spec-02",
        "spec-01",
        "spec-03",
        "row-d9",
        "row-c17",
        "row-a16",
        "row-a17",
        "row-c18",
        "row-b6",
        "style-18",
        "style-4",
        "style-17",
    }


def test_an_undefined_citation_is_found(tmp_path: Path) -> None:
    """A citation of an id the page does not define is reported with its file: a rule,
    a chapter, a row and a style point nobody wrote down."""
    source = tmp_path / "src"
    source.mkdir()
    # The ids are built, so that this file itself cites only what exists.
    (source / "a.py").write_text(
        f"# S{99}: see spec {'0'}7, row Z{3} and style {999}\n", encoding="utf-8"
    )
    (source / "blob.bin").write_bytes(b"\xff\xfe S" + b"98")
    found = citations(source)
    undefined = set(found) - defined(render())
    assert undefined == {"s99", "spec-07", "row-z3", "style-999"}
    assert found["s99"] == ["src/a.py"]


def test_every_id_cited_in_src_and_tests_is_defined() -> None:
    """Every S-id, spec chapter, checklist row and style point cited anywhere in `src/`
    and `tests/`, and every rule a `rule` marker names, has its anchor in
    `docs/rules.md`."""
    found = citations(ROOT / "src", ROOT / "tests")
    for rule, where in marked_rules(ROOT / "tests").items():
        found.setdefault(rule.lower(), []).extend(where)
    undefined = {a: found[a] for a in sorted(set(found) - defined(render()))}
    assert not undefined, (
        "cited but defined nowhere: define each in tests/spec/ (_rules.py and "
        "_requires.py, _chapters.py, _checklist.py or _style.py), then run "
        f"`{COMMAND}`: {undefined}"
    )


# Built in two pieces, so that this file does not cite what it looks for.
_WORK_ITEM = re.compile(r"\bissues? #?\d+\b|\bissue" + "'s\\b", re.IGNORECASE)
_TEXT = {".py", ".md", ".toml", ".txt", ".sh", ".json"}


def test_no_text_cites_a_work_item_in_place_of_a_rule() -> None:
    """Code, tests, docs and benchmarks cite the rule they hold (`S13`, `spec 02`, a
    checklist row), never the work item that asked for it: a reader has the spec, not
    the tracker."""
    roots = [ROOT / "src", ROOT / "tests", ROOT / "docs", ROOT / "benchmarks"]
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md"]
    files += [p for r in roots for p in sorted(r.rglob("*")) if p.suffix in _TEXT]
    found = [
        f"{p.relative_to(ROOT)}:{n}: {m.group(0)}"
        for p in files
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if (m := _WORK_ITEM.search(line))
    ]
    assert not found, "cite the spec's rule instead: " + "; ".join(found)
