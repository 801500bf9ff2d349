"""A hung MCP tool never holds the person: the two-step stop of an EXTENSION call.

Real servers (the SDK's `MCPServer`, over stdio) behind a relay that logs every JSON-RPC
line it passes (`mcp_relay.py`): the first stop puts `notifications/cancelled` on the
wire and keeps waiting; the second (`abort(kill=True)`) ends the call END_UNKNOWN within
the abort bound, the server's whole tree is gone, and the next turn's call to the same
server works (the server is started again).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import psutil
import pytest

from tether import Runtime, ToolResult
from tether._config import Config
from tether.host._mcp import McpTools
from tether.runtime import CallState, ToolProgress

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tether.runtime import Session

pytestmark = pytest.mark.slow


HERE = Path(__file__).parent
FIXTURE = HERE / "mcp_server_fixture.py"
RELAY = HERE / "mcp_relay.py"
ABORT_BOUND = 0.5
GRACE = 0.3


def _relayed(log: Path) -> dict[str, Any]:
    return {
        "command": sys.executable,
        "args": [str(RELAY), str(log), sys.executable, str(FIXTURE)],
    }


def _wire(log: Path) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for line in log.read_text(encoding="utf-8").splitlines():
        mark, _, text = line.partition(" ")
        try:
            out.append((mark, json.loads(text)))
        except ValueError:
            continue
    return out


async def _on_wire(log: Path, mark: str, method: str) -> dict[str, Any]:
    """The first message with `method` the relay logged going `mark` (> or <)."""
    with anyio.fail_after(10):
        while True:
            if log.exists():  # noqa: ASYNC240 (a test's poll of a small file)
                for m, msg in _wire(log):
                    if m == mark and msg.get("method") == method:
                        return msg
            await anyio.sleep(0.02)


def _server_tree() -> list[psutil.Process]:
    """The relay and the fixture server: this process's descendants running either."""
    out = []
    for proc in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if str(FIXTURE) in cmd or str(RELAY) in cmd:
            out.append(proc)
    return out


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for proc in procs:
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.Error:
            continue
    return out


@asynccontextmanager
async def _runtime(log: Path, workspace: Path) -> AsyncIterator[Runtime]:
    config = Config(mcp_servers={"fx": _relayed(log)})
    async with McpTools.open(config, startup_timeout=20, workspace=workspace) as mcp:
        assert mcp.problems == []
        async with Runtime(
            workspace=workspace,
            tools=mcp.tools,
            permissions={"allow": ["mcp__fx__*"]},
            grace=GRACE,
            abort_bound=ABORT_BOUND,
            guard=False,
        ) as runtime:
            yield runtime


async def _two_presses(
    runtime: Runtime, session: Session, log: Path, tool: str
) -> tuple[list[object], list[str]]:
    """Call `tool`, stop it once, then kill; return its outcome and progress texts."""
    outcome: list[object] = []
    progress: list[str] = []
    events = runtime.subscribe()

    async def watch() -> None:
        # Kept as it comes: this task is cancelled, never finishes a comprehension.
        async for event in events:
            if isinstance(event, ToolProgress):
                progress.append(event.text)  # noqa: PERF401

    async with events, session.turn() as turn, anyio.create_task_group() as tg:
        tg.start_soon(watch)

        async def call() -> None:
            outcome.append(await turn.call(tool, {}))

        tg.start_soon(call)
        sent = await _on_wire(log, ">", "tools/call")
        report = await session.abort()
        # The first press: the server is told at once, the call is still waited for.
        assert not report.settled
        assert [(p.tool, p.why) for p in report.pending] == [
            (tool, "extension: started, waiting for result")
        ]
        cancel = await _on_wire(log, ">", "notifications/cancelled")
        assert cancel["params"]["requestId"] == sent["id"]
        with anyio.move_on_after(0.3):
            await session.settled()
        assert outcome == [], "the first press abandoned a started extension call"
        tree = _server_tree()
        assert len(tree) >= 2, tree  # the relay and the server
        # The second press: the wait ends, within the abort bound.
        started = time.monotonic()
        report = await session.abort(kill=True)
        took = time.monotonic() - started
        assert took <= ABORT_BOUND + 0.1, took
        [record] = [r for r in report.calls if r.tool == tool]
        assert record.state is CallState.END_UNKNOWN
        with anyio.fail_after(ABORT_BOUND + 2.5):
            await session.settled()
        assert _alive(tree) == []
        tg.cancel_scope.cancel()
    return outcome, progress


async def _next_turn_works(session: Session) -> None:
    async with session.turn() as turn:
        with anyio.fail_after(20):
            again = await turn.call("mcp__fx__echo", {"text": "again"})
    assert (again.output, again.is_error) == ("again", False)


@pytest.mark.anyio
async def test_hung_tool_cancel_then_kill_ends_unknown(
    workspace: Path, tmp_path: Path
) -> None:
    """A tool that never returns: cancel on the wire, END_UNKNOWN, tree gone, next call works."""
    log = workspace / "wire.log"
    async with _runtime(log, workspace) as runtime:
        session = runtime.session()
        outcome, _ = await _two_presses(runtime, session, log, "mcp__fx__hang")
        [result] = outcome
        assert isinstance(result, ToolResult)
        assert result.is_error
        assert "the server never answered; its effect is unknown" in result.output
        [record] = session.ledger_calls()
        assert (record.state, record.settled) == (CallState.END_UNKNOWN, True)
        await _next_turn_works(session)
        assert len(_alive(_server_tree())) >= 2  # started again, for that call


@pytest.mark.anyio
async def test_tool_ignoring_cancel_with_progress_is_ended(
    workspace: Path, tmp_path: Path
) -> None:
    """A tool that ignores the cancel and keeps sending progress is still ended."""
    log = workspace / "wire.log"
    async with _runtime(log, workspace) as runtime:
        session = runtime.session()
        outcome, progress = await _two_presses(runtime, session, log, "mcp__fx__deaf")
        [result] = outcome
        assert isinstance(result, ToolResult)
        assert result.is_error
        assert "its effect is unknown" in result.output
        # It was told, and went on: progress came after the cancel on the wire.
        wire = _wire(log)
        cancel_at = next(
            i
            for i, (m, msg) in enumerate(wire)
            if m == ">" and msg.get("method") == "notifications/cancelled"
        )
        assert any(
            m == "<" and msg.get("method") == "notifications/progress"
            for m, msg in wire[cancel_at:]
        )
        assert progress  # shown while it was waited for
        await _next_turn_works(session)


@pytest.mark.anyio
async def test_runtime_close_is_bounded_with_a_hung_server(
    workspace: Path, tmp_path: Path
) -> None:
    """Closing the runtime and its servers with a hung call in flight is bounded."""
    log = workspace / "wire.log"
    config = Config(mcp_servers={"fx": _relayed(log)})
    outcome: list[object] = []
    async with McpTools.open(config, startup_timeout=20, workspace=workspace) as mcp:
        runtime = Runtime(
            workspace=workspace,
            tools=mcp.tools,
            permissions={"allow": ["mcp__fx__*"]},
            grace=GRACE,
            abort_bound=ABORT_BOUND,
            guard=False,
        )
        async with runtime:
            session = runtime.session()
            async with session.turn() as turn:

                async def call() -> None:
                    outcome.append(await turn.call("mcp__fx__hang", {}))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    await _on_wire(log, ">", "tools/call")
                    tree = _server_tree()
                    started = time.monotonic()
                    tg.cancel_scope.cancel()  # the caller goes; the call stays
        took = time.monotonic() - started
        records = session.ledger_calls()
    closed = time.monotonic() - started
    # The stop's window, then the kill: bounded, far from forever.
    assert took <= GRACE + 5 * ABORT_BOUND + 2.0, took
    assert closed <= took + 2.0, closed
    assert [(r.state, r.settled) for r in records] == [(CallState.END_UNKNOWN, True)]
    assert _alive(tree) == []
    assert ">" in log.read_text(encoding="utf-8")
    assert any(
        msg.get("method") == "notifications/cancelled"
        for m, msg in _wire(log)
        if m == ">"
    )


@pytest.mark.anyio
async def test_http_server_cancel_then_drop_and_reconnect(workspace: Path) -> None:
    """Over streamable HTTP: the cancel reaches the server; the kill closes the
    connection within the bound, and the next call connects again."""
    from tether.host import ToolContext

    process = await anyio.open_process(
        [sys.executable, str(FIXTURE), "--http"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        with anyio.fail_after(30):
            line = b""
            while not line.endswith(b"\n"):
                line += await process.stdout.receive(1)
        url = f"http://127.0.0.1:{int(line.split()[1])}/mcp"
        config = Config(mcp_servers={"web": {"url": url}})
        async with McpTools.open(config, startup_timeout=20) as mcp:
            tools = {t.name: t for t in mcp.tools}
            ctx = ToolContext(call_id="c1", session_id="s1", workspace=workspace)
            events = tools["mcp__web__events"]

            async def ask(event: str) -> str:
                probe = ToolContext(call_id="e", session_id="s1", workspace=workspace)
                return await events.run(probe, {"wait_for": event})

            async with anyio.create_task_group() as tg:
                tg.start_soon(tools["mcp__web__hang"].run, ctx, {})
                assert "hang started" in await ask("hang started")
                ctx.cancelled.set()  # the first stop
                assert "hang cancelled" in await ask("hang cancelled")
                started = time.monotonic()
                tg.cancel_scope.cancel()  # the second stop: the host's kill
            assert time.monotonic() - started <= 2.5
            again = ToolContext(call_id="c2", session_id="s1", workspace=workspace)
            with anyio.fail_after(20):
                text = await tools["mcp__web__echo"].run(again, {"text": "back"})
            assert text == "back"
    finally:
        process.terminate()
        with anyio.fail_after(10):
            await process.wait()
        await process.aclose()
