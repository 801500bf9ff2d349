"""The permission broker: the guard first, then rules, then the approver for `ask`.

The broker decides whether a call may run. It never registers or cancels calls: the host
registers a call before asking the broker, and a stop cancels the broker's wait (a
pending prompt is withdrawn by that cancellation).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import attrs

from ..errors import GuardRefused, PermissionDenied
from ._protocol import Approver, CallKey, PermissionRequest
from ._tool import Decision, StopClass, Tool, default_decision

if TYPE_CHECKING:
    from ..guard import StopGuard

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

    return _StopGuardCheck(
        StopGuard(protected() if protected is not None else protected_paths())
    )


class _StopGuardCheck:
    """The stop guard as a `Guard`, which can also name the tools it never refuses."""

    def __init__(self, judge: StopGuard) -> None:
        self._judge = judge
        self._free: dict[str, bool] = {}
        """Read-only tools whose every call the guard lets by, found at a tool's first
        call."""

    def every_call_passes(self, tool: Tool) -> bool:
        """Whether the guard lets every call of `tool` by, whatever its input."""
        if tool.stop_class is not StopClass.READ_ONLY:
            return False
        passes = self._free.get(tool.name)
        if passes is None:
            passes = self._free[tool.name] = self._judge.lets_reads_by(tool.name)
        return passes

    def __call__(
        self, tool: Tool, args: Mapping[str, Any], workspace: Path
    ) -> str | None:
        if self.every_call_passes(tool):
            return None
        verdict = self._judge.judge(
            tool.name,
            args,
            cwd=workspace,
            mutating=False if tool.stop_class is StopClass.READ_ONLY else None,
        )
        return None if verdict.allowed else verdict.reason


@attrs.define(eq=False)
class Broker:
    """Guard, rules and approver, in that order."""

    workspace: Path
    rules: RuleSet | None = None
    """Allow / ask / deny rules (None: the class defaults only)."""
    approver: Approver | None = None
    guard: Guard | None = None
    _alone: dict[str, tuple[Tool, tuple[Decision, frozenset[str]] | None]] = (
        attrs.field(factory=dict, init=False, repr=False)
    )
    """By tool name, for the tool found at its first call: the decision of each of its
    calls whose input names none of the fields given with it, when neither the guard
    nor the rules need to see such a call; None when every call is judged on its own.
    A tool's class and subject field are its own for life, so is what the rules and
    guard say of it. Keyed by name, checked by identity: a tool need not be hashable."""

    def decide(self, tool: Tool, args: Mapping[str, Any]) -> Decision:
        """Return the rule decision for a call, without asking anyone.

        Raises:
            GuardRefused: the stop guard refused the call.
        """
        found = self._alone.get(tool.name)
        if found is None or found[0] is not tool:
            found = self._alone[tool.name] = (tool, self._decides_alone(tool))
        alone = found[1]
        if alone is not None and args.keys().isdisjoint(alone[1]):
            return alone[0]
        if self.guard is not None:
            reason = self.guard(tool, args, self.workspace)
            if reason is not None:
                raise GuardRefused(reason)
        if self.rules is None:
            return default_decision(tool.stop_class)
        return self.rules.decide(tool, args, workspace=self.workspace)

    def _decides_alone(self, tool: Tool) -> tuple[Decision, frozenset[str]] | None:
        every_call_passes = getattr(self.guard, "every_call_passes", None)
        if self.guard is not None and (
            every_call_passes is None or not every_call_passes(tool)
        ):
            return None  # a guard that may refuse a call sees each one
        if self.rules is None:
            return default_decision(tool.stop_class), frozenset()
        decides_alone = getattr(self.rules, "decides_alone", None)
        return None if decides_alone is None else decides_alone(tool)

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
