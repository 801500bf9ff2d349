"""A run's stop inside a turn (`prompt(halt=...)`): nothing new starts, nothing is cut.

The halt lands at an exact point (before the turn, inside a model step, inside a tool
call) or, in the race, after a chosen number of scheduler turns from a chosen event.
"""

from __future__ import annotations

import json
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether import Agent, Runtime, tool
from tether.host import StopClass, ToolContext
from tether.models import (
    ModelRequest,
    Move,
    ScriptedModel,
    StepDone,
    StreamEvent,
    ToolCall,
)
from tether.runtime import AgentEvent, CallState, ToolCallEnded, TurnEnded

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

NOT_RUN = (
    "TOOL_ABORTED: stopped before it started; it did not run"
    " (the person stopped the run)."
)
CALLS = 9
"""Tool calls the scripted stage makes, one per model step, before its answer."""


class Stage:
    """What one turn did: the halt, the calls that ran, the requests and their halt."""

    def __init__(self) -> None:
        self.halt = anyio.Event()
        self.halt_in_call: int | None = None
        self.halt_in_step: int | None = None
        self.ran: list[int] = []
        self.halted_when_started: list[bool] = []
        self.halted_when_asked: list[bool] = []


_STAGE: list[Stage] = []


@tool(stop_class=StopClass.READ_ONLY)
async def Step(ctx: ToolContext, n: int) -> str:
    """Call `n` of the stage; the halt may be set while it runs."""
    stage = _STAGE[0]
    stage.halted_when_started.append(stage.halt.is_set())
    stage.ran.append(n)
    if stage.halt_in_call == n:
        stage.halt.set()
    # The call goes on after the halt: it is not cut.
    for _ in range(3):
        await anyio.lowlevel.checkpoint()
    return f"ran {n}"


class HaltingModel:
    """The scripted stage, which may set the halt inside step `halt_in_step`."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        moves = [
            Move(
                text=f"step {n}",
                tool_calls=(
                    ToolCall(id=f"c{n}", name="Step", arguments=json.dumps({"n": n})),
                ),
            )
            for n in range(1, CALLS + 1)
        ]
        self.inner = ScriptedModel([*moves, Move(text="done")])

    @property
    def name(self) -> str:
        return "halting"

    @property
    def requests(self) -> list[ModelRequest]:
        return self.inner.requests

    @asynccontextmanager
    async def stream(
        self, request: ModelRequest
    ) -> AsyncIterator[AsyncIterator[StreamEvent]]:
        stage = self.stage
        stage.halted_when_asked.append(stage.halt.is_set())
        step = len(self.inner.requests) + 1
        async with self.inner.stream(request) as events:

            async def play() -> AsyncIterator[StreamEvent]:
                async for event in events:
                    if isinstance(event, StepDone) and stage.halt_in_step == step:
                        stage.halt.set()
                    yield event

            yield play()


@asynccontextmanager
async def _agent(workspace: Path, stage: Stage) -> AsyncIterator[Any]:
    _STAGE[:] = [stage]
    async with Runtime(
        workspace=workspace,
        tools=[Step],
        permissions={"allow": ["Step"]},
        grace=0.3,
        abort_bound=0.5,
        guard=False,
    ) as runtime:
        model = HaltingModel(stage)
        yield Agent(runtime, model), model


def _results(messages: list[Any]) -> dict[str, str]:
    return {m.tool_call_id: m.content for m in messages if m.role == "tool"}


WHERE = [
    ("before", 0),
    *(("step", n) for n in range(1, CALLS + 2)),
    *(("call", n) for n in range(1, CALLS + 1)),
]


@pytest.mark.anyio
@pytest.mark.rule("agent-stop")
@pytest.mark.parametrize(("where", "n"), WHERE, ids=[f"{w}-{n}" for w, n in WHERE])
async def test_a_halt_starts_no_request_and_no_call_and_cuts_none(
    workspace: Path, where: str, n: int
) -> None:
    """Spec 03: wherever the halt lands, the call in flight runs to its real result,
    no model request and no call starts after it, a call asked for but not started is
    told it did not run, and the turn ends `halted` with the count of calls that ran."""
    stage = Stage()
    if where == "before":
        stage.halt.set()
    elif where == "step":
        stage.halt_in_step = n
    else:
        stage.halt_in_call = n
    async with _agent(workspace, stage) as (agent, model):
        session = agent.session()
        with anyio.fail_after(5):
            ended = await session.prompt("go", halt=stage.halt, halt_wait=5)
    ran = {"before": 0, "step": n - 1, "call": n}[where]
    assert stage.ran == list(range(1, ran + 1))
    assert not any(stage.halted_when_started)
    assert not any(stage.halted_when_asked)
    assert ended.calls == ran
    results = _results(session.messages)
    assert [results[f"c{k}"] for k in range(1, ran + 1)] == [
        f"ran {k}" for k in range(1, ran + 1)
    ]
    if where == "step" and n == CALLS + 1:
        # The halt came with the model's own answer: the turn ended by itself.
        assert ended.stop_reason == "end_turn"
        return
    assert ended.stop_reason == "halted"
    assert len(model.requests) == {"before": 0, "step": n, "call": n}[where]
    if where == "step":
        # The calls of the step the halt came in were recorded as not run.
        assert results[f"c{n}"] == NOT_RUN
        records = {r.call_id: r for r in session.session.ledger_calls()}
        refused = [r for r in records.values() if r.started_at is None]
        assert [(r.state, r.abort_source) for r in refused] == [
            (CallState.ABORTED, "halt")
        ]
    assert len(results) == len(model.requests)


@pytest.mark.anyio
@pytest.mark.rule("agent-stop")
async def test_a_model_request_in_flight_is_closed_halt_wait_after_the_halt(
    workspace: Path,
) -> None:
    """Spec 05: a model request that outlives the halt by `halt_wait` seconds is closed
    (its text kept, marked cut); the turn ends `halted`. A tether choice: the request
    is given that long first, since closing it loses nothing of the work."""
    model = ScriptedModel([Move(text="thinking", hang=True)])
    halt = anyio.Event()

    async def on_event(event: AgentEvent) -> None:
        halt.set()  # the first chunk: the request is in flight

    async with Runtime(workspace=workspace, tools=[], guard=False) as runtime:
        session = Agent(runtime, model).session(on_event=on_event)
        with anyio.fail_after(5):
            ended = await session.prompt("go", halt=halt, halt_wait=0.05)
    assert ended.stop_reason == "halted"
    assert ended.calls == 0
    assert [m.to_json() for m in session.messages][-1] == {
        "role": "assistant",
        "content": "thinking",
        "cut": True,
    }


@pytest.mark.anyio
@pytest.mark.rule("agent-stop")
async def test_the_turn_after_a_halt_is_told_which_calls_did_not_run(
    workspace: Path,
) -> None:
    """The transcript after a halt holds one result per call, so the next turn (a
    take-over's) sends the model the truth: the finished call's output, the call kept
    from starting as not run."""
    stage = Stage()
    stage.halt_in_step = 2
    async with _agent(workspace, stage) as (agent, model):
        session = agent.session()
        with anyio.fail_after(5):
            await session.prompt("go", halt=stage.halt)
            model.inner.moves[2:] = [Move(text="carrying on")]
            ended = await session.prompt("go on")
    assert ended.stop_reason == "end_turn"
    sent = [m.to_json() for m in model.requests[-1].messages if m.role == "tool"]
    assert sent == [
        {"role": "tool", "content": "ran 1", "tool_call_id": "c1"},
        {"role": "tool", "content": NOT_RUN, "tool_call_id": "c2"},
    ]


async def _race(workspace: Path, after: int, yields: int) -> None:
    stage = Stage()
    events: list[AgentEvent] = []
    halted_at: list[float] = []
    async with (
        _agent(workspace, stage) as (agent, _model),
        anyio.create_task_group() as tg,
    ):

        async def halt_later() -> None:
            for _ in range(yields):
                await anyio.lowlevel.checkpoint()
            stage.halt.set()
            halted_at.append(time.time())

        async def on_event(event: AgentEvent) -> None:
            events.append(event)
            if len(events) == after:
                tg.start_soon(halt_later)

        session = agent.session(on_event=on_event)
        with anyio.fail_after(10):
            ended = await session.prompt("go", halt=stage.halt, halt_wait=5)
    # A call handed to the runtime before the halt is in flight, even if the host
    # starts it a scheduler turn later; none is handed over after.
    records = session.session.ledger_calls()
    for record in records:
        if record.started_at is not None and halted_at:
            assert record.requested_at is not None
            assert record.requested_at <= halted_at[0]
    assert not any(stage.halted_when_asked)
    assert ended.stop_reason in ("halted", "end_turn")
    assert ended.calls == len(stage.ran)
    assert stage.ran == list(range(1, len(stage.ran) + 1))
    # Every call asked for has exactly one result: its real output or "did not run".
    results = _results(session.messages)
    asked = [
        c.id for m in session.messages if m.role == "assistant" for c in m.tool_calls
    ]
    assert sorted(results) == sorted(asked)
    for k, call_id in enumerate(asked, start=1):
        assert results[call_id] == (f"ran {k}" if k in stage.ran else NOT_RUN)
    ends = [e for e in events if isinstance(e, ToolCallEnded)]
    assert [e.content for e in ends] == [results[c] for c in asked]
    assert isinstance(events[-1], TurnEnded)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(after=st.integers(min_value=1, max_value=40), yields=st.integers(0, 6))
@pytest.mark.rule("agent-stop")
def test_a_halt_anywhere_in_the_turn_cuts_no_call_and_starts_nothing_after(
    tmp_path_factory: pytest.TempPathFactory, after: int, yields: int
) -> None:
    """Races on purpose: the halt is set `yields` scheduler turns after the turn's
    `after`-th event; no request starts and no call is handed to the runtime once it
    is set, every started call ends with its real output, and every call asked for
    gets one result."""
    anyio.run(_race, tmp_path_factory.mktemp("halt-race"), after, yields)
