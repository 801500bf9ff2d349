"""JSON-RPC 2.0 over a byte stream, one JSON object per line.

Written here rather than taken from a library because the host needs three things the
libraries at hand do not give together: requests handled inline in arrival order (so a
`tools.abort` can never overtake its `tools.execute`), requests that may also run as tasks
(a permission prompt), and a waiter that is removed on every path so a late answer is
dropped. The `mcp` SDK's JSON-RPC layer is MCP-typed and private.

It does not know about tools: methods are registered by the hosts.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeAlias

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectSendStream

__all__ = (
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "Connection",
    "FdReceiveStream",
    "FdSendStream",
    "FrameTooLarge",
    "RpcError",
)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_CANCELLED = -32800
MAX_LINE = 16 * 1024 * 1024
"""Longest frame sent or accepted, in bytes (the newline excluded)."""

Params: TypeAlias = dict[str, Any]
InlineHandler: TypeAlias = Callable[[Params], Any]
TaskHandler: TypeAlias = Callable[[Params], Awaitable[Any]]
NotificationHandler: TypeAlias = Callable[[Params], None]


class RpcError(Exception):
    """A JSON-RPC error answer (raised by handlers, or received for a request)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.data = data


class FrameTooLarge(RpcError):
    """A message would make a frame longer than `MAX_LINE`; nothing was sent."""

    def __init__(self, size: int) -> None:
        super().__init__(
            INTERNAL_ERROR, f"message of {size} bytes is over the {MAX_LINE}-byte frame"
        )
        self.size = size


class FdReceiveStream(anyio.abc.ByteReceiveStream):
    """Bytes from a pipe's file descriptor, read without a thread (cancellable)."""

    closed = False
    """Set by an owner that closed `fd`: a reader woken for it reads no other file
    that took its number."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self.fd = fd

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while True:
            if self.closed:
                raise anyio.ClosedResourceError
            try:
                data = os.read(self.fd, max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self.fd)
                continue
            if not data:
                raise anyio.EndOfStream
            return data

    async def aclose(self) -> None:
        pass


class FdSendStream(anyio.abc.ByteSendStream):
    """Bytes to a pipe's file descriptor, written without a thread."""

    closed = False
    """Set by an owner that closed `fd`: a writer woken for it writes to no other file
    that took its number."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self.fd = fd

    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        while view:
            if self.closed:
                raise anyio.ClosedResourceError
            try:
                written = os.write(self.fd, view)
            except BlockingIOError:
                await anyio.wait_writable(self.fd)
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError from exc
            view = view[written:]

    async def aclose(self) -> None:
        pass


class Connection:
    """One JSON-RPC peer: answers requests, sends requests and notifications."""

    def __init__(
        self,
        receive: anyio.abc.ByteReceiveStream,
        send: anyio.abc.ByteSendStream,
        *,
        inline: dict[str, InlineHandler] | None = None,
        tasks: dict[str, TaskHandler] | None = None,
        notifications: dict[str, NotificationHandler] | None = None,
    ) -> None:
        self._receive = BufferedByteReceiveStream(receive)
        self._send = send
        self.inline = inline or {}
        self.tasks = tasks or {}
        self.notifications = notifications or {}
        self._next_id = 0
        self._waiters: dict[int, tuple[anyio.Event, list[Any]]] = {}
        self._outbox: MemoryObjectSendStream[bytes] | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._running: dict[Any, anyio.CancelScope] = {}
        self.bad_notifications = 0
        """Notifications whose handler failed (ignored, the connection keeps serving)."""
        self.oversized_frames = 0
        """Frames longer than `MAX_LINE` that were received and skipped."""
        self.pending_bytes = 0
        """Bytes queued to send and not yet written."""
        self.closed = anyio.Event()

    async def serve(
        self,
        *,
        on_eof: Callable[[], Awaitable[None]] | None = None,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Read and dispatch frames until the peer closes its end.

        After the last frame, `on_eof` (if given) runs while answers can still be sent;
        then everything queued is written and the connection closes.
        """
        send, receive = anyio.create_memory_object_stream[bytes](math.inf)
        self._outbox = send
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._write_loop, receive)
                task_status.started()
                await self._read_loop()
                self.closed.set()
                if on_eof is not None:
                    await on_eof()
                send.close()  # the writer drains what is queued, then ends
        finally:
            self.closed.set()
            send.close()
            for event, slot in self._waiters.values():
                slot.append(RpcError(INTERNAL_ERROR, "connection closed"))
                event.set()

    async def _write_loop(self, receive: anyio.abc.ObjectReceiveStream[bytes]) -> None:
        async with receive:
            async for frame in receive:
                self.pending_bytes -= len(frame)
                try:
                    await self._send.send(frame)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return

    def _put(self, message: dict[str, Any]) -> None:
        if self._outbox is None:
            raise RpcError(INTERNAL_ERROR, "connection is not serving")
        frame = (
            json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
            + b"\n"
        )
        if len(frame) > MAX_LINE + 1:
            # S13b: the peer would refuse it and lose the connection; the caller decides.
            raise FrameTooLarge(len(frame) - 1)
        try:
            self._outbox.send_nowait(frame)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise RpcError(INTERNAL_ERROR, "connection closed") from None
        self.pending_bytes += len(frame)

    def notify(self, method: str, params: Params) -> None:
        """Send a notification (queued in order; never blocks)."""
        self._put({"jsonrpc": "2.0", "method": method, "params": params})

    async def request(self, method: str, params: Params) -> Any:
        """Send a request and wait for its answer.

        A cancelled wait removes its waiter (a late answer is dropped) and tells the peer
        with `$/cancelRequest`.

        Raises:
            RpcError: the peer answered with an error, or the connection closed.
        """
        self._next_id += 1
        rid = self._next_id
        event = anyio.Event()
        slot: list[Any] = []
        self._waiters[rid] = (event, slot)
        try:
            self._put({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
            await event.wait()
        except BaseException:
            if not event.is_set() and not self.closed.is_set():
                self.notify("$/cancelRequest", {"id": rid})
            raise
        finally:
            # Remove the waiter on every path, so a late answer is dropped.
            self._waiters.pop(rid, None)
        answer = slot[0]
        if isinstance(answer, RpcError):
            raise answer
        return answer

    async def _read_loop(self) -> None:
        while True:
            try:
                line = await self._receive.receive_until(b"\n", MAX_LINE)
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
                return
            except anyio.DelimiterNotFound:
                # One oversized frame costs that frame, never the connection.
                self.oversized_frames += 1
                if not await self._skip_line():
                    return
                self._error(
                    None, INVALID_REQUEST, f"frame longer than {MAX_LINE} bytes skipped"
                )
                continue
            if line.strip():
                self._dispatch(line)

    async def _skip_line(self) -> bool:
        """Drop bytes up to and including the next newline; False at the end of input."""
        while True:
            # Take the whole buffer at once, so what follows the newline keeps its order.
            size = max(len(self._receive.buffer), 65536)
            try:
                chunk = await self._receive.receive(size)
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return False
            end = chunk.find(b"\n")
            if end >= 0:
                self._receive.feed_data(chunk[end + 1 :])
                return True

    def _error(self, rid: Any, code: int, message: str, data: Any = None) -> None:
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        self._put({"jsonrpc": "2.0", "id": rid, "error": error})

    def _dispatch(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except (ValueError, UnicodeDecodeError) as exc:
            self._error(None, PARSE_ERROR, f"parse error: {exc}")
            return
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            self._error(None, INVALID_REQUEST, "not a JSON-RPC 2.0 object")
            return
        rid = message.get("id")
        if "method" not in message:
            self._answer(message)
            return
        method = message["method"]
        params = message.get("params", {})
        if not isinstance(method, str) or not isinstance(params, dict):
            self._error(
                rid, INVALID_REQUEST, "method must be a string, params an object"
            )
            return
        if "id" not in message:
            self._notification(method, params)
            return
        if isinstance(rid, bool) or not isinstance(rid, int | str):
            self._error(None, INVALID_REQUEST, "id must be a string or an integer")
            return
        if method in self.inline:
            try:
                self._put(
                    {"jsonrpc": "2.0", "id": rid, "result": self.inline[method](params)}
                )
            except FrameTooLarge as exc:
                self._error(rid, INTERNAL_ERROR, f"answer not sent: {exc.message}")
            except RpcError as exc:
                self._error(rid, exc.code, exc.message, exc.data)
            except Exception as exc:
                self._error(rid, INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        elif method in self.tasks:
            assert self._tg is not None
            # The scope is known before the task starts, so a `$/cancelRequest` in the
            # same read as its request still finds it.
            scope = anyio.CancelScope()
            self._running[rid] = scope
            self._tg.start_soon(self._run_task, rid, scope, self.tasks[method], params)
        else:
            self._error(rid, METHOD_NOT_FOUND, f"method not found: {method}")

    def _notification(self, method: str, params: Params) -> None:
        if method == "$/cancelRequest":
            scope = self._running.get(params.get("id"))
            if scope is not None:
                scope.cancel()
            return
        handler = self.notifications.get(method)
        if handler is None:
            return
        try:
            handler(params)
        except Exception as exc:
            # A notification has no answer to carry an error: report it and keep serving.
            self.bad_notifications += 1
            print(
                f"tether: ignored a bad {method} notification: {exc}", file=sys.stderr
            )

    async def _run_task(
        self, rid: Any, scope: anyio.CancelScope, handler: TaskHandler, params: Params
    ) -> None:
        try:
            with scope:
                result = await handler(params)
                self._put({"jsonrpc": "2.0", "id": rid, "result": result})
                return
            self._error(rid, REQUEST_CANCELLED, "request cancelled")
        except FrameTooLarge as exc:
            self._error(rid, INTERNAL_ERROR, f"answer not sent: {exc.message}")
        except RpcError as exc:
            self._error(rid, exc.code, exc.message, exc.data)
        except Exception as exc:
            self._error(rid, INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        finally:
            self._running.pop(rid, None)

    def _answer(self, message: dict[str, Any]) -> None:
        waiter = self._waiters.get(message.get("id"))  # type: ignore[arg-type]
        if waiter is None:
            return  # an answer nobody waits for any more: dropped
        event, slot = waiter
        if "error" in message and isinstance(message["error"], dict):
            err = message["error"]
            code = err.get("code")
            slot.append(
                RpcError(
                    code if isinstance(code, int) else INTERNAL_ERROR,
                    str(err.get("message")),
                    err.get("data"),
                )
            )
        else:
            slot.append(message.get("result"))
        event.set()
