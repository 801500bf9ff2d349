"""A stop's truth over MCP tasks: tether's client of a server that offers the extension.

The server is tether's own `tether mcp serve --http` (`McpHttp`) in the test's event
loop, speaking `io.modelcontextprotocol/tasks`; its tools are the test's own, held at a
gate the test opens, so no step waits on a clock. tether's client (`McpTools`) makes
each call a task: a stop sends `tasks/cancel` and follows the task to its real end.
A server without tasks (the SDK's own `MCPServer`, in this loop too) behind a loopback
relay the test can cut shows a plain call's broken response stream.
"""

from __future__ import annotations

import contextlib
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import pytest
from tests.mcpserve._http import served_http, wait_state
from tests.waiting import await_until

from tether import Runtime, StopClass, ToolAborted, ToolContext, ToolResult, tool
from tether._config import Config
from tether.host._mcp import McpTools
from tether.runtime import CallState

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from pathlib import Path

    from tether.host import Tool
    from tether.runtime import Session

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

ABORT_BOUND = 0.3


def _gated(gate: anyio.Event, runs: list[str]) -> list[Tool]:
    """A write and a read that start, note their run in `runs`, and wait for `gate`."""

    @tool(stop_class=StopClass.MUTATING)
    async def GatedWrite(ctx: ToolContext, path: str, text: str) -> str:
        runs.append(path)
        await gate.wait()
        ctx.resolve(path).write_text(text, encoding="utf-8")
        return f"wrote {text!r} to {path}"

    @tool(stop_class=StopClass.READ_ONLY)
    async def GatedRead(ctx: ToolContext, key: str) -> str:
        runs.append(key)
        await gate.wait()
        return f"read {key}"

    return [GatedWrite, GatedRead]


@asynccontextmanager
async def _client_of(
    url: str, workspace: Path, *, token: str = ""
) -> AsyncIterator[Runtime]:
    """A runtime whose tools are the server's at `url` (`mcp__srv__*`), through
    tether's MCP client."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    config = Config(mcp_servers={"srv": {"url": url, "headers": headers}})
    async with McpTools.open(config, workspace=workspace) as mcp:
        assert mcp.problems == []
        async with Runtime(
            workspace=workspace,
            tools=mcp.tools,
            permissions={"allow": ["mcp__srv__*"]},
            abort_bound=ABORT_BOUND,
            guard=False,
        ) as runtime:
            yield runtime


async def _stopped_call(
    session: Session,
    events: object,
    name: str,
    args: dict[str, str],
    *,
    then: Callable[[], Awaitable[None]] | None = None,
) -> tuple[list[ToolResult | ToolAborted], list[str]]:
    """Call `name`, stop once it runs on the server; its outcome and the stop's reasons
    for the calls it waits on. `then` runs once the stop has returned."""
    outcome: list[ToolResult | ToolAborted] = []
    async with session.turn() as turn, anyio.create_task_group() as tg:

        async def call() -> None:
            try:
                outcome.append(await turn.call(f"mcp__srv__{name}", args))
            except ToolAborted as exc:
                outcome.append(exc)

        tg.start_soon(call)
        await wait_state(events, name, "running")
        report = await session.abort()
        assert not report.settled
        whys = [p.why for p in report.pending]
        if then is not None:
            await then()
    return outcome, whys


async def test_a_cancelled_task_that_completes_is_recorded_succeeded_with_its_result(
    workspace: Path,
) -> None:
    """A stop during a task's write: the report says the call is waited for, the
    server is told (`tasks/cancel`), and the write ends `succeeded` with its result
    in the ledger and in what the turn is given (spec 01 EXTENSION, over tasks)."""
    gate, runs = anyio.Event(), list[str]()
    async with (
        served_http(
            workspace, _gated(gate, runs), allow=["GatedWrite"], abort_bound=0.1
        ) as (http, events),
        _client_of(http.url, workspace, token=http.token) as runtime,
    ):
        session = runtime.session()

        async def open_once_the_server_is_told() -> None:
            await await_until(
                lambda: any(s.pending() for s in http.runtime.sessions),
                what="tasks/cancel stopping the server's call",
            )
            gate.set()

        args = {"path": "out.txt", "text": "landed"}
        outcome, whys = await _stopped_call(
            session, events, "GatedWrite", args, then=open_once_the_server_is_told
        )
        with anyio.fail_after(10):
            await session.settled()
        (record,) = session.ledger_calls()
        (served,) = http.runtime.ledger.every_call()
    assert whys == ["extension: started, waiting for result"]
    assert str(served.state) == "succeeded"
    assert record.state is CallState.SUCCEEDED
    assert record.output == "wrote 'landed' to out.txt"
    (result,) = outcome
    assert isinstance(result, ToolResult)
    assert (result.output, result.is_error) == ("wrote 'landed' to out.txt", False)
    assert (workspace / "out.txt").read_text() == "landed"
    assert runs == ["out.txt"]


async def test_a_cancelled_read_only_task_ends_cancelled_and_is_reported_so(
    workspace: Path,
) -> None:
    """A read-only tool on the server: `tasks/cancel` ends it there, the task ends
    `cancelled`, and the call ends `aborted` here, the turn told TOOL_ABORTED."""
    gate, runs = anyio.Event(), list[str]()
    async with (
        served_http(workspace, _gated(gate, runs), abort_bound=0.1) as (http, events),
        _client_of(http.url, workspace, token=http.token) as runtime,
    ):
        session = runtime.session()
        outcome, whys = await _stopped_call(session, events, "GatedRead", {"key": "k"})
        with anyio.fail_after(10):
            await session.settled()
        (record,) = session.ledger_calls()
        (served,) = http.runtime.ledger.every_call()
    assert whys == ["extension: started, waiting for result"]
    assert str(served.state) == "aborted"
    assert record.state is CallState.ABORTED
    (result,) = outcome
    assert isinstance(result, ToolAborted)
    assert runs == ["k"]


async def test_a_stream_that_breaks_mid_call_leaves_it_end_unknown_never_resent(
    workspace: Path,
) -> None:
    """The server goes away while a task's write runs: its status can no longer be
    read, the call ends `end_unknown` (not failed, not re-sent: it ran once)."""
    gate, runs = anyio.Event(), list[str]()
    async with (
        served_http(workspace, _gated(gate, runs), allow=["GatedWrite"]) as (
            http,
            events,
        ),
        _client_of(http.url, workspace, token=http.token) as runtime,
    ):
        session = runtime.session()
        outcome: list[ToolResult] = []
        async with session.turn() as turn, anyio.create_task_group() as tg:

            async def call() -> None:
                args = {"path": "out.txt", "text": "maybe"}
                outcome.append(await turn.call("mcp__srv__GatedWrite", args))

            tg.start_soon(call)
            await wait_state(events, "GatedWrite", "running")
            http.close()  # the server stops answering while the write runs on
        (record,) = session.ledger_calls()
        gate.set()  # let the server's write end, so it can close
    assert record.state is CallState.END_UNKNOWN
    (result,) = outcome
    assert result.is_error
    assert "whether the call took effect is unknown" in result.output
    assert runs == ["out.txt"]  # sent once, never again


@asynccontextmanager
async def _plain_server(gate: anyio.Event, runs: list[str]) -> AsyncIterator[str]:
    """The SDK's own `MCPServer` (no tasks) on loopback, in this loop: its URL.

    Its one tool notes each run and waits for `gate`."""
    from mcp.server.mcpserver import MCPServer

    from tether._loopback import listen_loopback, quiet_uvicorn

    server = MCPServer("plain")

    @server.tool()
    async def gated(text: str) -> str:
        runs.append(text)
        await gate.wait()
        return text

    app = server.streamable_http_app(host="127.0.0.1")
    sock = listen_loopback(0)
    uv = quiet_uvicorn(app, signals=False)
    async with server.session_manager.run(), anyio.create_task_group() as tg:
        tg.start_soon(uv.serve, [sock])
        with anyio.fail_after(10):
            while not uv.started:  # noqa: ASYNC110 (uvicorn sets a flag)
                await anyio.sleep(0.005)
        try:
            yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
        finally:
            gate.set()
            uv.should_exit = True


@asynccontextmanager
async def _cuttable(port_of: str) -> AsyncIterator[tuple[str, anyio.Event]]:
    """A loopback relay to `port_of`'s server: its URL, and an event that, once set,
    closes every connection it carries (a stream broken mid-call)."""
    upstream = int(port_of.rsplit(":", 1)[1].split("/")[0])
    cut = anyio.Event()
    async with (
        await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0) as relay,
        anyio.create_task_group() as tg,
    ):
        port = relay.extra(anyio.abc.SocketAttribute.local_port)

        async def carry(client: anyio.abc.SocketStream) -> None:
            async with (
                client,
                await anyio.connect_tcp("127.0.0.1", upstream) as server,
                anyio.create_task_group() as pipes,
            ):

                async def pump(
                    a: anyio.abc.SocketStream, b: anyio.abc.SocketStream
                ) -> None:
                    with contextlib.suppress(
                        anyio.EndOfStream,
                        anyio.BrokenResourceError,
                        anyio.ClosedResourceError,
                    ):
                        async for chunk in a:
                            await b.send(chunk)

                pipes.start_soon(pump, client, server)
                pipes.start_soon(pump, server, client)
                await cut.wait()
                pipes.cancel_scope.cancel()

        tg.start_soon(relay.serve, carry)
        try:
            yield f"http://127.0.0.1:{port}/mcp", cut
        finally:
            tg.cancel_scope.cancel()


async def test_a_plain_call_whose_stream_breaks_ends_end_unknown_and_is_not_resent(
    workspace: Path,
) -> None:
    """A server without tasks (the SDK's own): the connection carrying a call's
    response stream is closed mid-call; the call ends `end_unknown`, and the server
    ran it once."""
    gate, runs = anyio.Event(), list[str]()
    async with (
        _plain_server(gate, runs) as url,
        _cuttable(url) as (relayed, cut),
        _client_of(relayed, workspace) as runtime,
    ):
        session = runtime.session()
        async with session.turn() as turn, anyio.create_task_group() as tg:
            outcome: list[ToolResult] = []

            async def call() -> None:
                outcome.append(await turn.call("mcp__srv__gated", {"text": "once"}))

            tg.start_soon(call)
            await await_until(lambda: runs == ["once"], what="the call running")
            cut.set()
        (record,) = session.ledger_calls()
    assert record.state is CallState.END_UNKNOWN, record
    (result,) = outcome
    assert "whether the call took effect is unknown" in result.output
    assert runs == ["once"]
