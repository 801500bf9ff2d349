"""A local OpenAI-compatible Chat Completions server, for tests and benchmarks.

`ModelServer` listens on 127.0.0.1 and answers each request with the next `Reply` it was
given: real Server-Sent Events chunks (`chat.completion.chunk` objects, `data: [DONE]`
at the end) or an error status with a JSON body. A request that does not ask to stream
gets the same reply as one `chat.completion` object, the chunks put together. It keeps every request body, and it
can hold a stream open after its chunks until the client closes the connection, which
it records (`closed`), so a test sees that a stop really closed the request (S11).

HTTP/1.1 framing is done by `h11`; the server speaks only what the `openai` SDK needs
(one request per cycle, keep-alive, chunked responses).
"""

from __future__ import annotations

import collections
import json
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, final

import anyio
import anyio.abc
import attrs
import h11

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Sequence

__all__ = ("ModelServer", "Reply", "error_reply", "text_reply", "tool_call_reply")


@attrs.frozen(kw_only=True)
class Reply:
    """One answer of the server: SSE chunks, or an error status with a JSON body."""

    chunks: tuple[dict[str, Any], ...] = ()
    status: int = 200
    body: dict[str, Any] | None = None
    """The JSON body of an error status (or of an answer that does not stream)."""
    headers: tuple[tuple[str, str], ...] = ()
    hold: bool = False
    """After the chunks, keep the stream open until the client closes it."""
    drop: bool = False
    """After the chunks, close the connection without ending the stream."""


def _chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    usage: tuple[int, int] | None = None,
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": "chatcmpl-stub",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "stub",
        "choices": []
        if delta is None
        else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        data["usage"] = {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": usage[0] + usage[1],
        }
    return data


def text_reply(
    text: str = "",
    *,
    pieces: Sequence[str] | None = None,
    usage: tuple[int, int] | None = (10, 5),
    hold: bool = False,
    headers: Sequence[tuple[str, str]] = (),
) -> Reply:
    """An assistant answer streamed in `pieces` (default: the text in one piece).

    With `hold`, the stream stays open after the pieces (no finish, no `[DONE]`).
    """
    parts = list(pieces) if pieces is not None else ([text] if text else [])
    chunks = [_chunk({"role": "assistant", "content": ""})]
    chunks += [_chunk({"content": p}) for p in parts]
    if not hold:
        chunks.append(_chunk({}, finish="stop"))
        if usage is not None:
            chunks.append(_chunk(usage=usage))
    return Reply(chunks=tuple(chunks), hold=hold, headers=tuple(headers))


def tool_call_reply(
    calls: Sequence[tuple[str, str, dict[str, Any]]],
    *,
    text: str = "",
    split: int = 3,
    usage: tuple[int, int] | None = (10, 5),
) -> Reply:
    """Tool calls `(id, name, input)`, each one's arguments split over `split` chunks."""
    chunks = [_chunk({"role": "assistant", "content": text or None})]
    for index, (call_id, name, payload) in enumerate(calls):
        chunks.append(
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ]
                }
            )
        )
        arguments = json.dumps(payload)
        size = max(1, -(-len(arguments) // split))
        for start in range(0, len(arguments), size):
            piece = arguments[start : start + size]
            chunks.append(
                _chunk(
                    {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                )
            )
    chunks.append(_chunk({}, finish="tool_calls"))
    if usage is not None:
        chunks.append(_chunk(usage=usage))
    return Reply(chunks=tuple(chunks))


def error_reply(
    status: int, message: str = "error", *, retry_after_ms: int | None = None
) -> Reply:
    """An error status with an OpenAI-style error body."""
    headers = (
        (("retry-after-ms", str(retry_after_ms)),) if retry_after_ms is not None else ()
    )
    return Reply(
        status=status,
        body={"error": {"message": message, "type": "server_error", "code": None}},
        headers=headers,
    )


@final
class ModelServer:
    """An OpenAI-compatible server on 127.0.0.1 that plays replies in order.

    With no reply left, a request gets status 500 and a body that says so.
    """

    def __init__(self, replies: Iterable[Reply] = ()) -> None:
        self.replies = collections.deque(replies)
        self.requests: list[dict[str, Any]] = []
        """Every request body, parsed, in order."""
        self.headers: list[dict[str, str]] = []
        """Every request's headers (lower-case names), in order."""
        self.closed = anyio.Event()
        """Set when a client closed a held stream."""
        self.closed_at: float | None = None
        """`time.perf_counter()` when that happened."""
        self.port = 0

    @property
    def url(self) -> str:
        """The base URL to give a client (`http://127.0.0.1:PORT/v1`)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def add(self, *replies: Reply) -> None:
        """Queue more replies."""
        self.replies.extend(replies)

    @classmethod
    @asynccontextmanager
    async def open(cls, replies: Iterable[Reply] = ()) -> AsyncIterator[ModelServer]:
        """Serve until the block ends."""
        server = cls(replies)
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        server.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, server._serve)
            try:
                yield server
            finally:
                tg.cancel_scope.cancel()

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
                self.headers.append(
                    {k.decode().lower(): v.decode() for k, v in request.headers}
                )
                self.requests.append(json.loads(body or b"{}"))
                reply = (
                    self.replies.popleft()
                    if self.replies
                    else error_reply(500, "the test server has no reply left")
                )
                if not self.requests[-1].get("stream") and reply.status == 200:
                    reply = Reply(status=200, body=_completion(reply.chunks))
                if not await self._answer(conn, stream, reply):
                    return
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()

    async def _answer(
        self, conn: h11.Connection, stream: anyio.abc.SocketStream, reply: Reply
    ) -> bool:
        """Send one reply; False when the connection is over."""
        extra = [(k.encode(), v.encode()) for k, v in reply.headers]
        if reply.status != 200 or reply.body is not None:
            body = json.dumps(reply.body or {}).encode()
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *extra,
            ]
            await stream.send(
                conn.send(h11.Response(status_code=reply.status, headers=headers))
                + conn.send(h11.Data(data=body))
                + conn.send(h11.EndOfMessage())
            )
            return True
        headers = [
            (b"content-type", b"text/event-stream"),
            (b"transfer-encoding", b"chunked"),
            *extra,
        ]
        try:
            await stream.send(conn.send(h11.Response(status_code=200, headers=headers)))
            for chunk in reply.chunks:
                line = b"data: " + json.dumps(chunk).encode() + b"\n\n"
                await stream.send(conn.send(h11.Data(data=line)))
            if reply.drop:
                return False
            if reply.hold:
                # Wait for the client to close the connection (a stop, S11).
                while await stream.receive():
                    pass
                return False
            await stream.send(
                conn.send(h11.Data(data=b"data: [DONE]\n\n"))
                + conn.send(h11.EndOfMessage())
            )
        except (
            anyio.EndOfStream,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
        ):
            self.closed_at = time.perf_counter()
            self.closed.set()
            return False
        return True


def _completion(chunks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One `chat.completion` object: the message and usage that `chunks` stream."""
    content = ""
    calls: dict[int, dict[str, Any]] = {}
    finish = "stop"
    usage = None
    for chunk in chunks:
        usage = chunk.get("usage", usage)
        for choice in chunk["choices"]:
            delta = choice["delta"]
            content += delta.get("content") or ""
            finish = choice["finish_reason"] or finish
            for part in delta.get("tool_calls", ()):
                call = calls.setdefault(
                    part["index"],
                    {
                        "id": "",
                        "type": "function",
                        "function": {"name": "", "arguments": ""},
                    },
                )
                call["id"] = part.get("id") or call["id"]
                function = part.get("function", {})
                call["function"]["name"] += function.get("name") or ""
                call["function"]["arguments"] += function.get("arguments") or ""
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    body: dict[str, Any] = {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "model": "stub",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


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
