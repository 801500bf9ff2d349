"""Sessions and turns: fresh ids, `turn.call`, `Session.abort()` and `settled()`.

A turn is stopped level-triggered: once stopped, `turn.call` starts nothing (S10). A turn
settles when it is stopped or closed and every call of it has settled; then `turn.settled`
is set and a `TurnSettled` event is emitted.

A session is given the executor (which holds the host, the ledger and the bounds), not the
runtime: it does not import the runtime.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, final

import anyio
import anyio.lowlevel

from .._ids import new_id
from ..errors import DuplicateCallId, ToolError, UsageError
from ..host._protocol import AbortSource, CallKey
from ._values import AbortReport, PendingCall, StopRequest, ToolResult, TurnSettled

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ._executor import ActiveCall, Executor
    from ._ledger import CallRecord

__all__ = ("Session", "Turn")


@final
class Turn:
    """One user request and every tool call made for it, until it settles."""

    def __init__(self, session: Session, turn_id: str) -> None:
        self.session = session
        self.id = turn_id
        self.settled = anyio.Event()
        """`turn.settled`: set once no call of the turn can change anything."""
        self.stop: StopRequest | None = None
        self.closed = False
        self.calls: dict[str, ActiveCall] = {}
        """Calls of the turn not yet settled, by call id (a settled call is dropped: a
        long turn keeps nothing of its finished calls but their ledger rows)."""
        self.refused: set[str] = set()
        """Ids of the calls of the turn refused after its stop: never sent to the host
        (every other call that got an id was; the rare ones are the ones kept)."""

    @property
    def stopped(self) -> bool:
        """Whether a stop has been requested for this turn."""
        return self.stop is not None

    def refuse_new_calls(self, stop: StopRequest) -> None:
        """Stop the turn from starting calls, without stopping the calls it has sent.

        Every later `turn.call` is refused and recorded as never started (S10); the
        calls already sent run to their real end. This is the run's stop inside an
        agent (spec 03): nothing started is cut. A stop already taken is kept.
        """
        if self.stop is None:
            self.stop = stop
            self._check_settled()

    async def call(
        self,
        name: str,
        input: dict[str, Any] | None = None,
        *,
        call_id: str | None = None,
    ) -> ToolResult:
        """Run one tool call and return its result.

        May be awaited concurrently from several tasks (parallel calls in one turn).

        Raises:
            ToolAborted: a stop ended the call; `.partial_output` holds what it printed.
            ToolError: the call id was already used in the session (`DUPLICATE_CALL_ID`);
                nothing was run.
        """
        session = self.session
        executor = session.executor
        if self.closed:
            raise UsageError("this turn has ended; start a new one with session.turn()")
        if executor.host is None:
            raise UsageError(
                "the runtime is closed; calls run inside `async with Runtime(...)`"
            )
        cid = call_id if call_id is not None else new_id("call")
        if cid in session.used_ids:
            # S8: a reused id runs nothing.
            raise DuplicateCallId(
                f"call id {cid} was already used in session {session.id}"
            )
        session.used_ids.add(cid)
        key = CallKey(session.id, cid, name)
        stop_class = executor.stop_class_of(name)
        if self.stop is not None:
            self.refused.add(cid)
            raise executor.refuse_after_stop(key, self.id, stop_class, self.stop)
        active = executor.begin(
            key,
            self.id,
            stop_class,
            self._on_call_settled,
            {} if input is None else input,
        )
        self.calls[cid] = active
        try:
            await executor.send(active)
            await active.done.wait()
        except BaseException:
            # The caller was cancelled from outside: the call is stopped, not leaked.
            with anyio.move_on_after(executor.abort_bound, shield=True):
                await executor.stop_call(
                    active,
                    StopRequest(
                        source="turn",
                        reason="caller cancelled",
                        at=anyio.current_time(),
                    ),
                )
            raise
        outcome = active.outcome
        if isinstance(outcome, ToolError):
            raise outcome
        assert outcome is not None
        return outcome

    def _on_call_settled(self, call: ActiveCall) -> None:
        del self.calls[call.key.call_id]
        if self.closed or self.stop is not None:  # else it cannot settle yet
            self._check_settled()

    def _check_settled(self) -> None:
        if self.settled.is_set() or not (self.closed or self.stopped):
            return
        if not self.calls:
            self.settled.set()
            self.session.executor.emit(
                TurnSettled(self.session.id, self.id, self.stopped)
            )


@final
class Session:
    """One conversation: turns one after another, each stoppable."""

    def __init__(self, executor: Executor, session_id: str) -> None:
        self.executor = executor
        self.id = session_id
        self.used_ids: set[str] = set()
        self.turns: list[Turn] = []
        self._open: list[Turn] = []

    def unsettled_turns(self) -> list[Turn]:
        """Turns that have not settled yet, oldest first (settled ones are dropped)."""
        self._open = [t for t in self._open if not t.settled.is_set()]
        return list(self._open)

    @property
    def current_turn(self) -> Turn | None:
        """The latest turn, if any."""
        return self.turns[-1] if self.turns else None

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[Turn]:
        """Open a turn; a new turn starts clean, with fresh call ids (S12)."""
        current = self.current_turn
        if current is not None and not current.closed:
            raise UsageError("a turn is already open in this session; finish it first")
        turn = Turn(self, new_id("turn"))
        self.turns.append(turn)
        self._open.append(turn)
        try:
            yield turn
        finally:
            turn.closed = True
            turn._check_settled()

    async def abort(
        self,
        *,
        source: AbortSource = "user",
        reason: str | None = None,
        kill: bool = False,
    ) -> AbortReport:
        """Stop the current turn and report the truth, within the abort bound (S5, S6).

        Runs the stop handler of every unsettled call of the turn (and of any earlier
        turn still settling) itself; no tool's cooperation is needed. Stopping twice, or
        a settled turn, is harmless and returns the same kind of report (S12).

        `kill=True` (a second stop: "kill now") also closes the grace window of every
        PROCESS call at once, so its tree is killed without waiting, and stops waiting
        for every started EXTENSION call: it ends END_UNKNOWN (its server never
        answered) and the host ends it (an MCP server's tree is killed). A started
        write still runs to its real end.
        """
        executor = self.executor
        started = anyio.current_time()
        turn = self.current_turn
        if turn is None:
            return AbortReport(
                session_id=self.id,
                turn_id=None,
                source=source,
                reason=reason,
                settled=True,
                pending=(),
                calls=(),
                elapsed=anyio.current_time() - started,
            )
        # The current turn, and any earlier turn whose calls are still running: a
        # write of a turn stopped before must not hide behind the new turn's report.
        turns = [t for t in self.unsettled_turns() if t is not turn] + [turn]
        request = StopRequest(source=source, reason=reason, at=started)
        for each in turns:
            if each.stop is None:
                each.stop = request
        stop = turn.stop
        assert stop is not None
        if kill:
            executor.kill_now([c for t in turns for c in t.calls.values()])
        # A fifth of the bound is kept for building the report and for the scheduler:
        # on a loaded machine a task can wait tens of milliseconds for its next turn.
        budget = executor.abort_bound * 0.8
        # One turn of the event loop before the stop handlers run, not after: a call
        # whose task was started but has not run yet asks for its call now and is
        # refused (S10, it appears in the report), while no stopped tool's cleanup (a
        # worker thread, a file write) runs before abort() returns.
        await anyio.lowlevel.cancel_shielded_checkpoint()
        to_stop = [
            (call, each.stop or request)
            for each in turns
            for call in list(each.calls.values())
            if not call.settled
        ]
        # Calls the host has not started go first (S10): an out-of-process host reads
        # the stops in order, so a queued call leaves its admission queue before a
        # running call's stop frees the place it waits for.
        to_stop.sort(key=lambda pair: pair[0].host_phase in ("running", "finished"))
        with anyio.move_on_after(budget):
            if len(to_stop) == 1:
                # One call (the common case) is stopped in this task: handing the stop
                # to a task would wait for the event loop again.
                await executor.stop_call(*to_stop[0])
            elif to_stop:
                async with anyio.create_task_group() as tg:
                    for call, stop_of_turn in to_stop:
                        tg.start_soon(executor.stop_call, call, stop_of_turn)
        for each in turns:
            each._check_settled()
        calls = tuple(r for t in turns for r in executor.ledger.calls(self.id, t.id))
        settled = all(r.settled for r in calls) and all(
            t.settled.is_set() for t in turns
        )
        return AbortReport(
            session_id=self.id,
            turn_id=turn.id,
            source=stop.source,
            reason=stop.reason,
            settled=settled,
            pending=executor.pending([c for t in turns for c in t.calls.values()]),
            calls=calls,
            elapsed=anyio.current_time() - started,
            outliving=executor.outliving(),
        )

    def pending(self) -> tuple[PendingCall, ...]:
        """Name each call of the session still running after a stop, and why, now.

        A PROCESS call's grace window counts down.
        """
        turns = self.unsettled_turns()
        return self.executor.pending([c for t in turns for c in t.calls.values()])

    async def settled(self) -> None:
        """Wait until every turn of the session has settled (no-op if none is open)."""
        for turn in self.unsettled_turns():
            if turn.closed or turn.stopped:
                await turn.settled.wait()
            else:
                await _wait_all_calls(turn)

    def ledger_calls(self) -> list[CallRecord]:
        """Every call of the session as the ledger shows it, in order."""
        return self.executor.ledger.calls(self.id)


async def _wait_all_calls(turn: Turn) -> None:
    for call in list(turn.calls.values()):
        await call.wait_settled()
