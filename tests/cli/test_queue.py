"""`tether queue add/list` through the real command."""

from __future__ import annotations

import json

import pytest
from tests.cli._run import tether as _tether

pytestmark = pytest.mark.slow


def test_queue_add_then_list_shows_the_item_and_a_repeat_is_refused() -> None:
    """An added item is listed (plain and JSON); the same id again exits 2 with why."""
    added = _tether("queue", "add", "fix-typo", "--brief", "Fix it")
    assert (added.returncode, added.stdout) == (0, "queued fix-typo\n"), added.stderr
    again = _tether("queue", "add", "fix-typo", "--brief", "x")
    assert again.returncode == 2
    assert again.stderr == (
        "tether: item 'fix-typo' is already in the store; choose another id\n"
    )
    listed = _tether("queue", "list", "--json")
    assert json.loads(listed.stdout) == [
        {"id": "fix-typo", "brief": "Fix it", "state": "queued", "claimed_by": None}
    ]
    assert _tether("queue", "list").stdout == "fix-typo  queued  Fix it\n"


def test_queue_add_refuses_an_id_that_cannot_name_a_branch() -> None:
    """A bad id is refused (exit 2) with the characters allowed."""
    result = _tether("queue", "add", "a b", "--brief", "x")
    assert result.returncode == 2
    assert "letters, digits" in result.stderr
