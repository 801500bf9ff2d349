"""`tether mcp serve` driven by the MCP SDK's own client: tools, calls, a cancel, a stop.

The server is the real command in its own process (`python -m tether mcp serve`); the
client is the SDK's `stdio_client` and `ClientSession`. A cancel is the SDK's: cancelling
the task awaiting `call_tool` sends `notifications/cancelled` for its request.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from tests.cli._run import TETHER, tether, tether_in_pty
from tests.mcpserve._procs import (
    STARTING,
    alive,
    hung_command,
    marked,
    new_mark,
    sleeps,
)

from tether.runtime._ledger import read_ledger_file
from tether.stop import protected_paths

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    import mcp_types

    from tether.runtime import CallRecord

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90), pytest.mark.slow]

GRACE = 0.3


@pytest.fixture
def allowed(tether_home: Path) -> Path:
    """The account's rules allow Read, Bash and SlowWrite unattended (no one is there
    to ask)."""
    config = tether_home / "config" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        '[permissions]\nallow = ["Read", "Bash", "SlowWrite"]\n', encoding="utf-8"
    )
    return config


@asynccontextmanager
async def served(
    workspace: Path, ledger: Path, *extra: str
) -> AsyncIterator[ClientSession]:
    """A client session with `tether mcp serve` started in `workspace`."""
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "tether",
            "mcp",
            "serve",
            "--grace",
            str(GRACE),
            "--ledger",
            str(ledger),
            *extra,
        ],
        env=dict(os.environ),
        cwd=workspace,
    )
    with (workspace.parent / "server.err").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


def _text(result: mcp_types.CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def _ledger(ledger: Path) -> list[CallRecord]:
    """Every call the server kept, in order (one session per call)."""
    return sorted(read_ledger_file(ledger), key=lambda r: r.requested_at)


async def test_tools_are_listed_with_the_hints_of_their_stop_classes(
    workspace: Path, tmp_path: Path
) -> None:
    async with served(workspace, tmp_path / "ledger.sqlite") as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
    assert {"Bash", "Read", "Write", "Edit", "Glob", "Grep"} <= set(listed)
    read, bash, write = listed["Read"], listed["Bash"], listed["Write"]
    assert read.annotations is not None
    assert read.annotations.read_only_hint is True
    assert read.annotations.destructive_hint is False
    for tool in (bash, write):
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is False
        assert tool.annotations.destructive_hint is True
    assert read.input_schema["properties"]["file_path"]


async def test_an_ask_rule_with_no_one_to_ask_is_a_refusal_that_says_why(
    workspace: Path, tmp_path: Path
) -> None:
    async with served(workspace, tmp_path / "ledger.sqlite") as client:
        refused = await client.call_tool("Bash", {"command": "touch made"})
    assert refused.is_error
    assert "PERMISSION_DENIED: Bash needs permission and no approver" in _text(refused)
    assert not (workspace / "made").exists()


async def test_read_and_bash_run_as_tether_calls_and_are_kept_in_the_ledger(
    workspace: Path, tmp_path: Path, allowed: Path
) -> None:
    (workspace / "notes.txt").write_text("hello from the workspace\n")
    ledger = tmp_path / "ledger.sqlite"
    async with served(workspace, ledger) as client:
        read = await client.call_tool("Read", {"file_path": "notes.txt"})
        bash = await client.call_tool("Bash", {"command": "echo made by bash"})
    assert not read.is_error, _text(read)
    assert "hello from the workspace" in _text(read)
    assert not bash.is_error, _text(bash)
    assert "made by bash" in _text(bash)
    states = [(c.tool, str(c.state)) for c in _ledger(ledger)]
    assert ("Read", "succeeded") in states
    assert ("Bash", "succeeded") in states


async def test_a_cancelled_bash_has_its_tree_ended_and_the_next_result_says_so(
    workspace: Path, tmp_path: Path, allowed: Path
) -> None:
    """The shell ignores SIGTERM and leaves a child in the background: after the
    client's cancel the whole tree is gone within the grace window and a margin, the
    ledger says aborted, and the next call's result tells what happened."""
    ledger = tmp_path / "ledger.sqlite"
    # The tree may run in a PID namespace of its own: its processes are found from
    # here by the marker in their command lines, not by the pids they see.
    mark = new_mark()
    command = hung_command(mark)
    async with served(workspace, ledger) as client:
        async with anyio.create_task_group() as tg:

            async def hung() -> None:
                await client.call_tool("Bash", {"command": command})
                raise AssertionError("a cancelled request got an answer")

            tg.start_soon(hung)
            with anyio.fail_after(20):
                # Both sleeps started: the shell's trap is set.
                while len(sleeps(tree := marked(mark))) < 2:  # noqa: ASYNC110
                    await anyio.sleep(0.02)
            cancelled_at = time.monotonic()
            tg.cancel_scope.cancel()
        with anyio.fail_after(GRACE + 10):
            while any(alive(p) for p in tree):  # noqa: ASYNC110 (another process)
                await anyio.sleep(0.02)
        gone = time.monotonic() - cancelled_at
        told = ""
        with anyio.fail_after(10):
            while "ended:" not in told:
                result = await client.call_tool("Bash", {"command": "echo next"})
                told = _text(result)
        assert "next" in told
    assert gone >= GRACE * 0.5, "the tree was killed before its grace window"
    assert "cancelled by the client" in told
    assert "Bash: trap" in told
    assert "stopped while running; it was ended" in told
    (record,) = [c for c in _ledger(ledger) if "trap" in (c.input or "")]
    assert str(record.state) == "aborted"
    assert record.abort_source == "user"
    assert "MCP client cancelled request" in (record.abort_reason or "")
    shown = tether("ledger", "--file", str(ledger), record.session_id)
    assert "aborted" in shown.stdout, shown.stdout + shown.stderr


async def test_under_the_persons_stop_no_call_starts_and_the_refusal_says_why(
    workspace: Path, tmp_path: Path, allowed: Path
) -> None:
    ledger = tmp_path / "ledger.sqlite"
    async with served(workspace, ledger) as client:
        first = await client.call_tool("Bash", {"command": "echo before"})
        assert not first.is_error, _text(first)
        code, out = await anyio.to_thread.run_sync(
            tether_in_pty, "stop", "--reason", "lunch break"
        )
        assert code == 0, out
        refused = await client.call_tool("Bash", {"command": "touch after"})
    assert refused.is_error
    assert "the person set a stop (reason: lunch break)" in _text(refused)
    assert "not started" in _text(refused)
    assert not (workspace / "after").exists()
    states = [(c.tool, str(c.state), c.started_at) for c in _ledger(ledger)]
    assert states[-1] == ("Bash", "aborted", None)


async def test_a_cancelled_write_runs_to_its_end_and_the_next_result_says_so(
    workspace: Path, tmp_path: Path, allowed: Path
) -> None:
    """A started write is never abandoned: the file lands after the cancel, and the
    next call's result says the call ran to its end, with its output."""
    ledger = tmp_path / "ledger.sqlite"
    tools = ("--tool", "tether.testing:SlowWrite", "--tool", "tether.testing:Echo")
    async with served(workspace, ledger, *tools) as client:
        async with anyio.create_task_group() as tg:

            async def write() -> None:
                args = {"path": "out.txt", "text": "landed", "seconds": 1.0}
                got = await client.call_tool("SlowWrite", args)
                raise AssertionError(f"a cancelled request got an answer: {got}")

            tg.start_soon(write)
            with anyio.fail_after(20):
                while not _ledger_has(ledger, "running"):  # noqa: ASYNC110
                    await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
        assert not (workspace / "out.txt").exists()
        first = _text(await client.call_tool("Echo", {"text": "one"}))
        told = first
        with anyio.fail_after(10):
            while "ended:" not in told:
                told = _text(await client.call_tool("Echo", {"text": "again"}))
    assert (workspace / "out.txt").read_text() == "landed"
    assert "is still running: mutating" in first, first
    assert "ran to its end anyway: wrote 6 bytes to out.txt" in told, told
    (record,) = [c for c in _ledger(ledger) if c.tool == "SlowWrite"]
    assert str(record.state) == "succeeded"


def _calling(tool: str, arguments: dict[str, object]) -> list[dict[str, object]]:
    """The lines of a client that starts a session and calls `tool`."""
    hello = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    }
    call = {"name": tool, "arguments": arguments}
    return [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call},
    ]


def _ledger_has(ledger: Path, state: str) -> bool:
    try:
        return any(str(c.state) == state for c in read_ledger_file(ledger))
    except Exception:  # not made yet
        return False


async def test_a_served_call_cannot_reach_the_stop_folder_nor_outside_the_workspace(
    workspace: Path, tmp_path: Path, allowed: Path
) -> None:
    """The guard refuses a call that would change the stop, and the wall keeps a
    call's writes in its workspace: a client's call reaches neither."""
    stops = [p for p in protected_paths() if p.name != "stop-setup.json"]
    assert stops, protected_paths()
    target = stops[-1] / "stop"
    outside = tmp_path / "outside.txt"
    async with served(workspace, tmp_path / "ledger.sqlite") as client:
        forged = await client.call_tool("Bash", {"command": f"touch {target}"})
        escaped = await client.call_tool(
            "Bash", {"command": f"echo x > {outside}; echo done"}
        )
    assert forged.is_error
    assert "GUARD_REFUSED" in _text(forged), _text(forged)
    assert not target.exists()
    assert not outside.exists(), _text(escaped)
    assert "GUARD_REFUSED" not in _text(escaped)
    assert "PERMISSION_DENIED" not in _text(escaped)
    assert "Read-only file system" in _text(escaped)


async def test_a_client_that_leaves_mid_call_leaves_no_process_behind(
    workspace: Path, tmp_path: Path, allowed: Path
) -> None:
    """The client closes the server's stdin while a Bash call runs, with no cancel: the
    server stops the call as a stop would (grace window, the tree killed), then exits."""
    ledger = tmp_path / "ledger.sqlite"
    mark = new_mark()
    command = hung_command(mark)
    lines = _calling("Bash", {"command": command})
    argv = [*TETHER, "mcp", "serve", "--grace", str(GRACE), "--ledger", str(ledger)]
    async with await anyio.open_process(argv, cwd=workspace) as server:
        assert server.stdin is not None
        for line in lines:
            await server.stdin.send(json.dumps(line).encode() + b"\n")
        with anyio.fail_after(STARTING):
            while len(sleeps(tree := marked(mark))) < 2:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        left_at = time.monotonic()
        await server.stdin.aclose()
        with anyio.fail_after(GRACE + 10):
            await server.wait()
        exited = time.monotonic() - left_at
    assert not any(alive(p) for p in tree)
    assert exited >= GRACE * 0.5, "the tree was killed before its grace window"
    (record,) = [c for c in _ledger(ledger) if "trap" in (c.input or "")]
    assert str(record.state) == "aborted"
    assert record.abort_source == "shutdown"


async def test_a_signalled_server_stops_its_calls_before_it_exits(
    workspace: Path, tmp_path: Path, allowed: Path
) -> None:
    """A client that signals its server (Claude Code interrupted: SIGINT, then
    SIGTERM): the running Bash is stopped at the first signal as a shutdown, the later
    signals do not cut its grace window, and the server exits once it has settled,
    its stdin still open."""
    ledger = tmp_path / "ledger.sqlite"
    mark = new_mark()
    argv = [*TETHER, "mcp", "serve", "--grace", str(GRACE), "--ledger", str(ledger)]
    async with await anyio.open_process(argv, cwd=workspace) as server:
        assert server.stdin is not None
        for line in _calling("Bash", {"command": hung_command(mark)}):
            await server.stdin.send(json.dumps(line).encode() + b"\n")
        with anyio.fail_after(STARTING):
            while len(sleeps(tree := marked(mark))) < 2:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        signalled_at = time.monotonic()
        server.send_signal(signal.SIGINT)
        with anyio.fail_after(20):
            while not _ledger_has(ledger, "aborted"):
                server.send_signal(signal.SIGTERM)
                await anyio.sleep(0.02)
        gone = time.monotonic() - signalled_at
        with anyio.fail_after(10):
            await server.wait()
    assert not any(alive(p) for p in tree)
    assert gone >= GRACE * 0.5, "the tree was killed before its grace window"
    (record,) = _ledger(ledger)
    assert record.abort_source == "shutdown"
    # The signal seen first names the stop. Sent back to back, SIGINT and the first
    # SIGTERM may reach two threads of the server at once and be seen in either order.
    assert record.abort_reason in (
        "the MCP server got SIGINT",
        "the MCP server got SIGTERM",
    )


async def test_a_cancel_stops_only_its_own_call(
    workspace: Path, tmp_path: Path
) -> None:
    """Two calls in flight at once: the client cancels one, the other runs to its end
    and answers as if nothing happened (each call is a session of its own)."""
    ledger = tmp_path / "ledger.sqlite"
    tools = ("--tool", "tether.testing:Hang", "--tool", "tether.testing:Stuck")
    async with served(workspace, ledger, *tools) as client:
        other: list[mcp_types.CallToolResult] = []
        async with anyio.create_task_group() as outer:

            async def slow() -> None:
                other.append(await client.call_tool("Stuck", {"seconds": 1.0}))

            outer.start_soon(slow)
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "Hang", {"marker": "hang.txt"})
                with anyio.fail_after(20):
                    while sum(_ledger_has_n(ledger, "running")) < 2:  # noqa: ASYNC110
                        await anyio.sleep(0.02)
                tg.cancel_scope.cancel()
            with anyio.fail_after(20):
                while not (workspace / "hang.txt").exists():  # noqa: ASYNC110
                    await anyio.sleep(0.02)
    (result,) = other
    assert not result.is_error, _text(result)
    assert _text(result).endswith("late result")
    states = {c.tool: str(c.state) for c in _ledger(ledger)}
    assert states == {"Hang": "aborted", "Stuck": "succeeded"}


def _ledger_has_n(ledger: Path, state: str) -> list[int]:
    try:
        return [1 for c in read_ledger_file(ledger) if str(c.state) == state]
    except Exception:  # not made yet
        return []


async def test_a_call_reports_its_output_as_progress_when_the_client_asks(
    workspace: Path, tmp_path: Path, allowed: Path
) -> None:
    """With a progress callback (a progress token), Bash's output reaches the client
    while the call runs, before its result."""
    seen: list[str] = []

    async def on_progress(
        progress: float, total: float | None, message: str | None
    ) -> None:
        seen.append(message or "")

    async with served(workspace, tmp_path / "ledger.sqlite") as client:
        result = await client.call_tool(
            "Bash",
            {"command": "echo first; sleep 0.3; echo second"},
            progress_callback=on_progress,
        )
    assert not result.is_error, _text(result)
    assert "first" in "".join(seen), seen
