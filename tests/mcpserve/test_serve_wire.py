"""`tether mcp serve`'s stdio wire: pipes read and written on the event loop, a file
or a terminal through a thread; and the SDK's per-message span only under a tracer."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
from typing import TYPE_CHECKING

import anyio
import pytest
from opentelemetry import trace
from tests.cli._run import TETHER

from tether._jsonrpc import FdReceiveStream
from tether._mcpserve._server import freeze_heap, mcp_server
from tether._mcpserve._stdio import (
    _non_blocking,
    _PipeLines,
    _PipeWriter,
    _WireReader,
    _WireWriter,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.anyio


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read, write = os.pipe()
    yield read, write
    for fd in (read, write):
        with contextlib.suppress(OSError):  # closed by the test
            os.close(fd)


async def test_lines_split_across_reads_come_whole(pipe: tuple[int, int]) -> None:
    """A line cut between two reads (a character too) is one line; the last line may
    lack its newline; EOF ends the lines."""
    read, write = pipe
    lines = _PipeLines(read)
    os.write(write, b'{"a": 1}\n{"b": "\xc3')
    assert await lines.__anext__() == '{"a": 1}\n'
    os.write(write, b'\xa9"}\n{"c"')
    assert await lines.__anext__() == '{"b": "\u00e9"}\n'
    os.write(write, b": 3}")
    os.close(write)
    assert [line async for line in lines] == ['{"c": 3}']


async def test_a_wait_for_the_next_line_ends_at_its_cancel(
    pipe: tuple[int, int],
) -> None:
    """Nothing is blocked in a thread: the cancel ends the wait at once, and a line
    sent after is read whole."""
    read, write = pipe
    lines = _PipeLines(read)
    with anyio.move_on_after(0.05) as scope:
        await lines.__anext__()
    assert scope.cancelled_caught
    os.write(write, b"next\n")
    with anyio.fail_after(5):
        assert await lines.__anext__() == "next\n"


async def test_an_answer_larger_than_the_pipe_is_written_whole_while_others_run(
    pipe: tuple[int, int],
) -> None:
    """The writer waits on the event loop while the pipe is full, not in a blocked
    write: a reader in the same loop drains it and gets every byte."""
    read, write = pipe
    text = "x" * 300_000 + "\n"
    got = bytearray()

    async def drain() -> None:
        stream = FdReceiveStream(read)
        while len(got) < len(text):
            got.extend(await stream.receive())

    with _non_blocking(write), anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            await _PipeWriter(write).write(text)
    assert got.decode() == text


async def test_a_line_that_is_no_message_is_handed_on_and_the_next_is_read(
    pipe: tuple[int, int],
) -> None:
    """Messages are parsed as the server asks for them: a line that is none is handed
    on as its exception (as the SDK's reader does), and the wire's end ends them."""
    read, write = pipe
    reader = _WireReader(_PipeLines(read))
    os.write(write, b'not json\n{"jsonrpc": "2.0", "method": "notifications/x"}\n')
    os.close(write)
    with anyio.fail_after(5):
        bad, good = await reader.receive(), await reader.receive()
        with pytest.raises(anyio.EndOfStream):
            await reader.receive()
    assert isinstance(bad, Exception)
    assert good.message.method == "notifications/x"


async def test_an_answer_whose_sender_is_cancelled_mid_write_is_written_whole(
    pipe: tuple[int, int],
) -> None:
    """Half a line would break the wire: an answer larger than the pipe, its sender
    cancelled while the pipe is full, still reaches the client whole, and an answer
    sent meanwhile from another task comes whole after it."""
    from mcp.shared.message import SessionMessage
    from mcp_types import JSONRPCResponse

    read, write = pipe
    writer = _WireWriter(_PipeWriter(write))
    big = JSONRPCResponse(jsonrpc="2.0", id=1, result={"text": "x" * 300_000})
    lines: list[dict[str, object]] = []

    async def drain() -> None:
        async for line in _PipeLines(read):
            lines.append(json.loads(line))
            if len(lines) == 2:
                return

    with _non_blocking(write), anyio.fail_after(10):
        async with (
            anyio.create_task_group() as tg,
            anyio.create_task_group() as senders,
        ):
            senders.start_soon(writer.send, SessionMessage(big))
            await anyio.wait_all_tasks_blocked()  # the pipe is full
            after = JSONRPCResponse(jsonrpc="2.0", id=2, result={})
            tg.start_soon(writer.send, SessionMessage(after))
            await anyio.wait_all_tasks_blocked()  # it waits for the first
            senders.cancel_scope.cancel()
            tg.start_soon(drain)
    assert [line["id"] for line in lines] == [1, 2]
    assert lines[0]["result"] == {"text": "x" * 300_000}


def test_a_descriptor_gets_its_own_blocking_mode_back(pipe: tuple[int, int]) -> None:
    """The open pipe may be another process's too: its mode is given back."""
    read, _ = pipe
    assert os.get_blocking(read)
    with _non_blocking(read):
        assert not os.get_blocking(read)
    assert os.get_blocking(read)


def test_spans_are_made_only_under_a_tracer_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No provider set: the SDK's OpenTelemetry middleware is dropped (its spans would
    go nowhere); with one, it stays."""

    def names() -> list[str]:
        server = mcp_server(lambda ctx: None)  # type: ignore[arg-type,return-value]
        return [type(m).__name__ for m in server.middleware]

    assert "OpenTelemetryMiddleware" not in names()
    monkeypatch.setattr(trace, "get_tracer_provider", trace.NoOpTracerProvider)
    assert "OpenTelemetryMiddleware" in names()


async def test_stdin_and_stdout_that_are_files_are_served_through_a_thread(
    workspace: Path, tmp_path: Path
) -> None:
    """Neither a pipe nor a socket (a file here, or a terminal): the lines are read
    and the answers written as before, and the server ends at the input's end.

    `initialize` is answered before the next line is read; what comes after it may be
    cut short by the end of the input (EOF ends the server's handlers).
    """
    hello = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    }
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]
    given = tmp_path / "in.jsonl"
    given.write_text("".join(json.dumps(r) + "\n" for r in requests))
    answers = tmp_path / "out.jsonl"
    argv = [*TETHER, "mcp", "serve", "--ledger", str(tmp_path / "ledger.sqlite")]
    with given.open("rb") as stdin, answers.open("wb") as stdout:
        with anyio.fail_after(60):
            done = await anyio.run_process(
                argv, stdin=stdin, stdout=stdout, cwd=workspace, check=False
            )
    assert done.returncode == 0, done.stderr.decode()
    (answer,) = map(json.loads, answers.read_text().splitlines())
    assert answer["id"] == 1
    assert answer["result"]["serverInfo"]["name"] == "tether"


@pytest.mark.parametrize("http", [False, True])
def test_what_serving_loads_is_kept_out_of_the_collectors_walks(http: bool) -> None:
    """`tether mcp serve` loads its transport's SDK modules, then freezes the heap:
    a full collection later walks only what the server made since."""
    gc.unfreeze()
    try:
        freeze_heap(http=http)
        assert gc.get_freeze_count() > 0
        name = "mcp.server.streamable_http_manager" if http else "mcp.server.stdio"
        assert name in sys.modules
    finally:
        gc.unfreeze()  # this process serves nothing: its objects go back
