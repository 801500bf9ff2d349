"""`McpServe` runs each call in a session of its own, and ends it: the runtime keeps
no session of a call that has settled, however many calls were served, and keeps one
whose call still runs until it settles (closing the runtime still waits for it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest
from tests.runtime.support import ALLOW_ALL, TEST_TOOLS
from tests.waiting import await_until

from tether._mcpserve import McpServe
from tether.runtime import CallState, Runtime

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


def _runtime(workspace: Path) -> Runtime:
    return Runtime(
        workspace=workspace, tools=TEST_TOOLS, permissions=ALLOW_ALL, grace=0.3
    )


def _states(runtime: Runtime, tool: str) -> list[CallState]:
    return [c.state for c in runtime.ledger.every_call() if c.tool == tool]


async def test_each_served_call_ends_its_session(workspace: Path) -> None:
    """Calls one after another leave no session behind: the runtime's sessions do
    not grow with the calls served."""
    async with _runtime(workspace) as runtime, anyio.create_task_group() as tg:
        serve = McpServe(runtime, tg)
        for n in range(3):
            text, error = await serve.call_tool("Echo", {"text": f"t{n}"}, n)
            assert (text, error) == (f"t{n}", False)
            assert runtime.sessions == []
        assert _states(runtime, "Echo") == [CallState.SUCCEEDED] * 3


async def _cancel_once_running(
    serve: McpServe, tool: str, arguments: dict[str, object], request_id: int
) -> None:
    """Call `tool` and cancel the call's request once the call runs."""
    async with anyio.create_task_group() as calls:
        calls.start_soon(serve.call_tool, tool, arguments, request_id)
        await await_until(
            lambda: _states(serve.runtime, tool) == [CallState.RUNNING],
            what=f"{tool} running",
        )
        calls.cancel_scope.cancel()


async def test_a_cancelled_calls_session_stays_until_the_call_settles(
    workspace: Path,
) -> None:
    """A cancelled write runs to its end: its session stays in the runtime until then
    (so a close would wait for it) and leaves once it settles; a cancelled hung read
    settles at the cancel, and its session goes at once."""
    async with _runtime(workspace) as runtime, anyio.create_task_group() as tg:
        serve = McpServe(runtime, tg)
        await _cancel_once_running(
            serve, "SlowWrite", {"path": "out.txt", "seconds": 0.3}, 1
        )
        (session,) = runtime.sessions
        assert session.unsettled_turns()
        with anyio.fail_after(5):
            await session.settled()
        await await_until(lambda: runtime.sessions == [], what="its session ended")
        assert _states(runtime, "SlowWrite") == [CallState.SUCCEEDED]
        assert (workspace / "out.txt").read_text() == "x"

        await _cancel_once_running(serve, "Hang", {"marker": "m"}, 2)
        assert _states(runtime, "Hang") == [CallState.ABORTED]
        await await_until(lambda: runtime.sessions == [], what="its session ended")


async def test_a_session_ended_with_its_turn_open_leaves_once_the_turn_closes(
    workspace: Path,
) -> None:
    """`end_session` before the turn is closed: the session stays (the event loop
    runs on meanwhile) and leaves once the turn has closed and settled."""
    async with _runtime(workspace) as runtime:
        session = runtime.session()
        async with session.turn() as turn:
            await turn.call("Echo", {"text": "x"})
            runtime.end_session(session)
            await anyio.sleep(0.01)  # the wait for the turn runs, and waits
            assert runtime.sessions == [session]
        await await_until(lambda: runtime.sessions == [], what="the session ended")


async def test_a_ledger_file_keeps_the_rows_of_ended_sessions_not_memory(
    workspace: Path, tmp_path: Path
) -> None:
    """With a ledger file the rows of each ended session leave memory: however many
    calls were served the ledger holds none of them, and still lists and finds each;
    a cancelled write's session is forgotten once it settles, and the next call's
    result still says what really happened."""
    runtime = Runtime(
        workspace=workspace,
        tools=TEST_TOOLS,
        permissions=ALLOW_ALL,
        grace=0.3,
        ledger=tmp_path / "ledger.db",
    )
    async with runtime, anyio.create_task_group() as tg:
        serve = McpServe(runtime, tg)
        for n in range(4):
            assert await serve.call_tool("Echo", {"text": f"t{n}"}, n) == (
                f"t{n}",
                False,
            )
        assert runtime.ledger._rows == {}
        assert runtime.ledger._turns == {}
        echoes = runtime.ledger.every_call()
        assert [(c.tool, c.output) for c in echoes] == [
            ("Echo", f"t{n}") for n in range(4)
        ]
        assert runtime.ledger.find(echoes[2].session_id, echoes[2].call_id) == echoes[2]

        await _cancel_once_running(
            serve, "SlowWrite", {"path": "out.txt", "seconds": 0.3}, 9
        )
        await await_until(lambda: runtime.sessions == [], what="its session ended")
        assert runtime.ledger._rows == {}
        told, error = await serve.call_tool("Echo", {"text": "next"}, 10)
        assert (error, told.splitlines()[-1]) == (False, "next")
        assert "request 9 (SlowWrite" in told, told
        assert "ran to its end anyway" in told, told
        assert _states(runtime, "SlowWrite") == [CallState.SUCCEEDED]
        assert len(runtime.ledger.every_call()) == 6
