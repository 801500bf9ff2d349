"""`tests/machine.py`: a missing tool skips with what to install, except in CI."""

from __future__ import annotations

import pytest
from tests.machine import HIDE, missing, which


def test_a_hidden_tool_is_missing_though_it_is_on_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert which("sh") is not None
    monkeypatch.setenv(HIDE, "node, sh")
    assert which("sh") is None
    assert which("env") is not None


@pytest.mark.parametrize("ci", [None, "false", "true"])
def test_a_missing_tool_skips_with_the_reason_and_fails_only_in_ci(
    monkeypatch: pytest.MonkeyPatch, ci: str | None
) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    outcome = pytest.fail.Exception if ci == "true" else pytest.skip.Exception
    with pytest.raises(outcome) as raised:
        missing("the ACL rows", "needs setfacl: apt-get install acl")
    said = str(raised.value)
    assert "apt-get install acl" in said
    assert ("CI must run the ACL rows" in said) == (ci == "true")
