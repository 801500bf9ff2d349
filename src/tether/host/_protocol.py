"""The host protocol as domain values: what the runtime and a host say to each other.

Five messages cross the seam: `tools.execute` (runtime -> host), `tools.abort` and
`tools.kill` (runtime -> host, answered with `found` and the call's phase),
`tools.progress` and `tools.result` (host -> runtime). A host that asks the person for permission sends
`permission.request` back to the runtime's approver. These are the domain forms; the
JSON-RPC frames of the stdio host are converted at one boundary (`_wire.py`).

`HostConnection` is what the runtime needs of any host, in-process or over stdio: the
three requests, and the reaping hook that ends every process a lost host started.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol, TypeAlias

import attrs

from ..errors import ErrorCode
from ._tool import StopClass

__all__ = (
    "AbortAck",
    "AbortRequest",
    "AbortSource",
    "Approver",
    "CallKey",
    "ElicitationAnswer",
    "ElicitationRequest",
    "Elicitor",
    "ExecuteRequest",
    "HostConnection",
    "HostEvent",
    "HostPhase",
    "KillRequest",
    "NoOneToAsk",
    "OutputEvent",
    "PermissionRequest",
    "PhaseEvent",
    "ResultEvent",
    "Sink",
)

HostPhase: TypeAlias = Literal[
    "unknown", "registered", "pending_permission", "queued", "running", "finished"
]
"""Where a call is at the host. `unknown`: the host never saw it (the abort became a
tombstone); `registered` to `queued`: before the operation (a stop means it never starts);
`running`: the tool is executing; `finished`: its result has been sent."""

PRE_START_PHASES: frozenset[HostPhase] = frozenset(
    {"unknown", "registered", "pending_permission", "queued"}
)
"""Phases in which a stopped call is guaranteed never to start."""

AbortSource: TypeAlias = Literal["user", "turn", "deadline", "shutdown", "halt"]
"""Who asked for an abort (style point 17): `Session.abort(source=...)`, and what an
`AbortReport` and a stopped call's record say."""


# The values built on every call (the key, the request, the phase and result events) are
# frozen classes with an instance dict, not slots: attrs' frozen __init__ then writes the
# dict directly instead of calling `object.__setattr__` per field, four times cheaper.


@attrs.frozen(cache_hash=True, slots=False)
class CallKey:
    """The full key of a call at the host: aborts are typed by all three parts (S7)."""

    session_id: str
    call_id: str
    tool: str


@attrs.frozen(slots=False)
class ExecuteRequest:
    """`tools.execute`: run a tool call."""

    key: CallKey
    input: dict[str, Any]


@attrs.frozen
class AbortRequest:
    """`tools.abort`: stop a call, as its stop class says.

    A PROCESS call is told to terminate; the runtime owns the grace window and, when it
    closes, sends `KillRequest`. The host keeps no timer of its own.
    """

    key: CallKey
    source: AbortSource
    reason: str | None


@attrs.frozen
class KillRequest:
    """`tools.kill`: a stopped PROCESS call's grace window closed; kill its tree now.

    The host ends the call's task, and with it every descendant (SIGKILL to each); a
    call that is not running is left as it is.
    """

    key: CallKey


@attrs.frozen
class AbortAck:
    """The answer to `tools.abort`: whether the host knew the call, and its phase then."""

    found: bool
    phase: HostPhase
    processes: int = 0
    """Process trees the call started (`ToolContext.run_process()`) not reaped yet: a
    stopped call's result comes only once they are."""
    asking: str = ""
    """The question to the person the call waited on when the stop came, which the stop
    withdraws ("": none)."""


@attrs.frozen(slots=False)
class PhaseEvent:
    """`tools.progress` of kind `phase`: the call moved to another phase."""

    key: CallKey
    phase: HostPhase
    stop_class: StopClass | None = None
    at: float | None = None
    """When the host moved the call (wall clock), if it said: a stdio host's phase
    arrives later than it happened when the host's loop was busy."""


@attrs.frozen(slots=False)
class OutputEvent:
    """`tools.progress` of kind `output`: text the tool reported."""

    key: CallKey
    text: str


@attrs.frozen(slots=False)
class ResultEvent:
    """`tools.result`: the call's one final result; nothing of it runs any more."""

    key: CallKey
    output: str
    code: ErrorCode | None = None
    message: str = ""
    field_path: str = ""
    end_unknown: bool = False
    """The call's end cannot be known (its answer was lost: `ToolFailed(end_unknown=True)`)."""

    @property
    def is_error(self) -> bool:
        """Whether the call ended with an error code."""
        return self.code is not None


HostEvent: TypeAlias = PhaseEvent | OutputEvent | ResultEvent


@attrs.frozen
class PermissionRequest:
    """What the approver is asked: may this call run?"""

    session_id: str
    call_id: str
    tool: str
    input: dict[str, Any]
    stop_class: StopClass
    reason: str = ""


Approver: TypeAlias = Callable[[PermissionRequest], Awaitable[bool]]
"""Decides a call that a rule (or the class default) sends to `ask`; cancelled by a stop."""


@attrs.frozen
class ElicitationRequest:
    """An MCP server's question to the person (`elicitation/create`) during a call.

    `schema` is the form MCP allows: an object whose `properties` are flat strings,
    numbers, integers, booleans or enums (`required` lists the ones that must be given).
    """

    session_id: str
    call_id: str
    tool: str
    server: str
    message: str
    schema: dict[str, Any]


@attrs.frozen
class ElicitationAnswer:
    """The person's answer: `accept` with the form's `content`, `decline` or `cancel`."""

    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] = attrs.field(factory=dict)


Elicitor: TypeAlias = Callable[[ElicitationRequest], Awaitable[ElicitationAnswer]]
"""Answers an MCP server's question; cancelled by a stop (the server is told `cancel`)."""


class NoOneToAsk(Exception):
    """An elicitor has no person to put this question to; `str()` says why.

    The question is declined as it is where there is no elicitor at all, and the
    call's output says why.
    """


Sink: TypeAlias = Callable[[HostEvent], None]
"""Receives the host's events on the runtime's side; must not block."""


class HostConnection(Protocol):
    """A connected host, as the runtime sees it."""

    async def execute(self, request: ExecuteRequest) -> None:
        """Send `tools.execute`; returns once the host has the call."""
        ...

    async def abort(self, request: AbortRequest) -> AbortAck:
        """Send `tools.abort` and return the host's answer."""
        ...

    async def kill(self, request: KillRequest) -> AbortAck:
        """Send `tools.kill` and return the host's answer."""
        ...

    def outliving(self) -> dict[str, int]:
        """Stopped calls whose work still runs in this process, counted by tool name.

        A host in another process answers `{}`: its workers end when it is closed.
        """
        ...

    async def reap_orphans(self) -> list[int]:
        """After the host was lost: end every process it started; return any left alive.

        A host in the runtime's own process is never lost and has nothing to reap.
        """
        ...
