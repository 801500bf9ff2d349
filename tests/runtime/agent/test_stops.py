"""A stop at each point of a turn, and the exact results the model is given next turn."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from tests.runtime.agent.conftest import Harness, call

from tether import tool
from tether.host import StopClass, ToolContext
from tether.models import Move
from tether.runtime import (
    CallState,
    MessageChunk,
    PermissionRequest,
    ToolCallEnded,
    ToolCallProgress,
    ToolCallRequested,
    ToolCallStarted,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WHILE_RUNNING = (
    "TOOL_ABORTED: stopped while running; it was ended (the user stopped the turn)."
)
BEFORE_START = "TOOL_ABORTED: stopped before it started; it did not run (the user stopped the turn)."


def started(tool_name: str) -> Callable[[Any], bool]:
    return lambda e: isinstance(e, ToolCallStarted) and e.tool == tool_name


def printed(tool_name: str, text: str = "started") -> Callable[[Any], bool]:
    """The call printed `text` (the test tools print `started` first)."""
    return lambda e: (
        isinstance(e, ToolCallProgress) and e.tool == tool_name and e.text == text
    )


async def next_request_results(h: Harness) -> list[dict[str, Any]]:
    """Prompt again and return the tool results the model is given, in order."""
    await h.session.prompt("what happened?")
    return [m for m in h.last_request() if m["role"] == "tool"]


def ended_events(h: Harness) -> list[ToolCallEnded]:
    return [e for e in h.rec.events if isinstance(e, ToolCallEnded)]


@pytest.mark.rule("S11")
async def test_s11_stop_during_the_model_request_keeps_the_text_marked_cut(
    harness: Callable[..., Any],
) -> None:
    """S11: a stop while the model streams ends the request at once; the text that
    arrived stays in the transcript marked `cut`, and the next request carries it."""
    moves = [
        Move(text="Hello", chunks=("Hel", "lo"), hang=True),
        Move(text="again"),
    ]
    async with harness(moves) as h:
        h.stop_when(lambda e: isinstance(e, MessageChunk) and e.text == "lo")
        ended = await h.session.prompt("go")
        assert ended.stop_reason == "cancelled"
        assert ended.text == "Hello"
        assert (await h.report()).settled
        await h.session.prompt("and now?")
    assert h.last_request() == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Hello", "cut": True},
        {"role": "user", "content": "and now?"},
    ]


@pytest.mark.rule("S11")
async def test_s11_half_streamed_tool_calls_of_a_cut_message_never_run(
    harness: Callable[..., Any],
) -> None:
    """S11: tool calls the model was still streaming when stopped are not run and not
    left in the transcript without a result."""
    moves = [
        Move(text="let me", tool_calls=(call("Echo", "m1", text="x"),), hang=True),
        Move(text="fine"),
    ]
    async with harness(moves) as h:
        h.stop_when(lambda e: isinstance(e, MessageChunk))
        ended = await h.session.prompt("go")
        assert ended.stop_reason == "cancelled"
        await h.session.prompt("next")
    assert not any(isinstance(e, ToolCallRequested) for e in h.rec.events)
    assert h.session.session.ledger_calls() == []
    assert h.last_request()[1] == {
        "role": "assistant",
        "content": "let me",
        "cut": True,
    }


_HARNESS: list[Harness] = []


@tool(stop_class=StopClass.READ_ONLY)
async def PressStop(ctx: ToolContext) -> str:
    """Press Stop for the running turn, then return at once."""
    _HARNESS[0].abort_soon()
    return "stop pressed"


@pytest.mark.rule("agent-results")
@pytest.mark.rule("S10")
async def test_s10_a_stop_between_moves_starts_no_further_model_request(
    harness: Callable[..., Any],
) -> None:
    """S10: after a stop that lands between a tool call and the next model request, the
    loop asks the model nothing more; the finished call's result is kept."""
    moves = [Move(tool_calls=(call("PressStop", "m1"),)), Move(text="after")]
    async with harness(
        moves, tools=[PressStop], permissions={"allow": ["PressStop"]}
    ) as h:
        _HARNESS[:] = [h]
        ended = await h.session.prompt("go")
        assert ended.stop_reason == "cancelled"
        assert len(h.model.requests) == 1
        results = await next_request_results(h)
    assert results == [
        {"role": "tool", "content": "stop pressed", "tool_call_id": "m1"}
    ]


@pytest.mark.rule("agent-results")
@pytest.mark.rule("S10")
async def test_s10_a_call_queued_for_admission_is_stopped_before_it_starts(
    harness: Callable[..., Any],
    host_kind: str,
) -> None:
    """S10: with one admission place, the second call of a message waits; a stop
    while the first runs ends the second before it starts, and the model is told so."""
    moves = [
        Move(
            tool_calls=(call("Stuck", "m1", seconds=0.5), call("Echo", "m2", text="no"))
        ),
        Move(text="ok"),
    ]
    async with harness(moves, host=host_kind, max_concurrent=1) as h:
        h.stop_when(printed("Stuck"))
        ended = await h.session.prompt("go")
        assert ended.stop_reason == "cancelled"
        results = await next_request_results(h)
    assert results == [
        {
            "role": "tool",
            "content": WHILE_RUNNING + " Output so far:\nstarted",
            "tool_call_id": "m1",
        },
        {"role": "tool", "content": BEFORE_START, "tool_call_id": "m2"},
    ]
    assert [e.state for e in ended_events(h)] == [CallState.ABORTED] * 2
    assert not any(
        isinstance(e, ToolCallStarted) and e.tool == "Echo" for e in h.rec.events
    )


@pytest.mark.rule("agent-results")
@pytest.mark.rule("S9")
async def test_a_stop_during_a_permission_prompt_is_stopped_before_it_started(
    harness: Callable[..., Any],
    workspace: Path,
    host_kind: str,
) -> None:
    """A call whose permission prompt is pending when the stop comes never runs; the
    model is told it was stopped before it started (a stop, not a refusal)."""
    holder: list[Harness] = []

    async def approver(request: PermissionRequest) -> bool:
        holder[0].abort_soon()
        import anyio

        await anyio.sleep_forever()
        return True  # pragma: no cover

    moves = [Move(tool_calls=(call("SlowWrite", "m1", path="f.txt"),)), Move(text="ok")]
    async with harness(moves, host=host_kind, permissions={}, approver=approver) as h:
        holder.append(h)
        ended = await h.session.prompt("go")
        assert ended.stop_reason == "cancelled"
        results = await next_request_results(h)
    assert results == [{"role": "tool", "content": BEFORE_START, "tool_call_id": "m1"}]
    assert not (workspace / "f.txt").exists()


@pytest.mark.rule("agent-results")
@pytest.mark.rule("S5")
async def test_a_stopped_read_only_call_gives_the_model_its_output_so_far(
    harness: Callable[..., Any],
    host_kind: str,
) -> None:
    """READ_ONLY: a stop while it runs ends it at once; the model gets what it printed."""
    moves = [
        Move(tool_calls=(call("Stuck", "m1", seconds=0.5, ticks=0.01),)),
        Move(text="ok"),
    ]
    async with harness(moves, host=host_kind) as h:
        h.stop_when(printed("Stuck"))
        ended = await h.session.prompt("go")
        assert ended.stop_reason == "cancelled"
        assert (await h.report()).settled
        [end] = ended_events(h)
        results = await next_request_results(h)
    assert end.state is CallState.ABORTED
    assert end.content.startswith(WHILE_RUNNING + " Output so far:\nstarted")
    assert results == [{"role": "tool", "content": end.content, "tool_call_id": "m1"}]
    # S4: no progress of the call is delivered after it ended.
    after = h.rec.events[h.rec.events.index(end) :]
    assert not any(isinstance(e, ToolCallProgress) for e in after)


@pytest.mark.rule("agent-results")
@pytest.mark.rule("S13")
async def test_a_stopped_process_call_gives_the_model_its_output_until_it_ended(
    harness: Callable[..., Any],
    host_kind: str,
) -> None:
    """PROCESS: terminated on stop; the model gets the output it printed until it died."""
    moves = [Move(tool_calls=(call("Obedient", "m1"),)), Move(text="ok")]
    async with harness(moves, host=host_kind) as h:
        h.stop_when(lambda e: isinstance(e, ToolCallProgress) and e.text == "line 1\n")
        await h.session.prompt("go")
        results = await next_request_results(h)
    assert results == [
        {
            "role": "tool",
            "content": WHILE_RUNNING + " Output so far:\nline 0\nline 1\nterminated\n",
            "tool_call_id": "m1",
        }
    ]


@pytest.mark.rule("agent-results")
@pytest.mark.rule("S13")
async def test_a_process_killed_at_the_grace_window_gives_its_output_before_the_stop(
    harness: Callable[..., Any],
) -> None:
    """PROCESS that ignores termination: killed when the grace window closes; the model
    gets what it printed before the stop."""
    moves = [Move(tool_calls=(call("Stubborn", "m1", lines=1),)), Move(text="ok")]
    async with harness(moves) as h:
        h.stop_when(lambda e: isinstance(e, ToolCallProgress) and e.text == "line 0\n")
        await h.session.prompt("go")
        results = await next_request_results(h)
    assert results == [
        {
            "role": "tool",
            "content": WHILE_RUNNING + " Output so far:\nstartedline 0\n",
            "tool_call_id": "m1",
        }
    ]


@pytest.mark.rule("agent-results")
@pytest.mark.rule("S6")
@pytest.mark.parametrize(
    ("tool_name", "args", "real", "word"),
    [
        (
            "SlowWrite",
            {"path": "f.txt", "seconds": 0.2},
            "wrote 1 bytes to f.txt",
            "mutating",
        ),
        ("SlowExtension", {"seconds": 0.2}, "extension done", "extension"),
    ],
)
async def test_a_write_that_finishes_after_the_stop_gives_the_model_its_real_result(
    harness: Callable[..., Any],
    workspace: Path,
    tool_name: str,
    args: dict[str, Any],
    real: str,
    word: str,
    host_kind: str,
) -> None:
    """MUTATING and EXTENSION: a stop waits for the real result, and the model is told
    exactly that result, not "interrupted"; the turn ends only once it is in."""
    moves = [Move(tool_calls=(call(tool_name, "m1", **args),)), Move(text="ok")]
    async with harness(moves, host=host_kind) as h:
        h.stop_when(started(tool_name))
        ended = await h.session.prompt("go")
        assert ended.stop_reason == "cancelled"
        report = await h.report()
        assert not report.settled
        assert report.pending[0].why == f"{word}: started, waiting for result"
        [end] = ended_events(h)
        assert end.state is CallState.SUCCEEDED
        assert len(h.model.requests) == 1
        results = await next_request_results(h)
    assert results == [{"role": "tool", "content": real, "tool_call_id": "m1"}]
    if tool_name == "SlowWrite":
        assert (workspace / "f.txt").read_text() == "x"
    # The write ran once: the next turn did not run it again.
    assert len(h.session.session.ledger_calls()) == 1


@pytest.mark.rule("S12")
async def test_after_a_stop_the_next_turn_starts_clean_with_fresh_call_ids(
    harness: Callable[..., Any],
) -> None:
    """S12: stopping twice is harmless; the next turn runs its calls with fresh ids even
    when the model reuses its own ids."""
    moves = [
        Move(tool_calls=(call("Stuck", "m1", seconds=0.5),)),
        Move(tool_calls=(call("Echo", "m1", text="again"),)),
        Move(text="ok"),
    ]
    async with harness(moves) as h:
        h.stop_when(started("Stuck"))
        await h.session.prompt("go")
        second = await h.session.abort()
        assert second.settled
        ended = await h.session.prompt("retry")
    assert ended.stop_reason == "end_turn"
    first_id, second_id = (c.call_id for c in h.session.session.ledger_calls())
    assert first_id != second_id
    assert h.last_request()[-1] == {
        "role": "tool",
        "content": "again",
        "tool_call_id": "m1",
    }
