"""What the agent loop and a model exchange: messages, tool specs, stream events.

These are tether's own frozen values; each model converts them to its wire format at its
own boundary (`_openai.py` to Chat Completions), so the loop never sees a wire object.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

import attrs

from ..errors import TetherError

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

__all__ = (
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "Role",
    "StepDone",
    "StreamEvent",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolSpec",
    "Usage",
)

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
"""Who a message is from, as Chat Completions names it."""


class ModelError(TetherError):
    """The model could not be used: no endpoint or key, the endpoint refused, a bad file.

    The message is one line that says what to do.
    """


@attrs.frozen(kw_only=True)
class ToolCall:
    """One tool call a model asked for.

    `id` is the model's own id (the tool result names it); `call_id` is the fresh,
    session-unique id the runtime ran it under (empty until the loop assigns one).
    """

    id: str
    name: str
    arguments: str
    """The input as the model wrote it: a JSON object, as text."""
    call_id: str = ""

    def input(self) -> dict[str, Any]:
        """The arguments parsed as a JSON object.

        Raises:
            ValueError: the arguments are not a JSON object.
        """
        value = json.loads(self.arguments or "{}")
        if not isinstance(value, dict):
            raise ValueError("tool call arguments must be a JSON object")
        return value

    def to_json(self) -> dict[str, str]:
        """The call as a plain JSON object (the transcript's form)."""
        return {
            "id": self.id,
            "name": self.name,
            "arguments": self.arguments,
            "call_id": self.call_id,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolCall:
        """Read a call written by `to_json`."""
        return cls(
            id=str(data["id"]),
            name=str(data["name"]),
            arguments=str(data.get("arguments", "{}")),
            call_id=str(data.get("call_id", "")),
        )


@attrs.frozen(kw_only=True)
class Message:
    """One message of a conversation.

    An assistant message may carry tool calls; a `tool` message answers one of them by
    `tool_call_id`. `cut` marks an assistant message whose stream a stop closed: its
    text is what arrived before the stop.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    cut: bool = False

    def to_json(self) -> dict[str, Any]:
        """The message as a plain JSON object (the transcript's form)."""
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [c.to_json() for c in self.tool_calls]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.cut:
            data["cut"] = True
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Message:
        """Read a message written by `to_json`.

        Raises:
            ValueError: the role is not one of system, user, assistant, tool.
        """
        role = data.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            raise ValueError(f"unknown message role {role!r}")
        tool_call_id = data.get("tool_call_id")
        return cls(
            role=role,
            content=str(data.get("content") or ""),
            tool_calls=tuple(ToolCall.from_json(c) for c in data.get("tool_calls", ())),
            tool_call_id=None if tool_call_id is None else str(tool_call_id),
            cut=bool(data.get("cut", False)),
        )


@attrs.frozen(kw_only=True)
class ToolSpec:
    """A tool as the model is told about it."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    """The JSON schema of the tool's input."""


@attrs.frozen(kw_only=True)
class ModelRequest:
    """One model step's input: the conversation so far and the tools on offer."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    on_retry: Callable[[str], None] | None = attrs.field(default=None, eq=False)
    """Told, in one line, each time the model sends the request again (its own retries
    of a busy or unreachable endpoint), before the answer of the retry."""


@attrs.frozen
class Usage:
    """Tokens one model step used, as the endpoint counted them."""

    prompt_tokens: int
    completion_tokens: int


@attrs.frozen
class TextDelta:
    """A piece of the assistant's text, as it streams."""

    text: str


@attrs.frozen
class ToolCallDelta:
    """A piece of a tool call as it streams (for display; `StepDone` has the whole call)."""

    index: int
    id: str | None
    name: str | None
    arguments: str


@attrs.frozen(kw_only=True)
class StepDone:
    """The model finished its step: the whole assistant message and what it cost.

    `rate_limits` keeps the endpoint's rate-limit headers (`x-ratelimit-*`,
    `retry-after`) for callers that pace unattended work.
    """

    message: Message
    finish_reason: str | None = None
    usage: Usage | None = None
    rate_limits: Mapping[str, str] = attrs.field(factory=dict)


StreamEvent: TypeAlias = TextDelta | ToolCallDelta | StepDone
"""What a model's stream yields; the last event of a complete step is `StepDone`."""


class Model(Protocol):
    """A model that streams one step at a time and can be stopped for real.

    `stream(request)` is an async context manager giving an async iterator of
    `StreamEvent`s. Leaving the context before `StepDone` (a stop cancels the caller's
    scope) must end the request for real: an HTTP model closes its connection.
    """

    @property
    def name(self) -> str:
        """The model's spec, such as `openai:gpt-4o` or `scripted:moves.jsonl`."""
        ...

    def stream(
        self, request: ModelRequest
    ) -> AbstractAsyncContextManager[AsyncIterator[StreamEvent]]:
        """Start one model step."""
        ...
