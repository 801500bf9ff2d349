"""Transcripts kept in the ledger: a session resumes by id, and a call whose result was
never kept gets its truth from the ledger's final state."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from tests.runtime.agent.conftest import call
from tests.runtime.support import ALLOW_ALL, TEST_TOOLS

from tether import Agent, Runtime
from tether.errors import UsageError
from tether.models import Message, Move, ScriptedModel, ToolCall
from tether.runtime import CallRecord, CallState, delete_session, tool_result_text

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


def runtime(workspace: Path, ledger: Path) -> Runtime:
    return Runtime(
        workspace=workspace,
        tools=TEST_TOOLS,
        permissions=ALLOW_ALL,
        guard=False,
        ledger=ledger,
        abort_bound=0.5,
        grace=0.3,
    )


async def test_a_session_resumes_from_the_ledger_file(
    workspace: Path, tmp_path: Path
) -> None:
    """A second process (a new runtime on the same ledger file) continues the session:
    the model is given the whole earlier transcript."""
    ledger = tmp_path / "sessions.sqlite"
    first = ScriptedModel(
        [
            Move(text="calling", tool_calls=(call("Echo", "m1", text="hi"),)),
            Move(text="said hi"),
        ]
    )
    async with runtime(workspace, ledger) as rt:
        session = Agent(rt, first).session()
        await session.prompt("say hi")
        session_id = session.id
    second = ScriptedModel([Move(text="still here")])
    async with runtime(workspace, ledger) as rt:
        agent = Agent(rt, second)
        assert rt.ledger.messages(session_id)  # the first runtime's transcript
        resumed = agent.resume(session_id)
        ended = await resumed.prompt("again")
        with pytest.raises(UsageError, match="already open"):
            agent.resume(session_id)
        with pytest.raises(UsageError, match="no session nope"):
            agent.resume("nope")
    assert ended.stop_reason == "end_turn"
    sent = [m.to_json() for m in second.requests[0].messages]
    call_id = sent[1]["tool_calls"][0]["call_id"]
    assert sent == [
        {"role": "user", "content": "say hi"},
        {
            "role": "assistant",
            "content": "calling",
            "tool_calls": [
                {
                    "id": "m1",
                    "name": "Echo",
                    "arguments": '{"text": "hi"}',
                    "call_id": call_id,
                }
            ],
        },
        {"role": "tool", "content": "hi", "tool_call_id": "m1"},
        {"role": "assistant", "content": "said hi"},
        {"role": "user", "content": "again"},
    ]


@pytest.mark.rule("agent-results")
async def test_a_call_left_without_a_result_gets_one_from_the_ledger(
    workspace: Path, tmp_path: Path
) -> None:
    """A transcript cut off by a crash (an assistant call with no result) is never sent
    as it is: the missing result is built from the ledger's final state of the call."""
    ledger = tmp_path / "sessions.sqlite"
    model = ScriptedModel([Move(text="ok")])
    async with runtime(workspace, ledger) as rt:
        session = rt.session()
        async with session.turn() as turn:
            await turn.call("Echo", {"text": "x"}, call_id="call_real")
        rt.ledger.add_message(session.id, turn.id, {"role": "user", "content": "go"})
        rt.ledger.add_message(
            session.id,
            turn.id,
            Message(
                role="assistant",
                tool_calls=(
                    ToolCall(id="m1", name="Echo", arguments="{}", call_id="call_real"),
                    ToolCall(id="m2", name="Echo", arguments="{}", call_id="call_lost"),
                ),
            ).to_json(),
        )
        sid = session.id
    async with runtime(workspace, ledger) as rt:
        resumed = Agent(rt, model).resume(sid)
        await resumed.prompt("what happened?")
    sent = [m.to_json() for m in model.requests[0].messages]
    assert sent[2:] == [
        {
            "role": "tool",
            "content": "It finished, but its output was not kept (the session ended first).",
            "tool_call_id": "m1",
        },
        {
            "role": "tool",
            "content": "TOOL_ABORTED: stopped before it started; it did not run"
            " (the session ended first).",
            "tool_call_id": "m2",
        },
        {"role": "user", "content": "what happened?"},
    ]


def _record(state: CallState, **kw: object) -> CallRecord:
    return CallRecord(call_id="c", tool="Write", state=state, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("record", "text"),
    [
        (
            _record(CallState.ABORTED, started_at=1.0, abort_source="shutdown"),
            "TOOL_ABORTED: stopped while running; it was ended (the turn was stopped"
            " (shutdown)). Its output was not kept.",
        ),
        (
            _record(CallState.ABORTED),
            "TOOL_ABORTED: stopped before it started; it did not run (the user stopped"
            " the turn).",
        ),
        (
            _record(CallState.FAILED, code="TOOL_FAILED"),
            "TOOL_FAILED: it failed; the message was not kept.",
        ),
        (
            _record(CallState.RUNNING),
            "The session ended while this call was running; its outcome is unknown.",
        ),
        (
            _record(CallState.END_UNKNOWN, started_at=1.0),
            "The session ended while this call was running; its outcome is unknown.",
        ),
    ],
)
def test_results_from_the_ledger_alone_say_only_what_it_knows(
    record: CallRecord, text: str
) -> None:
    """Without the call's outcome, the result says what the ledger's state says and
    nothing more (never "interrupted" for a call that may have finished)."""
    assert tool_result_text(record, None) == text


async def test_a_resume_holds_the_session_and_one_after_a_delete_finds_none(
    workspace: Path, tmp_path: Path
) -> None:
    """A resumed session is held while its runtime is open: a delete (from another
    process, or an editor's `session/delete`) is refused. A resume after a delete finds
    no session, even where its runtime read the transcript before the delete."""
    ledger = tmp_path / "sessions.sqlite"
    async with runtime(workspace, ledger) as rt:
        kept, gone = rt.session(), rt.session()
        for session in (kept, gone):
            rt.ledger.add_message(session.id, "t1", {"role": "user", "content": "hi"})
    async with runtime(workspace, ledger) as rt:
        agent = Agent(rt, ScriptedModel([]))
        assert rt.ledger.messages(gone.id)  # read before the delete
        delete_session(ledger, gone.id)
        with pytest.raises(UsageError, match=f"no session {gone.id}"):
            agent.resume(gone.id)
        resumed = agent.resume(kept.id)
        assert [m.content for m in resumed.messages] == ["hi"]
        with pytest.raises(UsageError, match=f"session {kept.id} is open in process"):
            delete_session(ledger, kept.id)
    delete_session(ledger, kept.id)
    async with runtime(workspace, ledger) as rt:
        assert rt.ledger.messages(kept.id) == rt.ledger.messages(gone.id) == []
