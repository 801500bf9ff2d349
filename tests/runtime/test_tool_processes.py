"""A custom tool's processes (`ctx.run_process`) belong to its call: a stopped call has not
settled while any of them is still being killed, whatever the tool's stop class."""

from __future__ import annotations

from typing import TYPE_CHECKING

import psutil
import pytest
from tests.host.contain_tools import slow_listing

from tether import Runtime, ToolAborted
from tether.testing import alive, event_log, stop_once_started

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = pytest.mark.slow


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
    async with runtime, event_log(runtime) as events:
        stopped = await stop_once_started(
            runtime.session(), events, "slow_listing", {}, processes=2
        )
        left = alive(stopped.procs)
        for pid in left:
            psutil.Process(pid).kill()
    procs, report, record = stopped.procs, stopped.report, stopped.record
    assert len(procs) == 2
    assert left == []
    assert isinstance(stopped.outcome, ToolAborted)
    assert report.elapsed <= ABORT_BOUND + MARGIN
    assert report.settled or [p.why for p in report.pending] == [
        "read_only: stopped, waiting for the 1 process tree it started to be reaped"
    ]
    assert record.state == "aborted"
    assert record.settled
