"""Leaving `async with Runtime` while calls still run: a started write is waited for (in
process) or recorded as of unknown end (stdio, whose closing is bounded); closing says
what it waits for; nothing stays RUNNING and no caller hangs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.runtime.support import ALLOW_ALL, TEST_TOOLS

from tether import ErrorCode, Runtime, ToolAborted
from tether.runtime import CallState
from tether.testing import event_log

pytestmark = pytest.mark.anyio

GRACE = 0.3
BOUND = 0.2
SHUTDOWN = GRACE + 2 * BOUND
"""How long closing waits for calls to settle before it acts."""


async def _leave_while_writing(
    rt: Runtime, seconds: float
) -> tuple[list[Any], float, Runtime]:
    outcome: list[Any] = []
    async with anyio.create_task_group() as tg:
        async with rt, event_log(rt) as events:
            session = rt.session()
            async with session.turn() as turn:

                async def call() -> None:
                    outcome.append(
                        await turn.call(
                            "SlowWrite",
                            {"path": "w.txt", "text": "whole", "seconds": seconds},
                        )
                    )

                tg.start_soon(call)
                await events.wait_started()
            left = anyio.current_time()
        closed = anyio.current_time() - left
    return outcome, closed, rt


def _runtime(workspace: Path, host: str) -> Runtime:
    return Runtime(
        workspace=workspace,
        tools=TEST_TOOLS,
        permissions=ALLOW_ALL,
        grace=GRACE,
        abort_bound=BOUND,
        host=host,  # type: ignore[arg-type]
        guard=False,
    )


async def test_closing_in_process_waits_for_a_started_write_and_says_so(
    workspace: Path,
) -> None:
    """Regression: leaving the runtime while a write ran longer than the shutdown bound
    cut it half done in process and left its row RUNNING with `turn.call` hanging. In
    process the write is waited for, and closing says what it waits for."""
    rt = _runtime(workspace, "inprocess")
    with anyio.fail_after(10):
        outcome, _, rt = await _leave_while_writing(rt, seconds=SHUTDOWN + 0.5)
    assert (workspace / "w.txt").read_text() == "whole"
    assert outcome[0].output == "wrote 5 bytes to w.txt"
    (record,) = rt.sessions[0].ledger_calls()
    assert record.state is CallState.SUCCEEDED
    assert record.settled
    (said,) = [p for p in rt.problems if p.startswith("closing waits for")]
    assert f"SlowWrite call {record.call_id} (running, since " in said


async def test_closing_the_stdio_host_is_bounded_and_a_cut_write_is_end_unknown(
    workspace: Path,
) -> None:
    """Regression: over stdio, leaving while a write ran left its row RUNNING forever.
    Closing is bounded (host ended after grace + abort bound), the write is recorded
    END_UNKNOWN, its caller gets TOOL_FAILED saying so, and the report names it."""
    rt = _runtime(workspace, "stdio")
    with anyio.fail_after(10):
        outcome, closed, rt = await _leave_while_writing(rt, seconds=30)
    assert closed < SHUTDOWN + GRACE + BOUND + 3.0  # reaping is bounded too
    (record,) = rt.sessions[0].ledger_calls()
    assert record.state is CallState.END_UNKNOWN
    assert record.settled
    assert outcome[0].code is ErrorCode.TOOL_FAILED
    assert "whether it completed is unknown" in outcome[0].output
    assert any(
        p.startswith("closed before") and record.call_id in p for p in rt.problems
    )


async def test_closing_names_a_stopped_tool_that_ignores_cancellation(
    make_runtime: Callable[..., Runtime], host_kind: str
) -> None:
    """Closing while a stopped tool's task still runs (it ignores cancellation) says,
    after the abort bound, which tool and call it waits for, on both hosts the call
    settles at once, and nothing hangs."""
    rt = make_runtime(grace=GRACE, abort_bound=BOUND)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg, rt, event_log(rt) as events:
            session = rt.session()
            async with session.turn() as turn:

                async def call() -> None:
                    with pytest.raises(ToolAborted):
                        await turn.call("Stuck", {"seconds": SHUTDOWN + 1.0})

                tg.start_soon(call)
                await events.wait_started()
    (record,) = rt.sessions[0].ledger_calls()
    assert record.state is CallState.ABORTED
    if host_kind == "inprocess":
        (said,) = [p for p in rt.problems if "ignore cancellation" in p]
        assert f"Stuck call {record.call_id} (stopped, still running, since " in said
