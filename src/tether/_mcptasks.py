"""How a tether call's life reads as an MCP task status, and back.

The MCP tasks extension (`io.modelcontextprotocol/tasks`, the 2026-07-28 form) gives a
task one of five statuses, and lets a cancelled task end as what really happened: a
`tasks/cancel` is a request, and the task "MAY ultimately reach a terminal status other
than `cancelled`". tether's ledger says what really happened (`CallState`), so the
mapping is fixed by the ledger, never by the cancel:

| tether call (ledger `CallState`) | task status |
|---|---|
| not ended (`requested`, `pending_permission`, `queued`, `running`, `aborting`) | `working` |
| `succeeded`, or `failed` with a tool result (`isError: true`) | `completed`, with the result |
| `aborted` (a stop ended it, or it never started) | `cancelled` |
| `end_unknown` (its end was never reported) | `failed` |

So a cancelled read-only call ends `cancelled`; a cancelled write that had started
runs to its end and ends `completed` with its result (or its error result); a process
stays `working` through its grace window until its whole tree is gone. While a stop
waits on a call, the abort report's reason for it (`PendingCall.why`, such as
"mutating: started, waiting for result") is the task's status message.

The way back (a tether client following a server's task) uses the same table:
`completed` is the call's result, `cancelled` is `aborted`, `failed` is `failed`; a
task whose status can no longer be read has an unknown end (`end_unknown`), never a
guessed one.

This module is the mapping only: no MCP SDK, no runtime, so the server
(`tether mcp serve`) and tether's MCP client read the same table. Call states are
their `CallState` values.
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias, assert_never

__all__ = (
    "TASKS_EXTENSION",
    "TERMINAL_STATUSES",
    "CallStateValue",
    "TaskStatus",
    "call_state",
    "task_status",
)

TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
"""The tasks extension's identifier, in capabilities' `extensions`."""

TaskStatus: TypeAlias = Literal[
    "working", "input_required", "completed", "failed", "cancelled"
]
"""An MCP task's status."""

TERMINAL_STATUSES: Final[frozenset[TaskStatus]] = frozenset(
    {"completed", "failed", "cancelled"}
)
"""The statuses a task never leaves."""

CallStateValue: TypeAlias = Literal[
    "requested",
    "pending_permission",
    "queued",
    "running",
    "aborting",
    "succeeded",
    "failed",
    "aborted",
    "end_unknown",
]
"""A ledger `CallState`'s value (a test holds the two sets equal)."""

_STATUS: Final[dict[str, TaskStatus]] = {
    "requested": "working",
    "pending_permission": "working",
    "queued": "working",
    "running": "working",
    "aborting": "working",  # spec 01 S6: requested is not ended
    "succeeded": "completed",
    "failed": "completed",  # a tool's error is a result (`isError`), not a JSON-RPC error
    "aborted": "cancelled",
    "end_unknown": "failed",
}


def task_status(state: CallStateValue | str) -> TaskStatus:
    """The task status of a call in `state` (a `CallState`, or its value).

    Raises:
        ValueError: `state` is not a call state.
    """
    try:
        return _STATUS[str(state)]
    except KeyError:
        raise ValueError(f"{state!r} is not a tether call state") from None


def call_state(status: TaskStatus | None, *, is_error: bool = False) -> CallStateValue:
    """The ledger state a server's task status stands for (None: it cannot be read).

    `is_error` is the completed result's `isError`: a tool error ends the call `failed`.
    A task still `working` (or waiting for input) is `running`.
    """
    match status:
        case "working" | "input_required":
            return "running"
        case "completed":
            return "failed" if is_error else "succeeded"
        case "cancelled":
            return "aborted"
        case "failed":
            return "failed"
        case None:
            return "end_unknown"
        case _:
            assert_never(status)
