"""What `Session.abort()` waits for before it returns: the stop handlers, never a stopped
tool's own cleanup; a call asked for just before the stop is in its report; and what
waits for the host's started writes is woken when they end."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest
from tests.runtime.support import ALLOW_ALL, TEST_TOOLS

from tether import Runtime, StopClass, ToolAborted, ToolContext, tool
from tether.host._inprocess import InProcessHost
from tether.runtime import CallState
from tether.testing import event_log

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

CLEANED: list[str] = []
"""Calls of `Tidy` whose cleanup has run (in-process: the test reads it directly)."""


@tool(stop_class=StopClass.READ_ONLY)
async def Tidy(ctx: ToolContext) -> str:
    """A read-only tool that waits forever and notes its cleanup when it is cancelled."""
    ctx.progress("started")
    try:
        await anyio.sleep_forever()
    finally:
        CLEANED.append(ctx.call_id)
    return "never"  # pragma: no cover - sleep_forever ends only by cancellation


async def test_abort_returns_before_the_stopped_tools_cleanup(workspace: Path) -> None:
    """S6: a stopped read-only call is settled in the report while its tool has not yet
    had a turn of the event loop: abort() does not wait on the tool's task."""
    CLEANED.clear()
    async with (
        Runtime(workspace=workspace, tools=[Tidy], guard=False) as rt,
        event_log(rt) as events,
    ):
        session = rt.session()
        for n in range(1, 4):
            async with anyio.create_task_group() as tg, session.turn() as turn:

                async def call(turn: object = turn) -> None:
                    with pytest.raises(ToolAborted):
                        await turn.call("Tidy", {})  # type: ignore[attr-defined]

                tg.start_soon(call)
                await events.wait_started(n)
                report = await session.abort()
                assert report.settled, report
                [record] = report.calls
                assert record.state is CallState.ABORTED
                assert len(CLEANED) == n - 1  # this call's cleanup has not run yet
            # The tool was told: its task ends once the loop gets to it.
            assert CLEANED[-1] == record.call_id


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_call_asked_for_just_before_the_stop_is_refused_in_the_report(
    host_kind: str, workspace: Path
) -> None:
    """S10: a call whose task was started but had not run when abort() was called is
    refused (never started), and the report returned already shows it. On asyncio only:
    trio runs ready tasks in no set order, so there the task may run after abort()."""
    async with Runtime(
        workspace=workspace,
        tools=TEST_TOOLS,
        guard=False,
        host=host_kind,  # type: ignore[arg-type]
    ) as rt:
        session = rt.session()
        outcomes: list[BaseException] = []
        async with anyio.create_task_group() as tg, session.turn() as turn:

            async def call() -> None:
                try:
                    await turn.call("Echo", {"text": "late"})
                except ToolAborted as exc:
                    outcomes.append(exc)

            tg.start_soon(call)
            report = await session.abort()
        [record] = report.calls
        assert record.state is CallState.ABORTED
        assert record.settled
        assert report.settled
        assert len(outcomes) == 1
        assert "not started" in str(outcomes[0])
        # The turn keeps the refused id: nothing of it was sent to the host.
        assert turn.refused == {record.call_id}


async def test_every_wait_for_started_writes_wakes_when_they_end(
    workspace: Path,
) -> None:
    """Two waits for the host's started writes both end when the write does: neither
    misses the wake-up the other one was given."""
    async with (
        Runtime(workspace=workspace, tools=TEST_TOOLS, permissions=ALLOW_ALL) as rt,
        event_log(rt) as events,
    ):
        assert isinstance(rt.host, InProcessHost)
        core = rt.host.core
        session = rt.session()
        woken: list[int] = []

        async def wait(n: int) -> None:
            await core.wait_started_writes()
            woken.append(n)

        async with session.turn() as turn, anyio.create_task_group() as tg:
            tg.start_soon(turn.call, "SlowWrite", {"path": "out.txt", "seconds": 0.2})
            await events.wait_started()
            with anyio.fail_after(5):
                async with anyio.create_task_group() as waits:
                    waits.start_soon(wait, 1)
                    waits.start_soon(wait, 2)
        assert sorted(woken) == [1, 2]
        assert (workspace / "out.txt").exists()
