"""The executor: races each call against the stop, by its stop class, in one place.

A call's outcome is decided here from the host's events and the stop, never by the
caller's task: a call that must not be abandoned (MUTATING, EXTENSION, a PROCESS in its
grace window) reaches its real end in the ledger even when its caller has gone. The
registry of unsettled calls (`active`) lives here too; `Session.abort()` runs each of its
session's calls' stop handler itself (S5), and grace windows run in the runtime's task
group, which `serving()` hands in with the host.

A call's life is an `ActiveCall`: its `state` is its ledger row's, and every change of it
goes through `ActiveCall.move()` (the moves `CallState` allows; any other raises), which
moves the row with it. A call ends one way (`Executor._end()`: its outcome, final state
and columns in one move) and settles one way (`Executor._settle()`, then
`ActiveCall.mark_settled()`). Every time stamp comes from the ledger's clock.

The executor owns the one grace timer of a PROCESS call: the host is told to terminate at
the stop and to kill when the window closes. It does not know about JSON-RPC or which
host it speaks to; it speaks to a `HostConnection`.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from .._bounded_output import BoundedOutput
from ..errors import ErrorCode, InvalidInput, ToolAborted, UsageError
from ..host._calls import PARTIAL_LIMIT
from ..host._protocol import (
    PRE_START_PHASES,
    AbortAck,
    AbortRequest,
    CallKey,
    ExecuteRequest,
    HostConnection,
    HostEvent,
    HostPhase,
    KillRequest,
    OutputEvent,
    PhaseEvent,
    ResultEvent,
)
from ..host._tool import OnStop, StopClass, StopPolicy
from ..host._wire import encoded_input
from ._ledger import (
    NEXT_STATES,
    OUTPUT_BOUND,
    CallRecord,
    CallState,
    Ledger,
    bounded,
    input_column,
)
from ._values import (
    CallChanged,
    PendingCall,
    PendingPhase,
    RuntimeEvent,
    StopRequest,
    ToolProgress,
    ToolResult,
    shown_seconds,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterator

__all__ = ("ActiveCall", "Executor")

_CLASS_VALUE: dict[StopClass | None, str] = {
    None: "",
    **{c: c.value for c in StopClass},
}
"""Each class's own value string, as the ledger keeps it (None: a tool the runtime does
not know): `.value` is a property of the enum, and `str()` would make a new string that
every row of a long session keeps."""

# Members read once, for the path of every call: `CallState.RUNNING` goes through the
# enum class's `__getattr__` hook (Python 3.11), about ten times a global's cost.
_REQUESTED = CallState.REQUESTED
_RUNNING = CallState.RUNNING
_SUCCEEDED = CallState.SUCCEEDED
_TOOL_ABORTED = ErrorCode.TOOL_ABORTED

_PHASE_STATE: dict[HostPhase, CallState] = {
    "pending_permission": CallState.PENDING_PERMISSION,
    "queued": CallState.QUEUED,
    "running": CallState.RUNNING,
}


class ActiveCall:
    """The runtime's side of one call, from request to settlement.

    A plain class with slots: one is made per call, and only the executor makes them.
    """

    __slots__ = (
        "_settled_event",
        "_streamed",
        "done",
        "executor",
        "grace",
        "host_phase",
        "key",
        "kill_now",
        "on_settled",
        "outcome",
        "phase",
        "processes",
        "question",
        "sending",
        "settled",
        "state",
        "stop",
        "stop_class",
        "survivors",
    )

    def __init__(
        self,
        executor: Executor,
        key: CallKey,
        stop_class: StopClass | None,
        on_settled: Callable[[ActiveCall], None],
        done: anyio.Event,
    ) -> None:
        self.executor = executor
        """The executor that registered the call: its ledger, registry and subscribers."""
        self.key = key
        self.stop_class = stop_class
        """None when the runtime does not know the tool (treated as MUTATING on a stop)."""
        self.on_settled = on_settled
        self.state = _REQUESTED
        """The call's state in the ledger. Invariant: changed only by `move()`, which
        changes the ledger's row with it."""
        self.outcome: ToolResult | ToolAborted | None = None
        """What the caller is told. Invariant: set with `done`; set while `state` is not
        final only for a READ_ONLY call answered before the host said whether it started
        (`unconfirmed`)."""
        self.done = done
        """Set when the outcome is known (the caller may return)."""
        self.settled = False
        """True once nothing of the call can change anything any more."""
        self._settled_event: anyio.Event | None = None
        self.host_phase: HostPhase = "unknown"
        self.stop: StopRequest | None = None
        self._streamed: BoundedOutput | None = None
        """What the call streamed, head and tail only (made at the first progress)."""
        self.phase: PendingPhase | None = None
        """Where the call stands after a stop (None: no stop reached it yet)."""
        self.processes = 0
        """Process trees a stopped call had started and the host was still reaping."""
        self.question = ""
        """The question to the person the stop withdrew ("": none)."""
        self.survivors: tuple[int, ...] = ()
        """Processes left alive after the host was lost and its trees were killed."""
        self.sending: ExecuteRequest | InvalidInput | None = None
        """What `send()` sends (or the reason the input cannot be sent); None once sent."""
        self.grace: anyio.CancelScope | None = None
        """The PROCESS call's grace window while it is open (its deadline is the kill)."""
        self.kill_now = False
        """A second stop asked to kill the call's tree at once, without the grace window
        (or, for a started EXTENSION call, to stop waiting for its server)."""

    def move(self, state: CallState, changes: dict[str, Any] | None = None) -> None:
        """Move to `state`, with column changes, in the ledger too (staying is no move).

        Subscribers, if any, are told.

        Raises:
            UsageError: `CallState` does not allow the move (e.g. out of a final state).
        """
        if state is not self.state and state not in NEXT_STATES[self.state]:
            raise UsageError(
                f"call {self.key.call_id}: illegal move {self.state} -> {state}"
            )
        key = self.key
        executor = self.executor
        executor.ledger.transition(key.session_id, key.call_id, state, changes)
        self.state = state
        if executor.listened():
            executor.announce(self)

    @property
    def unconfirmed(self) -> bool:
        """Whether the call's caller was answered before its end was recorded.

        A stopped READ_ONLY call whose host has not said whether it started: the ledger
        keeps it `aborting` until the host says (its phase, its result) or is gone, and
        then records what it said.
        """
        return self.outcome is not None and not self.state.is_final

    def mark_settled(self) -> None:
        """Nothing of the call can change anything any more.

        It leaves the registry; its waiters wake and its turn is told.
        """
        self.phase = None
        key = self.key
        self.executor.active.pop((key.session_id, key.call_id), None)
        self.settled = True
        if self._settled_event is not None:
            self._settled_event.set()
        self.on_settled(self)

    async def wait_settled(self) -> None:
        """Wait until the call has settled."""
        if self.settled:
            return
        if self._settled_event is None:
            self._settled_event = anyio.Event()
        await self._settled_event.wait()

    def stream(self, text: str) -> None:
        """Keep a progress text of the call (bounded from the first byte)."""
        if self._streamed is None:
            self._streamed = BoundedOutput(PARTIAL_LIMIT)
        self._streamed.add(text.encode("utf-8", "surrogatepass"))

    def streamed(self) -> str:
        """What the call streamed so far (head and tail)."""
        return "" if self._streamed is None else self._streamed.text()

    @property
    def policy(self) -> StopPolicy:
        """The class's row of the stop table (an unknown tool's is MUTATING's)."""
        return (self.stop_class or StopClass.MUTATING).policy

    @property
    def treated_as(self) -> StopClass:
        """The class a stop treats the call by (an unknown tool's is MUTATING)."""
        return self.stop_class or StopClass.MUTATING


KILL_RESULT_BOUND = 0.5
"""Seconds a PROCESS call whose grace window closed waits for the host's result after
the kill (the output read up to the kill) before it ends with what it streamed."""


class Executor:
    """Sends calls to the host, applies stops, and writes every outcome to the ledger."""

    def __init__(
        self,
        *,
        ledger: Ledger,
        grace: float,
        abort_bound: float,
        emit: Callable[[RuntimeEvent], None],
        stop_class_of: Callable[[str], StopClass | None] = lambda _name: None,
        listened: Callable[[], bool] = lambda: True,
    ) -> None:
        self.listened = listened
        """Whether anyone takes call changes now (asked at each change; when nobody
        does, none is built)."""
        self.ledger = ledger
        self.clock = ledger.clock
        """Wall-clock seconds: every time stamp of a call (one clock with the ledger's)."""
        self.grace = grace
        """The PROCESS grace window, in seconds."""
        self.abort_bound = abort_bound
        """`Session.abort()` returns within this many seconds."""
        self.stop_class_of = stop_class_of
        """The stop class of a tool by name (None: not known to the runtime)."""
        self.emit = emit
        self.host: HostConnection | None = None
        """The host calls are sent to, inside `serving()` (None: outside it)."""
        self.task_group: anyio.abc.TaskGroup | None = None
        """Where grace windows run, inside `serving()`."""
        self.active: dict[tuple[str, str], ActiveCall] = {}
        """The abort registry: calls not yet settled, by (session id, call id)."""
        self.late_results = 0
        """Results that arrived after their call had ended (discarded, S3)."""
        self.dropped_progress = 0
        """Progress events of abandoned calls that were dropped (S4)."""
        self._event_class: Callable[[], anyio.Event] | None = None

    @contextmanager
    def serving(
        self, host: HostConnection, task_group: anyio.abc.TaskGroup
    ) -> Iterator[None]:
        """Send calls to `host` and run grace windows in `task_group`, for the block.

        The runtime opens it once both exist (the host's events reach `on_host_event`
        from its start) and closes it before either ends: after the block no call is
        sent, and `end_at_close()` ends what is left.

        Raises:
            UsageError: the executor is already serving.
        """
        if self.host is not None:
            raise UsageError("the executor already serves a host")
        self.host, self.task_group = host, task_group
        try:
            yield
        finally:
            self.host = self.task_group = None

    # -- starting calls ---------------------------------------------------------------

    def begin(
        self,
        key: CallKey,
        turn_id: str,
        stop_class: StopClass | None,
        on_settled: Callable[[ActiveCall], None],
        input: object,
    ) -> ActiveCall:
        """Register a call in the abort registry and the ledger; `send()` sends it.

        The input is checked here, for both hosts alike: one that is not a JSON object
        fails the call when it is sent, before anything crosses the seam.
        """
        make_event = self._event_class
        if make_event is None:
            # `anyio.Event()` looks up the event loop's own class each time; the
            # executor lives in one loop, so it looks once.
            make_event = self._event_class = type(anyio.Event())
        call = ActiveCall(self, key, stop_class, on_settled, make_event())
        try:
            value, text = encoded_input(input)
        except InvalidInput as exc:
            call.sending = exc
            text = input_column(input)
        else:
            # Encoded once: its JSON text is what the ledger keeps.
            call.sending = ExecuteRequest(key, value)
            if len(text) > OUTPUT_BOUND:
                text = bounded(text)
        self.ledger.request(
            key.session_id,
            key.call_id,
            key.tool,
            turn_id,
            _CLASS_VALUE[stop_class],
            text,
        )
        self.active[(key.session_id, key.call_id)] = call
        return call

    def refuse_after_stop(
        self,
        key: CallKey,
        turn_id: str,
        stop_class: StopClass | None,
        stop: StopRequest,
    ) -> ToolAborted:
        """Record a call asked for after the turn's stop: it never starts (S10)."""
        now = self.clock()
        refused = ToolAborted(f"not started: the turn was {stop}", call_id=key.call_id)
        self.ledger.add(
            CallRecord(
                call_id=key.call_id,
                tool=key.tool,
                state=CallState.ABORTED,
                session_id=key.session_id,
                turn_id=turn_id,
                stop_class=_CLASS_VALUE[stop_class],
                requested_at=now,
                ended_at=now,
                settled_at=now,
                **_columns(refused, stop, now),
            )
        )
        return refused

    async def send(self, call: ActiveCall) -> None:
        """Send `tools.execute` for a registered call; a failed send fails the call."""
        host = self.host
        assert host is not None
        request, call.sending = call.sending, None
        if not isinstance(request, ExecuteRequest):
            assert request is not None, "a call is sent once"
            # The same answer on both hosts, before anything crosses the seam.
            self._on_result(
                call,
                ResultEvent(
                    call.key,
                    "",
                    code=request.code,
                    message=request.message,
                    field_path=request.path,
                ),
            )
            return
        try:
            await host.execute(request)
        except Exception as exc:  # the host is gone or refused the frame
            self._on_result(
                call,
                ResultEvent(
                    call.key,
                    "",
                    code=ErrorCode.TOOL_FAILED,
                    message=f"host unreachable: {exc}",
                ),
            )

    # -- events from the host ---------------------------------------------------------

    def on_host_event(self, event: HostEvent) -> None:
        """Sink for the host's `tools.progress` and `tools.result` (never blocks)."""
        key = event.key
        call = self.active.get((key.session_id, key.call_id))
        if call is None or (call.key is not key and call.key != key):
            # S3: nothing of a settled (or unknown) call is taken any more.
            if isinstance(event, ResultEvent):
                self.late_results += 1
            elif isinstance(event, OutputEvent):
                self.dropped_progress += 1
            return
        # Most frequent first: every call ends with a result and starts running.
        if isinstance(event, ResultEvent):
            self._on_result(call, event)
        elif isinstance(event, PhaseEvent):
            self._on_phase(call, event)
        else:
            self._on_output(call, event)

    def _on_phase(self, call: ActiveCall, event: PhaseEvent) -> None:
        call.host_phase = phase = event.phase
        if call.stop_class is None and event.stop_class is not None:
            call.stop_class = event.stop_class
        state = _PHASE_STATE.get(phase)
        if state is not _RUNNING:
            if state is not None and call.outcome is None and call.stop is None:
                call.move(state)
            return
        if call.outcome is not None and not call.unconfirmed:
            return
        if call.stop is not None:
            # The stop crossed the host's "running" on the way (the host's loop was
            # busy, or the frame was in flight): the call started all the same, and the
            # ledger says so before it records the call's end.
            key = call.key
            if self.ledger.get(key.session_id, key.call_id).started_at is not None:
                return
            state = call.state
            if state is not CallState.ABORTING:
                state = CallState.RUNNING
        at = event.at
        call.move(state, {"started_at": self.clock() if at is None else at})

    def _on_output(self, call: ActiveCall, event: OutputEvent) -> None:
        if call.outcome is not None or (
            call.stop is not None and call.policy.on_stop is OnStop.ABANDON
        ):
            self.dropped_progress += 1
            return  # S4: progress of an abandoned call stops at the stop
        # A stopped PROCESS call's output is taken until its outcome: what its tree
        # prints in the grace window (a TERM handler's lines) is in the live view.
        call.stream(event.text)
        key = call.key
        self.emit(ToolProgress(key.session_id, key.call_id, key.tool, event.text))

    def _on_result(self, call: ActiveCall, event: ResultEvent) -> None:
        if call.outcome is not None:
            # S3: a late result of an abandoned call changes nothing but "the host is done".
            self.late_results += 1
            self._settle(call)
            return
        key = call.key
        code = event.code
        if code is _TOOL_ABORTED or (call.stop is not None and call.policy.abandons):
            self._end_aborted(call, partial=event.output or call.streamed())
            self._settle(call)
        elif code is None and not event.end_unknown:
            # No stop, or a stopped call that is not abandoned: it succeeded.
            result = ToolResult(output=event.output, call_id=key.call_id, tool=key.tool)
            self._end(call, _SUCCEEDED, result, settle=True)
        else:
            # An error; or its answer was lost: whether it took effect is not known.
            result = ToolResult(
                output=event.message or event.output,
                is_error=True,
                code=code or ErrorCode.TOOL_FAILED,
                call_id=key.call_id,
                tool=key.tool,
            )
            state = CallState.END_UNKNOWN if event.end_unknown else CallState.FAILED
            self._end(call, state, result, settle=True)

    # -- moves ------------------------------------------------------------------------

    def announce(self, call: ActiveCall) -> None:
        """Tell the subscribers the call's state in the ledger now."""
        key = call.key
        rec = self.ledger.get(key.session_id, key.call_id)
        self.emit(
            CallChanged(
                rec.session_id,
                rec.call_id,
                rec.tool,
                rec.state,
                rec.code,
                rec.settled,
            )
        )

    def _end(
        self,
        call: ActiveCall,
        state: CallState,
        outcome: ToolResult | ToolAborted,
        *,
        settle: bool = False,
    ) -> None:
        """End the call in the final `state` with `outcome`, and answer its caller.

        One ledger move records the end, how it ended and, with `settle`, that it
        settled. A call answered before its end (`unconfirmed`) ends with what it was
        answered.
        """
        now = self.clock()
        changes = _columns(outcome, call.stop, now)
        changes["ended_at"] = now
        if settle:
            changes["settled_at"] = now
        call.move(state, changes)
        if call.outcome is None:
            call.outcome = outcome
            call.done.set()
        if settle:
            call.mark_settled()

    def _end_aborted(self, call: ActiveCall, *, partial: str) -> None:
        self._end(call, CallState.ABORTED, self._aborted(call, partial))

    def _aborted(self, call: ActiveCall, partial: str) -> ToolAborted:
        why = str(call.stop) if call.stop else "stopped"
        return ToolAborted(
            f"{call.key.tool} call {call.key.call_id} {why}",
            partial_output=partial,
            call_id=call.key.call_id,
        )

    def _failure(self, call: ActiveCall, text: str) -> ToolResult:
        return ToolResult(
            output=text,
            is_error=True,
            code=ErrorCode.TOOL_FAILED,
            call_id=call.key.call_id,
            tool=call.key.tool,
        )

    def _settle(self, call: ActiveCall) -> None:
        """Settle a call whose caller was answered: nothing of it changes any more."""
        if call.settled or call.outcome is None:
            return
        if call.unconfirmed:
            self._end(call, CallState.ABORTED, call.outcome)
        key = call.key
        self.ledger.settle(key.session_id, key.call_id, self.clock())
        if self.listened():
            self.announce(call)
        call.mark_settled()

    # -- stopping ---------------------------------------------------------------------

    async def stop_call(self, call: ActiveCall, stop: StopRequest) -> None:
        """The call's stop handler: tell the host and apply the class's policy (S2, S5)."""
        if call.settled:
            return
        if call.stop is not None:
            if call.kill_now:
                await self._give_up(call)
            return
        call.stop = stop
        if call.outcome is None and call.policy.on_stop is OnStop.ABANDON:
            if call.host_phase == "running":
                # The caller is answered now; the call settles once the host says it
                # started no process that is still being killed (`_apply_ack`).
                self._end_aborted(call, partial=call.streamed())
                call.phase = PendingPhase.ASKING_ABOUT_PROCESSES
            else:
                # Not seen running: only the host can say whether it started (its
                # "running" may be on the way); its answer decides what the caller is
                # told and what the ledger records (`_apply_ack`).
                call.phase = PendingPhase.ASKING_IF_STARTED
        elif call.outcome is None:
            call.phase = PendingPhase.STOP_SENT
        assert self.host is not None
        request = AbortRequest(call.key, stop.source, stop.reason)
        ack: AbortAck | None = None
        try:
            ack = await self.host.abort(request)
        except Exception:  # the host is gone: decide on what the runtime saw
            ack = None
        finally:
            self._apply_ack(call, ack)
        if call.kill_now:
            await self._give_up(call)

    def _apply_ack(self, call: ActiveCall, ack: AbortAck | None) -> None:
        on_stop = call.policy.on_stop
        if on_stop is OnStop.ABANDON and not call.settled and call.outcome is None:
            if ack is None:
                # The host did not answer within the bound: the caller is answered now
                # (a read is never waited for), and the ledger says `aborting` until the
                # host says whether the call started.
                self._answer_unconfirmed(call)
                return
            # The host's "running", if it was sent, came before its answer.
            self._end_aborted(call, partial=call.streamed())
        if on_stop is OnStop.ABANDON and not call.settled:
            if ack is not None and ack.processes:
                # S13: its result comes once the trees it started are reaped.
                call.processes = ack.processes
                call.phase = PendingPhase.REAPING
            else:
                self._settle(call)
            return
        if call.outcome is not None:
            return
        if ack is None:
            # Unconfirmed: only the host can say whether the operation started. Its
            # result (TOOL_ABORTED if the stop reached it first) decides (style 18).
            call.phase = PendingPhase.STOP_UNCONFIRMED
            if on_stop is OnStop.TERMINATE:
                self._start_grace_window(call)
            return
        if ack.phase in PRE_START_PHASES:
            # The host guarantees a call stopped before its operation never starts.
            self._end_aborted(call, partial="")
            self._settle(call)
            return
        if ack.phase == "finished":
            call.phase = PendingPhase.FINISHED
            return
        match on_stop:
            case OnStop.TERMINATE:
                call.move(CallState.ABORTING)
                call.phase = PendingPhase.TERMINATING
                self._start_grace_window(call)
            case OnStop.AWAIT:
                call.phase = PendingPhase.STARTED
                # spec 01: a pending prompt is withdrawn by the stop.
                call.question = ack.asking
            case OnStop.ABANDON:  # pragma: no cover - handled above
                pass

    def _answer_unconfirmed(self, call: ActiveCall) -> None:
        stop = call.stop
        changes: dict[str, Any] = {}
        if stop is not None:
            changes["abort_source"] = stop.source
            changes["abort_reason"] = stop.reason
        call.move(CallState.ABORTING, changes)
        call.outcome = self._aborted(call, call.streamed())
        call.phase = PendingPhase.START_UNCONFIRMED
        call.done.set()

    def _start_grace_window(self, call: ActiveCall) -> None:
        assert self.task_group is not None
        self.task_group.start_soon(self._close_grace_window, call)

    def host_lost(self, reason: str) -> None:
        """The host went away: no result will come, so every unsettled call ends now.

        A stopped call ends TOOL_ABORTED, any other TOOL_FAILED with the reason. Calls
        that may have started processes settle only once every process the host
        started is gone (S13); the others settle at once.
        """
        processes: list[ActiveCall] = []
        for call in list(self.active.values()):
            if call.outcome is None:
                if call.stop is not None:
                    self._end_aborted(call, partial=call.streamed())
                else:
                    self._end(call, CallState.FAILED, self._failure(call, reason))
            if _has_processes(call):
                call.phase = PendingPhase.HOST_LOST
                processes.append(call)
            else:
                self._settle(call)
        if processes:
            assert self.task_group is not None
            assert self.host is not None
            self.task_group.start_soon(self._settle_after_reaping, self.host, processes)

    async def end_at_close(self, host: HostConnection, reason: str) -> None:
        """The runtime closes with calls unsettled: each ends with what is known.

        A write or extension whose operation had started ends END_UNKNOWN (the host never
        said how it ended); a stopped call ends TOOL_ABORTED, any other TOOL_FAILED.
        Process calls settle once the host's processes are reaped. Callers waiting in
        `turn.call` get their answer; nothing is left RUNNING.
        """
        processes: list[ActiveCall] = []
        for call in list(self.active.values()):
            if call.outcome is None:
                started = call.host_phase in ("running", "finished")
                if started and call.policy.on_stop is OnStop.AWAIT:
                    self._end(
                        call,
                        CallState.END_UNKNOWN,
                        self._failure(
                            call,
                            f"{reason} while it ran; whether it completed is unknown",
                        ),
                    )
                elif call.stop is not None:
                    self._end_aborted(call, partial=call.streamed())
                else:
                    self._end(call, CallState.FAILED, self._failure(call, reason))
            if _has_processes(call):
                processes.append(call)
            else:
                self._settle(call)
        if processes:
            await self._settle_after_reaping(host, processes)

    def started_writes(self) -> list[ActiveCall]:
        """Unsettled calls whose operation started and is never abandoned.

        MUTATING, EXTENSION and tools the runtime does not know (spec 01).
        """
        return [
            call
            for call in self.active.values()
            if not call.settled
            and call.policy.on_stop is OnStop.AWAIT
            and call.host_phase in ("running", "finished")
        ]

    def waiting(self, calls: Collection[ActiveCall] | None = None) -> list[str]:
        """Name each unsettled call (or each of `calls`).

        Each with its tool, its call id and since when it was requested.
        """
        out = []
        for call in self.active.values() if calls is None else calls:
            rec = self.ledger.get(call.key.session_id, call.key.call_id)
            since = time.strftime("%H:%M:%S", time.localtime(rec.requested_at))
            out.append(
                f"{call.key.tool} call {call.key.call_id} ({rec.state}, since {since})"
            )
        return out

    async def _settle_after_reaping(
        self, host: HostConnection, calls: list[ActiveCall]
    ) -> None:
        left = await host.reap_orphans()
        for call in calls:
            if left:
                call.phase = PendingPhase.SURVIVED_KILL
                call.survivors = tuple(left)
            else:
                self._settle(call)

    async def _close_grace_window(self, call: ActiveCall) -> None:
        call.grace = anyio.move_on_after(0 if call.kill_now else self.grace)
        try:
            with call.grace:
                await call.done.wait()
        finally:
            call.grace = None
        if call.outcome is not None:
            return
        # The window closed first: the host is told to kill every descendant, and the
        # call settles when the tree is gone. It ends with what the host read up to the
        # kill (its result; what the kill left, such as git's locks, is named there), or,
        # if that result is not here within `KILL_RESULT_BOUND`, with what it streamed
        # until now. Until the host confirms, the report says only that the kill was sent.
        call.phase = PendingPhase.KILL_SENT
        assert self.host is not None
        assert self.task_group is not None
        self.task_group.start_soon(self._end_after_kill, call)
        try:
            ack = await self.host.kill(KillRequest(call.key))
        except Exception:  # the host is gone: `host_lost` reaps what it started
            return
        if not call.settled and ack.found and ack.phase == "running":
            call.phase = PendingPhase.KILLED

    async def _end_after_kill(self, call: ActiveCall) -> None:
        with anyio.move_on_after(KILL_RESULT_BOUND):
            await call.done.wait()
        if call.outcome is None:
            self._end_aborted(call, partial=call.streamed())

    def kill_now(self, calls: Collection[ActiveCall]) -> None:
        """Close the grace window of each stopped PROCESS call at once.

        Its tree is killed now (a second stop). A started EXTENSION call is marked: its
        stop handler stops waiting for the server (`_give_up`). Other calls are not
        touched: a started write still runs to its real end.
        """
        for call in calls:
            if call.settled:
                continue
            if call.stop_class is StopClass.EXTENSION:
                call.kill_now = True
            elif call.policy.on_stop is OnStop.TERMINATE:
                call.kill_now = True
                if call.grace is not None:
                    call.grace.cancel()

    async def _give_up(self, call: ActiveCall) -> None:
        """Stop waiting for a started EXTENSION call (a second stop): it ends END_UNKNOWN.

        The server was told to cancel at the first stop and never answered, so what the
        call did is unknown. The host is told to end the call (its server's process tree
        is killed, or its HTTP stream closed); the call settles once the host has ended
        it, or at once when the host no longer holds it.
        """
        if (
            call.settled
            or call.outcome is not None
            or call.stop_class is not StopClass.EXTENSION
        ):
            return
        self._end(
            call,
            CallState.END_UNKNOWN,
            self._failure(
                call,
                f"{call.key.tool} was stopped and waited for no more: the server never "
                "answered; its effect is unknown",
            ),
        )
        call.phase = PendingPhase.ENDING_UNKNOWN
        assert self.host is not None
        try:
            ack = await self.host.kill(KillRequest(call.key))
        except Exception:  # the host is gone: nothing of the call is left to end
            ack = None
        if ack is None or not ack.found:
            self._settle(call)

    def outliving(self) -> tuple[str, ...]:
        """One line per tool whose stopped calls' workers still run in this process."""
        if self.host is None:
            return ()
        return tuple(
            f"{tool}: {n} stopped call{'s' if n > 1 else ''} still running in a worker "
            "that ignores the stop"
            for tool, n in sorted(self.host.outliving().items())
        )

    def pending(self, calls: list[ActiveCall]) -> tuple[PendingCall, ...]:
        """Name each unsettled call, where it stands and why it still runs."""
        out = []
        for call in calls:
            if call.settled:
                continue
            phase = call.phase or PendingPhase.RUNNING
            left = None
            if phase is PendingPhase.TERMINATING:
                # The window's deadline is the truth; the report counts down with it.
                grace = call.grace
                left = shown_seconds(
                    self.grace
                    if grace is None
                    else max(0.0, grace.deadline - anyio.current_time())
                )
            out.append(
                PendingCall(
                    call_id=call.key.call_id,
                    tool=call.key.tool,
                    stop_class=call.treated_as,
                    phase=phase,
                    seconds_left=left,
                    trees=call.processes if phase is PendingPhase.REAPING else 0,
                    question=call.question if phase is PendingPhase.STARTED else "",
                    survivors=call.survivors,
                )
            )
        return tuple(out)


def _columns(
    outcome: ToolResult | ToolAborted, stop: StopRequest | None, now: float
) -> dict[str, Any]:
    """The ledger's view of how a call ended: output, error, code, who stopped it, when.

    `now` is the wall clock's time (a stop's `at` is the event loop's). Only the columns
    that differ from a blank record are given: a row keeps no more.
    """
    columns: dict[str, Any]
    if type(outcome) is ToolResult:
        output = outcome.output
        columns = {"output": bounded(output)}
        if outcome.is_error:
            columns["error"] = output
        if outcome.code is not None:
            columns["code"] = outcome.code
    else:
        assert isinstance(outcome, ToolAborted)
        columns = {
            "output": bounded(outcome.partial_output),
            "error": outcome.message,
            "code": outcome.code,
        }
    if stop is not None:
        columns["stopped_at"] = now - max(0.0, anyio.current_time() - stop.at)
        columns["abort_source"] = stop.source
        columns["abort_reason"] = stop.reason
    return columns


def _has_processes(call: ActiveCall) -> bool:
    """Whether the call may have started processes the host has to reap."""
    return call.policy.on_stop is OnStop.TERMINATE or call.processes > 0
