"""The agent loop: model step, tool calls in parallel, results back, until the turn ends.

```python
from tether import Agent, Runtime
from tether.models import model_from_spec

async with Runtime(workspace=".") as runtime:
    agent = Agent(runtime, model_from_spec("scripted:moves.jsonl"))
    session = agent.session(on_event=render)     # async (AgentEvent) -> None
    ended = await session.prompt("tidy the README")   # TurnEnded(stop_reason=...)
    # from another task, while a turn runs:
    report = await session.abort()               # AbortReport, within the abort bound
```

`prompt()` runs one turn: it asks the model (streamed), runs every tool call of one
assistant message in parallel through `turn.call`, gives the results back and asks again,
until the model answers without tool calls (`end_turn`), a stop (`cancelled`), or
`max_turn_requests` model requests. It returns once the turn has settled and every event
of it was delivered (the last is `TurnEnded`). `abort()` stops the turn wherever it is:
during a model request the stream is closed at once and the text so far is kept in the
transcript, marked `cut` (S11); between moves nothing more starts (S10); tool calls
stop by their class (spec 01). Stops are level-triggered: the loop re-checks before
every move.

A run's stop is gentler (`prompt(text, halt=event)`, spec 03 "The stop inside an
agent"): it is read before every model request and before every tool call starts; once
it is set nothing new starts, the calls in flight run to their real end, and the turn
ends `halted`. A model request in flight gets `halt_wait` seconds, then it is closed
as a stop closes it.

The truth carries into the next request: every tool call the model asked for gets
exactly one result message: its real output, its error, `stopped before it started`,
or `stopped while running` with the output so far. A transcript whose turn was cut off
by a crash gets its missing results from the ledger's final state of each call.

Permission prompts go through the runtime's approver (`Runtime(approver=...)`); its
`PermissionRequest.session_id` names the agent session.

Transcripts live in the runtime's ledger (with a SQLite ledger they outlast the
process); `Agent.resume(session_id)` continues one. The loop does not know any wire
format: models convert messages at their own boundary, the ACP server and the terminal
render the events.
"""

from __future__ import annotations

import datetime
import math
from typing import TYPE_CHECKING, final

import anyio

from .._ids import new_id
from ..errors import ErrorCode, ToolAborted, UsageError
from ..models import (
    Message,
    Model,
    ModelError,
    ModelRequest,
    StepDone,
    TextDelta,
    ToolCall,
    ToolSpec,
)
from ._agent_events import (
    AgentEvent,
    EventCallback,
    MessageChunk,
    ModelWaiting,
    StopReason,
    ToolCallEnded,
    ToolCallProgress,
    ToolCallRequested,
    ToolCallStarted,
    TurnEnded,
)
from ._ledger import CallRecord, CallState
from ._session import Session, Turn
from ._values import (
    AbortReport,
    CallChanged,
    PendingCall,
    RuntimeEvent,
    StopRequest,
    ToolProgress,
    ToolResult,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

    from ..host import AbortSource
    from ._runtime import Runtime

__all__ = (
    "HALT_REASON",
    "Agent",
    "AgentSession",
    "default_system",
    "tool_result_text",
)

HALT_REASON = "the person stopped the run"
"""The reason recorded on calls a run's stop kept from starting."""


def default_system(workspace: Path | str, *, today: datetime.date | None = None) -> str:
    """The system message of a session given none: its workspace and today's date."""
    day = today or datetime.date.today()
    return (
        f"You work in the directory {workspace}: the tools' relative paths start"
        f" there. Today is {day:%A}, {day.isoformat()}."
    )


@final
class Agent:
    """A model and a runtime, making agent sessions.

    `system` is the system message of every request; `max_turn_requests` bounds the
    model requests of one turn.
    """

    def __init__(
        self,
        runtime: Runtime,
        model: Model,
        *,
        system: str | None = None,
        max_turn_requests: int = 50,
    ) -> None:
        if max_turn_requests < 1:
            raise UsageError("max_turn_requests must be at least 1")
        self.runtime = runtime
        self.model = model
        self.system = system
        self.max_turn_requests = max_turn_requests
        self._specs: tuple[int, tuple[ToolSpec, ...]] | None = None

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """The runtime's tools as the model is told about them (built once per set)."""
        tools = self.runtime.tools
        if self._specs is None or self._specs[0] != len(tools):
            specs = tuple(
                ToolSpec(
                    name=t.name, description=t.description, parameters=t.input_schema()
                )
                for t in tools
            )
            self._specs = (len(tools), specs)
        return self._specs[1]

    def session(self, *, on_event: EventCallback | None = None) -> AgentSession:
        """Start a session with a fresh id."""
        return AgentSession(self, self.runtime.session(), on_event)

    def resume(
        self, session_id: str, *, on_event: EventCallback | None = None
    ) -> AgentSession:
        """Continue a session the runtime's ledger keeps.

        Its transcript is read back; a session never prompted has only its record.

        Raises:
            UsageError: the ledger knows no such session.
        """
        runtime = self.runtime
        # Read as it is held: a delete after this is refused while the runtime is open.
        saved = runtime.ledger.claim_session(session_id)
        if any(s.id == session_id for s in runtime.sessions):
            raise UsageError(f"session {session_id} is already open")
        if runtime.host is None:
            raise UsageError("use the Runtime inside `async with`")
        session = Session(runtime.executor, session_id)
        runtime.sessions.append(session)
        agent_session = AgentSession(self, session, on_event)
        agent_session.messages = [Message.from_json(m) for m in saved]
        return agent_session


@final
class AgentSession:
    """One conversation with the model: turns one after another, each stoppable."""

    def __init__(
        self, agent: Agent, session: Session, on_event: EventCallback | None
    ) -> None:
        self.agent = agent
        self.session = session
        self.on_event = on_event
        self.messages: list[Message] = []
        """The transcript (without the system message), in order."""
        self._model_scope: anyio.CancelScope | None = None
        self._stop: tuple[AbortSource, str | None] | None = None
        self._running = False
        self._send: MemoryObjectSendStream[AgentEvent] | None = None
        self._turn_id = ""
        # Per tool call of the running turn: its final CallChanged was forwarded.
        self.rate_limits: Mapping[str, str] = {}
        """The rate-limit headers of the latest model answer (for pacing unattended work)."""
        self._tokens = [0, 0]
        self._calls = 0
        self._halt: anyio.Event | None = None
        self._final_seen: dict[str, anyio.Event] = {}
        self._started: set[str] = set()

    @property
    def id(self) -> str:
        """The session id (the runtime's session; the ledger's key)."""
        return self.session.id

    @property
    def running(self) -> bool:
        """Whether a turn is running."""
        return self._running

    def request_messages(self) -> tuple[Message, ...]:
        """What the next model request carries: the system message and the transcript.

        Every tool call has a result: from the ledger where the transcript lacks one.
        """
        head = (
            (Message(role="system", content=self.agent.system),)
            if self.agent.system
            else ()
        )
        return head + tuple(_with_every_result(self.messages, self._lookup))

    def _lookup(self, call: ToolCall) -> CallRecord | None:
        if not call.call_id:
            return None
        return self.agent.runtime.ledger.find(self.id, call.call_id)

    async def abort(
        self,
        *,
        source: AbortSource = "user",
        reason: str | None = None,
        kill: bool = False,
    ) -> AbortReport:
        """Stop the running turn and report the truth, within the abort bound.

        A model request in flight is closed at once (S11); tool calls stop by their
        class (`Session.abort()`; `kill=True` kills process trees without their grace
        window). Harmless when no turn runs.
        """
        if self._stop is None:
            self._stop = (source, reason)
        self._cancel_model()
        report = await self.session.abort(source=source, reason=reason, kill=kill)
        self._cancel_model()
        return report

    def pending(self) -> tuple[PendingCall, ...]:
        """Each call still running after a stop, and why, as of now."""
        return self.session.pending()

    def _cancel_model(self) -> None:
        if self._model_scope is not None:
            self._model_scope.cancel()

    async def prompt(
        self,
        text: str,
        *,
        halt: anyio.Event | None = None,
        halt_wait: float = 10.0,
    ) -> TurnEnded:
        """Run one turn for the user's text; return once it has settled.

        `halt` is a run's stop: read before every model request and before every tool
        call starts. Once it is set no request and no call starts; the calls in flight
        run to their real end; a call the model asked for that did not start gets a
        result saying the person stopped the run; the turn ends `halted`. A model
        request in flight when it is set is closed after `halt_wait` seconds (S11).

        Raises:
            UsageError: a turn is already running in this session.
        """
        if self._running:
            raise UsageError("a turn is running in this session; stop it or wait")
        self._running = True
        self._stop = None
        self._halt = halt
        runtime = self.agent.runtime
        send, receive = anyio.create_memory_object_stream[AgentEvent](math.inf)
        runtime_events = runtime.subscribe()
        try:
            async with anyio.create_task_group() as delivery:
                delivery.start_soon(self._deliver, receive)
                with send, runtime_events:
                    self._send = send
                    async with anyio.create_task_group() as forwarding:
                        forwarding.start_soon(self._forward, runtime_events)
                        if halt is not None:
                            forwarding.start_soon(
                                self._close_model_after_halt, halt, halt_wait
                            )
                        try:
                            ended = await self._turn(text)
                        finally:
                            forwarding.cancel_scope.cancel()
                    send.send_nowait(ended)
            return ended
        finally:
            self._send = None
            self._running = False
            self._halt = None
            self._final_seen.clear()
            self._started.clear()

    async def _turn(self, text: str) -> TurnEnded:
        async with self.session.turn() as turn:
            self._turn_id = turn.id
            self._append(Message(role="user", content=text))
            ended = await self._steps(turn)
        # The turn is closed: it settles once every call has (a write that outlived the
        # stop included). Callers were already given each call's result.
        await turn.settled.wait()
        return ended

    async def _steps(self, turn: Turn) -> TurnEnded:
        agent = self.agent
        last_text = ""
        requests = 0

        self._tokens = [0, 0]
        self._calls = 0

        def end(reason: StopReason, error: str | None = None) -> TurnEnded:
            return TurnEnded(
                session_id=self.id,
                turn_id=turn.id,
                stop_reason=reason,
                text=last_text,
                error=error,
                requests=requests,
                calls=self._calls,
                prompt_tokens=self._tokens[0],
                completion_tokens=self._tokens[1],
            )

        while True:
            if await self._stopped(turn):  # S10
                return end(_stop_reason(turn))
            if requests >= agent.max_turn_requests:
                return end("max_turn_requests")
            requests += 1
            # Invariant: no await between the stop's reading in `_stopped` and the
            # request's start, so a request never starts after the stop was set.
            try:
                message, done = await self._ask_model(turn)
            except ModelError as exc:
                return end("error", str(exc))
            if message is not None:
                last_text = message.content
            if done is None:
                self._halted(turn)
                return end(_stop_reason(turn))
            if done.finish_reason == "content_filter":
                return end("refusal")
            assert message is not None
            if not message.tool_calls:
                return end("end_turn")
            await self._run_calls(turn, message.tool_calls)

    async def _stopped(self, turn: Turn) -> bool:
        if self._stop is not None and not turn.stopped:
            # abort() came before this turn was open: stop it now.
            source, reason = self._stop
            await self.session.abort(source=source, reason=reason)
        self._halted(turn)
        return turn.stopped

    def _halted(self, turn: Turn) -> bool:
        """Read the run's stop; once set, the turn starts no call (never awaits)."""
        halt = self._halt
        if halt is None or not halt.is_set():
            return False
        turn.refuse_new_calls(
            StopRequest(source="halt", reason=HALT_REASON, at=anyio.current_time())
        )
        return True

    async def _close_model_after_halt(self, halt: anyio.Event, wait: float) -> None:
        # Spec 05: stop -> halted within the call in flight + `stop_wait`; a model
        # request is not a tool call, so it is the one thing a halt may close. No
        # request starts after the halt, so this closes only the one in flight.
        await halt.wait()
        await anyio.sleep(wait)
        self._cancel_model()

    async def _ask_model(self, turn: Turn) -> tuple[Message | None, StepDone | None]:
        """One streamed model step: the assistant message (cut if stopped) and its end."""
        attempt = 1

        def retrying(reason: str) -> None:
            nonlocal attempt
            attempt += 1
            self._emit(
                ModelWaiting(
                    session_id=self.id, turn_id=turn.id, attempt=attempt, reason=reason
                )
            )

        request = ModelRequest(
            messages=self.request_messages(),
            tools=self.agent.tool_specs(),
            on_retry=retrying,
        )
        self._emit(ModelWaiting(session_id=self.id, turn_id=turn.id))
        pieces: list[str] = []
        done: StepDone | None = None
        with anyio.CancelScope() as scope:
            self._model_scope = scope
            try:
                async with self.agent.model.stream(request) as stream:
                    async for event in stream:
                        match event:
                            case TextDelta(text=piece):
                                pieces.append(piece)
                                self._emit(
                                    MessageChunk(
                                        session_id=self.id, turn_id=turn.id, text=piece
                                    )
                                )
                            case StepDone():
                                done = event
                            case _:
                                pass
                if done is None and not scope.cancel_called:
                    raise ModelError(
                        f"the answer of {self.agent.model.name} ended before it was"
                        " complete; ask again"
                    )
            except ModelError:
                # The endpoint failed mid-answer: keep what it said, marked as cut.
                if pieces:
                    self._append(
                        Message(role="assistant", content="".join(pieces), cut=True)
                    )
                raise
            finally:
                self._model_scope = None
        if done is None:
            # S11: the stream was closed by a stop; keep what arrived, marked as cut.
            text = "".join(pieces)
            if not text:
                return None, None
            cut = Message(role="assistant", content=text, cut=True)
            self._append(cut)
            return cut, None
        if done.usage is not None:
            self._tokens[0] += done.usage.prompt_tokens
            self._tokens[1] += done.usage.completion_tokens
        if done.rate_limits:
            self.rate_limits = dict(done.rate_limits)
        message = done.message
        message = Message(
            role="assistant",
            content=message.content,
            tool_calls=tuple(
                ToolCall(
                    id=c.id, name=c.name, arguments=c.arguments, call_id=new_id("call")
                )
                for c in message.tool_calls
            ),
        )
        self._append(message)
        return message, done

    async def _run_calls(self, turn: Turn, calls: tuple[ToolCall, ...]) -> None:
        results: list[Message | None] = [None] * len(calls)

        async def run(index: int, call: ToolCall) -> None:
            results[index] = await self._run_call(turn, call)

        async with anyio.create_task_group() as tg:
            for index, call in enumerate(calls):
                tg.start_soon(run, index, call)
        for result in results:
            assert result is not None
            self._append(result)

    async def _run_call(self, turn: Turn, call: ToolCall) -> Message:
        """Run one call through `turn.call` and return the result message for the model."""
        runtime = self.agent.runtime
        try:
            args = call.input()
        except ValueError as exc:
            args = None
            invalid = f"{ErrorCode.INVALID_INPUT}: the arguments are not a JSON object ({exc})"
        self._final_seen[call.call_id] = anyio.Event()
        self._emit(
            ToolCallRequested(
                session_id=self.id,
                turn_id=turn.id,
                call_id=call.call_id,
                model_call_id=call.id,
                tool=call.name,
                input=args or {},
                stop_class=runtime.stop_class_of(call.name),
                title=runtime.call_title(call.name, args or {}),
            )
        )
        if args is None:
            self._ended(
                turn, call, CallState.FAILED, ErrorCode.INVALID_INPUT, "", invalid
            )
            return _tool_message(call, invalid)
        outcome: ToolResult | ToolAborted
        # Spec 03: the run's stop is read before each call starts; `turn.call` then
        # refuses it without awaiting first.
        self._halted(turn)
        try:
            outcome = await turn.call(call.name, args, call_id=call.call_id)
        except ToolAborted as exc:
            outcome = exc
        if call.call_id not in turn.refused:  # it was sent
            # Every progress event of the call is delivered before it ends.
            await self._final_seen[call.call_id].wait()
        record = runtime.ledger.get(self.id, call.call_id)
        if record.started_at is not None:
            self._calls += 1
        content = tool_result_text(record, outcome)
        if isinstance(outcome, ToolAborted):
            self._ended(
                turn, call, record.state, record.code, outcome.partial_output, content
            )
        else:
            self._ended(turn, call, record.state, outcome.code, outcome.output, content)
        return _tool_message(call, content)

    def _ended(
        self,
        turn: Turn,
        call: ToolCall,
        state: CallState,
        code: ErrorCode | None,
        output: str,
        content: str,
    ) -> None:
        self._emit(
            ToolCallEnded(
                session_id=self.id,
                turn_id=turn.id,
                call_id=call.call_id,
                tool=call.name,
                state=state,
                code=code,
                output=output,
                content=content,
            )
        )

    def _append(self, message: Message) -> None:
        self.messages.append(message)
        self.agent.runtime.ledger.add_message(self.id, self._turn_id, message.to_json())

    def _emit(self, event: AgentEvent) -> None:
        assert self._send is not None
        self._send.send_nowait(event)

    async def _deliver(self, receive: MemoryObjectReceiveStream[AgentEvent]) -> None:
        async with receive:
            async for event in receive:
                if self.on_event is not None:
                    await self.on_event(event)

    async def _forward(self, events: MemoryObjectReceiveStream[RuntimeEvent]) -> None:
        """Turn the runtime's events of this session's calls into agent events."""
        try:
            await self._forward_each(events)
        finally:
            # The runtime closed its events (it is shutting down): no call may wait for
            # an end that will not be forwarded.
            for seen in self._final_seen.values():
                seen.set()

    async def _forward_each(
        self, events: MemoryObjectReceiveStream[RuntimeEvent]
    ) -> None:
        async for event in events:
            match event:
                case ToolProgress(session_id=sid, call_id=cid) if sid == self.id:
                    seen = self._final_seen.get(cid)
                    if seen is not None and not seen.is_set():
                        self._emit(
                            ToolCallProgress(
                                session_id=sid,
                                turn_id=self._turn_id,
                                call_id=cid,
                                tool=event.tool,
                                text=event.text,
                            )
                        )
                case CallChanged(session_id=sid, call_id=cid, state=state) if (
                    sid == self.id
                ):
                    seen = self._final_seen.get(cid)
                    if seen is None or seen.is_set():
                        continue
                    if state is CallState.RUNNING and cid not in self._started:
                        self._started.add(cid)
                        self._emit(
                            ToolCallStarted(
                                session_id=sid,
                                turn_id=self._turn_id,
                                call_id=cid,
                                tool=event.tool,
                            )
                        )
                    elif state.is_final:
                        seen.set()
                case _:
                    pass


def _tool_message(call: ToolCall, content: str) -> Message:
    return Message(role="tool", content=content, tool_call_id=call.id)


def _stop_reason(turn: Turn) -> StopReason:
    stop = turn.stop
    return "halted" if stop is not None and stop.source == "halt" else "cancelled"


def _stopper(record: CallRecord) -> str:
    if record.abort_source in (None, "user"):
        return "the user stopped the turn"
    if record.abort_source == "halt":
        return HALT_REASON
    return f"the turn was stopped ({record.abort_source})"


def tool_result_text(
    record: CallRecord | None, outcome: ToolResult | ToolAborted | None
) -> str:
    """What the model is told about one tool call, from its ledger record and outcome.

    With no outcome (the process ended before the result was kept), the ledger's final
    state alone decides; nothing is guessed.
    """
    if isinstance(outcome, ToolResult):
        if outcome.is_error:
            return f"{outcome.code}: {outcome.output}"
        return outcome.output
    if record is None:
        return (
            f"{ErrorCode.TOOL_ABORTED}: stopped before it started; it did not run"
            " (the session ended first)."
        )
    if isinstance(outcome, ToolAborted) or record.state is CallState.ABORTED:
        if record.started_at is None:
            return (
                f"{ErrorCode.TOOL_ABORTED}: stopped before it started; it did not run"
                f" ({_stopper(record)})."
            )
        partial = outcome.partial_output if outcome is not None else None
        text = (
            f"{ErrorCode.TOOL_ABORTED}: stopped while running; it was ended"
            f" ({_stopper(record)})."
        )
        if partial is None:
            return text + " Its output was not kept."
        if not partial:
            return text + " It printed nothing."
        return text + " Output so far:\n" + partial
    if record.state is CallState.SUCCEEDED:
        return "It finished, but its output was not kept (the session ended first)."
    if record.state is CallState.FAILED:
        return f"{record.code}: it failed; the message was not kept."
    # END_UNKNOWN is the ledger's word for a call whose process died while it ran.
    state = "running" if record.state is CallState.END_UNKNOWN else record.state
    return f"The session ended while this call was {state}; its outcome is unknown."


def _with_every_result(
    messages: list[Message], lookup: Callable[[ToolCall], CallRecord | None]
) -> list[Message]:
    """The transcript with one result per tool call: missing ones from the ledger."""
    out: list[Message] = []
    pending: list[ToolCall] = []

    def close_pending() -> None:
        out.extend(
            _tool_message(call, tool_result_text(lookup(call), None))
            for call in pending
        )
        pending.clear()

    for message in messages:
        if message.role == "tool":
            pending[:] = [c for c in pending if c.id != message.tool_call_id]
            out.append(message)
            continue
        close_pending()
        out.append(message)
        if message.role == "assistant":
            pending.extend(message.tool_calls)
    close_pending()
    return out
