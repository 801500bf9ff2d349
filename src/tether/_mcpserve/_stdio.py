"""The stdio wire of `tether mcp serve`: stdin's lines in, the answers out.

The SDK's `stdio_server` reads and writes the standard streams through worker threads
(`anyio.wrap_file`): each line in and each answer out waits for a thread and then for
the event loop again, two wake-ups that a loaded machine can make cost milliseconds on
the path from a client's cancel to its answer. When a stream is a pipe or a socket (as
a client that starts the server gives it), it is read and written here on the event
loop itself, non-blocking; otherwise (a terminal, a file) a thread does it, as before.

With both streams pipes, the SDK's own reader and writer tasks are left out too
(`message_streams`): the dispatcher reads each message straight off the wire and each
answer is written by the task that sends it, not handed through a memory stream to a
task of its own (a hop, an event-loop turn and a task switch each way).
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.lowlevel

from .._jsonrpc import FdReceiveStream, FdSendStream

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ("ReadStream", "message_streams", "stdio_wire")

ANSWER_WRITE_BOUND = 10.0
"""Seconds an answer whose first bytes are written may wait for the client to read
the rest (shielded from the cancel of its sender: half a line would break the wire)."""


def _pollable(fd: int) -> bool:
    """Whether `fd` is a pipe or a socket: what the event loop can wait on."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@contextlib.contextmanager
def _non_blocking(fd: int) -> Any:
    """`fd` non-blocking for the block, its own mode back after.

    The open file may be shared with another process.
    """
    was = os.get_blocking(fd)
    os.set_blocking(fd, False)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.set_blocking(fd, was)


class _PipeLines:
    """The lines of a pipe, read on the event loop; the last may lack its newline.

    Cancelling a wait for the next line leaves nothing blocked.
    """

    def __init__(self, fd: int) -> None:
        self._stream = FdReceiveStream(fd)
        self._lines: list[bytes] = []
        self._part = b""
        self._eof = False

    def __aiter__(self) -> _PipeLines:
        return self

    async def __anext__(self) -> str:
        while not self._lines:
            if self._eof:
                raise StopAsyncIteration
            try:
                chunk = await self._stream.receive()
            except anyio.EndOfStream:
                self._eof = True
                if self._part:
                    self._lines.append(self._part)
                continue
            *whole, self._part = (self._part + chunk).split(b"\n")
            self._lines.extend(line + b"\n" for line in whole)
        return self._lines.pop(0).decode("utf-8", errors="replace")


class _PipeWriter:
    """The answers, each written whole to a pipe on the event loop.

    It waits only while the pipe is full (a reader that is behind).
    """

    def __init__(self, fd: int) -> None:
        self._stream = FdSendStream(fd)

    async def write(self, text: str) -> None:
        await self._stream.send(text.encode("utf-8"))
        await anyio.lowlevel.checkpoint()

    async def write_bytes(self, data: bytes) -> None:
        """Write every byte of `data`, waiting while the pipe is full."""
        await self._stream.send(data)

    async def flush(self) -> None:
        """Nothing is buffered: `write` returns once the pipe has every byte."""

    def write_nowait(self, data: bytes) -> int:
        """Write what the pipe takes now, without waiting; how many bytes it took."""
        try:
            return os.write(self._stream.fd, data)
        except BlockingIOError:
            return 0
        except OSError as exc:
            raise anyio.BrokenResourceError from exc


class ReadStream:
    """What the SDK's server reads messages from: `receive()`, iteration, `aclose()`.

    A subclass gives `receive()` (raising `anyio.EndOfStream` at the end).
    """

    async def receive(self) -> Any:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Nothing to close here (the wire is closed by its owner)."""

    def __aiter__(self) -> ReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> ReadStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _WireReader(ReadStream):
    """The SDK's read stream, read off the wire: each line parsed when it is asked for.

    A line that is no JSON-RPC message is handed on as its exception, as the SDK's
    own reader does.
    """

    def __init__(self, lines: Any) -> None:
        import mcp_types

        self._lines = lines
        self._parse = mcp_types.jsonrpc_message_adapter.validate_json

    async def receive(self) -> Any:
        from mcp.shared.message import SessionMessage

        try:
            line = await self._lines.__anext__()
        except StopAsyncIteration:
            raise anyio.EndOfStream from None
        try:
            return SessionMessage(self._parse(line, by_name=False))
        except Exception as exc:
            return exc


class _WireWriter:
    """The SDK's write stream, writing each message to the wire from its sender's task.

    Messages are written one at a time, each whole: one begun is finished even if
    its sender is cancelled meanwhile (bounded by `ANSWER_WRITE_BOUND`).
    """

    def __init__(self, out: _PipeWriter) -> None:
        self._out = out
        self._half: anyio.Event | None = None
        """Set while an answer is half written: its end is waited for (a lock would
        cost an event-loop turn on every answer; this costs one only then)."""
        self._closed = False

    async def send(self, item: Any) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        line = item.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
        data = line.encode("utf-8")
        while self._half is not None:
            await self._half.wait()
        # The whole line in one write when the pipe has room (the common case):
        # nothing to wait for, and nothing a cancel could cut.
        written = self._out.write_nowait(data)
        if written == len(data):
            return
        self._half = half = anyio.Event()
        try:
            with anyio.CancelScope(shield=True) as scope:
                scope.deadline = anyio.current_time() + ANSWER_WRITE_BOUND
                await self._out.write_bytes(data[written:])
        finally:
            self._half = None
            half.set()
        if scope.cancelled_caught:
            self._closed = True
            raise anyio.BrokenResourceError(
                f"the client read no answer for {ANSWER_WRITE_BOUND:g} s: "
                "the wire is closed"
            )

    async def aclose(self) -> None:
        self._closed = True

    def close(self) -> None:
        self._closed = True

    async def __aenter__(self) -> _WireWriter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@contextlib.asynccontextmanager
async def _thread_lines(wire: int) -> AsyncIterator[Any]:
    """The lines of `wire` read by a daemon thread (a terminal or a file).

    The SDK's own reader waits for its blocked read when cancelled, so a signalled
    server would wait for the client's next line or EOF to exit; a daemon thread is
    left blocked instead.
    """
    send, receive = anyio.create_memory_object_stream[str](64)
    token = anyio.lowlevel.current_token()

    def pump() -> None:
        with open(wire, encoding="utf-8", errors="replace", closefd=False) as lines:
            for line in lines:
                try:
                    anyio.from_thread.run(send.send, line, token=token)
                except Exception:  # the server has closed
                    return
        with contextlib.suppress(Exception):
            anyio.from_thread.run_sync(send.close, token=token)

    threading.Thread(target=pump, name="tether-mcp-stdin", daemon=True).start()
    async with receive:
        yield receive


@contextlib.contextmanager
def _diverted(fd: int, to: int) -> Any:
    """A private copy of `fd` (the wire), while `fd` itself points at `to`.

    What the calls start, and a stray print, then read EOF or write to stderr
    instead of the wire, as the SDK does; `fd` is the wire again after. The copy is
    left open: a daemon thread may still be blocked reading it.
    """
    wire = os.dup(fd)
    os.dup2(to, fd)
    try:
        yield wire
    finally:
        os.dup2(wire, fd)


@contextlib.asynccontextmanager
async def stdio_wire() -> AsyncIterator[tuple[Any, Any]]:
    """`(stdin, stdout)` for the SDK's `stdio_server`.

    Stdin's lines, and a writer for the answers or None (stdout is not a pipe or a
    socket: the SDK writes it itself).
    """
    async with contextlib.AsyncExitStack() as stack:
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            wire_in = stack.enter_context(_diverted(0, null))
        finally:
            os.close(null)
        if _pollable(wire_in):
            stack.enter_context(_non_blocking(wire_in))
            lines: Any = _PipeLines(wire_in)
        else:
            lines = await stack.enter_async_context(_thread_lines(wire_in))
        out: _PipeWriter | None = None
        if _pollable(1):
            wire_out = stack.enter_context(_diverted(1, 2))
            stack.enter_context(_non_blocking(wire_out))
            out = _PipeWriter(wire_out)
        yield lines, out


@contextlib.asynccontextmanager
async def message_streams() -> AsyncIterator[tuple[Any, Any]]:
    """`(read, write)`: the MCP messages of stdin and stdout, for the SDK's server.

    Off the wire directly when stdout is a pipe or a socket; otherwise through the
    SDK's `stdio_server` (which writes a terminal or a file through a thread).
    """
    from mcp.server.stdio import stdio_server

    async with stdio_wire() as (lines, out):
        if out is not None:
            yield _WireReader(lines), _WireWriter(out)
            return
        async with stdio_server(lines, None) as streams:
            yield streams
