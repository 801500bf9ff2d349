"""Frozen values the runtime hands out: results, abort reports and events."""

from __future__ import annotations

from typing import TypeAlias

import attrs

from ..errors import ErrorCode
from ..host import AbortSource
from ._ledger import CallRecord, CallState

__all__ = (
    "AbortReport",
    "CallChanged",
    "PendingCall",
    "RuntimeEvent",
    "StopRequest",
    "ToolProgress",
    "ToolResult",
    "TurnSettled",
)


@attrs.frozen(kw_only=True, slots=False)  # built per call: see `CallKey`
class ToolResult:
    """What a finished call returned; `is_error` with a `code` when it failed."""

    output: str
    is_error: bool = False
    code: ErrorCode | None = None
    call_id: str = ""
    tool: str = ""


@attrs.frozen(kw_only=True)
class StopRequest:
    """Who stopped a turn, why, and when (in the runtime's clock)."""

    source: AbortSource
    reason: str | None
    at: float

    def __str__(self) -> str:
        return f"stopped by {self.source}" + (f": {self.reason}" if self.reason else "")


@attrs.frozen
class PendingCall:
    """A call that is still running after a stop, and why (starts with its class)."""

    call_id: str
    tool: str
    why: str


@attrs.frozen(kw_only=True)
class AbortReport:
    """The truth about a turn when `Session.abort()` returned.

    `settled` is true only when the ledger says every call of the turn has settled;
    `pending` names each call still running and why; `calls` is the ledger's view of the
    turn at that moment, so the report and the ledger agree.
    """

    session_id: str
    turn_id: str | None
    source: AbortSource
    reason: str | None
    settled: bool
    pending: tuple[PendingCall, ...]
    calls: tuple[CallRecord, ...]
    elapsed: float
    """Seconds `abort()` took."""
    outliving: tuple[str, ...] = ()
    """Tools whose stopped calls' workers still run in the runtime's process (they
    ignore the stop), with their count: the calls have ended, the work has not."""

    def __str__(self) -> str:
        head = (
            f"turn {self.turn_id or '-'} {'settled' if self.settled else 'not settled'}"
        )
        head += f" ({self.source}{': ' + self.reason if self.reason else ''})"
        lines = [head]
        lines += [f"  {p.call_id} {p.tool}: {p.why}" for p in self.pending]
        lines += [f"  {line}" for line in self.outliving]
        return "\n".join(lines)


@attrs.frozen
class ToolProgress:
    """A call reported progress output."""

    session_id: str
    call_id: str
    tool: str
    text: str


@attrs.frozen
class CallChanged:
    """A call moved to another state in the ledger."""

    session_id: str
    call_id: str
    tool: str
    state: CallState
    code: ErrorCode | None
    settled: bool = False
    """Whether the call has settled (the last event of a call has it true)."""


@attrs.frozen
class TurnSettled:
    """`turn.settled`: no call of the turn can change anything any more."""

    session_id: str
    turn_id: str
    stopped: bool


RuntimeEvent: TypeAlias = ToolProgress | CallChanged | TurnSettled
