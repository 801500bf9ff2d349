"""A second stop kills now: a PROCESS call's grace window closes at once, and the
report's countdown of the window moves while it is open."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest
from tests.runtime.support import ALLOW_ALL
from tests.waiting import await_until

from tether import Runtime, ToolAborted
from tether.runtime import CallState
from tether.testing import event_log

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.mark.rule("S5")
async def test_a_second_stop_with_kill_ends_the_grace_window_at_once(
    make_runtime: Callable[..., Runtime],
) -> None:
    """Stubborn ignores termination; with a 30 s window the report counts down, and
    `abort(kill=True)` settles the call within a second, its output kept."""
    async with (
        make_runtime(grace=30.0, permissions=ALLOW_ALL) as rt,
        event_log(rt) as events,
    ):
        session = rt.session()
        errors: list[ToolAborted] = []
        async with anyio.create_task_group() as tg, session.turn() as turn:

            async def call() -> None:
                try:
                    await turn.call("Stubborn", {"lines": 2})
                except ToolAborted as exc:
                    errors.append(exc)

            tg.start_soon(call)
            # Over stdio the lines arrive after `started`; output after the stop is not
            # kept (S4), so stop once they are in.
            await events.wait_for(lambda _event: "line 1" in events.progress())
            report = await session.abort(reason="first")
            [pending] = report.pending
            assert pending.why == "process: terminating, at most 30 s left"
            # The window's clock announces nothing: re-check until a second passed.
            await await_until(
                lambda: session.pending()[0].seconds_left != 30,
                what="the countdown to move",
                bound=5,
            )
            assert session.pending()[0].why == "process: terminating, at most 29 s left"
            pressed = anyio.current_time()
            again = await session.abort(reason="second", kill=True)
            with anyio.fail_after(1.0):
                await session.settled()
            took = anyio.current_time() - pressed
        assert took < 1.0
        assert again.reason == "first"
        assert session.pending() == ()
        [error] = errors
        assert "line 1" in error.partial_output
        [record] = session.ledger_calls()
        assert record.state is CallState.ABORTED
