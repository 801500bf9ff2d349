"""The MCP server over a Runtime: one session per `tools/call`, a cancel is its abort."""

from __future__ import annotations

import contextlib
import itertools
from typing import TYPE_CHECKING, Any, final

import anyio
import anyio.abc
import attrs

from ..errors import ToolAborted, ToolError
from ..host._tool import StopClass
from ..runtime import Runtime, Session, ToolProgress, ToolResult, tool_result_text
from ..runtime._values import StopRequest
from ..stop import ReadOutcome, StopWatch, stop_reason
from ._elicit import ElicitRelay
from ._stdio import ReadStream, message_streams

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    import mcp_types as types
    from mcp.server.context import ServerRequestContext

    from ..host._protocol import AbortSource
    from ..host._tool import Tool
    from ..runtime import CallRecord

__all__ = (
    "McpServe",
    "ServedCall",
    "freeze_heap",
    "mcp_server",
    "serve_stdio",
    "tool_annotations",
)

SERVER_NAME = "tether"


def tool_annotations(stop_class: StopClass) -> tuple[bool, bool]:
    """`(readOnlyHint, destructiveHint)` of a stop class: only READ_ONLY has no effect.

    A PROCESS, MUTATING or EXTENSION call may change anything its tree or its server
    reaches, so it is not read-only and may be destructive (MCP's own default).
    """
    read_only = stop_class is StopClass.READ_ONLY
    return read_only, not read_only


@attrs.define
class _Cancelled:
    """A call whose request the client cancelled: told in the next call's result."""

    request_id: object
    title: str
    session: Session
    done: anyio.Event
    """Set once the call's task has its outcome (or none, if it never ran)."""
    box: list[ToolResult | ToolError]
    """The call's outcome, once `done`."""
    aborted: anyio.Event = attrs.Factory(anyio.Event)
    """Set once `Session.abort()` for the cancel has returned."""
    told_running: bool = False


@attrs.define(eq=False)
class ServedCall:
    """One call the server started: its session and, once `done`, its outcome."""

    name: str
    arguments: dict[str, Any]
    session: Session
    refusal: str | None
    """Why the call was not started (the person's stop), or None."""
    done: anyio.Event = attrs.Factory(anyio.Event)
    """Set once the call's task has its outcome (or none, if it never ran)."""
    box: list[ToolResult | ToolError] = attrs.Factory(list)
    """The call's outcome, once `done`."""
    cancelled: list[bool] = attrs.Factory(list)
    """Not empty once the request was cancelled: a task not yet run starts nothing."""


@final
class McpServe:
    """Serves a runtime's tools to one MCP client; each call a tether call.

    `watch` reads the person's recorded stop before each call (None: no stop store, and
    `hold` says why every call is refused, or nothing is read when `hold` is None too).
    Over stdio one serves the one client; over HTTP one serves each MCP session, and
    one more every stateless (2026-07-28) request.
    """

    def __init__(
        self,
        runtime: Runtime,
        task_group: anyio.abc.TaskGroup,
        *,
        watch: StopWatch | None = None,
        hold: str | None = None,
        tell_next: bool = True,
        stream_cancels: bool = False,
    ) -> None:
        self.runtime = runtime
        self.task_group = task_group
        self.watch = watch
        self.hold = hold
        self.cancelled: list[_Cancelled] = []
        self.progress_to: dict[str, Callable[[str], Awaitable[None]]] = {}
        """Where each session's progress goes: the client asked for it (a progress
        token) for the request the session runs."""
        self.pump = anyio.CancelScope()
        """The scope of the progress pump, started by the first call that wants
        progress (a subscriber makes every call's progress an event: a cost)."""
        self._pumping = False
        self.peer_cancelled: set[object] = set()
        """Request ids the client sent `notifications/cancelled` for (a handler cancelled
        otherwise was cancelled because the client left)."""
        self.tell_next = tell_next
        """A cancelled call's end is told in the result of the client's next call
        (False: the client has no next call here, a stateless request)."""
        self.stream_cancels = stream_cancels
        """Closing a request's stream is its cancel (the 2026-07-28 HTTP wire)."""
        self.closing = False
        """Set when the server closes: a call cancelled then is stopped as a
        shutdown."""
        self.closing_reason = "the MCP server is closing"
        """The ledger's reason for a call stopped because the server closes."""

    def list_tools(self) -> list[types.Tool]:
        """The runtime's tools as MCP tools, with the hints of their stop classes."""
        import mcp_types as types

        return [
            types.Tool(
                name=tool.name,
                description=tool.description or None,
                input_schema=tool.input_schema(),
                annotations=types.ToolAnnotations(
                    read_only_hint=hints[0], destructive_hint=hints[1]
                ),
            )
            for tool in self.runtime.tools
            for hints in [tool_annotations(tool.stop_class)]
        ]

    def stop_refusal(self) -> str | None:
        """Why no call may start now, or None.

        The person's stop (with its reason), or a stop that cannot be read.
        """
        if self.watch is None:
            return None if self.hold is None else self._held(self.hold)
        reading = self.watch.read()
        if reading.outcome is ReadOutcome.CLEAR:
            return None
        if reading.outcome is ReadOutcome.STOPPED:
            why = stop_reason(reading)
            reason = f" (reason: {why})" if why else ""
            return (
                f"tether: the person set a stop{reason}, so this call was not started. "
                "Start no other tool call and do not retry; the person lifts the stop "
                "with `tether lift` when they choose."
            )
        return self._held(reading.reason or "the stop could not be read")

    @staticmethod
    def _held(why: str) -> str:
        return (
            f"tether: the stop cannot be read ({why}), so this call was not started; "
            "`tether status` says what to fix."
        )

    async def cancelled_lines(self) -> list[str]:
        """What really happened to each cancelled call not told yet.

        A cancel being handled is waited for (its abort, bounded by the abort bound),
        so a call that the cancel ended is told as ended. A call that has ended is told
        once and dropped; one still running is said to run (once), and told again when
        it ends.
        """
        lines: list[str] = []
        keep: list[_Cancelled] = []
        bound = self.runtime.abort_bound
        for entry in list(self.cancelled):
            head = f"tether: request {entry.request_id} ({entry.title}), cancelled by the client,"
            # Each wait only when there is one: a wait for a set event is still a
            # turn of the event loop, on the path of the answer.
            if not entry.aborted.is_set():
                with anyio.move_on_after(bound):
                    await entry.aborted.wait()
            records = entry.session.ledger_calls()
            record = records[-1] if records else None
            if record is not None and record.settled and not entry.done.is_set():
                with anyio.move_on_after(bound):
                    await entry.done.wait()  # the call's task takes its outcome
            if not entry.done.is_set() and not (record is None or record.settled):
                keep.append(entry)
                if not entry.told_running:
                    entry.told_running = True
                    why = "; ".join(p.why for p in entry.session.pending())
                    lines.append(f"{head} is still running: {why or 'ending now'}.")
                continue
            outcome = entry.box[0] if entry.box else None
            if record is None:
                said = "it did not start (the cancel came first)."
            elif isinstance(outcome, ToolAborted) or outcome is None:
                said = tool_result_text(record, outcome)
            elif isinstance(outcome, ToolResult):
                said = "it ran to its end anyway: " + tool_result_text(record, outcome)
            else:
                said = f"it failed: {outcome.code}: {outcome}"
            lines.append(f"{head} ended: {said}")
        told = {id(e) for e in self.cancelled} - {id(e) for e in keep}
        self.cancelled = [e for e in self.cancelled if id(e) not in told]
        return lines

    async def pump_progress(self) -> None:
        """Send each call's progress to its client, while the call is the client's.

        The executor drops the progress of an abandoned call (S4); a call whose request
        was cancelled is no longer the client's, so its progress goes nowhere.
        """
        with self.pump:
            async for event in self.runtime.subscribe():
                if not isinstance(event, ToolProgress):
                    continue
                send = self.progress_to.get(event.session_id)
                if send is not None:
                    with contextlib.suppress(Exception):  # the client left
                        await send(event.text)

    def start_call(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        progress: Callable[[str], Awaitable[None]] | None = None,
        *,
        context: ServerRequestContext[Any, Any] | None = None,
    ) -> ServedCall:
        """Start one call in a session of its own, in the server's task group.

        Under the person's stop (or a stop that cannot be read) the call starts nothing
        and the ledger keeps it as never started, with the refusal as its reason.
        `context`: the client's request, which a fronted server's question is relayed
        to while the call runs (`ElicitRelay`), when the runtime's elicitor relays.
        """
        session = self.runtime.session()
        call = ServedCall(name, arguments or {}, session, self.stop_refusal())
        relay = self.runtime.elicitor
        unrelay = (
            relay.register(session.id, context)
            if context is not None and isinstance(relay, ElicitRelay)
            else None
        )

        async def run() -> None:
            try:
                if call.cancelled:  # the cancel came before this task ran
                    return
                async with session.turn() as turn:
                    if call.refusal is not None:
                        turn.refuse_new_calls(
                            StopRequest(
                                source="halt",
                                reason=call.refusal,
                                at=anyio.current_time(),
                            )
                        )
                    try:
                        call.box.append(await turn.call(name, call.arguments))
                    except ToolError as exc:
                        call.box.append(exc)
            finally:
                if unrelay is not None:
                    unrelay()
                call.done.set()
                # One session per call: it leaves the runtime once it has settled.
                self.runtime.end_session(session)

        if progress is not None:
            self.progress_to[session.id] = progress
            if not self._pumping:
                self._pumping = True
                self.task_group.start_soon(self.pump_progress)
        self.task_group.start_soon(run)
        return call

    def answer(
        self, call: ServedCall, records: list[CallRecord] | None = None
    ) -> tuple[str, bool]:
        """The text of an ended call's result and whether it is an error.

        `records`: the call's session's ledger, when the caller has read it already.
        """
        outcome = call.box[0] if call.box else None
        if records is None:
            records = call.session.ledger_calls()
        if call.refusal is not None:
            return call.refusal, True
        if isinstance(outcome, ToolResult):
            text = outcome.output
            if outcome.is_error and outcome.code is not None:
                text = f"{outcome.code}: {text}"
            return text, outcome.is_error
        if isinstance(outcome, ToolAborted) or outcome is None:
            return tool_result_text(records[-1] if records else None, outcome), True
        return f"{outcome.code}: {outcome}", True

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        request_id: object,
        progress: Callable[[str], Awaitable[None]] | None = None,
        *,
        context: ServerRequestContext[Any, Any] | None = None,
    ) -> tuple[str, bool]:
        """Run one call and return its text and whether it is an error.

        Cancelled from outside (the client's cancel): the call's session is aborted;
        the truth is kept for the next call's result, and the cancellation goes on.
        `context`: as `start_call` takes it.
        """
        notes = await self.cancelled_lines() if self.tell_next else []
        call = self.start_call(name, arguments, progress, context=context)
        session = call.session
        try:
            await call.done.wait()
        except anyio.get_cancelled_exc_class():
            self.progress_to.pop(session.id, None)
            call.cancelled.append(True)
            with anyio.CancelScope(shield=True):
                entry = _Cancelled(
                    request_id,
                    self.runtime.call_title(name, call.arguments),
                    session,
                    call.done,
                    call.box,
                )
                if self.tell_next:
                    self.cancelled.append(entry)
                source, reason = self.cancel_source(request_id)
                try:
                    await session.abort(source=source, reason=reason)
                finally:
                    entry.aborted.set()
            raise
        self.progress_to.pop(session.id, None)
        self.peer_cancelled.discard(request_id)  # a cancel that crossed the answer
        text, error = self.answer(call)
        return "\n".join([*notes, text]), error

    def cancel_source(self, request_id: object) -> tuple[AbortSource, str]:
        """Who stopped a call whose request was cancelled, and why, for its abort.

        The client's `notifications/cancelled` (noted by request id), or on a wire
        where closing a request's stream is its cancel, that close while the server
        is not closing; otherwise the client left (or the server is closing).
        """
        if request_id in self.peer_cancelled:
            self.peer_cancelled.discard(request_id)
            return "user", f"the MCP client cancelled request {request_id}"
        if self.stream_cancels and not self.closing:
            return (
                "user",
                f"the MCP client cancelled request {request_id} (closed its stream)",
            )
        if self.closing:
            return "shutdown", self.closing_reason
        return "shutdown", "the MCP client left"


def mcp_server(
    serve_for: Callable[[ServerRequestContext[Any, Any]], McpServe],
    *,
    on_call_tool: Callable[..., Awaitable[Any]] | None = None,
    tools: Sequence[Tool] = (),
) -> Any:
    """The SDK's low-level `Server` whose handlers run calls on `serve_for(ctx)`.

    `on_call_tool` (ctx, params, serve) answers `tools/call` in place of the plain
    answer when it returns something other than None (the tasks extension). `tools`:
    the tools served, whose input schemas the SDK checks a 2026-07-28 call's headers
    against (without them it lists every tool for each call).
    """
    schemas = {tool.name: tool.input_schema() for tool in tools}
    import mcp_types as types
    from mcp.server.lowlevel import Server

    async def on_list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=serve_for(ctx).list_tools())

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> Any:
        serve = serve_for(ctx)
        if on_call_tool is not None:
            answer = await on_call_tool(ctx, params, serve)
            if answer is not None:
                return answer
        token = (ctx.meta or {}).get("progress_token")
        progress = None
        if token is not None:
            steps = itertools.count(1)

            async def progress(text: str) -> None:
                await ctx.session.send_progress_notification(
                    token,
                    next(steps),
                    message=text,
                    related_request_id=str(ctx.request_id),
                )

        text, error = await serve.call_tool(
            params.name, params.arguments, ctx.request_id, progress, context=ctx
        )
        # The wire's shape as a plain dict (what `CallToolResult` dumps to): the SDK
        # checks it against the protocol's result model once on the way out, and a
        # model built here would be checked and dumped first, on every answer's path.
        return {
            "content": [{"type": "text", "text": text}],
            "isError": error,
            "resultType": "complete",
        }

    server = Server(
        SERVER_NAME,
        instructions=(
            "tether's tools: each call runs under the person's permission rules, "
            "guard and stop; a cancelled call's real end is told in the next result."
        ),
        on_list_tools=on_list_tools,
        on_call_tool=call_tool,
        get_tool_input_schema=schemas.get if tools else None,
    )
    if not _tracing():
        # No tracer provider: the SDK's span for each message (its documented
        # opt-out is to drop it from this list) would go nowhere, and it sits on the
        # path of every cancel and answer.
        server.middleware = [
            m
            for m in server.middleware
            if type(m).__name__ != "OpenTelemetryMiddleware"
        ]
    return server


def _tracing() -> bool:
    """Whether an OpenTelemetry tracer provider is set (spans are recorded)."""
    try:
        from opentelemetry import trace
    except ImportError:  # an SDK without tracing
        return False
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def freeze_heap(*, http: bool) -> None:
    """Load what serving needs, then keep what is loaded out of the collector's walks.

    For a process that only serves (`tether mcp serve`): the modules, the tools and the
    SDK's models live as long as the process, and a full collection walks them all,
    a pause of a tenth to two thirds of a second on a loaded machine that a cancel's
    answer would wait behind. After `gc.freeze()` collections walk only what the
    server made since (nothing loaded is freed: at this point a collection finds
    almost nothing to free).
    """
    import gc

    import mcp.server.lowlevel

    if http:
        import mcp.server.streamable_http_manager
    else:
        import mcp.server.stdio  # noqa: F401
    gc.freeze()


async def serve_stdio(
    runtime: Runtime, *, watch: StopWatch | None = None, hold: str | None = None
) -> None:
    """Serve `runtime`'s tools over MCP on stdin/stdout until the client leaves.

    SIGINT and SIGTERM (a client such as Claude Code signals its servers when it is
    interrupted) stop every running call as a shutdown; the server exits once they have
    settled.
    """
    import signal

    left = "the MCP client left"
    # The receiver stays open until every call has settled and the runtime has
    # closed: the signals a client sends after the first (Claude Code sends SIGINT,
    # then SIGTERM) do not cut a grace window or a write short.
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with runtime, anyio.create_task_group() as tg:
            serve = McpServe(runtime, tg, watch=watch, hold=hold)
            server = mcp_server(lambda ctx: serve)

            async def stop_on_signal(serving: anyio.CancelScope) -> None:
                async for signum in signals:
                    serve.closing = True
                    serve.closing_reason = (
                        f"the MCP server got {signal.Signals(signum).name}"
                    )
                    serving.cancel()
                    return

            async with anyio.create_task_group() as serving:
                serving.start_soon(stop_on_signal, serving.cancel_scope)
                async with message_streams() as (read, write):
                    await server.run(
                        _NotingReader(read, serve.peer_cancelled),
                        write,
                        server.create_initialization_options(),
                    )
                serving.cancel_scope.cancel()
            if serve.closing:
                left = serve.closing_reason
            # The client left (or signalled): what still runs is stopped as a stop
            # would (a process gets its grace window, a started write runs to its
            # end), then the runtime closes.
            for session in list(runtime.sessions):
                if session.unsettled_turns():
                    await session.abort(source="shutdown", reason=left)
            serve.pump.cancel()


class _NotingReader(ReadStream):
    """The server's read stream, noting the request ids of `notifications/cancelled`.

    The SDK cancels a handler both for the client's cancel and when the client leaves;
    the note tells the two apart, so the ledger says which.
    """

    def __init__(self, inner: Any, noted: set[object]) -> None:
        self._inner = inner
        self._noted = noted

    def _note(self, item: Any) -> Any:
        message = getattr(item, "message", None)
        message = getattr(message, "root", message)
        if getattr(message, "method", None) == "notifications/cancelled":
            params = getattr(message, "params", None)
            if isinstance(params, dict):
                self._noted.add(params.get("requestId"))
        return item

    async def receive(self) -> Any:
        return self._note(await self._inner.receive())

    async def aclose(self) -> None:
        await self._inner.aclose()
