"""Local stub model servers that drive the real agent CLIs (Claude Code, Codex).

`AgentServer` listens on 127.0.0.1 and speaks one wire format: the Anthropic Messages
API (`POST /v1/messages`, Server-Sent Events or one JSON answer) that Claude Code
reaches through `ANTHROPIC_BASE_URL`, or the OpenAI Responses API (`POST
/v1/responses`, SSE) that Codex reaches through a custom model provider. Each model
request is answered by a `Script`: a function of the request body (the whole
conversation so far) that returns a `Move` (text, tool calls, and how long to think
first). It records every request, so a test can see what the model was shown, and
counts the tool results the CLI sent back.

HTTP/1.1 framing is `h11`'s. Requests that are not model requests (Claude Code's
`count_tokens`, anything unknown) get a small JSON answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Literal, final

import anyio
import anyio.abc
import attrs
import h11

__all__ = ("AgentServer", "Move", "Script", "Wire", "tool_results")

Wire = Literal["anthropic", "responses"]
"""The API a server speaks: Anthropic Messages or OpenAI Responses."""


@attrs.frozen(kw_only=True)
class Move:
    """One model answer: optional text, then tool calls `(name, input)`."""

    text: str = ""
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    think: float = 0.0
    """Seconds the model waits before it answers (a slow model between calls)."""


Script = Callable[[dict[str, Any]], Move]
"""Chooses the next answer from a request's body."""


def tool_results(body: dict[str, Any]) -> list[str]:
    """The text of every tool result the request carries, oldest first.

    Anthropic: `tool_result` blocks of user messages; Responses: the `output` of
    `function_call_output` (and `custom_tool_call_output`) items.
    """
    found: list[str] = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            found.extend(
                _text_of(block.get("content"))
                for block in content
                if isinstance(block, dict) and block.get("type") == "tool_result"
            )
    entries = body.get("input")
    if isinstance(entries, list):
        found.extend(
            _text_of(entry.get("output"))
            for entry in entries
            if isinstance(entry, dict)
            and entry.get("type") in ("function_call_output", "custom_tool_call_output")
        )
    return found


def _text_of(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(_text_of(v) for v in value)
    if isinstance(value, dict):
        for key in ("text", "content", "output"):
            if key in value:
                return _text_of(value[key])
    return "" if value is None else json.dumps(value)


@final
class AgentServer:
    """A stub model endpoint on 127.0.0.1 answering with a `Script`."""

    def __init__(self, wire: Wire, script: Script) -> None:
        self.wire: Wire = wire
        self.script = script
        self.requests: list[dict[str, Any]] = []
        """The body of every model request, in order."""
        self.port = 0
        self._ids = 0

    @property
    def url(self) -> str:
        """The base URL: `http://127.0.0.1:PORT` (Anthropic) or `.../v1` (Responses)."""
        base = f"http://127.0.0.1:{self.port}"
        return base if self.wire == "anthropic" else base + "/v1"

    @classmethod
    @asynccontextmanager
    async def open(cls, wire: Wire, script: Script) -> AsyncIterator[AgentServer]:
        """Serve until the block ends."""
        server = cls(wire, script)
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        server.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, server._serve)
            try:
                yield server
            finally:
                tg.cancel_scope.cancel()

    def _id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}_{self._ids:04d}"

    async def _serve(self, stream: anyio.abc.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        async with stream:
            while True:
                request = await _next_event(conn, stream)
                if not isinstance(request, h11.Request):
                    return
                body = b""
                while True:
                    event = await _next_event(conn, stream)
                    if isinstance(event, h11.Data):
                        body += event.data
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    else:
                        return
                path = request.target.decode().split("?", 1)[0]
                if request.method != b"POST":
                    # HEAD and GET probes (a client checking the endpoint): no body.
                    await stream.send(
                        conn.send(
                            h11.Response(
                                status_code=200, headers=[(b"content-length", b"0")]
                            )
                        )
                        + conn.send(h11.EndOfMessage())
                    )
                    conn.start_next_cycle()
                    continue
                try:
                    parsed = json.loads(body or b"{}")
                except json.JSONDecodeError:
                    parsed = {}
                try:
                    await self._answer(conn, stream, path, parsed)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return
                if conn.our_state is h11.MUST_CLOSE:
                    return
                try:
                    conn.start_next_cycle()
                except h11.LocalProtocolError:
                    return

    async def _answer(
        self,
        conn: h11.Connection,
        stream: anyio.abc.SocketStream,
        path: str,
        body: dict[str, Any],
    ) -> None:
        model_path = "/v1/messages" if self.wire == "anthropic" else "/v1/responses"
        if path != model_path or not isinstance(body, dict):
            await _json(conn, stream, _side_answer(path))
            return
        self.requests.append(body)
        move = self.script(body)
        if move.think > 0:
            await anyio.sleep(move.think)
        if self.wire == "anthropic":
            events = self._anthropic(move, body)
            if not body.get("stream"):
                await _json(conn, stream, self._anthropic_message(move, body))
                return
        else:
            events = self._responses(move, body)
        headers = [
            (b"content-type", b"text/event-stream"),
            (b"transfer-encoding", b"chunked"),
        ]
        await stream.send(conn.send(h11.Response(status_code=200, headers=headers)))
        for name, data in events:
            frame = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
            await stream.send(conn.send(h11.Data(data=frame)))
        await stream.send(conn.send(h11.EndOfMessage()))

    # -- Anthropic Messages ----------------------------------------------------------
    def _blocks(self, move: Move) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if move.text:
            blocks.append({"type": "text", "text": move.text})
        for name, payload in move.calls:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": self._id("toolu"),
                    "name": name,
                    "input": payload,
                }
            )
        return blocks

    def _anthropic_message(self, move: Move, body: dict[str, Any]) -> dict[str, Any]:
        blocks = self._blocks(move)
        return {
            "id": self._id("msg"),
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "stub"),
            "content": blocks,
            "stop_reason": "tool_use" if move.calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }

    def _anthropic(
        self, move: Move, body: dict[str, Any]
    ) -> list[tuple[str, dict[str, Any]]]:
        message = self._anthropic_message(move, body)
        blocks = message.pop("content")
        stop_reason = message.pop("stop_reason")
        message.update(content=[], stop_reason=None)
        events: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": message})
        ]
        for index, block in enumerate(blocks):
            start: dict[str, Any]
            delta: dict[str, Any]
            if block["type"] == "text":
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                start = {**block, "input": {}}
                delta = {
                    "type": "input_json_delta",
                    "partial_json": json.dumps(block["input"]),
                }
            events += [
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": start,
                    },
                ),
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                ),
                ("content_block_stop", {"type": "content_block_stop", "index": index}),
            ]
        events += [
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": 5},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        return events

    # -- OpenAI Responses ------------------------------------------------------------
    def _responses(
        self, move: Move, body: dict[str, Any]
    ) -> list[tuple[str, dict[str, Any]]]:
        rid = self._id("resp")
        items: list[dict[str, Any]] = []
        if move.text:
            items.append(
                {
                    "type": "message",
                    "id": self._id("msg"),
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "text": move.text, "annotations": []}
                    ],
                }
            )
        for name, payload in move.calls:
            items.append(
                {
                    "type": "function_call",
                    "id": self._id("fc"),
                    "call_id": self._id("call"),
                    "name": name,
                    "arguments": json.dumps(payload),
                    "status": "completed",
                }
            )
        base = {
            "id": rid,
            "object": "response",
            "created_at": int(time.time()),
            "model": body.get("model", "stub"),
            "status": "in_progress",
            "output": [],
        }
        events: list[tuple[str, dict[str, Any]]] = [
            ("response.created", {"type": "response.created", "response": base})
        ]
        for index, item in enumerate(items):
            events.append(
                (
                    "response.output_item.added",
                    {
                        "type": "response.output_item.added",
                        "output_index": index,
                        "item": item,
                    },
                )
            )
            events.append(
                (
                    "response.output_item.done",
                    {
                        "type": "response.output_item.done",
                        "output_index": index,
                        "item": item,
                    },
                )
            )
        done = {
            **base,
            "status": "completed",
            "output": items,
            "usage": {
                "input_tokens": 10,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 15,
            },
        }
        events.append(
            ("response.completed", {"type": "response.completed", "response": done})
        )
        return events


def _side_answer(path: str) -> dict[str, Any]:
    if path.endswith("/count_tokens"):
        return {"input_tokens": 10}
    if path.endswith("/models"):
        return {"data": [], "object": "list", "models": []}
    return {}


async def _json(
    conn: h11.Connection, stream: anyio.abc.SocketStream, data: dict[str, Any]
) -> None:
    body = json.dumps(data).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    await stream.send(
        conn.send(h11.Response(status_code=200, headers=headers))
        + conn.send(h11.Data(data=body))
        + conn.send(h11.EndOfMessage())
    )


async def _next_event(conn: h11.Connection, stream: anyio.abc.SocketStream) -> object:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        try:
            data = await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return None
        conn.receive_data(data)
