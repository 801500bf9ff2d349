"""Typed events of the agent loop, delivered in order through one async callback.

For each tool call: `ToolCallRequested`, then `ToolCallStarted` (if its operation began),
`ToolCallProgress` any number of times, and always one `ToolCallEnded` with its final
state. Each turn ends with one `TurnEnded`, delivered after every `ToolCallEnded` of the
turn. `ModelWaiting` comes as each model request is sent (and again as the model
retries it); `MessageChunk`s carry the assistant's text as it streams. A terminal view and the
ACP server render these; they are values, never wire objects.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeAlias

import attrs

from ..errors import ErrorCode
from ..host import StopClass
from ._ledger import CallState

__all__ = (
    "AgentEvent",
    "EventCallback",
    "MessageChunk",
    "ModelWaiting",
    "StopReason",
    "ToolCallEnded",
    "ToolCallProgress",
    "ToolCallRequested",
    "ToolCallStarted",
    "TurnEnded",
)

StopReason: TypeAlias = Literal[
    "end_turn", "cancelled", "halted", "max_turn_requests", "refusal", "error"
]
"""Why a turn ended: the model answered without tool calls (`end_turn`), a stop
(`cancelled`), the run's stop seen between steps, after the calls in flight ended
(`halted`), the request limit (`max_turn_requests`), the model refused (`refusal`),
or the model could not be used (`error`, with a message)."""


@attrs.frozen(kw_only=True)
class ModelWaiting:
    """A model request was sent and its answer has not begun: the wait a screen shows."""

    session_id: str
    turn_id: str
    attempt: int = 1
    """1 for the request; 2, 3, ... each time the model sends it again."""
    reason: str | None = None
    """Why it was sent again (such as `the endpoint answered 503 Service
    Unavailable; retry 1 of 2`); None for the first send."""


@attrs.frozen(kw_only=True)
class MessageChunk:
    """A piece of the assistant's text, as the model streams it."""

    session_id: str
    turn_id: str
    text: str


@attrs.frozen(kw_only=True)
class ToolCallRequested:
    """The model asked for a tool call; nothing has run yet."""

    session_id: str
    turn_id: str
    call_id: str
    """The runtime's id of the call (fresh, unique in the session; the ledger's key)."""
    model_call_id: str
    """The id the model gave the call (its tool result names it)."""
    tool: str
    input: dict[str, Any]
    stop_class: StopClass | None
    """None when no tool of that name exists (the call ends `UNKNOWN_TOOL`)."""
    title: str
    """A short human title, such as `Bash: git status`."""


@attrs.frozen(kw_only=True)
class ToolCallStarted:
    """The call's operation began (it is past permission and admission)."""

    session_id: str
    turn_id: str
    call_id: str
    tool: str


@attrs.frozen(kw_only=True)
class ToolCallProgress:
    """The call printed output; none comes after a stop abandoned it (S4)."""

    session_id: str
    turn_id: str
    call_id: str
    tool: str
    text: str


@attrs.frozen(kw_only=True)
class ToolCallEnded:
    """The call reached its final state, as the ledger holds it."""

    session_id: str
    turn_id: str
    call_id: str
    tool: str
    state: CallState
    """SUCCEEDED, FAILED or ABORTED."""
    code: ErrorCode | None
    output: str
    """The tool's output; for an aborted call, what it printed before it ended."""
    content: str
    """Exactly what the model is given as the call's result."""


@attrs.frozen(kw_only=True)
class TurnEnded:
    """The turn is over and settled; `prompt()` returns this same value."""

    session_id: str
    turn_id: str
    stop_reason: StopReason
    text: str
    """The assistant's last message of the turn (cut short if a stop closed it)."""
    error: str | None = None
    """With `stop_reason == "error"`: the one-line reason."""
    requests: int = 0
    """Model requests the turn made."""
    calls: int = 0
    """Tool calls of the turn that started (each ran to its own end)."""
    prompt_tokens: int = 0
    """Prompt tokens of the turn's model requests, as the endpoint counted them."""
    completion_tokens: int = 0
    """Completion tokens of the turn's model requests."""


AgentEvent: TypeAlias = (
    ModelWaiting
    | MessageChunk
    | ToolCallRequested
    | ToolCallStarted
    | ToolCallProgress
    | ToolCallEnded
    | TurnEnded
)

EventCallback: TypeAlias = Callable[[AgentEvent], Awaitable[None]]
"""Receives each event in order; the loop waits for it before delivering the next."""
