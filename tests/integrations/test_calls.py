"""The framework-free part of the integrations: a framework's call run as a tether call,
its cancel the call's `Session.abort()`, the truth kept for the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
import pytest

from tether import Runtime
from tether.integrations._calls import CallRunner
from tether.testing import SlowWrite

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


async def test_a_cancel_anywhere_around_a_write_start_tells_the_truth(
    workspace: Path,
) -> None:
    """A framework's cancel lands at each step around a write's start (the race set on
    purpose): whatever the report and the model are told happens, and nothing lands
    after they said the write did not run (spec 01: "never starts", MUTATING)."""
    seen: set[str] = set()

    async def approver(request: object) -> bool:
        for _ in range(4):  # the person takes a few steps to answer
            await anyio.lowlevel.checkpoint()
        return True

    async with (
        Runtime(
            workspace=workspace, tools=[SlowWrite], approver=approver, guard=False
        ) as runtime,
        anyio.create_task_group() as calls,
    ):
        runner = CallRunner(runtime, calls, reason="cancelled by the test")
        for steps in range(16):
            target = workspace / f"out{steps}.txt"
            async with anyio.create_task_group() as framework:
                framework.start_soon(
                    runner.call, "SlowWrite", {"path": target.name, "seconds": 0}
                )
                for _ in range(steps):
                    await anyio.lowlevel.checkpoint()
                framework.cancel_scope.cancel()
            reports = await runner.wait_aborted()
            await runner.wait_settled()
            told = await runner.untold()
            await anyio.wait_all_tasks_blocked()
            if not told:  # the write ended before the cancel came
                seen.add("ended first")
                assert reports == ()
                assert target.exists()
                continue
            (call,) = told
            (report,) = reports
            text = call.after_cancel_text()
            if "did not run" in text or "did not start" in text:
                seen.add("never started")
                assert report.settled
                assert not target.exists()
            else:
                seen.add("ran to its end")
                assert "ran to its end anyway: wrote 1 bytes" in text
                assert target.read_text(encoding="utf-8") == "x"
    # Each truth was met: the steps are the event loop's, not the clock's.
    assert {"never started", "ran to its end"} <= seen
