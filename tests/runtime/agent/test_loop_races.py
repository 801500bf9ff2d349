"""Races on purpose: hypothesis picks the event of a turn after which Stop is pressed and
how many scheduler turns pass first; the loop's invariants must hold for every choice."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.runtime.support import ALLOW_ALL, TEST_TOOLS

from tether import Agent, Runtime
from tether.models import Move, ScriptedModel, ToolCall
from tether.runtime import (
    AgentEvent,
    CallState,
    ToolCallEnded,
    ToolCallRequested,
    TurnEnded,
)

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow


CALLS = [
    ("Echo", {"text": "quick"}),
    ("SlowWrite", {"path": "out.txt", "seconds": 0.05}),
    ("Stuck", {"seconds": 0.2}),
    ("Obedient", {"lines": 1}),
]


async def _one_race(workspace: Path, stop_after: int, yields: int) -> None:
    moves = [
        Move(
            text="working",
            chunks=("work", "ing"),
            tool_calls=tuple(
                ToolCall(id=f"m{n}", name=name, arguments=json.dumps(args))
                for n, (name, args) in enumerate(CALLS)
            ),
        ),
        Move(text="done"),
        Move(text="next turn"),
    ]
    model = ScriptedModel(moves)
    events: list[AgentEvent] = []
    async with (
        Runtime(
            workspace=workspace,
            tools=TEST_TOOLS,
            permissions=ALLOW_ALL,
            grace=0.2,
            abort_bound=0.5,
            guard=False,
        ) as rt,
        anyio.create_task_group() as tg,
    ):

        async def stop() -> None:
            for _ in range(yields):
                await anyio.lowlevel.checkpoint()
            await session.abort()

        async def on_event(event: AgentEvent) -> None:
            events.append(event)
            if len(events) == stop_after:
                tg.start_soon(stop)

        session = Agent(rt, model).session(on_event=on_event)
        with anyio.fail_after(10):
            ended = await session.prompt("go")
        calls_before = len(session.session.ledger_calls())
        with anyio.fail_after(10):
            await session.prompt("and now?")

    # The turn's last event is its end, delivered after every call's end.
    last = next(e for e in events if isinstance(e, TurnEnded))
    assert last == ended
    assert events.index(last) > max(
        (i for i, e in enumerate(events) if isinstance(e, ToolCallEnded)), default=-1
    )
    assert ended.stop_reason in ("end_turn", "cancelled")
    # Every call the model asked for that was requested ends exactly once, and the
    # transcript holds exactly one result per call, the same text as its end event.
    requested = [e for e in events if isinstance(e, ToolCallRequested)]
    ends = {e.call_id: e for e in events if isinstance(e, ToolCallEnded)}
    assert len(ends) == len(requested) == len({e.call_id for e in requested})
    transcript = session.messages
    results = {m.tool_call_id: m.content for m in transcript if m.role == "tool"}
    asked = [c for m in transcript if m.role == "assistant" for c in m.tool_calls]
    assert sorted(map(str, results)) == sorted(c.id for c in asked)
    assert sum(1 for m in transcript if m.role == "tool") == len(asked)
    records = {r.call_id: r for r in session.session.ledger_calls()}
    for call in asked:
        record = records[call.call_id]
        end = ends[call.call_id]
        assert record.settled
        assert record.state.is_final
        assert end.state is record.state
        assert results[call.id] == end.content
        if record.state is CallState.ABORTED:
            before = record.started_at is None
            assert end.content.startswith(
                "TOOL_ABORTED: stopped before it started"
                if before
                else "TOOL_ABORTED: stopped while running"
            )
        if call.name == "SlowWrite":
            written = (workspace / "out.txt").exists()
            assert written == (record.state is CallState.SUCCEEDED)
            if written:
                assert results[call.id] == "wrote 1 bytes to out.txt"
    # The next turn re-runs nothing and is told the same results.
    assert len(records) == calls_before
    sent = model.requests[-1].messages
    assert {m.tool_call_id: m.content for m in sent if m.role == "tool"} == results


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(stop_after=st.integers(min_value=1, max_value=16), yields=st.integers(0, 4))
@pytest.mark.rule("agent-results")
def test_loop_invariants_hold_wherever_the_stop_lands(
    tmp_path_factory: pytest.TempPathFactory, stop_after: int, yields: int
) -> None:
    """Wherever the stop lands (during the model's text, as calls are requested, run or
    end, or after), every call gets exactly one result that matches the ledger, a write
    that finished is reported as written, and the next turn re-runs nothing."""
    workspace = tmp_path_factory.mktemp("loop-race")
    anyio.run(_one_race, workspace, stop_after, yields)
