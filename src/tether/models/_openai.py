"""The `openai:<model>` model: any OpenAI-compatible Chat Completions endpoint, streamed.

Built on the official `openai` SDK (`AsyncOpenAI`). The base URL comes from the caller,
`TETHER_MODEL_URL` or the account's config; the key from the caller, `TETHER_MODEL_KEY`
or `OPENAI_API_KEY`. Retries on 429 and 5xx are the SDK's own: exponential backoff with
jitter that honours the server's `retry-after` (`max_retries`, default 2). A stop
cancels the caller's scope; leaving the stream's context closes the HTTP response, so
the server sees the connection close (S11).

This module is the one place Chat Completions wire shapes appear.
"""

from __future__ import annotations

import contextvars
import http
import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import aclosing, asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol, cast, final

import attrs

from .._config import Config, load_config, paths
from .._env import TetherEnv
from ._types import (
    Message,
    ModelError,
    ModelRequest,
    StepDone,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)

if TYPE_CHECKING:
    import openai

__all__ = ("OpenAIModel",)

_RATE_HEADERS = ("x-ratelimit-", "retry-after")


@final
class OpenAIModel:
    """A Chat Completions model reached through the `openai` SDK."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_retries: int = 2,
        timeout: float = 600.0,
        config: Config | None = None,
    ) -> None:
        """Resolve the endpoint and key now, so a missing one is refused at start.

        Raises:
            ModelError: no endpoint or no key is configured.
        """
        if not model:
            raise ModelError("name the model after `openai:`, as in openai:gpt-4o")
        config = config if config is not None else load_config()
        url = base_url or config.model_url
        if not url:
            raise ModelError(
                f"no model endpoint: set {TetherEnv.MODEL_URL} (for example"
                " http://127.0.0.1:8000/v1) or url in the [model] table of"
                f" {paths().config_file}"
            )
        key = (
            api_key
            or os.environ.get(TetherEnv.MODEL_KEY)
            or os.environ.get("OPENAI_API_KEY")
        )
        if not key:
            raise ModelError(
                f"no key for the model endpoint {url}: set {TetherEnv.MODEL_KEY} or"
                " OPENAI_API_KEY (any text for a local server that checks none)"
            )
        # The SDK is imported here, not with the module: its types take about a second
        # to import, and every run and CLI process that never reaches a hosted model
        # (command agents, the presets, scripted models) would pay it.
        import openai

        self.model = model
        self.base_url = url
        self.max_retries = max_retries
        self.client = openai.AsyncOpenAI(
            base_url=url,
            api_key=key,
            max_retries=max_retries,
            timeout=timeout,
            http_client=openai.DefaultAsyncHttpxClient(
                event_hooks={"request": [_on_request], "response": [_on_response]}
            ),
        )

    @property
    def name(self) -> str:
        """The model's spec."""
        return f"openai:{self.model}"

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.client.close()

    @asynccontextmanager
    async def stream(
        self, request: ModelRequest
    ) -> AsyncIterator[AsyncIterator[StreamEvent]]:
        """Start one streamed Chat Completions request.

        Raises:
            ModelError: the endpoint cannot be reached or refused the request (after
                the SDK's retries).
        """
        params: dict[str, Any] = {
            "model": self.model,
            "messages": [to_wire(m) for m in request.messages],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            params["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": dict(t.parameters),
                    },
                }
                for t in request.tools
            ]
        import openai  # loaded by the constructor: a name lookup now

        attempts = None
        if request.on_retry is not None:
            attempts = _Attempts(request.on_retry, self.max_retries)
        try:
            # The SDK's retries all happen inside `create()`, in this task's context.
            token = _ATTEMPTS.set(attempts)
            try:
                created = await self.client.chat.completions.create(**params)
            finally:
                _ATTEMPTS.reset(token)
            chunks = cast("openai.AsyncStream[Any]", created)
            async with chunks:
                limits = {
                    k: v
                    for k, v in chunks.response.headers.items()
                    if k.lower().startswith(_RATE_HEADERS)
                }
                events = _events(chunks, limits)
                async with aclosing(events):
                    yield events
        except openai.APIStatusError as exc:
            raise ModelError(
                f"the model endpoint {self.base_url} refused the request:"
                f" {exc.status_code} {_one_line(exc.message)}"
            ) from None
        except openai.APIConnectionError as exc:
            raise ModelError(
                f"cannot reach the model endpoint {self.base_url}"
                f" ({_one_line(str(exc))}); start it or set {TetherEnv.MODEL_URL}"
            ) from None


class _Response(Protocol):
    """What the status hook reads of the SDK's HTTP response."""

    @property
    def status_code(self) -> int: ...
    @property
    def reason_phrase(self) -> str: ...


@attrs.define
class _Attempts:
    """The sends of one request, told to its `on_retry`."""

    on_retry: Callable[[str], None]
    max_retries: int
    sent: int = 0
    failed: str | None = None
    """How the last send failed (its status), if it did."""


_STATUS_PHRASES = {int(status): status.phrase for status in http.HTTPStatus}

_ATTEMPTS: contextvars.ContextVar[_Attempts | None] = contextvars.ContextVar(
    "tether_model_attempts", default=None
)
"""The request being created in this task, if its caller wants to hear of retries."""


async def _on_request(_request: object) -> None:
    attempts = _ATTEMPTS.get()
    if attempts is None:
        return
    attempts.sent += 1
    if attempts.sent > 1:
        reason = attempts.failed or "the endpoint did not answer"
        attempts.on_retry(
            f"{reason}; retry {attempts.sent - 1} of {attempts.max_retries}"
        )
    attempts.failed = None


async def _on_response(response: _Response) -> None:
    attempts = _ATTEMPTS.get()
    if attempts is not None and response.status_code >= 400:
        code = response.status_code
        # HTTP/2 and some servers send no reason phrase: the standard one is shown.
        phrase = response.reason_phrase
        if not phrase and code in _STATUS_PHRASES:
            phrase = _STATUS_PHRASES[code]
        attempts.failed = f"the endpoint answered {code} {phrase}".rstrip()


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


async def _events(
    chunks: openai.AsyncStream[Any], limits: Mapping[str, str]
) -> AsyncGenerator[StreamEvent, None]:
    # Tool-call deltas come split over chunks, keyed by index: the id and name arrive
    # first, the arguments in pieces.
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    usage: Usage | None = None
    finish: str | None = None
    async for chunk in chunks:
        if chunk.usage is not None:
            usage = Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        for choice in chunk.choices:
            delta = choice.delta
            if choice.finish_reason is not None:
                finish = choice.finish_reason
            if delta is None:
                continue
            if delta.content:
                text.append(delta.content)
                yield TextDelta(delta.content)
            for part in delta.tool_calls or ():
                call = calls.setdefault(part.index, {"id": "", "name": "", "args": []})
                function = part.function
                name = function.name if function is not None else None
                args = (function.arguments if function is not None else None) or ""
                if part.id:
                    call["id"] = part.id
                if name:
                    call["name"] += name
                call["args"].append(args)
                yield ToolCallDelta(part.index, part.id, name, args)
    tool_calls = tuple(
        ToolCall(
            id=c["id"] or f"call_{index}",
            name=c["name"],
            arguments="".join(c["args"]) or "{}",
        )
        for index, c in sorted(calls.items())
    )
    yield StepDone(
        message=Message(role="assistant", content="".join(text), tool_calls=tool_calls),
        finish_reason=finish,
        usage=usage,
        rate_limits=dict(limits),
    )


def to_wire(message: Message) -> dict[str, Any]:
    """A message as Chat Completions takes it."""
    match message.role:
        case "system" | "user":
            return {"role": message.role, "content": message.content}
        case "assistant":
            out: dict[str, Any] = {"role": "assistant", "content": message.content}
            if message.tool_calls:
                out["content"] = message.content or None
                out["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for c in message.tool_calls
                ]
            return out
        case "tool":
            return {
                "role": "tool",
                "tool_call_id": message.tool_call_id,
                "content": message.content,
            }
