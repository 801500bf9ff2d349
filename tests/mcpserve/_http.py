"""`tether mcp serve --http` in the test's own event loop, and the SDK's clients of it.

The server is `McpHttp` on an ephemeral loopback port; the clients are the MCP SDK's own
(`mcp.Client` over `streamable_http_client`, with the token in an `httpx2` client's
headers): by default a 2026-07-28 client (no MCP session; closing a request's stream is
its cancel), with `mode="legacy"` a 2025 one (an MCP session; `notifications/cancelled`).
The tasks extension has no client in the SDK: `TasksClient` is a small one, made of the
SDK's own extension points (a `ClientExtension` claiming `resultType: "task"`, requests
sent through the session).
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from pydantic import TypeAdapter

from tether._loopback import listen_loopback
from tether._mcpserve import McpHttp
from tether._mcptasks import TASKS_EXTENSION, TERMINAL_STATUSES
from tether.runtime import Runtime

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence
    from pathlib import Path

    from anyio.streams.memory import MemoryObjectReceiveStream
    from mcp.client.client import ConnectMode

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
) -> AsyncIterator[tuple[McpHttp, MemoryObjectReceiveStream[RuntimeEvent]]]:
    """`McpHttp` serving `tools` (None: the built-ins) until the block ends, and the
    runtime's events from its start."""
    runtime = Runtime(
        workspace=workspace,
        tools=tools,
        permissions={"allow": list(allow)},
        grace=GRACE,
        ledger=ledger,
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


class _TaskParams(types.RequestParams):
    task_id: str


class _GetTask(types.Request[_TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: _TaskParams
    name_param: ClassVar[str | None] = "taskId"


class _CancelTask(types.Request[_TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: _TaskParams
    name_param: ClassVar[str | None] = "taskId"


class CreatedTask(types.Result):
    """A `tools/call` answered with a task (`resultType: "task"`)."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str


_ANY = TypeAdapter(dict[str, Any])


class TasksClient(ClientExtension):
    """The tasks extension on the SDK's client: declared, and a task followed to its end."""

    identifier = TASKS_EXTENSION

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [
            ResultClaim(result_type="task", model=CreatedTask, resolve=self._resolve)
        ]

    async def _resolve(
        self, created: CreatedTask, ctx: ClaimContext
    ) -> types.CallToolResult:
        task = await follow(ctx.session, created.task_id)
        return types.CallToolResult.model_validate(task["result"])


async def get_task(session: Any, task_id: str) -> dict[str, Any]:
    """`tasks/get`: the task as the server says it is now."""
    request = _GetTask(params=_TaskParams(task_id=task_id))
    answer: dict[str, Any] = await session.send_request(request, _ANY)
    return answer


async def cancel_task(session: Any, task_id: str) -> None:
    """`tasks/cancel`, acknowledged."""
    await session.send_request(_CancelTask(params=_TaskParams(task_id=task_id)), _ANY)


async def follow(
    session: Any, task_id: str, *, bound: float = 10.0, poll: float | None = None
) -> dict[str, Any]:
    """Poll `tasks/get` until the task's status is terminal; the last answer.

    Between two polls: `poll` seconds, or the interval the server suggests.
    """
    with anyio.fail_after(bound):
        while True:
            task = await get_task(session, task_id)
            if task["status"] in TERMINAL_STATUSES:
                return task
            wait = task.get("pollIntervalMilliseconds", 50) / 1000
            await anyio.sleep(wait if poll is None else poll)
