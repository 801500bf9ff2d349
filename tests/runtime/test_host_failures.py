"""What happens when the host misbehaves: it dies mid-call, a turn's calls outlive it, and
JSON-RPC frames arrive together."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from tests.runtime.support import ALLOW_ALL, TEST_TOOLS

from tether import ErrorCode, Runtime, ToolAborted
from tether._jsonrpc import Connection, FdReceiveStream, FdSendStream
from tether.host._stdio import StdioHostClient
from tether.runtime import CallState, PendingPhase
from tether.testing import alive, announce, event_log

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_calls_end_and_settle_when_the_stdio_host_dies(workspace: Path) -> None:
    """A host killed mid-call gives every call in flight TOOL_FAILED with the reason;
    nothing waits forever, and the session settles."""
    async with (
        Runtime(
            workspace=workspace,
            tools=TEST_TOOLS,
            permissions=ALLOW_ALL,
            host="stdio",
            guard=False,
            grace=0.3,
        ) as rt,
        event_log(rt) as events,
    ):
        assert isinstance(rt.host, StdioHostClient)
        session = rt.session()
        results = {}
        async with anyio.create_task_group() as tg, session.turn() as turn:

            async def call(name: str, args: dict[str, Any]) -> None:
                results[name] = await turn.call(name, args)

            tg.start_soon(call, "SlowWrite", {"path": "w.txt", "seconds": 30})
            tg.start_soon(call, "Stuck", {"seconds": 30})
            await events.wait_started(2)
            os.kill(rt.host.process.pid, signal.SIGKILL)
        with anyio.fail_after(5):
            await session.settled()
        for name in ("SlowWrite", "Stuck"):
            assert results[name].code is ErrorCode.TOOL_FAILED
            assert "host exited" in results[name].output
        assert {r.state for r in session.ledger_calls()} == {CallState.FAILED}
        assert all(r.settled for r in session.ledger_calls())


async def test_abort_reaches_calls_of_an_earlier_turn_still_running(
    host_kind: str, workspace: Path
) -> None:
    """S5/S6: a call that outlived its turn is still walked by abort(), and the report
    does not say settled while it runs."""
    async with (
        Runtime(
            workspace=workspace,
            tools=TEST_TOOLS,
            permissions=ALLOW_ALL,
            host=host_kind,  # type: ignore[arg-type]
            guard=False,
            grace=0.3,
        ) as rt,
        event_log(rt) as events,
    ):
        session = rt.session()
        async with anyio.create_task_group() as tg:
            async with session.turn() as first:

                async def write() -> None:
                    await first.call("SlowWrite", {"path": "w.txt", "seconds": 0.5})

                async def stuck() -> None:
                    with pytest.raises(ToolAborted):
                        await first.call("Stuck", {"seconds": 0.3})

                tg.start_soon(write)
                tg.start_soon(stuck)
                await events.wait_started(2)
            async with session.turn() as second:
                report = await session.abort()
                assert report.turn_id == second.id
                assert not report.settled
                [pending] = report.pending
                assert pending.tool == "SlowWrite"
                assert pending.phase is PendingPhase.STARTED
                assert {r.tool for r in report.calls} == {"SlowWrite", "Stuck"}
        await session.settled()
        states = {r.tool: r.state for r in session.ledger_calls()}
        assert states == {"SlowWrite": CallState.SUCCEEDED, "Stuck": CallState.ABORTED}


async def test_cancel_request_in_the_same_read_as_its_request_cancels_it() -> None:
    """A `$/cancelRequest` that arrives in one read with its request still cancels the
    handler (a withdrawn permission prompt is never left open)."""
    to_server_r, to_server_w = os.pipe()
    from_server_r, from_server_w = os.pipe()
    cancelled = anyio.Event()

    async def handler(params: dict[str, object]) -> object:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        raise AssertionError("sleep_forever returned")

    server = Connection(
        FdReceiveStream(to_server_r),
        FdSendStream(from_server_w),
        tasks={"ask": handler},
    )
    frames = [
        {"jsonrpc": "2.0", "id": 7, "method": "ask", "params": {}},
        {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 7}},
    ]
    os.write(to_server_w, b"".join(json.dumps(f).encode() + b"\n" for f in frames))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(5):
            await cancelled.wait()
        os.close(to_server_w)
    answer = json.loads(os.read(from_server_r, 65536).splitlines()[0])
    assert answer["id"] == 7
    assert answer["error"]["code"] == -32800
    for fd in (to_server_r, from_server_r, from_server_w):
        with contextlib.suppress(OSError):
            os.close(fd)


@pytest.mark.rule("S13")
async def test_s13_a_dead_host_settles_process_calls_only_once_their_trees_are_gone(
    workspace: Path,
) -> None:
    """S13 (regression): when the stdio host dies mid-call, a Bash call's turn settles
    only after every process the host started is gone, escaped ones included."""
    from tether.host.tools import default_tools

    tools = [t for t in default_tools() if t.name == "Bash"]

    say = announce()
    command = (
        f"(trap '' TERM; sh -c '{say}; exec sleep 300') & "
        f"setsid sh -c '{say}; exec sleep 301' & sleep 302"
    )
    async with (
        Runtime(
            workspace=workspace,
            tools=tools,
            permissions={"allow": ["Bash"]},
            host="stdio",
            guard=False,
            grace=0.3,
        ) as rt,
        event_log(rt) as events,
    ):
        assert isinstance(rt.host, StdioHostClient)
        session = rt.session()
        async with anyio.create_task_group() as tg, session.turn() as turn:
            results = []

            async def call() -> None:
                results.append(await turn.call("Bash", {"command": command}))

            tg.start_soon(call)
            procs = await events.wait_announced(2)
            os.kill(rt.host.process.pid, signal.SIGKILL)
        with anyio.fail_after(10):
            await session.settled()
        assert alive(procs) == []
        assert results[0].code is ErrorCode.TOOL_FAILED
