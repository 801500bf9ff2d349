"""The executor: races each call against the stop, by its stop class, in one place.

A call's outcome is decided here from the host's events and the stop, never by the
caller's task: a call that must not be abandoned (MUTATING, EXTENSION, a PROCESS in its
grace window) reaches its real end in the ledger even when its caller has gone. The
registry of unsettled calls (`active`) lives here too; `Session.abort()` runs each of its
session's calls' stop handler itself (S5), and grace windows run in the runtime's task
group.

The executor owns the one grace timer of a PROCESS call: the host is told to terminate at
the stop and to kill when the window closes. It does not know about JSON-RPC or which
host it speaks to; it speaks to a `HostConnection`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection
from typing import Any

import anyio
import anyio.abc
import attrs

from .._bounded_output import BoundedOutput
from ..errors import ErrorCode, InvalidInput, ToolAborted, ToolError
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
    OUTPUT_BOUND,
    CallRecord,
    CallState,
    Ledger,
    bounded,
    input_column,
    outcome_columns,
)
from ._values import (
    CallChanged,
    PendingCall,
    RuntimeEvent,
    StopRequest,
    ToolProgress,
    ToolResult,
)

__all__ = ("ActiveCall", "Executor")

_PHASE_STATE: dict[HostPhase, CallState] = {
    "pending_permission": CallState.PENDING_PERMISSION,
    "queued": CallState.QUEUED,
    "running": CallState.RUNNING,
}


@attrs.define(eq=False)
class ActiveCall:
    """The runtime's side of one call, from request to settlement."""

    key: CallKey
    stop_class: StopClass | None
    """None when the runtime does not know the tool (treated as MUTATING on a stop)."""
    on_settled: Callable[[ActiveCall], None]
    outcome: ToolResult | ToolAborted | None = None
    done: anyio.Event = attrs.field(factory=anyio.Event)
    """Set when the outcome is known (the caller may return)."""
    is_settled: bool = False
    """True once nothing of the call can change anything any more."""
    _settled_event: anyio.Event | None = None
    host_phase: HostPhase = "unknown"
    stop: StopRequest | None = None
    _streamed: BoundedOutput | None = None
    """What the call streamed, head and tail only (made at the first progress)."""
    why: str | None = None
    """Why the call still runs after a stop (starts with its class, lower case)."""
    processes: int = 0
    """Process trees a stopped call had started and the host was still reaping."""
    sending: ExecuteRequest | InvalidInput | None = None
    """What `send()` sends (or the reason the input cannot be sent); None once sent."""
    grace: anyio.CancelScope | None = None
    """The PROCESS call's grace window while it is open (its deadline is the kill)."""
    kill_now: bool = False
    """A second stop asked to kill the call's tree at once, without the grace window
    (or, for a started EXTENSION call, to stop waiting for its server)."""
    unconfirmed: bool = False
    """A stopped READ_ONLY call whose caller was answered before the host said whether
    it had started: the ledger keeps it `aborting` until the host says (its phase, its
    result) or is gone, and then records what it said."""

    async def wait_settled(self) -> None:
        """Wait until the call has settled."""
        if self.is_settled:
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
    def class_word(self) -> str:
        """The stop class as reports name it."""
        return str(self.stop_class or StopClass.MUTATING)


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
        self.grace = grace
        """The PROCESS grace window, in seconds."""
        self.abort_bound = abort_bound
        """`Session.abort()` returns within this many seconds."""
        self.stop_class_of = stop_class_of
        """The stop class of a tool by name (None: not known to the runtime)."""
        self.emit = emit
        self.host: HostConnection | None = None
        self.task_group: anyio.abc.TaskGroup | None = None
        self.active: dict[tuple[str, str], ActiveCall] = {}
        """The abort registry: calls not yet settled, by (session id, call id)."""
        self.late_results = 0
        """Results that arrived after their call had ended (discarded, S3)."""
        self.dropped_progress = 0
        """Progress events of abandoned calls that were dropped (S4)."""
        self._event_class: Callable[[], anyio.Event] | None = None

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
        call = ActiveCall(
            key=key,
            stop_class=stop_class,
            on_settled=on_settled,
            done=make_event(),
        )
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
            # The member's own value: `str()` would make a new string that every row
            # of a long session keeps.
            stop_class.value if stop_class else "",
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
        now = time.time()
        record = _record(key, turn_id, stop_class, CallState.ABORTED, now)
        refused = ToolAborted(f"not started: the turn was {stop}", call_id=key.call_id)
        self.ledger.add(
            attrs.evolve(
                record,
                code=ErrorCode.TOOL_ABORTED,
                ended_at=now,
                settled_at=now,
                abort_source=stop.source,
                abort_reason=stop.reason,
                **outcome_columns(refused, stop),
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
        if state is not None and call.outcome is None and call.stop is None:
            if state is CallState.RUNNING:
                key = call.key
                at = event.at
                self.ledger.start(
                    key.session_id, key.call_id, time.time() if at is None else at
                )
                if self.listened():
                    self._changed(call)
            else:
                self._move(call, state)
        elif state is CallState.RUNNING and (call.outcome is None or call.unconfirmed):
            # The stop crossed the host's "running" on the way (the host's loop was
            # busy, or the frame was in flight): the call started all the same, and
            # the ledger says so before it records the call's end.
            self._record_start(call, event.at)

    def _record_start(self, call: ActiveCall, at: float | None) -> None:
        key = call.key
        rec = self.ledger.get(key.session_id, key.call_id)
        if rec.started_at is not None or rec.state.is_final:
            return
        state = rec.state
        if state is not CallState.ABORTING:
            state = CallState.RUNNING
        changes = {"started_at": time.time() if at is None else at}
        self._move(call, state, changes)

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
        if event.code is None and call.stop is None and call.outcome is None:
            # The most common end of a call, written here rather than in a method of
            # its own: it succeeded with no stop, and ends and settles in one ledger move.
            key = call.key
            output = event.output
            call.outcome = ToolResult(output=output, call_id=key.call_id, tool=key.tool)
            if len(output) > OUTPUT_BOUND:
                output = bounded(output)
            self.ledger.succeed(key.session_id, key.call_id, output, time.time())
            if self.listened():
                self._changed(call)
            call.done.set()
            self._forget(call)
            return
        if call.outcome is None:
            if event.code is ErrorCode.TOOL_ABORTED or (
                call.stop is not None and call.policy.abandons
            ):
                self._finish_aborted(call, partial=event.output or call.streamed())
            elif (
                event.end_unknown
            ):  # its answer was lost: whether it took effect is not known
                result = ToolResult(
                    output=event.message or event.output,
                    is_error=True,
                    code=event.code or ErrorCode.TOOL_FAILED,
                    call_id=call.key.call_id,
                    tool=call.key.tool,
                )
                self._finish(
                    call, CallState.END_UNKNOWN, result, result.code, settled=True
                )
            elif event.code is not None:
                result = ToolResult(
                    output=event.message or event.output,
                    is_error=True,
                    code=event.code,
                    call_id=call.key.call_id,
                    tool=call.key.tool,
                )
                self._finish(call, CallState.FAILED, result, event.code, settled=True)
            else:  # a stopped call that is not abandoned, and that succeeded
                result = ToolResult(
                    output=event.output, call_id=call.key.call_id, tool=call.key.tool
                )
                self._finish(call, CallState.SUCCEEDED, result, None, settled=True)
        else:
            # S3: a late result of an abandoned call changes nothing but "the host is done".
            self.late_results += 1
        self._settle(call)

    # -- outcomes ---------------------------------------------------------------------

    def _move(
        self, call: ActiveCall, state: CallState, changes: dict[str, Any] | None = None
    ) -> None:
        key = call.key
        self.ledger.transition(key.session_id, key.call_id, state, changes)
        self._changed(call)

    def _changed(self, call: ActiveCall) -> None:
        """Tell the subscribers, if any, the call's state in the ledger now."""
        if self.listened():
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

    def _finish(
        self,
        call: ActiveCall,
        state: CallState,
        outcome: ToolResult | ToolAborted,
        code: ErrorCode | None,
        *,
        settled: bool = False,
    ) -> None:
        assert call.outcome is None
        call.outcome = outcome
        stop = call.stop
        now = time.time()
        changes = outcome_columns(outcome, stop)
        changes["code"] = code
        changes["ended_at"] = now
        if settled:
            changes["settled_at"] = now
        if stop is not None:
            changes["abort_source"] = stop.source
            changes["abort_reason"] = stop.reason
        self._move(call, state, changes)
        call.done.set()

    def _finish_aborted(self, call: ActiveCall, *, partial: str) -> None:
        why = str(call.stop) if call.stop else "stopped"
        exc = ToolAborted(
            f"{call.key.tool} call {call.key.call_id} {why}",
            partial_output=partial,
            call_id=call.key.call_id,
        )
        self._finish(call, CallState.ABORTED, exc, ErrorCode.TOOL_ABORTED)

    def _settle(self, call: ActiveCall) -> None:
        if call.is_settled or call.outcome is None:
            return
        if call.unconfirmed:
            self._record_unconfirmed_end(call)
        key = call.key
        if not self.ledger.is_settled(key.session_id, key.call_id):
            self.ledger.settle(key.session_id, key.call_id, time.time())
            self._changed(call)
        self._forget(call)

    def _forget(self, call: ActiveCall) -> None:
        """Take a settled call out of the registry and tell its turn."""
        call.why = None
        self.active.pop((call.key.session_id, call.key.call_id), None)
        # Settled: its waiters wake (written here, not as a method of the call: this is
        # on the path of every call).
        call.is_settled = True
        if call._settled_event is not None:
            call._settled_event.set()
        call.on_settled(call)

    # -- stopping ---------------------------------------------------------------------

    async def stop_call(self, call: ActiveCall, stop: StopRequest) -> None:
        """The call's stop handler: tell the host and apply the class's policy (S2, S5)."""
        if call.is_settled:
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
                self._finish_aborted(call, partial=call.streamed())
                call.why = (
                    f"{call.class_word}: stopped, asking the host about its processes"
                )
            else:
                # Not seen running: only the host can say whether it started (its
                # "running" may be on the way); its answer decides what the caller is
                # told and what the ledger records (`_apply_ack`).
                call.why = (
                    f"{call.class_word}: stop sent, asking the host whether it started"
                )
        elif call.outcome is None:
            call.why = f"{call.class_word}: stop sent, waiting for the host to answer"
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
        if on_stop is OnStop.ABANDON and not call.is_settled and call.outcome is None:
            if ack is None:
                # The host did not answer within the bound: the caller is answered now
                # (a read is never waited for), and the ledger says `aborting` until the
                # host says whether the call started.
                self._answer_unconfirmed(call)
                return
            # The host's "running", if it was sent, came before its answer.
            self._finish_aborted(call, partial=call.streamed())
        if on_stop is OnStop.ABANDON and not call.is_settled:
            if ack is not None and ack.processes:
                # S13: its result comes once the trees it started are reaped.
                call.processes = ack.processes
                trees = "tree" if ack.processes == 1 else "trees"
                call.why = (
                    f"{call.class_word}: stopped, waiting for the {ack.processes} "
                    f"process {trees} it started to be reaped"
                )
            else:
                self._settle(call)
            return
        if call.outcome is not None:
            return
        word = call.class_word
        if ack is None:
            # Unconfirmed: only the host can say whether the operation started. Its
            # result (TOOL_ABORTED if the stop reached it first) decides (style 18).
            call.why = f"{word}: stop not confirmed by the host, waiting for result"
            if on_stop is OnStop.TERMINATE:
                self._start_grace_window(call)
            return
        if ack.phase in PRE_START_PHASES:
            # The host guarantees a call stopped before its operation never starts.
            self._finish_aborted(call, partial="")
            self._settle(call)
            return
        if ack.phase == "finished":
            call.why = f"{word}: finished, waiting for its result"
            return
        match on_stop:
            case OnStop.TERMINATE:
                self._move(call, CallState.ABORTING)
                call.why = f"{word}: terminating, {_left(self.grace)}"
                self._start_grace_window(call)
            case OnStop.AWAIT:
                call.why = f"{word}: started, waiting for result"
                if ack.asking:
                    # spec 01: a pending prompt is withdrawn by the stop.
                    call.why += f"; its question was withdrawn ({ack.asking})"
            case OnStop.ABANDON:  # pragma: no cover - handled above
                pass

    def _answer_unconfirmed(self, call: ActiveCall) -> None:
        stop = call.stop
        why = str(stop) if stop else "stopped"
        call.outcome = ToolAborted(
            f"{call.key.tool} call {call.key.call_id} {why}",
            partial_output=call.streamed(),
            call_id=call.key.call_id,
        )
        call.unconfirmed = True
        changes: dict[str, Any] = {}
        if stop is not None:
            changes["abort_source"] = stop.source
            changes["abort_reason"] = stop.reason
        self._move(call, CallState.ABORTING, changes)
        call.why = (
            f"{call.class_word}: stopped, the host has not said whether it started"
        )
        call.done.set()

    def _record_unconfirmed_end(self, call: ActiveCall) -> None:
        """End a call answered before the host said whether it started, as it said."""
        call.unconfirmed = False
        outcome = call.outcome
        assert outcome is not None
        changes = outcome_columns(outcome, call.stop)
        changes["code"] = ErrorCode.TOOL_ABORTED
        changes["ended_at"] = time.time()
        self._move(call, CallState.ABORTED, changes)

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
                    self._finish_aborted(call, partial=call.streamed())
                else:
                    result = ToolResult(
                        output=reason,
                        is_error=True,
                        code=ErrorCode.TOOL_FAILED,
                        call_id=call.key.call_id,
                        tool=call.key.tool,
                    )
                    self._finish(call, CallState.FAILED, result, ErrorCode.TOOL_FAILED)
            if _has_processes(call):
                call.why = f"{call.class_word}: host lost, waiting for its processes to be reaped"
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
                    self._finish(
                        call,
                        CallState.END_UNKNOWN,
                        self._failure(
                            call,
                            f"{reason} while it ran; whether it completed is unknown",
                        ),
                        ErrorCode.TOOL_FAILED,
                    )
                elif call.stop is not None:
                    self._finish_aborted(call, partial=call.streamed())
                else:
                    self._finish(
                        call,
                        CallState.FAILED,
                        self._failure(call, reason),
                        ErrorCode.TOOL_FAILED,
                    )
            if _has_processes(call):
                processes.append(call)
            else:
                self._settle(call)
        if processes:
            await self._settle_after_reaping(host, processes)

    def _failure(self, call: ActiveCall, text: str) -> ToolResult:
        return ToolResult(
            output=text,
            is_error=True,
            code=ErrorCode.TOOL_FAILED,
            call_id=call.key.call_id,
            tool=call.key.tool,
        )

    def started_writes(self) -> list[ActiveCall]:
        """Unsettled calls whose operation started and is never abandoned.

        MUTATING, EXTENSION and tools the runtime does not know (spec 01).
        """
        return [
            call
            for call in self.active.values()
            if not call.is_settled
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
                call.why = (
                    f"{call.class_word}: host lost, processes {left} survive a kill"
                )
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
        word = call.class_word
        call.why = f"{word}: kill sent, not confirmed by the host"
        assert self.host is not None
        assert self.task_group is not None
        self.task_group.start_soon(self._end_after_kill, call)
        try:
            ack = await self.host.kill(KillRequest(call.key))
        except Exception:  # the host is gone: `host_lost` reaps what it started
            return
        if not call.is_settled and ack.found and ack.phase == "running":
            call.why = f"{word}: killed, waiting for the process tree to be reaped"

    async def _end_after_kill(self, call: ActiveCall) -> None:
        with anyio.move_on_after(KILL_RESULT_BOUND):
            await call.done.wait()
        if call.outcome is None:
            self._finish_aborted(call, partial=call.streamed())

    def kill_now(self, calls: Collection[ActiveCall]) -> None:
        """Close the grace window of each stopped PROCESS call at once.

        Its tree is killed now (a second stop). A started EXTENSION call is marked: its
        stop handler stops waiting for the server (`_give_up`). Other calls are not
        touched: a started write still runs to its real end.
        """
        for call in calls:
            if call.is_settled:
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
            call.is_settled
            or call.outcome is not None
            or call.stop_class is not StopClass.EXTENSION
        ):
            return
        word = call.class_word
        self._finish(
            call,
            CallState.END_UNKNOWN,
            self._failure(
                call,
                f"{call.key.tool} was stopped and waited for no more: the server never "
                "answered; its effect is unknown",
            ),
            ErrorCode.TOOL_FAILED,
        )
        call.why = f"{word}: ended unknown, the host is ending the call"
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
        """Name each unsettled call and why it still runs."""
        out = []
        for call in calls:
            if call.is_settled:
                continue
            why = call.why or f"{call.class_word}: running, no stop requested"
            if call.grace is not None and why.startswith(
                f"{call.class_word}: terminating"
            ):
                # The window's deadline is the truth; the text counts down with it.
                left = max(0.0, call.grace.deadline - anyio.current_time())
                why = f"{call.class_word}: terminating, {_left(left)}"
            out.append(PendingCall(call.key.call_id, call.key.tool, why))
        return tuple(out)


def _left(seconds: float) -> str:
    """`at most N s left` of a grace window, in whole seconds once above one."""
    if seconds > 1:
        shown = f"{math.ceil(seconds - 1e-6)}"
    else:
        shown = f"{math.ceil(seconds * 100 - 1e-6) / 100:g}"
    return f"at most {shown} s left"


def _has_processes(call: ActiveCall) -> bool:
    """Whether the call may have started processes the host has to reap."""
    return call.policy.on_stop is OnStop.TERMINATE or call.processes > 0


def _record(
    key: CallKey,
    turn_id: str,
    stop_class: StopClass | None,
    state: CallState,
    now: float,
) -> CallRecord:
    return CallRecord(
        call_id=key.call_id,
        tool=key.tool,
        state=state,
        session_id=key.session_id,
        turn_id=turn_id,
        stop_class=stop_class.value if stop_class else "",
        requested_at=now,
    )


def raise_or_return(call: ActiveCall) -> ToolResult:
    """Turn a call's outcome into the caller's return value or exception."""
    outcome = call.outcome
    assert outcome is not None
    if isinstance(outcome, ToolError):
        raise outcome
    return outcome
