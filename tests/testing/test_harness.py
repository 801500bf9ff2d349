"""The harnesses of `tether.testing` do what their docs say (a tether choice: users test
their own tools with them, so they are tested like any public API)."""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

import anyio
import psutil
import pytest

from tether import ToolAborted
from tether.testing import (
    Echo,
    Hang,
    event_log,
    runtime_for,
    stop_once_started,
    wait_exited,
)

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_stop_once_started_stops_the_call_after_its_start_and_waits_it_out(
    workspace: Path,
) -> None:
    """The call is stopped only after its work began (Hang's cancel handler ran, so the
    host told it), and the result says what the caller, the abort and the ledger saw."""
    async with (
        runtime_for(workspace, [Hang]) as runtime,
        event_log(runtime) as events,
    ):
        stopped = await stop_once_started(
            runtime.session(), events, "Hang", {"marker": "told"}, reason="test"
        )
    assert isinstance(stopped.outcome, ToolAborted)
    assert stopped.report.elapsed <= runtime.abort_bound
    assert stopped.record.tool == "Hang"
    assert stopped.record.state == "aborted"
    assert stopped.record.settled
    assert stopped.record.abort_reason == "test"
    assert (workspace / "told").read_text(encoding="utf-8") == "cancelled"
    assert stopped.procs == ()


async def test_stop_once_started_fails_in_bound_when_the_call_reports_no_start(
    workspace: Path,
) -> None:
    """A call that never reports progress is never stopped by a guess: the wait for its
    start fails at its bound."""
    async with (
        runtime_for(workspace, [Echo]) as runtime,
        event_log(runtime) as events,
    ):
        with pytest.raises(TimeoutError, match=r"Echo did not start within 0\.3 s"):
            await stop_once_started(
                runtime.session(), events, "Echo", {"text": "x"}, timeout=0.3
            )


async def test_runtime_for_allows_its_tools_with_small_bounds(workspace: Path) -> None:
    """Every tool given is allowed, and the stop bounds are the small ones of tests."""
    async with runtime_for(workspace, [Echo]) as runtime:
        session = runtime.session()
        async with session.turn() as turn:
            result = await turn.call("Echo", {"text": "hi"})
    assert result.output == "hi"
    assert (runtime.grace, runtime.abort_bound) == (0.3, 0.5)


async def test_wait_exited_wakes_on_exit_and_names_the_processes_left() -> None:
    """`wait_exited` fails at its bound naming the live pids; a killed process counts
    as exited before its parent reaps it (a zombie)."""
    sleepers = [subprocess.Popen(["sleep", "300"]) for _ in range(2)]  # noqa: ASYNC220
    procs = [psutil.Process(p.pid) for p in sleepers]
    try:
        with pytest.raises(TimeoutError, match=str(sleepers[1].pid)):
            await wait_exited(procs, timeout=0.2)
        for sleeper in sleepers:
            sleeper.kill()
        with anyio.fail_after(5):
            await wait_exited(procs)
        assert [p.status() for p in procs] == [psutil.STATUS_ZOMBIE] * 2
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()
