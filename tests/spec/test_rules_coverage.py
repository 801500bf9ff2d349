"""Every spec rule has at least one test marked with it, and every marker names a rule.

The markers are read from the test sources (not from the collected items), so the check
holds on every run, whole suite or a single file.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ._rules import RULES

pytestmark = pytest.mark.slow


TESTS = Path(__file__).resolve().parents[1]


def _is_rule_marker(node: ast.expr) -> bool:
    """`pytest.mark.rule` or `mark.rule` as the callee of a call."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "rule"
        and (
            (isinstance(node.value, ast.Attribute) and node.value.attr == "mark")
            or (isinstance(node.value, ast.Name) and node.value.id == "mark")
        )
    )


def marked_rules(root: Path) -> dict[str, list[str]]:
    """Each rule id named by a `pytest.mark.rule(...)` call under `root`, with where."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and _is_rule_marker(node.func)):
                continue
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    where = f"{path.relative_to(root)}:{node.lineno}"
                    found.setdefault(arg.value, []).append(where)
    return found


def test_the_scan_finds_markers_in_every_form(tmp_path: Path) -> None:
    """Decorators, module `pytestmark` and several ids in one marker are all read."""
    (tmp_path / "test_a.py").write_text(
        "import pytest\n"
        "from pytest import mark\n"
        "pytestmark = pytest.mark.rule('M1')\n"
        "@pytest.mark.rule('D1', 'D2')\n"
        "def test_x() -> None: ...\n"
        "@mark.rule('D3')\n"
        "def test_y() -> None: ...\n"
        "@pytest.mark.other('N1')\n"
        "def test_z() -> None: ...\n"
    )
    assert set(marked_rules(tmp_path)) == {"M1", "D1", "D2", "D3"}


def test_every_marked_rule_is_in_the_manifest() -> None:
    """A `rule` marker that names no rule of the manifest is a typo."""
    found = marked_rules(TESTS)
    unknown = {rule: found[rule] for rule in set(found) - set(RULES)}
    assert not unknown, f"markers name rules not in the manifest: {unknown}"


def test_every_rule_has_a_test() -> None:
    """Each rule of the manifest is pinned by at least one marked test."""
    missing = set(RULES) - set(marked_rules(TESTS))
    assert not missing, f"rules without a test: {sorted(missing)}"
