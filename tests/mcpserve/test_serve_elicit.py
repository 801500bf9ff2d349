"""`tether mcp serve` relays a fronted server's question to its own MCP client.

Real parts: the fronted server is the SDK's (`tests/host/mcp_server_fixture.py`, whose
`ask` elicits an order), started by the runtime as `fx`; the server is `mcp_server`
over `McpServe` with `ElicitRelay` as the runtime's elicitor, as `tether mcp serve`
builds it; the client is the SDK's `Client`, in this process (its in-memory transport,
the handshake revision, where a server may send a request during a call).
"""

from __future__ import annotations

import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types
import pytest
from mcp import Client
from tests.host.support import asked_until_withdrawn

from tether._config import Config
from tether._mcpserve._elicit import ElicitRelay
from tether._mcpserve._server import McpServe, mcp_server
from tether.runtime import Runtime

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from mcp.client.session import ClientRequestContext

    from tether.runtime import CallRecord

FIXTURE = Path(__file__).parents[1] / "host" / "mcp_server_fixture.py"
ASKED = "fx asked: Order something?"


@asynccontextmanager
async def _served(
    workspace: Path, elicitation: Any = None
) -> AsyncIterator[tuple[Client, Runtime]]:
    """The client of a server fronting `fx`; `elicitation`: the client's callback
    (None: it does not declare the capability)."""
    config = Config(
        mcp_servers={"fx": {"command": sys.executable, "args": [str(FIXTURE)]}}
    )
    with anyio.fail_after(30):
        async with (
            Runtime(
                workspace=workspace,
                config=config,
                elicitor=ElicitRelay(),
                permissions={"allow": ["mcp__fx__*"]},
                abort_bound=0.5,
                guard=False,
            ) as runtime,
            anyio.create_task_group() as tg,
        ):
            serve = McpServe(runtime, tg)
            server = mcp_server(lambda ctx: serve)
            async with Client(
                server, mode="legacy", elicitation_callback=elicitation
            ) as client:
                yield client, runtime
            tg.cancel_scope.cancel()


def _text(result: mcp_types.CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def _records(runtime: Runtime) -> list[CallRecord]:
    return runtime.ledger.every_call()


@pytest.mark.anyio
async def test_the_question_reaches_the_client_and_a_cancel_withdraws_it(
    workspace: Path,
) -> None:
    """The client is asked on its call's request, the server named, and the content
    it accepts is what the fronted tool receives. Then it cancels a call while its
    person is asked: the relayed question is withdrawn at the client, the fronted
    server is told `cancel`, and the ledger says so."""
    asked: list[mcp_types.ElicitRequestParams] = []
    asking, withdrawn = anyio.Event(), anyio.Event()

    async def person(
        context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        asked.append(params)
        if len(asked) == 1:
            content: dict[str, str | int | float | bool | list[str] | None] = {
                "name": "Ann",
                "count": 2,
            }
            return mcp_types.ElicitResult(action="accept", content=content)
        await asked_until_withdrawn(asking, withdrawn)

    async with _served(workspace, person) as (client, runtime):
        result = await client.call_tool("mcp__fx__ask", {})
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "mcp__fx__ask", {})
            with anyio.fail_after(20):
                await asking.wait()
            tg.cancel_scope.cancel()
        with anyio.fail_after(5):
            await withdrawn.wait()
            for session in list(runtime.sessions):
                await session.settled()
        records = _records(runtime)
    assert not result.is_error, _text(result)
    assert _text(result) == (
        'accept {"name":"Ann","count":2,"gift":false,"color":"red"}'
    )
    params = asked[0]
    assert params.message == "fx asks: Order something?"
    assert isinstance(params, mcp_types.ElicitRequestFormParams)
    assert set(params.requested_schema["properties"]) == {
        "name",
        "count",
        "gift",
        "color",
    }
    assert records[-1].output == f"cancel\n[{ASKED}: withdrawn by the stop (cancel)]"


@pytest.mark.anyio
async def test_a_client_without_elicitation_has_it_declined_and_the_ledger_says_why(
    workspace: Path,
) -> None:
    async with _served(workspace) as (client, runtime):
        result = await client.call_tool("mcp__fx__ask", {})
        records = _records(runtime)
    why = (
        f"{ASKED}: declined (no one here can answer: the MCP client of tether mcp "
        "serve did not declare elicitation)"
    )
    assert _text(result) == f"decline\n[{why}]"
    assert records[-1].output == f"decline\n[{why}]"
