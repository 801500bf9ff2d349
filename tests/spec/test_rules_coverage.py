"""Every spec rule has at least one test marked with it, and every marker names a rule."""

from __future__ import annotations

import pytest

from ._rules import RULES


def _marked_rules(session: pytest.Session) -> set[str]:
    found: set[str] = set()
    for item in session.items:
        for mark in item.iter_markers("rule"):
            found.update(mark.args)
    return found


def test_every_marked_rule_is_in_the_manifest(request: pytest.FixtureRequest) -> None:
    """A `rule` marker that names no rule of the manifest is a typo."""
    unknown = _marked_rules(request.session) - set(RULES)
    assert not unknown, f"markers name rules not in the manifest: {sorted(unknown)}"


def test_every_rule_has_a_test(request: pytest.FixtureRequest) -> None:
    """Each rule of the manifest is pinned by a test (run the whole suite to check)."""
    if len(request.session.items) < 50:
        pytest.skip("coverage of rules is judged on a whole-suite run")
    missing = set(RULES) - _marked_rules(request.session)
    assert not missing, f"rules without a test: {sorted(missing)}"
