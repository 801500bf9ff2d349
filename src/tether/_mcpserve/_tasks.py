"""The MCP tasks extension, served: a call as a task whose status tells the truth.

A `tools/call` on the 2026-07-28 wire whose client declares `io.modelcontextprotocol/tasks`
in the request's capabilities is answered at once with a task (`resultType: "task"`);
the call runs in the server's task group, not the request's. `tasks/get` reads the
task's status from the call's ledger record through the one mapping in
`tether._mcptasks`; `tasks/cancel` is the call's `Session.abort()` and is acknowledged
at once, and the status goes on telling what really happens: a read-only call ends
`cancelled`, a started write stays `working` until it ends, then `completed` with its
result.

Deliberately not here: the 2025-11-25 experimental tasks (their `tasks/cancel` must
mark a task `cancelled` even when its write runs on, which would hide the truth), so an
MCP session of that revision gets plain calls; `input_required` (no call here asks the
client: an `ask` rule is a refusal); `notifications/tasks/status` (clients poll).
Tasks are kept in memory for `ttl` seconds after they are made, and are found by their
unguessable ids alone: whoever holds an id (and the server's token) may read or cancel it.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, final

import anyio
import attrs

from .._mcptasks import TASKS_EXTENSION, TERMINAL_STATUSES, TaskStatus, task_status
from ..errors import ToolAborted
from ._server import McpServe, ServedCall

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext


__all__ = ("TaskTable",)


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


@attrs.define(eq=False)
class _Task:
    task_id: str
    serve: McpServe
    call: ServedCall
    born: float
    """When the task was made (`anyio.current_time()`)."""
    created_at: str
    updated_at: str
    status: TaskStatus = "working"
    cancel_asked: bool = False


@final
class TaskTable:
    """The tasks of one server, by id; their calls run on the `McpServe` that took them."""

    def __init__(self, *, ttl: int = 3600, poll_ms: int = 100) -> None:
        self.ttl = ttl
        """Seconds a task is kept after it is made (`ttlSeconds`)."""
        self.poll_ms = poll_ms
        """The polling interval suggested to clients."""
        self._tasks: dict[str, _Task] = {}

    @staticmethod
    def wanted(ctx: ServerRequestContext[Any, Any]) -> bool:
        """Whether this request's client takes a task for its call (it said so)."""
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return False
        caps = ctx.session.client_capabilities
        return caps is not None and TASKS_EXTENSION in (caps.extensions or {})

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: Any, serve: McpServe
    ) -> dict[str, Any] | None:
        """A task for this `tools/call`, or None when its client takes no task."""
        if not self.wanted(ctx):
            return None
        self._forget_old()
        call = serve.start_call(params.name, params.arguments)
        now = _now()
        task = _Task(
            secrets.token_urlsafe(18), serve, call, anyio.current_time(), now, now
        )
        self._tasks[task.task_id] = task
        return {"resultType": "task", **self._fields(task)}

    def _forget_old(self) -> None:
        oldest = anyio.current_time() - self.ttl
        for key, task in list(self._tasks.items()):
            if task.born < oldest and task.status in TERMINAL_STATUSES:
                del self._tasks[key]

    def _find(self, task_id: str) -> _Task:
        from mcp.shared.exceptions import MCPError
        from mcp_types import INVALID_PARAMS

        task = self._tasks.get(task_id)
        if task is None:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"no task {task_id!r} here (never made, or its time to live "
                "ran out)",
            )
        return task

    def _fields(self, task: _Task) -> dict[str, Any]:
        """The task as the wire has it; its status read now from its call."""
        call = task.call
        extra: dict[str, Any] = {}
        records = call.session.ledger_calls()
        if not call.done.is_set():
            # While a stop waits on the call, the abort report's reason; before, the
            # call's ledger state ("running" once the tool has started).
            status: TaskStatus = "working"
            if task.cancel_asked:
                why = "; ".join(p.why for p in call.session.pending())
                message = f"a cancel was asked; {why or 'ending now'}"
            else:
                message = records[-1].state.value if records else "requested"
        else:
            outcome = call.box[0] if call.box else None
            if records:
                status = task_status(records[-1].state)
            else:  # never reached the ledger: nothing ran
                status = (
                    "cancelled"
                    if outcome is None or isinstance(outcome, ToolAborted)
                    else "completed"
                )
            text, error = task.serve.answer(call, records)
            message = text
            if status == "completed":
                extra["result"] = {
                    "content": [{"type": "text", "text": text}],
                    "isError": error,
                }
            elif status == "failed":
                extra["error"] = {"code": -32603, "message": text}
        if status != task.status:
            task.status, task.updated_at = status, _now()
        return {
            "taskId": task.task_id,
            "status": status,
            **({"statusMessage": message} if message else {}),
            "createdAt": task.created_at,
            "lastUpdatedAt": task.updated_at,
            "ttlSeconds": self.ttl,
            "pollIntervalMilliseconds": self.poll_ms,
            **extra,
        }

    async def get(
        self, ctx: ServerRequestContext[Any, Any], params: Any
    ) -> dict[str, Any]:
        """`tasks/get`: the task with its status now (its result once completed)."""
        return self._fields(self._find(params.task_id))

    async def cancel(
        self, ctx: ServerRequestContext[Any, Any], params: Any
    ) -> dict[str, Any]:
        """`tasks/cancel`: the call's `Session.abort()`, acknowledged once it returns.

        The abort returns within the runtime's abort bound; the status goes on
        telling the truth (a started write ends `completed`). An unknown id is
        acknowledged too, as the extension says.
        """
        task = self._tasks.get(params.task_id)
        if task is not None and not task.call.done.is_set() and not task.cancel_asked:
            task.cancel_asked = True
            task.call.cancelled.append(True)
            await task.call.session.abort(
                source="user",
                reason=f"the MCP client cancelled task {task.task_id}",
            )
        return {}

    async def update(
        self, ctx: ServerRequestContext[Any, Any], params: Any
    ) -> dict[str, Any]:
        """`tasks/update`: acknowledged; no task here ever waits for input."""
        return {}

    def register(self, server: Any) -> None:
        """Serve `tasks/get`, `tasks/cancel` and `tasks/update` on `server`."""
        import mcp_types as types

        class _TaskParams(types.RequestParams):
            task_id: str
            request_state: str | None = None

        class _UpdateParams(_TaskParams):
            input_responses: dict[str, Any] | None = None

        server.add_request_handler("tasks/get", _TaskParams, self.get)
        server.add_request_handler("tasks/cancel", _TaskParams, self.cancel)
        server.add_request_handler("tasks/update", _UpdateParams, self.update)
        server.extensions[TASKS_EXTENSION] = {}
