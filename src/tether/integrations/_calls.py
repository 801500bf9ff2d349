"""Another framework's tool calls run as tether calls: a session each, a cancel its abort.

An agent framework awaits each tool call in a task of its own and cancels that task when
its run is cancelled. `CallRunner.call()` runs the call as a tether call in a session of
its own, in a task the runner owns (never the framework's), and waits for it. When the
waiting task is cancelled, the call's session is aborted (`Session.abort()`: the call is
stopped as its stop class says, S5) before the cancellation goes on, and the abort's
report is kept. The call's own task goes on to the call's real end, so a started write or
extension is never abandoned, and its outcome is kept for whoever asks.

This module knows no framework: what a framework's tool returns, and how it is told
after a stop, is built by that framework's adapter from a `RunningCall`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, final

import anyio
import anyio.abc
import attrs

from ..errors import ToolAborted, ToolError
from ..runtime import (
    AbortReport,
    CallRecord,
    Runtime,
    Session,
    ToolResult,
    tool_result_text,
)
from ..runtime._values import StopRequest

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ("CallRunner", "RunningCall")


@attrs.define(eq=False)
class RunningCall:
    """One framework tool call, run as a tether call in a session of its own."""

    tool: str
    """The tether tool's name."""
    arguments: dict[str, Any]
    session: Session
    tag: tuple[str, ...] = ()
    """What the framework knows of the call (its own id of it, the name the model
    used, ...), kept for its adapter."""
    outcome: ToolResult | ToolError | None = None
    """What `turn.call` gave (None: not yet, or the call never started)."""
    ended: anyio.Event = attrs.Factory(anyio.Event)
    """Set once the call's task has its outcome (or none: the cancel came first)."""
    answered: anyio.Event = attrs.Factory(anyio.Event)
    """Set once the framework's wait is over: with the outcome, or after the abort its
    cancel caused has returned."""
    cancelled: bool = False
    """The framework cancelled its wait (its run was cancelled)."""
    report: AbortReport | None = None
    """The report of the abort that cancel caused, once it has returned."""
    told: bool = False
    """Whether its truth after the cancel has been handed out (`CallRunner.untold`)."""

    @property
    def record(self) -> CallRecord | None:
        """The call as the ledger shows it now (None: it never reached the runtime)."""
        records = self.session.ledger_calls()
        return records[-1] if records else None

    @property
    def settled(self) -> bool:
        """Whether nothing of the call can change anything any more."""
        record = self.record
        return self.ended.is_set() and (record is None or record.settled)

    def workers(self) -> list[str]:
        """Lines naming this call's tool if stopped calls' workers of it still run."""
        record = self.record
        if record is None:
            return []
        head = f"{record.tool}: "
        return [
            line for line in self.session.executor.outliving() if line.startswith(head)
        ]

    def result_text(self) -> str:
        """What the call gives the model when it ends: its output, or why not."""
        outcome = self.outcome
        if isinstance(outcome, ToolAborted) or not isinstance(outcome, ToolError):
            return tool_result_text(self.record, outcome)
        return f"{outcome.code}: {outcome}"

    def after_cancel_text(self) -> str:
        """What really happened to a call whose wait was cancelled, as it stands now."""
        record = self.record
        head = "tether: the run was cancelled while this call was on;"
        if record is None:
            return f"{head} it did not start (the cancel came first)."
        if not self.ended.is_set() or not record.settled:
            why = "; ".join(p.why for p in self.session.pending())
            return f"{head} it is still running: {why or 'ending now'}."
        outcome = self.outcome
        if isinstance(outcome, ToolResult):
            if outcome.is_error:
                return (
                    f"{head} it ended with an error: {outcome.code}: {outcome.output}"
                )
            return f"{head} it ran to its end anyway: {outcome.output}"
        if outcome is None or isinstance(outcome, ToolAborted):
            text = f"{head} {tool_result_text(record, outcome)}"
            workers = self.workers()
            # A read-only call's worker that ignores the stop: the call has ended, its
            # work has not, and the model is told so.
            return text + (f" {'; '.join(workers)}." if workers else "")
        return f"{head} it failed: {outcome.code}: {outcome}"

    async def wait_settled(self) -> None:
        """Wait until the call has its outcome and every part of it has settled."""
        await self.ended.wait()
        await self.session.settled()


@final
class CallRunner:
    """Runs framework tool calls as tether calls in `task_group`, one session each.

    `reason` is what the ledger and reports say a framework's cancel was.
    """

    def __init__(
        self, runtime: Runtime, task_group: anyio.abc.TaskGroup, *, reason: str
    ) -> None:
        self.runtime = runtime
        self.task_group = task_group
        self.reason = reason
        self.in_flight: list[RunningCall] = []
        """Calls whose framework wait is not over, oldest first."""
        self.stopped: list[RunningCall] = []
        """Calls whose wait was cancelled, oldest first."""
        self._reported = 0
        """How many of `stopped` `wait_aborted()` has handed out."""

    async def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        tag: tuple[str, ...] = (),
        refuse: str | None = None,
    ) -> RunningCall:
        """Run one call and return it once it has its outcome.

        With `refuse` (why: a stop came before it), the call is not started and the
        ledger records it so (S10). Cancelled from outside (the framework's cancel): the
        call's session is aborted, within the abort bound, and the cancellation goes on;
        the call's task goes on to the call's real end.
        """
        session = self.runtime.session()
        running = RunningCall(tool, dict(arguments), session, tag)

        async def run() -> None:
            try:
                if running.cancelled:  # the cancel came before this task ran
                    return
                async with session.turn() as turn:
                    if refuse is not None:
                        turn.refuse_new_calls(
                            StopRequest(
                                source="user", reason=refuse, at=anyio.current_time()
                            )
                        )
                    try:
                        running.outcome = await turn.call(tool, running.arguments)
                    except ToolError as exc:
                        running.outcome = exc
            finally:
                running.ended.set()
                # One session per call: it leaves the runtime once it has settled.
                self.runtime.end_session(session)

        self.in_flight.append(running)
        try:
            self.task_group.start_soon(run)
            await running.ended.wait()
        except anyio.get_cancelled_exc_class():
            running.cancelled = True
            self.stopped.append(running)
            # S6: `abort()` returns within its bound; the shield is bounded anyway.
            with anyio.move_on_after(2 * self.runtime.abort_bound, shield=True):
                running.report = await session.abort(source="user", reason=self.reason)
            raise
        finally:
            self.in_flight.remove(running)
            running.answered.set()
        return running

    async def settle(self, running: RunningCall) -> None:
        """Wait until a cancelled call has settled, bounded as closing a runtime is.

        A process tree is killed when its grace window closes, so within `grace` and two
        abort bounds everything but a slow write or extension has settled; those are
        then stopped as a second stop does (an extension whose server does not answer
        ends with its outcome unknown). A started write is never cut (spec 01): its
        real end is awaited, as closing a runtime awaits it. A stopped read-only call's
        worker is given one abort bound to end (S14: cooperative ones end within 100
        ms); one still running after it is named by `after_cancel_text()`.
        """
        runtime = self.runtime
        with anyio.move_on_after(runtime.grace + 2 * runtime.abort_bound) as scope:
            await running.wait_settled()
        if not scope.cancelled_caught:
            with anyio.move_on_after(runtime.abort_bound):
                # Looked at every 5 ms: the host announces no worker's end.
                while running.workers():  # noqa: ASYNC110
                    await anyio.sleep(0.005)
            return
        with anyio.move_on_after(2 * runtime.abort_bound):
            await running.session.abort(source="user", reason=self.reason, kill=True)
            await running.wait_settled()
        await running.wait_settled()  # only a started write is left: it runs to its end

    async def abort(self, *, kill: bool = False) -> tuple[AbortReport, ...]:
        """Stop every call that has not settled, as a stop would; their reports.

        `kill=True` is the second stop: a process's grace window closes now, and a
        started extension stops being waited for (`Session.abort(kill=True)`).
        """
        unsettled = [r for r in [*self.in_flight, *self.stopped] if not r.settled]
        return tuple(
            [
                await r.session.abort(source="user", reason=self.reason, kill=kill)
                for r in unsettled
            ]
        )

    async def wait_aborted(self) -> tuple[AbortReport, ...]:
        """Wait until each call in flight now has its answer; new abort reports.

        After a framework's cancel, each call in flight is answered once its abort has
        returned (within the abort bound). The reports are those of the aborts no
        earlier `wait_aborted()` returned, oldest first.
        """
        for running in list(self.in_flight):
            await running.answered.wait()
        fresh = self.stopped[self._reported :]
        self._reported = len(self.stopped)
        return tuple(r.report for r in fresh if r.report is not None)

    async def wait_settled(self) -> None:
        """Wait until every call in flight or stopped has settled."""
        for running in [*self.in_flight, *self.stopped]:
            await running.wait_settled()

    async def untold(self) -> list[RunningCall]:
        """The stopped calls not yet told, once each has settled; marked told."""
        out = []
        for running in self.stopped:
            if not running.told:
                await running.wait_settled()
                running.told = True
                out.append(running)
        self.stopped = [r for r in self.stopped if not r.told]
        self._reported = 0
        return out

    async def aclose(self) -> None:
        """Stop what still runs (source `shutdown`) and give it the runtime's bound."""
        runtime = self.runtime
        with anyio.move_on_after(runtime.grace + 2 * runtime.abort_bound, shield=True):
            for running in [*self.in_flight, *self.stopped]:
                if not running.settled:
                    await running.session.abort(
                        source="shutdown", reason="the tools were closed"
                    )
            for running in [*self.in_flight, *self.stopped]:
                await running.wait_settled()
