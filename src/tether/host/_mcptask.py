"""The MCP tasks extension, as a client speaks it: a `tools/call` answered with a task.

The SDK (`mcp` 2.3) has no tasks client; this one is made of the SDK's own extension
points: a `ClientExtension` declaring `io.modelcontextprotocol/tasks` and claiming the
`resultType: "task"` answer, and `tasks/get` / `tasks/cancel` sent through the
client's session. A task is followed by polling `tasks/get` at the interval the server
suggests; a stop sends `tasks/cancel` once and the polling goes on, since a cancelled
task may end as what really happened (`completed`, with its result). What a status
means for the ledger is read from the one mapping, `tether._mcptasks`.

Not here: `tasks/result` (the 2026-07-28 form carries a completed task's result in
`tasks/get`), `input_required` (tether answers no task's question) and
`notifications/tasks/status` (tether polls).
"""

from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import anyio
import mcp_types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from pydantic import TypeAdapter

from .._mcptasks import TASKS_EXTENSION, TERMINAL_STATUSES

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

__all__ = (
    "CreatedTask",
    "TaskLost",
    "TasksClient",
    "cancel_task",
    "follow_task",
    "get_task",
    "offers_tasks",
)

_POLL_FLOOR = 0.01
_POLL_CEILING = 5.0
"""Bounds, in seconds, on the polling interval a server suggests."""


class _TaskParams(mcp_types.RequestParams):
    task_id: str


class _GetTask(mcp_types.Request[_TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: _TaskParams
    name_param: ClassVar[str | None] = "taskId"


class _CancelTask(mcp_types.Request[_TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: _TaskParams
    name_param: ClassVar[str | None] = "taskId"


class CreatedTask(mcp_types.Result):
    """A `tools/call` answered with a task (`resultType: "task"`)."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str


class TaskLost(Exception):
    """The task's status can no longer be read: its end is unknown."""


_ANY = TypeAdapter(dict[str, Any])


class TasksClient(ClientExtension):
    """The tasks extension on the SDK's client: declared, and a task followed to its end.

    `resolve` finishes a created task (default: followed to its terminal status, its
    result returned); the host gives its own, which cancels at a stop.
    """

    identifier = TASKS_EXTENSION

    def __init__(
        self,
        resolve: Callable[
            [CreatedTask, ClaimContext], Awaitable[mcp_types.CallToolResult]
        ]
        | None = None,
    ) -> None:
        self._resolve = resolve if resolve is not None else _to_the_end

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [
            ResultClaim(result_type="task", model=CreatedTask, resolve=self._resolve)
        ]


async def _to_the_end(
    created: CreatedTask, ctx: ClaimContext
) -> mcp_types.CallToolResult:
    task = await follow_task(ctx.session, created.task_id)
    return mcp_types.CallToolResult.model_validate(task["result"])


def offers_tasks(capabilities: mcp_types.ServerCapabilities | None) -> bool:
    """Whether a server's capabilities declare the tasks extension."""
    return capabilities is not None and TASKS_EXTENSION in (
        capabilities.extensions or {}
    )


async def get_task(session: Any, task_id: str) -> dict[str, Any]:
    """`tasks/get`: the task as the server says it is now."""
    request = _GetTask(params=_TaskParams(task_id=task_id))
    answer: dict[str, Any] = await session.send_request(request, _ANY)
    return answer


async def cancel_task(session: Any, task_id: str) -> None:
    """`tasks/cancel`, acknowledged (the task may still end otherwise)."""
    await session.send_request(_CancelTask(params=_TaskParams(task_id=task_id)), _ANY)


async def follow_task(
    session: Any,
    task_id: str,
    *,
    stop: anyio.Event | None = None,
    bound: float = math.inf,
    poll: float | None = None,
) -> dict[str, Any]:
    """Poll `tasks/get` until the task's status is terminal; the last answer.

    Between two polls: `poll` seconds, or the interval the server suggests. Once
    `stop` is set, `tasks/cancel` is sent (once) and the polling goes on until the
    task's real end. `bound`: seconds before the follow gives up (`TimeoutError`;
    none by default: a task is waited for until its end or a second stop).

    Raises:
        TaskLost: `tasks/get` could not be read (the connection broke, the server
            forgot the task): whether the task took effect is unknown.
    """
    cancel_sent = False
    with anyio.fail_after(bound):
        while True:
            if stop is not None and stop.is_set() and not cancel_sent:
                cancel_sent = True
                with contextlib.suppress(Exception):  # the next poll says what it means
                    await cancel_task(session, task_id)
            try:
                task = await get_task(session, task_id)
            except Exception as exc:
                raise TaskLost(_why(exc)) from exc
            if task.get("status") in TERMINAL_STATUSES:
                return task
            wait = task.get("pollIntervalMilliseconds", 100) / 1000
            if poll is not None:
                wait = poll
            wait = min(max(wait, _POLL_FLOOR), _POLL_CEILING)
            if stop is None or cancel_sent:
                await anyio.sleep(wait)
            else:
                with anyio.move_on_after(wait):
                    await stop.wait()


def _why(exc: BaseException) -> str:
    from mcp import MCPError

    if isinstance(exc, MCPError):
        return f"MCP error {exc.error.code}: {exc.error.message}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
