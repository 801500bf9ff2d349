"""MCP tools against real servers: the test server over stdio and HTTP, mcp-server-time."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from tether._config import Config
from tether.errors import InvalidInput, ToolFailed
from tether.host import StopClass, ToolContext
from tether.host._mcp import McpTool, McpTools

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

pytestmark = pytest.mark.slow


FIXTURE = Path(__file__).with_name("mcp_server_fixture.py")
STDIO = {"command": sys.executable, "args": [str(FIXTURE)]}


def _ctx(workspace: Path, progress: list[str] | None = None) -> ToolContext:
    sink = progress.append if progress is not None else None
    return ToolContext(
        call_id="c1", session_id="s1", workspace=workspace, on_progress=sink
    )


@asynccontextmanager
async def _open(
    servers: Mapping[str, Any], *, hint: bool = False, startup_timeout: float = 20.0
) -> AsyncIterator[tuple[McpTools, dict[str, McpTool]]]:
    config = Config(mcp_servers=dict(servers), mcp_read_only_hint=hint)
    with anyio.fail_after(60):
        async with McpTools.open(config, startup_timeout=startup_timeout) as mcp:
            yield mcp, {t.name: t for t in mcp.tools}


async def _wait_event(tools: dict[str, McpTool], ws: Path, event: str) -> str:
    """Ask the test server for its events once `event` is among them."""
    text = await tools["mcp__fx__events"].run(_ctx(ws), {"wait_for": event})
    assert event in text, text
    return text


@pytest.mark.anyio
async def test_tools_named_with_server_schema(workspace: Path) -> None:
    """Each server tool appears as mcp__<server>__<tool> with the server's schema."""
    async with _open({"fx": STDIO}) as (mcp, tools):
        assert mcp.problems == []
        assert set(tools) == {
            "mcp__fx__echo",
            "mcp__fx__slow",
            "mcp__fx__fail",
            "mcp__fx__ask",
            "mcp__fx__ask_anyway",
            "mcp__fx__can_elicit",
            "mcp__fx__die",
            "mcp__fx__stubborn",
            "mcp__fx__hang",
            "mcp__fx__deaf",
            "mcp__fx__peek",
            "mcp__fx__events",
            "mcp__fx__attempt",
            "mcp__fx__where",
            "mcp__fx__spawn",
            "mcp__fx__reach",
        }
        echo = tools["mcp__fx__echo"]
        assert echo.remote_name == "echo"
        assert echo.server == "fx"
        assert echo.description == "Return the text, repeated."
        schema = echo.input_schema()
        assert schema["required"] == ["text"]
        assert schema["properties"]["times"]["type"] == "integer"
        # Off by default: readOnlyHint does not change the stop class.
        assert {t.stop_class for t in tools.values()} == {StopClass.EXTENSION}
        assert tools["mcp__fx__peek"].read_only


@pytest.mark.anyio
async def test_input_validated_against_schema(workspace: Path) -> None:
    """Input that breaks the server's schema raises InvalidInput naming the field."""
    async with _open({"fx": STDIO}) as (_, tools):
        echo = tools["mcp__fx__echo"]
        assert echo.validate({"text": "a", "times": 2}) == {"text": "a", "times": 2}
        # An optional field given null is left out; a required one is refused.
        assert echo.validate({"text": "a", "times": None}) == {"text": "a"}
        cases: list[tuple[dict[str, object], str]] = [
            ({}, "text"),
            ({"text": 3}, "text"),
            ({"text": None}, "text"),
            ({"text": "a", "times": "x"}, "times"),
        ]
        for raw, path in cases:
            with pytest.raises(InvalidInput) as info:
                echo.validate(raw)
            assert info.value.path == path
            assert path in str(info.value)


@pytest.mark.anyio
async def test_call_result_and_error(workspace: Path) -> None:
    """A call returns the server's text; a tool error becomes ToolFailed."""
    async with _open({"fx": STDIO}) as (_, tools):
        ctx = _ctx(workspace)
        assert (
            await tools["mcp__fx__echo"].run(ctx, {"text": "hi", "times": 3})
            == "hi hi hi"
        )
        with pytest.raises(ToolFailed, match="disk on fire"):
            await tools["mcp__fx__fail"].run(ctx, {"why": "disk on fire"})


@pytest.mark.anyio
async def test_progress_notifications_become_ctx_progress(workspace: Path) -> None:
    """Each MCP progress notification reaches ctx.progress in order."""
    progress: list[str] = []
    async with _open({"fx": STDIO}) as (_, tools):
        result = await tools["mcp__fx__slow"].run(
            _ctx(workspace, progress), {"steps": 3}
        )
    assert result == "done after 3 steps"
    assert progress == ["[1/3] step 1", "[2/3] step 2", "[3/3] step 3"]


@pytest.mark.anyio
async def test_stop_sends_cancel_and_keeps_waiting(workspace: Path) -> None:
    """A stopped EXTENSION call tells the server at once and is not abandoned.

    The server (as MCP says) never answers a cancelled request: only the host's kill
    (a second stop) ends the wait; the server is then started again for the next call.
    """
    async with _open({"fx": STDIO}) as (_, tools):
        hang = tools["mcp__fx__hang"]
        assert hang.stop_class is StopClass.EXTENSION
        ctx = _ctx(workspace)
        ended: list[str] = []

        async def call() -> None:
            try:
                await hang.run(ctx, {})
            except anyio.get_cancelled_exc_class():
                ended.append("cancelled")
                raise

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await _wait_event(tools, workspace, "hang started")
            ctx.cancelled.set()  # the first stop: the host never cancels this task
            events = await _wait_event(tools, workspace, "hang cancelled")
            lines = events.splitlines()
            call_ids = [
                line.split()[-1] for line in lines if line.startswith("recv tools/call")
            ]
            cancels = [
                line
                for line in lines
                if line.startswith("recv notifications/cancelled")
            ]
            assert len(cancels) == 1
            # `hang cancelled` came of it: the id named `hang`'s request.
            assert cancels[0].split()[-1] in call_ids
            await anyio.sleep(0.2)
            assert ended == []  # still waited for
            tg.cancel_scope.cancel()  # the second stop: the host cancels the task
        assert ended == ["cancelled"]
        with anyio.fail_after(20):
            again = await tools["mcp__fx__echo"].run(_ctx(workspace), {"text": "up"})
        assert again == "up"


@pytest.mark.anyio
async def test_read_only_hint_opt_in_sends_cancelled(workspace: Path) -> None:
    """With the opt-in, a readOnlyHint tool is READ_ONLY and its cancel reaches the server."""
    async with _open({"fx": STDIO}, hint=True) as (_, tools):
        peek = tools["mcp__fx__peek"]
        assert peek.stop_class is StopClass.READ_ONLY
        assert tools["mcp__fx__echo"].stop_class is StopClass.EXTENSION
        ctx = _ctx(workspace)
        async with anyio.create_task_group() as tg:
            tg.start_soon(peek.run, ctx, {})
            await _wait_event(tools, workspace, "peek started")
            ctx.cancelled.set()
            tg.cancel_scope.cancel()  # what the host does to a READ_ONLY call on a stop
        events = await _wait_event(tools, workspace, "peek cancelled")
        lines = events.splitlines()
        call_ids = [
            line.split()[-1] for line in lines if line.startswith("recv tools/call")
        ]
        cancels = [
            line for line in lines if line.startswith("recv notifications/cancelled")
        ]
        assert len(cancels) == 1
        assert cancels[0].split()[-1] in call_ids
        assert lines.index(cancels[0]) < lines.index("peek cancelled")


@pytest.mark.anyio
async def test_broken_servers_reported_and_skipped(
    workspace: Path, tmp_path: Path
) -> None:
    """Servers that cannot start are reported with a reason; the others still work."""
    servers = {
        "fx": STDIO,
        "missing": {"command": str(tmp_path / "no-such-server")},
        "crashes": {
            "command": sys.executable,
            "args": ["-c", "import sys; sys.stderr.write('bad config'); sys.exit(3)"],
        },
        "shapeless": {"args": ["x"]},
        "old": {"type": "sse", "url": "http://127.0.0.1:9/sse"},
        "wrongargs": {"command": "x", "args": "not a list"},
        "a__b": STDIO,
        "off": {"command": "nothing", "disabled": True},
    }
    # Every server here answers or fails at once: the bound only has to let the good one
    # start on a loaded machine (the mute server's own test waits for its bound).
    async with _open(servers, startup_timeout=60.0) as (mcp, tools):
        reasons = {p.server: p.reason for p in mcp.problems}
        assert set(reasons) == {
            "missing",
            "crashes",
            "shapeless",
            "old",
            "wrongargs",
            "a__b",
        }
        assert "no such file" in reasons["missing"].lower()
        assert "bad config" in reasons["crashes"]
        assert "command" in reasons["shapeless"]
        assert "SSE" in reasons["old"]
        assert "args" in reasons["wrongargs"]
        assert "__" in reasons["a__b"]
        missing = next(p for p in mcp.problems if p.server == "missing")
        assert str(missing).startswith("MCP server 'missing': ")
        echo = await tools["mcp__fx__echo"].run(_ctx(workspace), {"text": "still here"})
        assert echo == "still here"


@pytest.mark.anyio
async def test_a_mute_server_is_reported_once_its_bound_passed() -> None:
    """A server that never answers `initialize` is skipped with the bound it missed."""
    mute = {"command": sys.executable, "args": ["-c", "import sys; sys.stdin.read()"]}
    async with _open({"mute": mute}, startup_timeout=0.5) as (mcp, tools):
        [problem] = mcp.problems
        assert problem.server == "mute"
        assert "no answer within 0.5 s" in problem.reason
        assert not tools


@pytest.mark.anyio
async def test_server_that_dies_fails_its_calls(workspace: Path) -> None:
    """A server that dies mid-call fails that call and later ones with ToolFailed."""
    async with _open({"fx": STDIO}) as (_, tools):
        with anyio.fail_after(10), pytest.raises(ToolFailed, match="mcp__fx__die"):
            await tools["mcp__fx__die"].run(_ctx(workspace), {})
        with anyio.fail_after(10), pytest.raises(ToolFailed):
            await tools["mcp__fx__echo"].run(_ctx(workspace), {"text": "anyone?"})


@pytest.mark.anyio
async def test_call_after_close_fails(workspace: Path) -> None:
    """A tool whose server session has closed fails with a reason instead of hanging."""
    async with _open({"fx": STDIO}) as (_, tools):
        echo = tools["mcp__fx__echo"]
    with pytest.raises(ToolFailed, match="not running"):
        await echo.run(_ctx(workspace), {"text": "late"})


@pytest.mark.anyio
async def test_published_time_server(workspace: Path) -> None:
    """mcp-server-time from PyPI, started as its users start it, answers get_current_time."""
    command = Path(sys.executable).with_name("mcp-server-time")
    servers = {
        "time": {"command": str(command), "args": ["--local-timezone", "Etc/UTC"]}
    }
    async with _open(servers) as (mcp, tools):
        assert mcp.problems == []
        current = tools["mcp__time__get_current_time"]
        assert current.stop_class is StopClass.EXTENSION
        assert "timezone" in current.input_schema()["required"]
        text = await current.run(
            _ctx(workspace), current.validate({"timezone": "Asia/Tokyo"})
        )
        data = json.loads(text)
        assert data["timezone"] == "Asia/Tokyo"
        assert data["datetime"].endswith("+09:00")
        with pytest.raises(InvalidInput):
            current.validate({})


@pytest.mark.anyio
async def test_streamable_http_server(workspace: Path) -> None:
    """The test server over streamable HTTP on loopback: tools, calls and progress."""
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
        port = int(line.split()[1])
        url = f"http://127.0.0.1:{port}/mcp"
        progress: list[str] = []
        servers = {"web": {"url": url, "headers": {"X-Tether-Test": "1"}}}
        async with _open(servers) as (mcp, tools):
            assert mcp.problems == []
            assert "mcp__web__echo" in tools
            echo = tools["mcp__web__echo"]
            assert await echo.run(_ctx(workspace), {"text": "over http"}) == "over http"
            slow = tools["mcp__web__slow"]
            assert await slow.run(_ctx(workspace, progress), {"steps": 2}) == (
                "done after 2 steps"
            )
        assert progress == ["[1/2] step 1", "[2/2] step 2"]
    finally:
        process.terminate()
        with anyio.fail_after(10):
            await process.wait()
        await process.aclose()


@pytest.mark.anyio
async def test_runtime_stop_abandons_read_only_hint_tool(workspace: Path) -> None:
    """Through the runtime, with the opt-in a stop settles a readOnlyHint call at once."""
    from tether import Runtime, ToolAborted

    async with _open({"fx": STDIO}, hint=True) as (mcp, tools):
        runtime = Runtime(
            workspace=workspace,
            tools=mcp.tools,
            permissions={"allow": ["mcp__fx__*"]},
            abort_bound=0.5,
            guard=False,
        )
        outcome: list[object] = []
        async with runtime:
            session = runtime.session()
            async with session.turn() as turn:

                async def call() -> None:
                    try:
                        outcome.append(await turn.call("mcp__fx__peek", {}))
                    except ToolAborted as exc:
                        outcome.append(exc)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    await _wait_event(tools, workspace, "peek started")
                    report = await session.abort()
                    assert report.settled, report
        assert len(outcome) == 1
        assert isinstance(outcome[0], ToolAborted)
        events = await _wait_event(tools, workspace, "peek cancelled")
        assert "recv notifications/cancelled" in events
