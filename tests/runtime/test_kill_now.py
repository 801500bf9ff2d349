"""A second stop kills now: a PROCESS call's grace window closes at once, and the
report's countdown of the window moves while it is open."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest
from tests.runtime.support import ALLOW_ALL
from tests.waiting import await_until

from tether import Runtime, ToolAborted, ToolResult
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
            # Over stdio the lines arrive after `started`: stop once the first is in,
            # so the partial output asserted below is the command's, not a race's.
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


@pytest.mark.rule("S6")
async def test_a_second_stop_ends_a_started_extension_call_unknown(
    make_runtime: Callable[..., Runtime],
) -> None:
    """A plugin-like EXTENSION tool that runs on after the stop: the first stop waits
    for it and says so; `abort(kill=True)` ends the wait within the abort bound,
    END_UNKNOWN ("the server never answered; its effect is unknown"), its task ended."""
    bound = 0.5
    async with (
        make_runtime(grace=30.0, abort_bound=bound, permissions=ALLOW_ALL) as rt,
        event_log(rt) as events,
    ):
        session = rt.session()
        results: list[ToolResult] = []
        async with anyio.create_task_group() as tg, session.turn() as turn:

            async def call() -> None:
                results.append(await turn.call("SlowExtension", {"seconds": 60}))

            tg.start_soon(call)
            await events.wait_for(lambda _event: "started" in events.progress())
            first = await session.abort()
            assert [p.why for p in first.pending] == [
                "extension: started, waiting for result"
            ]
            pressed = anyio.current_time()
            again = await session.abort(kill=True)
            took = anyio.current_time() - pressed
            with anyio.fail_after(2.0):
                await session.settled()
        assert took <= bound + 0.1
        assert [r.state for r in again.calls] == [CallState.END_UNKNOWN]
        [result] = results
        assert result.is_error
        assert "the server never answered; its effect is unknown" in result.output
        [record] = session.ledger_calls()
        assert (record.state, record.settled) == (CallState.END_UNKNOWN, True)
