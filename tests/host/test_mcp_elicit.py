"""MCP elicitation: a server's question reaches the runtime's elicitor (a real server,
the SDK's, asking with `ctx.elicit`), is declined where no one can answer, and is
withdrawn by a stop."""

from __future__ import annotations

import json
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest
from tests.host.support import asked_until_withdrawn

from tether._config import Config
from tether.host._protocol import AbortAck
from tether.host._wire import abort_ack_from_wire, abort_ack_to_wire
from tether.runtime import (
    CallState,
    ElicitationAnswer,
    ElicitationRequest,
    Elicitor,
    Runtime,
    ToolProgress,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.slow


FIXTURE = Path(__file__).with_name("mcp_server_fixture.py")
ABORT_BOUND = 0.5


@asynccontextmanager
async def _runtime(
    workspace: Path, elicitor: Elicitor | None, *, legacy: bool = False
) -> AsyncIterator[Runtime]:
    """A runtime whose standard tools hold the fixture server's, as `fx`."""
    args = [str(FIXTURE), *(["--legacy"] if legacy else [])]
    config = Config(mcp_servers={"fx": {"command": sys.executable, "args": args}})
    with anyio.fail_after(60):
        async with Runtime(
            workspace=workspace,
            config=config,
            elicitor=elicitor,
            permissions={"allow": ["mcp__fx__*"]},
            abort_bound=ABORT_BOUND,
            guard=False,
        ) as runtime:
            assert not [p for p in runtime.problems if "fx" in p], runtime.problems
            yield runtime


@pytest.mark.anyio
@pytest.mark.parametrize("legacy", [False, True], ids=["2026-07-28", "2025-11-25"])
async def test_accepted_content_reaches_the_tool(workspace: Path, legacy: bool) -> None:
    """The elicitor is asked with the call's ids and the server's form; its content
    is what the tool receives. Either revision: a round of `input_required` in the
    call, or a request of the server's while the call runs."""
    asked: list[ElicitationRequest] = []

    async def elicitor(request: ElicitationRequest) -> ElicitationAnswer:
        asked.append(request)
        content = {"name": "Ann", "count": 2, "gift": True, "color": "green"}
        return ElicitationAnswer("accept", content)

    async with _runtime(workspace, elicitor, legacy=legacy) as runtime:
        session = runtime.session()
        async with session.turn() as turn:
            advertised = await turn.call("mcp__fx__can_elicit", {})
            result = await turn.call("mcp__fx__ask", {})
            events = await turn.call("mcp__fx__events", {})
    assert ("recv initialize" in events.output) is legacy, events.output
    assert advertised.output == "yes"
    assert not result.is_error, result.output
    action, _, data = result.output.partition(" ")
    assert action == "accept"
    assert json.loads(data) == {
        "name": "Ann",
        "count": 2,
        "gift": True,
        "color": "green",
    }
    [request] = asked
    assert (request.session_id, request.call_id) == (session.id, result.call_id)
    assert (request.server, request.tool) == ("fx", "mcp__fx__ask")
    assert request.message == "Order something?"
    assert request.schema["type"] == "object"
    assert set(request.schema["properties"]) == {"name", "count", "gift", "color"}
    assert set(request.schema["required"]) == {"name", "count"}


@pytest.mark.anyio
async def test_fields_left_empty_take_the_forms_defaults(workspace: Path) -> None:
    """A field an accepted answer leaves out is sent with the form's default
    (SEP-1034); a field the person filled in keeps their value."""

    async def elicitor(request: ElicitationRequest) -> ElicitationAnswer:
        return ElicitationAnswer(
            "accept", {"name": "Ann", "count": 2, "color": "green"}
        )

    async with _runtime(workspace, elicitor) as runtime:
        session = runtime.session()
        async with session.turn() as turn:
            result = await turn.call("mcp__fx__ask_anyway", {})
    action, _, data = result.output.partition(" ")
    assert action == "accept", result.output
    sent = {"name": "Ann", "count": 2, "gift": False, "color": "green"}
    assert json.loads(data) == sent


@pytest.mark.anyio
async def test_declined_by_the_person(workspace: Path) -> None:
    """A decline reaches the server as a decline."""

    async def elicitor(request: ElicitationRequest) -> ElicitationAnswer:
        return ElicitationAnswer("decline")

    async with _runtime(workspace, elicitor) as runtime:
        session = runtime.session()
        async with session.turn() as turn:
            result = await turn.call("mcp__fx__ask", {})
    assert (result.output, result.is_error) == ("decline", False)


@pytest.mark.anyio
async def test_no_elicitor_declines_and_says_why(workspace: Path) -> None:
    """With no one to answer, the capability is not advertised; a server that asks
    anyway is declined (not an error), and the call's output and result say why (the
    ledger keeps it)."""
    async with _runtime(workspace, None) as runtime:
        events = runtime.subscribe()
        session = runtime.session()
        async with events, session.turn() as turn:
            advertised = await turn.call("mcp__fx__can_elicit", {})
            result = await turn.call("mcp__fx__ask_anyway", {})
            progress = []
            while True:
                try:
                    event = events.receive_nowait()
                except anyio.WouldBlock:
                    break
                if isinstance(event, ToolProgress):
                    progress.append(event.text)
        records = session.ledger_calls()
    why = "fx asked: Order something?: declined (no one here can answer)"
    assert advertised.output == "no"
    assert (result.output, result.is_error) == (f"decline\n[{why}]", False)
    assert progress == [why]
    assert records[-1].output == f"decline\n[{why}]"


@pytest.mark.anyio
async def test_stop_withdraws_a_pending_question(workspace: Path) -> None:
    """A stop while the person is being asked cancels the elicitor and answers the
    server `cancel`; the stop's report says the question was withdrawn (as a permission
    prompt is, spec 01) while the call waits for the server's real result, which ends
    the call, and the turn settles."""
    asking = anyio.Event()
    withdrawn = anyio.Event()

    async def elicitor(request: ElicitationRequest) -> ElicitationAnswer:
        await asked_until_withdrawn(asking, withdrawn)

    async with _runtime(workspace, elicitor) as runtime:
        session = runtime.session()
        outcome = []
        async with session.turn() as turn, anyio.create_task_group() as tg:

            async def call() -> None:
                outcome.append(await turn.call("mcp__fx__ask", {}))

            tg.start_soon(call)
            with anyio.fail_after(20):
                await asking.wait()
            started = time.monotonic()
            report = await session.abort()
            with anyio.fail_after(ABORT_BOUND + 5):
                await withdrawn.wait()
                await session.settled()
            took = time.monotonic() - started
        [result] = outcome
        [pending] = report.pending
        assert pending.why == (
            "extension: started, waiting for result; its question was withdrawn "
            "(fx asked: Order something?)"
        )
        why = "fx asked: Order something?: withdrawn by the stop (cancel)"
        assert (result.output, result.is_error) == (f"cancel\n[{why}]", False)
        [record] = session.ledger_calls()
        assert record.state is CallState.SUCCEEDED
        assert took < 5, took


def test_a_withdrawn_question_crosses_the_stdio_host_seam() -> None:
    """The question a stop withdrew travels in `tools.abort`'s answer from a stdio host
    as from the in-process one; an answer with none leaves the field out."""
    ack = AbortAck(found=True, phase="running", asking="fx asked: Order something?")
    assert abort_ack_from_wire(json.loads(json.dumps(abort_ack_to_wire(ack)))) == ack
    assert abort_ack_to_wire(AbortAck(found=True, phase="running")) == {
        "found": True,
        "phase": "running",
        "processes": 0,
    }
