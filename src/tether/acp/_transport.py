"""Newline-delimited JSON-RPC frames for the ACP connection, with the one error boundary.

The `agent-client-protocol` SDK answers unknown methods (-32601) and bad parameters
(-32602) itself, but its stdio reader logs a line that is not JSON and answers nothing,
and a line that is JSON but not an object ends its receive loop. This transport is the
one place that fixes both: it hands the SDK only objects that look like JSON-RPC 2.0
messages and answers everything else itself (-32700 for a line that is not JSON, -32600
for one that is not a request, notification or response), then keeps serving.

It also keeps the editor's requests not yet answered, so a `$/cancel_request`
notification (which the SDK does not route) reaches `on_cancel_request` with the request
it names; one naming no pending request is dropped, as the protocol asks. Each request is
offered to `on_request` first, which takes (and answers) those the SDK does not route.

It also notes the id of each request of ours sent while `noting_requests()` is open in
the sending task (the SDK mints ids and does not return them), so a request given up can
be withdrawn with `$/cancel_request`.

It does not know about sessions or tools; it moves frames.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from typing import TYPE_CHECKING, Any, Final, TypeGuard

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from .._jsonrpc import INVALID_REQUEST, MAX_LINE, PARSE_ERROR

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

__all__ = ("CANCEL_REQUEST", "LineTransport", "noting_requests", "withdrawn_on_stop")

_VERSION: Final = "2.0"
CANCEL_REQUEST: Final = "$/cancel_request"
_NOTING: contextvars.ContextVar[list[str | int] | None] = contextvars.ContextVar(
    "tether_acp_noting", default=None
)
"""Where the current task's outgoing request ids are noted, if anywhere."""


@contextlib.contextmanager
def noting_requests() -> Iterator[list[str | int]]:
    """Note the id of every request this task sends while open, in order."""
    ids: list[str | int] = []
    token = _NOTING.set(ids)
    try:
        yield ids
    finally:
        _NOTING.reset(token)


WITHDRAW_BOUND: Final = 1.0
"""Longest wait, in seconds, to tell the peer a request of ours is given up."""


@contextlib.asynccontextmanager
async def withdrawn_on_stop(
    withdraw: Callable[[str | int], Awaitable[None]],
) -> AsyncIterator[None]:
    """Withdraw the requests this task sends inside, if a cancellation ends the wait.

    Each is named to `withdraw` (which sends `$/cancel_request`), briefly and
    shielded; the cancellation then goes on.
    """
    with noting_requests() as sent:
        try:
            yield
        except anyio.get_cancelled_exc_class():
            with anyio.move_on_after(WITHDRAW_BOUND, shield=True):
                for request_id in sent:
                    await withdraw(request_id)
            raise


class LineTransport:
    """An `acp` message transport over a byte stream pair: one JSON object per line."""

    def __init__(
        self,
        receive: anyio.abc.ByteReceiveStream,
        send: anyio.abc.ByteSendStream,
        *,
        max_line: int = MAX_LINE,
        write_bound: float = 30.0,
    ) -> None:
        self._receive = BufferedByteReceiveStream(receive)
        self._send = send
        self._max_line = max_line
        self._write_bound = write_bound
        self._lock = anyio.Lock()
        self._closed = False
        self.rejected = 0
        """Frames answered here with a parse or invalid-request error."""
        self.on_result: Callable[[object], None] | None = None
        """Called with a response's result once its frame is written (what follows a
        `session/new` answer can then be sent after it)."""
        self.on_cancel_request: Callable[[str, dict[str, Any]], None] | None = None
        """Called with the method and params of a pending request a `$/cancel_request`
        names (the request is still answered, by its handler)."""
        self.on_request: Callable[[str | int, str, dict[str, Any]], bool] | None = None
        """Offered each request (its id, method and params) before the SDK: True when
        it takes it, to answer it with `send()` (a method the SDK does not route)."""
        self._pending: dict[str | int, tuple[str, dict[str, Any]]] = {}
        """The peer's requests not answered yet, by id: their method and params."""

    async def send(self, message: dict[str, Any]) -> None:
        """Write one frame; frames never interleave."""
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        noting = _NOTING.get()
        if noting is not None and "method" in message and _is_id(message.get("id")):
            # Noted before the write: a write that is cut may still have arrived.
            noting.append(message["id"])
        async with self._lock:
            if self._closed:
                raise ConnectionError("the ACP connection is closed")
            # A frame cut half-way would corrupt every frame after it: the write is
            # shielded, and bounded so a peer that stops reading cannot hold it forever.
            with anyio.move_on_after(self._write_bound, shield=True) as scope:
                await self._send.send(data)
            if scope.cancelled_caught:
                self._closed = True
                raise ConnectionError(
                    f"the ACP client read nothing for {self._write_bound:g} s"
                )
            answered = message.get("id")
            if "method" not in message and _is_id(answered):
                self._pending.pop(answered, None)
            if self.on_result is not None and "result" in message:
                self.on_result(message["result"])

    async def receive(self) -> dict[str, Any] | None:
        """Return the next well-formed message, or None at the end of the stream."""
        while True:
            try:
                line = await self._receive.receive_until(b"\n", self._max_line)
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError):
                return None  # the editor closed its side (a cut last line is dropped)
            except anyio.DelimiterNotFound:
                # A frame past the bound cannot be resynchronised: end the session.
                await self._reject(
                    None,
                    PARSE_ERROR,
                    "Parse error",
                    f"line longer than {self._max_line} bytes",
                )
                return None
            line = line.strip()
            if not line:
                continue
            try:
                message = json.loads(line)
            except (ValueError, UnicodeDecodeError) as exc:
                await self._reject(None, PARSE_ERROR, "Parse error", str(exc))
                continue
            problem = _problem(message)
            if problem is None:
                if self._cancels_a_request(message) or self._taken(message):
                    continue
                return message  # type: ignore[no-any-return]
            frame_id = message.get("id") if isinstance(message, dict) else None
            if not isinstance(frame_id, str | int) or isinstance(frame_id, bool):
                frame_id = None
            await self._reject(frame_id, INVALID_REQUEST, "Invalid request", problem)

    def _cancels_a_request(self, message: dict[str, Any]) -> bool:
        """Keep a request as pending; take a `$/cancel_request` notification here."""
        method = message.get("method")
        if method is None:
            return False
        if "id" in message:
            if _is_id(message["id"]):
                self._pending[message["id"]] = (method, _params(message))
            return False
        if method != CANCEL_REQUEST:
            return False
        named = _params(message).get("requestId")
        pending = self._pending.get(named) if _is_id(named) else None
        if pending is not None and self.on_cancel_request is not None:
            self.on_cancel_request(*pending)
        return True

    def _taken(self, message: dict[str, Any]) -> bool:
        """Whether `on_request` took the message (a request it serves)."""
        request_id = message.get("id")
        if self.on_request is None or "method" not in message or not _is_id(request_id):
            return False
        return self.on_request(request_id, message["method"], _params(message))

    async def close(self) -> None:
        """Stop sending; a frame being written is finished first."""
        async with self._lock:
            self._closed = True

    async def _reject(
        self, frame_id: str | int | None, code: int, message: str, details: str
    ) -> None:
        self.rejected += 1
        error = {"code": code, "message": message, "data": {"details": details}}
        # A peer that is gone cannot be told; the receive side sees the end next.
        with contextlib.suppress(
            ConnectionError, anyio.BrokenResourceError, anyio.ClosedResourceError
        ):
            await self.send({"jsonrpc": _VERSION, "id": frame_id, "error": error})


def _params(message: dict[str, Any]) -> dict[str, Any]:
    params = message.get("params")
    return params if isinstance(params, dict) else {}


def _is_id(value: object) -> TypeGuard[str | int]:
    return isinstance(value, str | int) and not isinstance(value, bool)


def _problem(message: object) -> str | None:
    """Say why a decoded frame is not a JSON-RPC 2.0 message, or None if it is one."""
    if not isinstance(message, dict):
        return "a frame must be a JSON object (batches are not supported)"
    if message.get("jsonrpc") != _VERSION:
        return 'a frame must carry "jsonrpc": "2.0"'
    has_id = "id" in message
    if has_id:
        frame_id = message["id"]
        if isinstance(frame_id, bool) or not isinstance(frame_id, str | int | None):
            return "an id must be a string, an integer or null"
    if "method" in message:
        if not isinstance(message["method"], str):
            return "a method must be a string"
        params = message.get("params")
        if params is not None and not isinstance(params, dict | list):
            return "params must be an object or an array"
        return None
    if has_id and ("result" in message or "error" in message):
        return None
    return "a frame must be a request, a notification or a response"
