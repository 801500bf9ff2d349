"""An MCP server's question during a call reaches the editor as ACP's `elicitation/create`
(a form scoped to the session and the call), and a stop withdraws it (spec 04, "MCP, as
servers speak it now"; spec 01: a pending prompt is withdrawn by a stop)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp import text_block
from acp.schema import (
    AcceptElicitationResponse,
    CreateElicitationResponse,
    ElicitationFormSessionMode,
    ElicitationMode,
    McpServerStdio,
)
from tests.acp.support import Embedded, embedded, write_script

from tether.acp._elicit import takes_forms

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

FIXTURE = Path(__file__).parents[1] / "host" / "mcp_server_fixture.py"
FX = McpServerStdio(name="fx", command=sys.executable, args=[str(FIXTURE)], env=[])
"""The SDK's server whose `ask` tool asks for an order, given by `session/new`."""

ASK: dict[str, Any] = {
    "text": "Asking.",
    "tool_calls": [{"id": "m1", "name": "mcp__fx__ask", "input": {}}],
}
"""A model move: call the fixture server's `ask` tool."""


def _outputs(ed: Embedded) -> list[str]:
    """The output of each call that completed, in the order they ended."""
    return [
        u.content[0].content.text
        for _, u in ed.recorder.updates
        if u.session_update == "tool_call_update" and u.status == "completed"
    ]


async def _prompt(ed: Embedded, sid: str, *, cancel: bool = False) -> str:
    """Prompt the session; with `cancel`, send `session/cancel` once the editor has a
    question it has not answered. Return the stop reason."""
    reasons: list[str] = []
    asked = len(ed.recorder.questions)

    async def run() -> None:
        response = await ed.conn.prompt(session_id=sid, prompt=[text_block("go")])
        reasons.append(response.stop_reason)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        if cancel:
            await ed.recorder.wait_for(lambda: len(ed.recorder.questions) > asked, 30)
            await ed.conn.cancel(session_id=sid)
    return reasons[0]


async def test_a_servers_question_goes_to_the_editor_and_a_stop_withdraws_it(
    workspace: Path, tmp_path: Path
) -> None:
    """The editor said it takes forms: a question arrives as a form scoped to the
    session and the tool call, and what is typed there is what the tool gets. A
    `session/cancel` while the editor shows the next one: tether tells the editor the
    request is void (`$/cancel_request`), the server is answered `cancel`, and the
    call's result says the question was withdrawn by the stop."""
    answers = [
        AcceptElicitationResponse(action="accept", content={"name": "Ann", "count": 2})
    ]

    async def elicit(message: str, mode: ElicitationMode) -> CreateElicitationResponse:
        if answers:
            return answers.pop()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    moves: list[dict[str, Any]] = [
        ASK,
        {"text": "Done."},
        ASK,
        {"text": "unreachable after a stop"},
    ]
    model = write_script(tmp_path / "s.jsonl", moves)
    async with embedded(model, elicit=elicit) as ed:
        sid = await ed.open_session(workspace, [FX])
        assert await _prompt(ed, sid) == "end_turn"
        assert ed.server.statistics().elicitation_requests == 1
        assert await _prompt(ed, sid, cancel=True) == "cancelled"
    calls = [
        u.tool_call_id
        for _, u in ed.recorder.updates
        if u.session_update == "tool_call"
    ]
    (message, mode), _ = ed.recorder.questions
    assert message == "fx asks: Order something?"
    assert isinstance(mode, ElicitationFormSessionMode)
    assert (mode.session_id, mode.tool_call_id) == (sid, calls[0])
    assert mode.requested_schema.properties is not None
    assert set(mode.requested_schema.properties) == {"name", "count", "gift", "color"}
    assert set(mode.requested_schema.required or ()) == {"name", "count"}
    [(method, params)] = ed.recorder.withdrawn
    assert (method, params["toolCallId"]) == ("elicitation/create", calls[1])
    assert _outputs(ed) == [
        'accept {"name":"Ann","count":2,"gift":false,"color":"red"}',
        "cancel\n[fx asked: Order something?: withdrawn by the stop (cancel)]",
    ]


async def test_an_editor_that_takes_no_forms_is_not_asked(
    workspace: Path, tmp_path: Path
) -> None:
    """An editor that did not say it takes forms: the server is not told it may ask,
    and a question asked anyway is declined with the reason in the call's result."""
    moves: list[dict[str, Any]] = [
        {
            "text": "Asking.",
            "tool_calls": [
                {"id": "m1", "name": "mcp__fx__can_elicit", "input": {}},
                {"id": "m2", "name": "mcp__fx__ask_anyway", "input": {}},
            ],
        },
        {"text": "Done."},
    ]
    model = write_script(tmp_path / "s.jsonl", moves)
    async with embedded(model) as ed:
        assert await _prompt(ed, await ed.open_session(workspace, [FX])) == "end_turn"
    assert sorted(_outputs(ed)) == [
        "decline\n[fx asked: Order something?: declined (no one here can answer)]",
        "no",
    ]
    assert not ed.recorder.questions


async def test_what_the_editor_said_in_an_initialize_answered_early_is_kept(
    tmp_path: Path,
) -> None:
    """`tether acp` answers the first `initialize` before the server starts; the
    capabilities it gave reach the server, so an editor that takes forms is asked."""
    model = write_script(tmp_path / "s.jsonl", [{"text": "Done."}])
    early: dict[str, Any] = {"elicitation": {"form": {}}}
    async with embedded(model, answered_early=early) as ed:
        assert takes_forms(ed.server.client_capabilities)
