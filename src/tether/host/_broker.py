"""The permission broker: the guard first, then rules, then the approver for `ask`.

The broker decides whether a call may run. It never registers or cancels calls: the host
registers a call before asking the broker, and a stop cancels the broker's wait (a
pending prompt is withdrawn by that cancellation).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeAlias

import attrs

from ..errors import GuardRefused, PermissionDenied
from ._protocol import Approver, CallKey, PermissionRequest
from ._tool import Decision, StopClass, Tool, default_decision

__all__ = ("Broker", "Decision", "Guard", "RuleSet", "default_decision", "stop_guard")

Guard: TypeAlias = Callable[[Tool, Mapping[str, Any], Path], str | None]
"""Returns the reason a call is refused by the stop guard, or None to let it pass."""


class RuleSet(Protocol):
    """What the broker needs of permission rules (`PermissionRules` has it)."""

    def decide(
        self, tool: Tool, args: Mapping[str, Any], *, workspace: Path
    ) -> Decision: ...


def stop_guard(protected: Callable[[], Sequence[Path]] | None = None) -> Guard:
    """Return the guard of spec 02 over this account's stop directories.

    The protected paths are found once, here, and pinned for the guard's life (a runtime
    pins its stop folder and setup the same way): a call pays only for what it names.
    """
    from ..guard import StopGuard
    from ..stop import protected_paths

    judge = StopGuard(protected() if protected is not None else protected_paths())

    # Read-only tools whose every call the guard lets by, found at a tool's first call.
    free: dict[str, bool] = {}

    def check(tool: Tool, args: Mapping[str, Any], workspace: Path) -> str | None:
        if tool.stop_class is StopClass.READ_ONLY:
            passes = free.get(tool.name)
            if passes is None:
                passes = free[tool.name] = judge.lets_reads_by(tool.name)
            if passes:
                return None
        verdict = judge.judge(
            tool.name,
            args,
            cwd=workspace,
            mutating=False if tool.stop_class is StopClass.READ_ONLY else None,
        )
        return None if verdict.allowed else verdict.reason

    return check


@attrs.define(eq=False)
class Broker:
    """Guard, rules and approver, in that order."""

    workspace: Path
    rules: RuleSet | None = None
    """Allow / ask / deny rules (None: the class defaults only)."""
    approver: Approver | None = None
    guard: Guard | None = None

    def decide(self, tool: Tool, args: Mapping[str, Any]) -> Decision:
        """Return the rule decision for a call, without asking anyone.

        Raises:
            GuardRefused: the stop guard refused the call.
        """
        if self.guard is not None:
            reason = self.guard(tool, args, self.workspace)
            if reason is not None:
                raise GuardRefused(reason)
        if self.rules is None:
            return default_decision(tool.stop_class)
        return self.rules.decide(tool, args, workspace=self.workspace)

    async def ask(self, key: CallKey, tool: Tool, args: Mapping[str, Any]) -> None:
        """Ask the approver; return if approved.

        Raises:
            PermissionDenied: the approver said no, or there is no approver.
        """
        if self.approver is None:
            raise PermissionDenied(
                f"{tool.name} needs permission and no approver is set; "
                f"add an allow rule such as {tool.name!r} to run it unattended"
            )
        request = PermissionRequest(
            session_id=key.session_id,
            call_id=key.call_id,
            tool=tool.name,
            input=dict(args),
            stop_class=tool.stop_class,
        )
        if not await self.approver(request):
            raise PermissionDenied(f"{tool.name} was not approved")
