"""The host core: executes tool calls and applies typed aborts to them.

Order of a call (spec 01): register its cancellation, then the guard and permission, then
admission, then the tool. A stop before the tool runs means it never runs. Once running,
the stop class's row of the stop table (`StopClass.policy`) decides: READ_ONLY is
cancelled at once, PROCESS is told to terminate and killed when the grace window closes,
MUTATING and EXTENSION run to their real result.

Both hosts use this core: the in-process host calls it directly, the stdio host behind
JSON-RPC. It does not know about JSON-RPC or the runtime's ledger; it reports through an
`emit` callback that must not block.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import attrs

from .._bounded_output import BoundedOutput
from ..errors import (
    DuplicateCallId,
    ErrorCode,
    InvalidInput,
    PermissionDenied,
    ToolError,
    ToolFailed,
    UnknownTool,
)
from ._admission import Admission
from ._calls import CallTable, HostCall
from ._protocol import (
    PRE_START_PHASES,
    AbortAck,
    AbortRequest,
    CallKey,
    ExecuteRequest,
    HostEvent,
    HostPhase,
    KillRequest,
    OutputEvent,
    PhaseEvent,
    ResultEvent,
)
from ._tool import OnStop, Tool, ToolContext

if TYPE_CHECKING:
    from pathlib import Path

    from ._broker import Broker

__all__ = ("MAX_TEXT", "HostCore", "HostStatistics", "cut_text")

Emit = Callable[[HostEvent], None]

MAX_TEXT = 2 * 1024 * 1024
"""Longest result or progress text a call hands back, in UTF-8 bytes (head and tail are
kept beyond it). Both hosts cut alike; escaped as JSON it still fits a stdio frame."""


def cut_text(text: str, limit: int = MAX_TEXT) -> str:
    """Return `text`, or its head and tail with a marker if it is longer than `limit`."""
    if len(text) * 4 <= limit:  # cheap: a character is at most 4 bytes of UTF-8
        return text
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    kept = BoundedOutput(limit)
    kept.add(data)
    return kept.text()


@attrs.frozen
class HostStatistics:
    """A snapshot of the host's load."""

    active: int
    running: int
    queued: int
    tombstones: int


class HostCore:
    """Runs calls in its own task group; `execute` and `abort` never block."""

    def __init__(
        self,
        tools: Sequence[Tool],
        *,
        broker: Broker,
        max_concurrent: int = 16,
        tombstone_ttl: float = 60.0,
        clock: Callable[[], float] = anyio.current_time,
    ) -> None:
        self.tools = {t.name: t for t in tools}
        self.broker = broker
        self.calls = CallTable(tombstone_ttl=tombstone_ttl, clock=clock)
        self.admission = Admission(limit=max_concurrent)
        self._tg: anyio.abc.TaskGroup | None = None
        self._idle: anyio.Event | None = None
        """Set when no call is left; made by a wait for it (most calls end unwatched)."""
        self._ended: anyio.Event | None = None
        """Set when a call ends; made by a wait for one."""

    @property
    def workspace(self) -> Path:
        """The directory tools work in."""
        return self.broker.workspace

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Own the calls' task group until cancelled; ready when `started()` is called."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                self._tg = None

    async def wait_idle(self) -> None:
        """Wait until no call is active."""
        while len(self.calls):
            if self._idle is None:
                self._idle = anyio.Event()
            await self._idle.wait()

    def started_writes(self) -> list[HostCall]:
        """Running MUTATING and EXTENSION calls: never cut once started (spec 01)."""
        return [
            call
            for call in self.calls
            if call.phase == "running"
            and call.tool.stop_class.policy.on_stop is OnStop.AWAIT
        ]

    async def wait_started_writes(self) -> None:
        """Wait until every started MUTATING and EXTENSION call has ended."""
        while self.started_writes():
            if self._ended is None:
                self._ended = anyio.Event()
            await self._ended.wait()

    def describe_active(self) -> list[str]:
        """Name each call the host still runs: tool, call id, since when, and its state."""
        out = []
        for call in self.calls:
            since = time.strftime("%H:%M:%S", time.localtime(call.registered_at))
            state = "stopped, still running" if call.stop_requested else call.phase
            out.append(
                f"{call.key.tool} call {call.key.call_id} ({state}, since {since})"
            )
        return out

    def outliving(self) -> dict[str, int]:
        """Stopped calls whose work still runs (a worker that ignores the stop), by tool.

        READ_ONLY calls only: a stop ends them at once, so one still running is a worker
        that ignores it. A PROCESS call still running is in its grace window and a
        started MUTATING or EXTENSION call is being waited for; the report names those
        by what tether is doing with them, never as ignoring the stop.
        """
        counts: dict[str, int] = {}
        for call in self.calls:
            if (
                call.stop_requested
                and call.phase == "running"
                and call.tool.stop_class.policy.on_stop is OnStop.ABANDON
            ):
                counts[call.key.tool] = counts.get(call.key.tool, 0) + 1
        return counts

    def statistics(self) -> HostStatistics:
        """Return the host's current load."""
        return HostStatistics(
            active=len(self.calls),
            running=self.admission.running,
            queued=self.admission.queued,
            tombstones=self.calls.tombstones(),
        )

    def execute(self, request: ExecuteRequest, emit: Emit) -> None:
        """Register a call and start it; every outcome is reported through `emit`."""
        key = request.key
        if not self.calls.claim_id(key):
            err = DuplicateCallId(
                f"call id {key.call_id} was already used in session {key.session_id}"
            )
            emit(_result(key, "", err))
            return
        if self.calls.take_tombstone(key):
            # S7: an abort for exactly this call arrived first; it never runs.
            emit(_aborted(key, "stopped before it reached the host"))
            return
        tool = self.tools.get(key.tool)
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            emit(
                _result(
                    key, "", UnknownTool(f"unknown tool {key.tool!r} (known: {known})")
                )
            )
            return
        try:
            args = tool.validate(request.input)
        except InvalidInput as exc:
            emit(_result(key, "", exc))
            return
        except Exception as exc:  # a plugin's own check failed: that call fails
            emit(_result(key, "", _as_tool_error(exc)))
            return

        def on_progress(text: str) -> None:
            # Reads the call's own fields: a closure over `call` and `emit` alone leaves
            # the rest of `execute`'s names plain locals.
            call.keep_progress(text)
            if (
                call.stop_requested
                and call.tool.stop_class.policy.on_stop is OnStop.ABANDON
            ):
                return  # S4: the runtime takes no progress after the stop; none is sent
            # A PROCESS call's grace window is the tree's: what it prints until the
            # tree is gone is the call's output, in the live view too.
            emit(OutputEvent(call.key, cut_text(text)))

        ctx = ToolContext(
            call_id=key.call_id,
            session_id=key.session_id,
            workspace=self.broker.workspace,
            on_progress=on_progress,
        )
        call = HostCall(key=key, tool=tool, args=args, ctx=ctx)
        # Invariant: registered before permission is evaluated, so a stop finds it.
        self.calls.register(call)
        assert self._tg is not None, "HostCore.serve() is not running"
        # The call's task is what a stop cancels: anyio gives each task its own scope,
        # so the call needs none of its own. `create_task` is `start_soon` given the
        # coroutine itself: it has no callable to name or to call.
        call.task = self._tg.create_task(
            self._run(call, emit), name=f"tool {key.tool} {key.call_id}"
        )

    def kill(self, request: KillRequest) -> AbortAck:
        """Close a stopped call's grace window: end its task and its tree now."""
        call = self.calls.get(request.key)
        if call is None:
            found = self.calls.was_claimed(request.key)
            return AbortAck(found=False, phase="finished" if found else "unknown")
        phase = call.phase
        if phase == "running":
            # The tool's task ends, and with it every process of the tree (SIGKILL to
            # each descendant).
            call.stop_requested = True
            call.ctx.cancelled.set()
            call.cancel()
        return _ack(call, phase)

    def abort(self, request: AbortRequest) -> AbortAck:
        """Apply a typed stop to a call and say what phase it was in."""
        call = self.calls.get(request.key)
        if call is None:
            if self.calls.was_claimed(request.key):
                # It ran and ended before the stop came; its result is already sent.
                return AbortAck(found=False, phase="finished")
            self.calls.bury(request.key)
            return AbortAck(found=False, phase="unknown")
        phase = call.phase
        if call.stop_requested:
            return _ack(call, phase)
        call.stop_requested = True
        if phase in PRE_START_PHASES:
            call.cancel()  # its operation never starts
        elif phase == "running":
            # The class's row of the stop table: a PROCESS call's flag is its SIGTERM
            # (the runtime sends the kill when its grace window closes); an awaited
            # call that is told may still finish cleanly, and its result is awaited.
            policy = call.tool.stop_class.policy
            if policy.tells_tool:
                call.ctx.cancelled.set()
            if policy.on_stop is OnStop.ABANDON:
                call.cancel()
                # The abandoned worker may still be blocked: free its place now.
                self._release(call)
        return _ack(call, phase)

    def _release(self, call: HostCall) -> None:
        """Give back the call's place, if it holds one.

        An abandoned call's place comes back at its stop; its task's end then finds none.
        """
        if call.placed:
            call.placed = False
            self.admission.give_back()

    def _set_phase(self, call: HostCall, phase: HostPhase, emit: Emit) -> None:
        """Move the call to `phase` and tell the runtime."""
        call.phase = phase
        emit(PhaseEvent(call.key, phase, call.tool.stop_class))

    async def _run(self, call: HostCall, emit: Emit) -> None:
        """The call's task: its result is sent once it has released everything.

        A call that is allowed and finds a free place goes straight to its tool; only a
        call that must be asked about or queued waits (`_wait_to_start`).
        """
        key = call.key
        tool = call.tool
        result: ResultEvent | None = None
        in_tool = False
        try:
            if tool.looks_up:
                # S15: what the rules judge is looked up once, and the tool uses it.
                call.args = await tool.look_up(call.args)
            result, ask = self._refusal(call)
            if result is None:
                if ask or not self.admission.take():
                    result = await self._wait_to_start(call, emit, ask=ask)
                else:
                    call.placed = True
            # A stop that landed before this point (even one whose cancellation found no
            # checkpoint: a wait had just been granted) means the operation never starts.
            if result is None and call.stop_requested:
                result = _aborted(key, "stopped before it started")
            if result is None:
                self._set_phase(call, "running", emit)
                in_tool = True
                output = await tool.run(call.ctx, call.args)
                in_tool = False
                if call.stop_requested and tool.stop_class.policy.abandons:
                    result = _aborted(key, "stopped while running", cut_text(output))
                else:
                    if len(output) * 4 > MAX_TEXT:  # `cut_text`'s own first test
                        output = cut_text(output)
                    result = ResultEvent(key, output)
        except Exception as exc:  # the tool's own failure, not a stop
            result = _result(key, "", _as_tool_error(exc))
        except BaseException as exc:
            ours = _is_our_cancellation(exc)
            if in_tool and not ours:
                # S13b: whatever a tool raises (a CancelledError of its own, SystemExit,
                # KeyboardInterrupt) ends that call only, never the host's task group.
                result = _result(key, "", _raised(exc))
            else:
                if call.cancelled and ours:
                    # A stop ended the task; the host closing ends it without a result.
                    if call.phase == "running":
                        partial = cut_text(call.progress_text())
                        result = _aborted(key, "stopped while running", partial)
                    else:
                        result = _aborted(key, "stopped before it started")
                raise
        finally:
            self._release(call)
            self.calls.remove(key)
            call.phase = "finished"
            call.ctx._end()
            # Each waiter made its event and looks again once woken: no event is set
            # for a call nobody waits on.
            if self._ended is not None:
                self._ended.set()
                self._ended = None
            if self._idle is not None and not len(self.calls):
                self._idle.set()
                self._idle = None
            if result is not None:
                emit(result)

    def _refusal(self, call: HostCall) -> tuple[ResultEvent | None, bool]:
        """Return the result of a call that must not start, and whether to ask.

        The result is None when the call may start (it is not stopped nor denied); the
        flag says whether the approver must be asked first.
        """
        key = call.key
        if call.stop_requested:
            # Stopped before this task ran: not even the approver is asked.
            return _aborted(key, "stopped before it started"), False
        try:
            decision = self.broker.decide(call.tool, call.args)
        except ToolError as exc:
            return _result(key, "", exc), False
        if decision == "deny":
            denied = ToolError(
                f"{call.tool.name} is denied by a permission rule",
                code=ErrorCode.PERMISSION_DENIED,
            )
            return _result(key, "", denied), False
        # Written out: each is then one constant, not a tuple built per call.
        return (None, True) if decision == "ask" else (None, False)

    async def _wait_to_start(
        self, call: HostCall, emit: Emit, *, ask: bool
    ) -> ResultEvent | None:
        """Ask the approver and wait for a place; a refusal's result, or None to start.

        A stop during a wait (for the approver, for a place) cancels the call's task.
        """
        if ask:
            self._set_phase(call, "pending_permission", emit)
            try:
                await self.broker.ask(call.key, call.tool, call.args)
            except ToolError as exc:
                return _result(call.key, "", exc)
            except BaseException as exc:
                if _is_our_cancellation(exc):
                    raise
                # The approver's own failure, whatever it raises (a CancelledError of
                # its own included), is no approval: that call does not run, and the
                # host and every other call are unharmed.
                why = f"the approver raised {type(exc).__name__}: {exc}"
                denied = PermissionDenied(f"{call.tool.name} was not approved: {why}")
                return _result(call.key, "", denied)
            call.placed = self.admission.take()
        if not call.placed:
            self._set_phase(call, "queued", emit)
            await self.admission.acquire()
            call.placed = True
        return None


def _is_our_cancellation(exc: BaseException) -> bool:
    """Whether `exc` is a cancellation of one of our scopes, not the tool's own raise.

    A scope around the task that was cancelled (or whose deadline passed) leaves an
    effective deadline in the past; a `CancelledError` a tool raises by itself does not.
    """
    if not isinstance(exc, anyio.get_cancelled_exc_class()):
        return False
    return anyio.current_effective_deadline() <= anyio.current_time()


def _ack(call: HostCall, phase: HostPhase) -> AbortAck:
    # The count is read before the cancellation is delivered: a READ_ONLY call whose
    # processes are being killed ends (its result is sent) only once they are reaped.
    return AbortAck(
        found=True,
        phase=phase,
        processes=call.ctx.processes_running,
        asking=call.ctx.asking,
    )


def _as_tool_error(exc: Exception) -> ToolError:
    if isinstance(exc, ToolError):
        return exc
    return ToolError(f"{type(exc).__name__}: {exc}", code=ErrorCode.TOOL_FAILED)


def _raised(exc: BaseException) -> ToolError:
    return ToolError(
        f"the tool raised {type(exc).__name__}: {exc}", code=ErrorCode.TOOL_FAILED
    )


def _result(key: CallKey, output: str, exc: ToolError) -> ResultEvent:
    path = exc.path if isinstance(exc, InvalidInput) else ""
    unknown = isinstance(exc, ToolFailed) and exc.end_unknown
    return ResultEvent(
        key,
        output,
        code=exc.code,
        message=exc.message,
        field_path=path,
        end_unknown=unknown,
    )


def _aborted(key: CallKey, message: str, partial: str = "") -> ResultEvent:
    return ResultEvent(key, partial, code=ErrorCode.TOOL_ABORTED, message=message)
