"""Settings that cannot cross to the stdio host are refused at start, never downgraded in
silence; those that can cross are carried faithfully."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from tests.runtime.support import TEST_TOOLS

from tether import ErrorCode, Runtime
from tether.errors import UsageError
from tether.host._rules import PermissionRules

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from tether.host._broker import Decision
    from tether.host._tool import Tool

pytestmark = pytest.mark.anyio


def _deny_everything(tool: Tool, args: Mapping[str, Any], workspace: Path) -> str:
    return "this custom guard refuses every call"


class _EveryCallDenied:
    def decide(
        self, tool: Tool, args: Mapping[str, Any], *, workspace: Path
    ) -> Decision:
        return "deny"


class _StricterRules(PermissionRules):
    def decide(
        self, tool: Tool, args: Mapping[str, Any], *, workspace: Path
    ) -> Decision:
        return "deny"


def test_a_custom_guard_is_refused_for_the_stdio_host(workspace: Path) -> None:
    """Regression: a custom guard used to become a bool over stdio (the child built the
    default guard); now the runtime refuses it at construction, saying what to do."""
    with pytest.raises(UsageError, match=r"custom guard.*host='inprocess'"):
        Runtime(
            workspace=workspace, tools=TEST_TOOLS, host="stdio", guard=_deny_everything
        )


@pytest.mark.parametrize("rules", [_EveryCallDenied(), _StricterRules()])
def test_custom_rule_sets_are_refused_for_the_stdio_host(
    workspace: Path, rules: Any
) -> None:
    """Regression: a RuleSet that is not the built-in class used to cross as empty lists
    (its deny rules vanished); now it is refused at construction with one line."""
    with pytest.raises(UsageError, match=r"cannot cross to the stdio host"):
        Runtime(workspace=workspace, tools=TEST_TOOLS, host="stdio", permissions=rules)


async def test_custom_settings_work_in_process(workspace: Path) -> None:
    """The in-process host runs a custom guard and custom rules as given."""
    async with Runtime(
        workspace=workspace,
        tools=TEST_TOOLS,
        permissions=_EveryCallDenied(),
        guard=False,
    ) as rt:
        session = rt.session()
        async with session.turn() as turn:
            result = await turn.call("Echo", {"text": "x"})
    assert result.code is ErrorCode.PERMISSION_DENIED


async def test_built_in_rules_cross_to_the_stdio_host_faithfully(
    workspace: Path,
) -> None:
    """Deny rules given as `PermissionRules` hold in the stdio host."""
    rules = PermissionRules.from_lists(allow=["Echo", "Fail"], deny=["Echo"])
    async with Runtime(
        workspace=workspace,
        tools=TEST_TOOLS,
        permissions=rules,
        host="stdio",
        guard=False,
    ) as rt:
        session = rt.session()
        async with session.turn() as turn:
            denied = await turn.call("Echo", {"text": "x"})
            failed = await turn.call("Fail", {"message": "ran"})
    assert denied.code is ErrorCode.PERMISSION_DENIED
    assert failed.output == "ran"
