"""The agent loop with the scripted model: steps, parallel calls, events, the turn limit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import pytest
from tests.runtime.agent.conftest import call

from tether import tool
from tether.host import StopClass, ToolContext
from tether.models import Move
from tether.runtime import (
    MessageChunk,
    ToolCallEnded,
    ToolCallRequested,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = pytest.mark.anyio


async def test_a_text_answer_streams_and_ends_the_turn(
    harness: Callable[..., Any],
) -> None:
    """A move without tool calls streams its pieces and ends the turn with `end_turn`."""
    async with harness([Move(text="Hello there", chunks=("Hello", " there"))]) as h:
        ended = await h.session.prompt("hi")
    assert ended.stop_reason == "end_turn"
    assert ended.text == "Hello there"
    assert [e.text for e in h.rec.events if isinstance(e, MessageChunk)] == [
        "Hello",
        " there",
    ]
    assert h.rec.events[-1] == ended
    assert [m.to_json() for m in h.session.messages] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello there"},
    ]


async def test_tool_results_go_back_to_the_model_step_after_step(
    harness: Callable[..., Any],
) -> None:
    """Multi-step tool use: each step's results are in the next request, in order."""
    moves = [
        Move(text="echoing", tool_calls=(call("Echo", "m1", text="one"),)),
        Move(tool_calls=(call("Fail", "m2", message="nope"),)),
        Move(text="done"),
    ]
    async with harness(moves) as h:
        ended = await h.session.prompt("go")
    assert ended.stop_reason == "end_turn"
    assert ended.requests == 3
    second, third = h.model.requests[1], h.model.requests[2]
    assert second.messages[-1].to_json() == {
        "role": "tool",
        "content": "one",
        "tool_call_id": "m1",
    }
    assert third.messages[-1].to_json() == {
        "role": "tool",
        "content": "TOOL_FAILED: nope",
        "tool_call_id": "m2",
    }
    assert [t.name for t in h.model.requests[0].tools] == [
        t.name for t in h.runtime.tools
    ]


async def test_each_call_has_requested_started_progress_ended_then_turn_ended(
    harness: Callable[..., Any],
) -> None:
    """A call's events come in order, each model request is announced before it, and
    `TurnEnded` is the last event of the turn."""
    moves = [
        Move(tool_calls=(call("SlowExtension", "m1", seconds=0.01),)),
        Move(text="ok"),
    ]
    async with harness(moves) as h:
        await h.session.prompt("go")
    kinds = [type(e).__name__ for e in h.rec.events if not isinstance(e, MessageChunk)]
    assert kinds == [
        "ModelWaiting",
        "ToolCallRequested",
        "ToolCallStarted",
        "ToolCallProgress",
        "ToolCallEnded",
        "ModelWaiting",
        "TurnEnded",
    ]
    requested = h.rec.events[1]
    assert isinstance(requested, ToolCallRequested)
    assert requested.stop_class is StopClass.EXTENSION
    assert requested.model_call_id == "m1"
    assert requested.call_id != "m1"
    assert requested.title == 'SlowExtension: {"seconds": 0.01}'
    ended = next(e for e in h.rec.events if isinstance(e, ToolCallEnded))
    assert ended.output == ended.content == "extension done"
    assert ended.call_id == requested.call_id
    [record] = h.session.session.ledger_calls()
    assert record.call_id == requested.call_id


_arrived = 0
_both = anyio.Event()


@tool(stop_class=StopClass.READ_ONLY)
async def Meet(ctx: ToolContext, name: str) -> str:
    """Return only once two Meet calls are running at the same time."""
    global _arrived
    _arrived += 1
    if _arrived == 2:
        _both.set()
    with anyio.fail_after(5):
        await _both.wait()
    return f"met {name}"


async def test_calls_of_one_message_run_in_parallel(
    harness: Callable[..., Any], workspace: Path
) -> None:
    """Two calls of one assistant message run at once (each waits for the other)."""
    global _arrived, _both
    _arrived, _both = 0, anyio.Event()
    moves = [
        Move(tool_calls=(call("Meet", "a", name="a"), call("Meet", "b", name="b"))),
        Move(text="both met"),
    ]
    async with harness(moves, tools=[Meet], permissions={"allow": ["Meet"]}) as h:
        ended = await h.session.prompt("meet")
    assert ended.stop_reason == "end_turn"
    assert [m.to_json() for m in h.model.requests[1].messages[-2:]] == [
        {"role": "tool", "content": "met a", "tool_call_id": "a"},
        {"role": "tool", "content": "met b", "tool_call_id": "b"},
    ]


async def test_the_turn_limit_ends_the_turn_and_every_call_has_its_result(
    harness: Callable[..., Any],
) -> None:
    """`max_turn_requests` model requests end the turn; the next turn's request still
    carries a result for every call."""
    moves = [
        Move(tool_calls=(call("Echo", "m1", text="1"),)),
        Move(tool_calls=(call("Echo", "m2", text="2"),)),
        Move(text="never asked"),
        Move(text="next turn"),
    ]
    async with harness(moves, max_turn_requests=2) as h:
        ended = await h.session.prompt("loop")
        assert ended.stop_reason == "max_turn_requests"
        assert len(h.model.requests) == 2
        await h.session.prompt("again")
    tail = h.last_request()
    assert tail[-4:] == [
        {"role": "tool", "content": "1", "tool_call_id": "m1"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "m2",
                    "name": "Echo",
                    "arguments": '{"text": "2"}',
                    "call_id": h.session.messages[3].tool_calls[0].call_id,
                }
            ],
        },
        {"role": "tool", "content": "2", "tool_call_id": "m2"},
        {"role": "user", "content": "again"},
    ]


async def test_a_model_that_cannot_answer_ends_the_turn_with_an_error(
    harness: Callable[..., Any],
) -> None:
    """A script out of moves ends the turn with `error` and a one-line reason."""
    async with harness([]) as h:
        ended = await h.session.prompt("hi")
    assert ended.stop_reason == "error"
    assert ended.error is not None
    assert "add moves to the script" in ended.error


async def test_a_second_prompt_while_a_turn_runs_is_refused(
    harness: Callable[..., Any],
) -> None:
    """One turn at a time per session: a concurrent prompt raises `UsageError`."""
    from tether.errors import UsageError

    async with harness([Move(text="slow", hang=True)]) as h:
        started = anyio.Event()
        h.rec.when(lambda e: isinstance(e, MessageChunk), started.set)
        assert h.tg is not None
        h.tg.start_soon(h.session.prompt, "one")
        await started.wait()
        with pytest.raises(UsageError):
            await h.session.prompt("two")
        await h.session.abort()


class _Truncated:
    """A model whose stream ends without finishing its step."""

    name = "truncated"

    def stream(self, request: Any) -> Any:
        from contextlib import asynccontextmanager

        from tether.models import TextDelta as Delta

        @asynccontextmanager
        async def cm() -> Any:
            async def events() -> Any:
                yield Delta("half")

            yield events()

        return cm()


async def test_a_model_answer_that_ends_early_is_an_error_not_a_stop(
    harness: Callable[..., Any],
) -> None:
    """A stream that ends without its step's end (and without a stop) ends the turn
    with `error`, never `cancelled`; the text so far is kept, marked cut."""
    async with harness(model=_Truncated()) as h:
        ended = await h.session.prompt("go")
    assert ended.stop_reason == "error"
    assert (
        ended.error == "the answer of truncated ended before it was complete; ask again"
    )
    assert h.session.messages[-1].to_json() == {
        "role": "assistant",
        "content": "half",
        "cut": True,
    }
