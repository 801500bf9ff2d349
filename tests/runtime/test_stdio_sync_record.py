"""A blocking tool stopped mid-call is recorded as what happened, on both hosts.

The tools of `sync_tools` block in a worker thread or in the host's own event loop (the
stdio host's "running" then leaves the host only when the tool lets go). The ledger
says the call started (at the host's time, before the tool's first effect), then its
real end: a write runs to its result, a read is stopped while running. Until the host
has said whether a stopped read started, the report and the ledger say so.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from tests.runtime.sync_tools import SYNC_TOOLS

from tether import ErrorCode, ToolAborted, ToolResult
from tether.runtime import CallChanged, CallState
from tether.testing import event_log, runtime_for

if TYPE_CHECKING:
    from pathlib import Path

    from tether.runtime import AbortReport, CallRecord

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CASES = [
    pytest.param("inprocess", "ThreadLookup", id="inprocess-thread-lookup"),
    pytest.param("inprocess", "ThreadWrite", id="inprocess-thread-write"),
    pytest.param("stdio", "ThreadLookup", id="stdio-thread-lookup"),
    pytest.param("stdio", "ThreadWrite", id="stdio-thread-write"),
    pytest.param("stdio", "LoopLookup", id="stdio-loop-lookup"),
    pytest.param("stdio", "LoopWrite", id="stdio-loop-write"),
]
"""A tool that blocks the event loop runs on the stdio host only: in-process, it would
block the test (and the runtime) with it."""

FS_TICK = 0.05
"""A file's mtime is the kernel's coarse clock, which may lag `time.time()` by a tick."""


@pytest.fixture
def anyio_backend() -> str:
    """The tools run in the host; the parent's side is the same on both backends."""
    return "asyncio"


async def wait_for_file(path: Path, timeout: float = 10.0) -> None:
    """Wait until another process (the host) has made `path`."""
    target = anyio.Path(path)
    with anyio.fail_after(timeout):
        while not await target.exists():  # noqa: ASYNC110 - made by another process
            await anyio.sleep(0.005)


def tool_input(name: str) -> dict[str, Any]:
    args = {"mark": "mark", "release": "release"}
    return {**args, "out": "out.txt"} if name.endswith("Write") else args


async def stop_mid_call(
    workspace: Path, host: str, name: str
) -> tuple[ToolResult | ToolAborted, AbortReport, CallRecord, list[CallState], float]:
    """Run `name`, stop the turn once its code ran, let it go; return what was seen.

    The caller's outcome, the report, the settled record, the states the ledger went
    through (as `CallChanged` events), and when the stop was asked for.
    """
    outcomes: list[ToolResult | ToolAborted] = []
    async with (
        runtime_for(workspace, SYNC_TOOLS, host=host, guard=False) as rt,
        event_log(rt) as events,
    ):
        session = rt.session()
        async with anyio.create_task_group() as tg, session.turn() as turn:

            async def call() -> None:
                try:
                    outcomes.append(
                        await turn.call(name, tool_input(name), call_id="c1")
                    )
                except ToolAborted as exc:
                    outcomes.append(exc)

            tg.start_soon(call)
            await wait_for_file(workspace / "mark")
            stopped_at = time.time()
            report = await session.abort()
            (workspace / "release").write_text("go", encoding="utf-8")
        with anyio.fail_after(10):
            await session.settled()
        events.drain()
        [record] = session.ledger_calls()
    states = [e.state for e in events.seen if isinstance(e, CallChanged)]
    return outcomes[0], report, record, states, stopped_at


@pytest.mark.parametrize(("host", "name"), CASES)
async def test_a_blocking_tool_stopped_mid_call_is_recorded_started_then_its_end(
    workspace: Path, host: str, name: str
) -> None:
    """The record says the call started (no later than its first effect) and ended
    as it did: a write with its result, a read stopped while running."""
    outcome, report, record, states, stopped_at = await stop_mid_call(
        workspace, host, name
    )
    marked = (workspace / "mark").stat().st_mtime
    assert record.started_at is not None, record
    assert record.started_at <= marked + FS_TICK
    assert record.started_at <= stopped_at
    assert record.ended_at is not None
    assert record.ended_at >= record.started_at
    assert record.settled
    assert record.abort_source == "user"
    if name.endswith("Write"):
        assert outcome == ToolResult(output="wrote out.txt", call_id="c1", tool=name)
        assert record.state is CallState.SUCCEEDED
        assert record.output == "wrote out.txt"
        assert (workspace / "out.txt").read_text(encoding="utf-8") == "written"
        assert states[-1] is CallState.SUCCEEDED
    else:
        assert isinstance(outcome, ToolAborted)
        assert record.state is CallState.ABORTED
        assert record.code is ErrorCode.TOOL_ABORTED
        assert not (workspace / "out.txt").exists()
    # Started, and only then ended: the one final state comes last.
    assert [s for s in states if s.is_final] == [states[-1]] * len(
        [s for s in states if s.is_final]
    )
    assert states[-1] is record.state
    # The report at the stop and the ledger then never disagree.
    [at_stop] = report.calls
    assert report.settled == at_stop.settled


async def test_a_stopped_read_the_host_has_not_confirmed_stays_aborting(
    workspace: Path,
) -> None:
    """With the host's loop held by the tool, the stop gets no answer within the
    bound: the caller is answered at once, and the report and the ledger say the call
    is `aborting` (not "never started") until the host says it ran."""
    outcome, report, record, _, _ = await stop_mid_call(
        workspace, "stdio", "LoopLookup"
    )
    assert isinstance(outcome, ToolAborted)
    [at_stop] = report.calls
    assert at_stop.state is CallState.ABORTING
    assert at_stop.started_at is None
    assert not report.settled
    [pending] = report.pending
    assert pending.why == "read_only: stopped, the host has not said whether it started"
    assert record.state is CallState.ABORTED
    assert record.started_at is not None
