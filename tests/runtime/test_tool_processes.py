"""A custom tool's processes (`ctx.run_process`) belong to its call: a stopped call has not
settled while any of them is still being killed, whatever the tool's stop class."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import psutil
import pytest
from tests.host.contain_tools import slow_listing
from tests.runtime.support import events_of

from tether import Runtime, ToolAborted
from tether.runtime import ToolProgress
from tether.testing._trees import alive, tree_pids, tree_procs

ABORT_BOUND = 0.5
MARGIN = 1.0
"""Scheduling slack on a loaded 2-core machine, on top of the abort bound."""


@pytest.mark.rule("S13")
@pytest.mark.anyio
async def test_s13_a_stopped_read_only_tool_settles_only_once_its_processes_are_reaped(
    make_runtime: Callable[..., Runtime],
) -> None:
    """S13: a READ_ONLY tool running a program that ignores SIGTERM (and a setsid child)
    through `ctx.run_process`, stopped: the caller gets ToolAborted and `abort()` returns
    within its bound, its report names the processes if it still waits, and after
    `settled()` no process of that tree is alive."""
    runtime = make_runtime(
        tools=[slow_listing],
        permissions={"allow": ["slow_listing"]},
        abort_bound=ABORT_BOUND,
    )
    aborted: list[ToolAborted] = []
    async with runtime, events_of(runtime) as events:
        session = runtime.session()
        async with anyio.create_task_group() as tg, session.turn() as turn:

            async def call() -> None:
                try:
                    await turn.call("slow_listing", {}, call_id="ls")
                except ToolAborted as exc:
                    aborted.append(exc)

            tg.start_soon(call)
            seen: list[str] = []

            def both_up(event: object) -> bool:
                if isinstance(event, ToolProgress):
                    seen.append(event.text)
                return len(tree_pids("".join(seen))) >= 2

            await events.wait(both_up)
            procs = tree_procs("".join(seen))
            report = await session.abort()
        with anyio.fail_after(10):
            await session.settled()
        left = alive(procs)
        for pid in left:
            psutil.Process(pid).kill()
        record = session.ledger_calls()[0]
    assert len(procs) == 2
    assert left == []
    assert len(aborted) == 1
    assert report.elapsed <= ABORT_BOUND + MARGIN
    assert report.settled or [p.why for p in report.pending] == [
        "read_only: stopped, waiting for the 1 process tree it started to be reaped"
    ]
    assert record.state == "aborted"
    assert record.settled
