"""`tether mcp serve --http` in the test's own event loop, and the SDK's clients of it.

The server is `McpHttp` on an ephemeral loopback port; the clients are the MCP SDK's own
(`mcp.Client` over `streamable_http_client`, with the token in an `httpx2` client's
headers): by default a 2026-07-28 client (no MCP session; closing a request's stream is
its cancel), with `mode="legacy"` a 2025 one (an MCP session; `notifications/cancelled`).
The tasks extension has no client in the SDK: `TasksClient` is tether's own
(`tether.host._mcptask`), the one its MCP client uses.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tether._loopback import listen_loopback
from tether._mcpserve import McpHttp
from tether.host._mcptask import (
    CreatedTask as CreatedTask,
)
from tether.host._mcptask import (
    TasksClient as TasksClient,
)
from tether.host._mcptask import cancel_task as cancel_task
from tether.host._mcptask import follow_task
from tether.host._mcptask import get_task as get_task
from tether.runtime import Runtime

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence
    from pathlib import Path

    import mcp_types as types
    from anyio.streams.memory import MemoryObjectReceiveStream
    from mcp.client.client import ConnectMode
    from mcp.client.extension import ClientExtension

    from tether.host import Tool
    from tether.runtime import CallChanged, RuntimeEvent

__all__ = (
    "TasksClient",
    "client_of",
    "served_http",
    "text_of",
    "wait_state",
)

GRACE = 0.3


@asynccontextmanager
async def served_http(
    workspace: Path,
    tools: Sequence[Tool] | None = None,
    *,
    allow: Sequence[str] = (),
    ledger: Path | None = None,
    abort_bound: float = 1.0,
) -> AsyncIterator[tuple[McpHttp, MemoryObjectReceiveStream[RuntimeEvent]]]:
    """`McpHttp` serving `tools` (None: the built-ins) until the block ends, and the
    runtime's events from its start."""
    runtime = Runtime(
        workspace=workspace,
        tools=tools,
        permissions={"allow": list(allow)},
        grace=GRACE,
        ledger=ledger,
        abort_bound=abort_bound,
    )
    http = McpHttp(runtime, listen_loopback(0))
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(10):
            await tg.start(http.serve)
        try:
            with runtime.subscribe() as events:
                yield http, events
        finally:
            http.close()


@asynccontextmanager
async def client_of(
    http: McpHttp,
    *,
    mode: ConnectMode = "auto",
    extensions: Sequence[ClientExtension] = (),
) -> AsyncIterator[Client]:
    """The SDK's client of `http`, with its token."""
    headers = {"Authorization": f"Bearer {http.token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as web,
        Client(
            streamable_http_client(http.url, http_client=web),
            mode=mode,
            extensions=list(extensions) or None,
        ) as client,
    ):
        yield client


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def wait_state(
    events: Any, tool: str, state: str, *, bound: float = 10.0
) -> CallChanged:
    """The runtime's event for `tool` reaching `state` (events: `runtime.subscribe()`)."""
    from tether.runtime import CallChanged

    with anyio.fail_after(bound):
        async for event in events:
            if (
                isinstance(event, CallChanged)
                and event.tool == tool
                and str(event.state) == state
            ):
                return event
    raise AssertionError(f"the event stream ended before {tool} was {state}")


async def follow(
    session: Any, task_id: str, *, bound: float = 10.0, poll: float | None = None
) -> dict[str, Any]:
    """Poll `tasks/get` until the task's status is terminal; the last answer."""
    return await follow_task(session, task_id, bound=bound, poll=poll)
