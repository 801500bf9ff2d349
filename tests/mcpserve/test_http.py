"""`tether mcp serve --http` driven by the MCP SDK's own clients over streamable HTTP.

The server runs in the test's event loop on an ephemeral loopback port (`McpHttp`), except
in the one end-to-end test of the command. What stdio already pins (the hints of the
stop classes, the person's stop, an `ask` rule refused, progress) is the same code and is
not repeated here; these tests pin what HTTP adds: the cancel of each wire, the MCP
session, a client that leaves, the tasks extension, the token and loopback, the wall.
"""

from __future__ import annotations

import json
import signal
import time
from typing import TYPE_CHECKING

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from tests.cli._run import TETHER, invoke
from tests.mcpserve._http import (
    CreatedTask,
    TasksClient,
    cancel_task,
    client_of,
    follow,
    get_task,
    served_http,
    text_of,
    wait_state,
)
from tests.mcpserve._procs import (
    STARTING,
    alive,
    hung_command,
    marked,
    new_mark,
    sleeps,
)
from tests.waiting import await_until

from tether._config import paths
from tether._loopback import loopback_host
from tether.cli._app import cli
from tether.errors import UsageError
from tether.stop import protected_paths
from tether.testing import Echo, Hang, SlowWrite

if TYPE_CHECKING:
    from pathlib import Path

    from tether._mcpserve import McpHttp

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60), pytest.mark.slow]

GRACE = 0.3


def _calls(http: McpHttp, tool: str) -> list[str]:
    return [str(c.state) for c in http.runtime.ledger.every_call() if c.tool == tool]


async def test_closing_a_requests_stream_ends_a_hung_read_only_call_at_once(
    workspace: Path,
) -> None:
    """A 2026-07-28 client cancels by closing the request's stream: the hung read-only
    call is stopped by the client (`user`), its work is cancelled (the marker), and its
    turn settles at once (spec 01 READ_ONLY, over HTTP)."""
    async with (
        served_http(workspace, [Hang, Echo]) as (http, events),
        client_of(http) as client,
    ):
        assert client.protocol_version == "2026-07-28"
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "Hang", {"marker": "hang.txt"})
            await wait_state(events, "Hang", "running")
            cancelled_at = time.monotonic()
            tg.cancel_scope.cancel()
        ended = await wait_state(events, "Hang", "aborted")
        took = time.monotonic() - cancelled_at
        ledger = http.runtime.ledger
        await await_until(
            lambda: ledger.calls(ended.session_id)[-1].settled,
            what="the stopped call settled",
            bound=5,
        )
        (record,) = ledger.calls(ended.session_id)
        marker = workspace / "hang.txt"
        await await_until(marker.exists, what="the tool's work cancelled (S2)")
        assert marker.read_text() == "cancelled"
        assert record.abort_source == "user"
        assert "closed its stream" in (record.abort_reason or "")
        after = await client.call_tool("Echo", {"text": "still served"})
        assert text_of(after) == "still served"
    assert took < 1.0, f"the cancel took {took:.3f} s to end the call"


async def test_a_cancelled_bash_in_an_mcp_session_has_its_tree_reclaimed(
    workspace: Path,
) -> None:
    """A 2025 client's `notifications/cancelled` over HTTP: the shell that ignores
    SIGTERM and its background child are all gone within the grace window and a margin,
    and the session's next result says what happened (spec 01 S13)."""
    mark = new_mark()
    async with (
        served_http(workspace, allow=["Bash"]) as (http, _events),
        client_of(http, mode="legacy") as client,
    ):
        assert client.protocol_version == "2025-11-25"
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "Bash", {"command": hung_command(mark)})
            with anyio.fail_after(20):
                while len(sleeps(tree := marked(mark))) < 2:  # noqa: ASYNC110 (processes)
                    await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
        with anyio.fail_after(GRACE + 10):
            while any(alive(p) for p in tree):  # noqa: ASYNC110 (other processes)
                await anyio.sleep(0.02)
        told = text_of(await client.call_tool("Bash", {"command": "echo next"}))
        (record,) = [
            c for c in http.runtime.ledger.every_call() if c.input and mark in c.input
        ]
    assert "cancelled by the client" in told, told
    assert "stopped while running; it was ended" in told, told
    assert told.splitlines()[-1] == "next", told
    assert str(record.state) == "aborted"
    assert record.abort_source == "user"
    assert "MCP client cancelled request" in (record.abort_reason or "")


async def test_a_cancelled_write_over_http_is_not_abandoned(workspace: Path) -> None:
    """A started write whose request stream the client closes runs to its end: the
    file lands and the ledger says it succeeded (spec 01 MUTATING)."""
    async with (
        served_http(workspace, [SlowWrite], allow=["SlowWrite"]) as (http, events),
        client_of(http) as client,
    ):
        async with anyio.create_task_group() as tg:
            args = {"path": "out.txt", "text": "landed", "seconds": 0.3}
            tg.start_soon(client.call_tool, "SlowWrite", args)
            await wait_state(events, "SlowWrite", "running")
            tg.cancel_scope.cancel()
        await wait_state(events, "SlowWrite", "succeeded")
    assert (workspace / "out.txt").read_text() == "landed"


async def test_a_task_tells_a_cancelled_write_ended_completed_with_its_result(
    workspace: Path,
) -> None:
    """With the tasks extension, a `tasks/cancel` of a started write is acknowledged,
    the task stays `working` while the write runs, then ends `completed` with the
    write's result; a cancelled read-only task ends `cancelled` (the truth, not the
    cancel)."""
    async with (
        served_http(workspace, [SlowWrite, Hang], allow=["SlowWrite"]) as (
            http,
            events,
        ),
        client_of(http, extensions=[TasksClient()]) as client,
    ):
        args = {"path": "out.txt", "text": "landed", "seconds": 0.3}
        write = await client.session.call_tool("SlowWrite", args, allow_claimed=True)
        assert isinstance(write, CreatedTask), write
        assert write.status == "working"
        await wait_state(events, "SlowWrite", "running")
        await cancel_task(client.session, write.task_id)
        during = await get_task(client.session, write.task_id)
        written = await follow(client.session, write.task_id)

        hang = await client.session.call_tool(
            "Hang", {"marker": "hang.txt"}, allow_claimed=True
        )
        assert isinstance(hang, CreatedTask)
        await wait_state(events, "Hang", "running")
        await cancel_task(client.session, hang.task_id)
        hung = await follow(client.session, hang.task_id, bound=2)

        plain = await client.call_tool("SlowWrite", {"path": "b.txt", "seconds": 0})
        await cancel_task(client.session, "no-such-task")  # acknowledged all the same
        with pytest.raises(MCPError, match="no task 'no-such-task' here") as unknown:
            await get_task(client.session, "no-such-task")
    assert during["status"] == "working", during
    assert "mutating: started" in during.get("statusMessage", ""), during
    assert written["status"] == "completed", written
    assert written["result"]["content"][0]["text"] == "wrote 6 bytes to out.txt"
    assert written["result"]["isError"] is False
    assert (workspace / "out.txt").read_text() == "landed"
    assert hung["status"] == "cancelled", hung
    assert "stopped while running" in hung["statusMessage"]
    assert text_of(plain) == "wrote 1 bytes to b.txt"  # the claim followed it
    assert unknown.value.error.code == INVALID_PARAMS


async def test_a_task_cancelled_at_once_ends_as_what_really_happened(
    workspace: Path,
) -> None:
    """A `tasks/cancel` sent right after the task is made lands before or after the
    write starts; whichever it is, the status says it: `cancelled` and nothing
    written, or `completed` and the file there (a race on purpose, both orders)."""
    async with (
        served_http(workspace, [SlowWrite], allow=["SlowWrite"]) as (http, _),
        client_of(http, extensions=[TasksClient()]) as client,
    ):
        ends = []
        for n in range(3):
            args = {"path": f"{n}.txt", "text": "landed", "seconds": 0.05}
            task = await client.session.call_tool("SlowWrite", args, allow_claimed=True)
            assert isinstance(task, CreatedTask)
            await cancel_task(client.session, task.task_id)
            ended = await follow(client.session, task.task_id)
            written = (workspace / f"{n}.txt").exists()
            ends.append((ended["status"], written))
    assert all(end in {("cancelled", False), ("completed", True)} for end in ends), ends


async def test_a_client_that_ends_its_session_mid_call_has_it_stopped_as_a_shutdown(
    workspace: Path,
) -> None:
    """A 2025 client that ends its MCP session (`DELETE`) while a call runs, with no
    cancel: the call is stopped as when a stdio client closes the pipe (`shutdown`,
    "the MCP client left"), and its work is cancelled."""
    version = "2025-06-18"
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "Hang", "arguments": {"marker": "hang.txt"}},
    }
    async with served_http(workspace, [Hang]) as (http, events):
        headers = {
            "Authorization": f"Bearer {http.token}",
            "Accept": "application/json, text/event-stream",
        }
        async with httpx2.AsyncClient(headers=headers, timeout=10) as web:
            opened = await web.post(http.url, json=init)
            session = {
                "Mcp-Session-Id": opened.headers["mcp-session-id"],
                "Mcp-Protocol-Version": version,
            }
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            await web.post(http.url, json=initialized, headers=session)
            async with anyio.create_task_group() as tg:

                async def hang() -> None:
                    async with web.stream(
                        "POST", http.url, json=call, headers=session
                    ) as answer:
                        async for _ in answer.aiter_bytes():
                            pass

                tg.start_soon(hang)
                await wait_state(events, "Hang", "running")
                left = await web.delete(http.url, headers=session)
                assert left.status_code == 200
                await wait_state(events, "Hang", "aborted")
                tg.cancel_scope.cancel()
        (record,) = http.runtime.ledger.every_call()
    assert record.abort_source == "shutdown"
    assert record.abort_reason == "the MCP client left"
    marker = workspace / "hang.txt"
    await await_until(marker.exists, what="the tool's work cancelled (S2)")
    assert marker.read_text() == "cancelled"


async def test_a_request_without_the_token_is_refused_with_what_to_send(
    workspace: Path,
) -> None:
    async with (
        served_http(workspace, [Echo]) as (http, _events),
        httpx2.AsyncClient() as web,
    ):
        refused = await web.post(http.url, json={})
        elsewhere = await web.get(http.url.removesuffix("/mcp") + "/other")
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == "Bearer"
    assert "Authorization: Bearer <token>" in refused.json()["error"]
    assert elsewhere.status_code == 404


def test_a_host_other_than_loopback_is_refused_with_why() -> None:
    """tether choice: the server runs tools as the person, so it listens on loopback
    only; any other host is refused in one line that says why and what to do."""
    for host in ("127.0.0.1", "localhost", "::1", "[::1]"):
        assert loopback_host(host, what="x") in ("127.0.0.1", "::1")
    with pytest.raises(UsageError) as refused:
        loopback_host("0.0.0.0", what="tether mcp serve --http")
    assert "loopback only" in str(refused.value)
    assert "SSH" in str(refused.value)
    with pytest.raises(UsageError, match="listens on loopback only") as refused:
        invoke(cli, "mcp", "serve", "--http", "--host", "192.168.1.5")
    assert "\n" not in str(refused.value)
    assert refused.value.exit_code == 2


async def test_a_served_call_cannot_reach_what_the_wall_keeps_off(
    workspace: Path, tmp_path: Path
) -> None:
    """Over HTTP as over stdio: the guard refuses a call that would set the stop, and
    the wall keeps tether's state and a repository outside the workspace read-only
    (spec 01 S15)."""
    stop = [p for p in protected_paths() if p.name != "stop-setup.json"][-1] / "stop"
    state = paths().state_dir
    state.mkdir(parents=True, exist_ok=True)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "config").write_text("[core]\n")
    script = "; ".join(
        f"echo x >> {target} 2>/dev/null || echo refused {target.name}"
        for target in (state / "forged.sqlite", repo / ".git" / "config")
    )
    async with (
        served_http(workspace, allow=["Bash"]) as (http, _events),
        client_of(http) as client,
    ):
        forged = await client.call_tool("Bash", {"command": f"touch {stop}"})
        walled = await client.call_tool("Bash", {"command": script})
    assert forged.is_error
    assert "GUARD_REFUSED" in text_of(forged), text_of(forged)
    assert not stop.exists()
    assert "refused forged.sqlite" in text_of(walled), text_of(walled)
    assert "refused config" in text_of(walled), text_of(walled)
    assert not (state / "forged.sqlite").exists()
    assert (repo / ".git" / "config").read_text() == "[core]\n"


@pytest.mark.timeout(STARTING + 60)
async def test_the_command_prints_its_url_and_token_and_serves_until_sigterm(
    workspace: Path,
) -> None:
    """End to end: `tether mcp serve --http --port 0 --json` prints one line with the
    URL and token, serves the SDK's client, and ends on SIGTERM with exit 0."""
    argv = [*TETHER, "mcp", "serve", "--http", "--port", "0", "--json"]
    argv += ["--tool", "tether.testing:Echo"]
    async with await anyio.open_process(argv, cwd=workspace) as server:
        assert server.stdout is not None
        line = b""
        with anyio.fail_after(STARTING):
            while not line.endswith(b"\n"):
                line += await server.stdout.receive(1)
        started = json.loads(line)
        assert started["url"].startswith("http://127.0.0.1:")
        assert started["url"].endswith("/mcp")
        headers = {"Authorization": f"Bearer {started['token']}"}
        async with (
            httpx2.AsyncClient(headers=headers) as web,
            Client(streamable_http_client(started["url"], http_client=web)) as client,
        ):
            echoed = await client.call_tool("Echo", {"text": "over http"})
        server.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            code = await server.wait()
    assert text_of(echoed) == "over http"
    assert code == 0
