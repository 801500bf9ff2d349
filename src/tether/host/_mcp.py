"""MCP servers' tools as tether tools, through the official `mcp` SDK.

Servers are configured in the usual `mcpServers` shape, a table of named servers:

```toml
[mcpServers.time]                     # stdio: the host starts the command
command = "mcp-server-time"
args = ["--local-timezone", "UTC"]
env = { TZ = "UTC" }
writable = ["~/.cache/uv"]            # beyond the workspace, inside the wall
network = "none"                      # loopback only

[mcpServers.docs]                     # streamable HTTP
url = "http://127.0.0.1:8000/mcp"
headers = { Authorization = "Bearer ..." }   # or none: OAuth, if the server asks
```

`McpTools.open(config)` starts every server at once inside its own task group, lists
their tools and yields them as `mcp__<server>__<tool>` tools with the server's input
schema. A server that cannot start, or does not answer within `startup_timeout`, is
reported in `.problems` and skipped; it never stops the others.

A stdio server runs inside the wall every process tree gets (S15, `_proctree.py`) when
the containment is `namespace`: its own PID namespace (the server and whatever it
starts die with the session, or with the host), everything read-only but the session's
workspace, the entry's `writable` paths and a private temporary directory, the session's
sockets masked, tether's secrets withheld unless its `env` table names them. Its
standard streams stay the SDK's pipes (the supervisor's `--stdio`). Under the
`subreaper` fallback it starts as the SDK starts it, in a process group of its own, with
no wall (docs/tools-process.md).

Stop semantics (spec 01): MCP tools are `EXTENSION`. A stop before the call is sent
never sends it (the host does not start the tool); once `tools/call` is sent, a stop
sends MCP `notifications/cancelled` for the request at once and the call goes on
waiting for the server's real result. A second stop (kill now) ends the wait: the
host cancels the call's task, the server's connection is dropped (a stdio server's
process tree is killed, an HTTP server's streams closed) and the server is started
again when the next call needs it. With the opt-in `mcp_read_only_hint`, tools the
server annotates `readOnlyHint` become `READ_ONLY`: a stop cancels the waiting task,
and the SDK then sends `notifications/cancelled` before the cancellation goes on.
Progress notifications become `ctx.progress(...)`.

A server that offers the MCP tasks extension gets each call as a task (`_mcptask.py`):
a stop sends `tasks/cancel` instead of `notifications/cancelled`, and the task is
followed to its real end, read through `tether._mcptasks`. A call whose answer is lost
with its connection (a broken response stream, a task that can no longer be read)
ends `end_unknown` (`ToolFailed(end_unknown=True)`) and is never sent again.

Elicitation (`elicitation/create`, a server asking the person during a call) goes to
the elicitor given to `McpTools.open` (`Runtime(elicitor=...)`), named with the call
that was running on that server; the capability is advertised only when there is
one. A field an accepted form leaves out is sent with the form's default (SEP-1034).
A stop that reaches the call withdraws a pending question (the server is told
`cancel`). With no elicitor, or a URL-mode question, the answer is `decline`, and the
call's output and result say why.

An HTTP server that answers 401 is authorised with OAuth (`_mcpauth.py`): the SDK's
flow on the tokens `tether mcp login` saved in the account's state, refreshed when
they expire. A server that wants the person's authorisation fails the call with one
line naming `tether mcp login NAME`; at start it is skipped with that line, unless a
person at a terminal may authorise it there (`_mcpperson.py`, the first `tether chat`):
asked once, and connected again at once if they did.

The request id a cancel names is learnt from the client's own write of the
`tools/call` message (`_Tap`): the SDK mints it and does not return it.
"""

from __future__ import annotations

import contextvars
import json
import math
import os
import re
import signal
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import (
    AbstractAsyncContextManager,
    AsyncExitStack,
    asynccontextmanager,
    suppress,
)
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self, TextIO

import anyio
import anyio.abc
import attrs
import psutil

from .. import _extras

try:  # the SDK is an extra: without it, the line that says how to install it
    import httpx2
    import jsonschema  # type: ignore[import-untyped]
    import mcp_types
    from mcp import Client, MCPError, StdioServerParameters
    from mcp.client.stdio import get_default_environment
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.message import SessionMessage
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    from ._mcpauth import McpAuth, OAuthClient
    from ._mcptask import CreatedTask, TaskLost, TasksClient, follow_task, offers_tasks
except ImportError as error:
    raise ImportError(_extras.missing("mcp", "tether's MCP tools")) from error

from .._env import TetherEnv
from .._mcptasks import call_state
from ..errors import InvalidInput, ToolAborted, ToolFailed, UsageError
from ._contain import Network, containment_now, supervisor_argv, tree_env
from ._mcpperson import Authoriser, authoriser
from ._proctree import namespace_wall, resolve_command
from ._protocol import ElicitationAnswer, ElicitationRequest, Elicitor, NoOneToAsk
from ._tool import StopClass, Tool, ToolContext

if TYPE_CHECKING:
    from types import TracebackType

    from mcp.client._transport import TransportStreams, WriteStream
    from mcp.client.extension import ClaimContext
    from mcp.client.session import ClientRequestContext

    from .._config import Config

__all__ = (
    "McpProblem",
    "McpTool",
    "McpTools",
    "ServerSpec",
    "parse_spec",
    "server_name",
)

_NAME_RE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_PAGES = 100
_STDERR_TAIL = 800
_DROP_BOUND = 2.0
"""Longest wait, in seconds, for a dropped server's process tree to be gone."""
_EXIT_WAIT = 0.5
"""How long a closing stdio server has to exit by itself once its stdin closes."""
_LINE_LIMIT = 64 * 1024 * 1024
"""Longest message line a stdio server may send; a longer one ends the connection."""


@attrs.frozen
class McpProblem:
    """A server that was skipped or failed, and why."""

    server: str
    reason: str

    def __str__(self) -> str:
        return f"MCP server {self.server!r}: {self.reason}"


@attrs.frozen(kw_only=True)
class ServerSpec:
    name: str
    transport: Literal["stdio", "http"]
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = attrs.field(factory=dict)
    cwd: str | None = None
    writable: tuple[Path, ...] = ()
    network: Network = "host"
    url: str = ""
    headers: Mapping[str, str] = attrs.field(factory=dict)
    oauth: OAuthClient | None = None
    """The entry's `oauth` table: the client tether is at the authorisation server."""


def _strings(value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} must be a list of strings")
    return tuple(value)


def _table(value: object, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(f"{what} must be a table of strings")
    return dict(value)


def server_name(name: object) -> str:
    """A configured server's name as tether uses it (tool names, token files)."""
    return _NAME_RE.sub("_", str(name))


def parse_spec(name: str, raw: object) -> ServerSpec | None:
    """Return the server's spec, None when it is disabled.

    Raises:
        ValueError: the entry is malformed; the message says how.
    """
    if not isinstance(raw, dict):
        raise ValueError("the entry must be a table with `command` or `url`")
    if raw.get("disabled") is True:
        return None
    kind = raw.get("type", raw.get("transport"))
    if kind == "sse":
        raise ValueError("the SSE transport is not supported; use streamable HTTP")
    if "command" in raw:
        command = raw["command"]
        if not isinstance(command, str) or not command:
            raise ValueError("`command` must be a non-empty string")
        cwd = raw.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise ValueError("`cwd` must be a string")
        writable = []
        for entry in _strings(raw.get("writable", []), "`writable`"):
            path = Path(entry).expanduser()
            if not path.is_absolute():
                raise ValueError(
                    f"`writable` paths must be absolute or start with ~ ({entry!r})"
                )
            writable.append(path)
        network = raw.get("network", "host")
        if network not in ("host", "none"):
            raise ValueError('`network` must be "host" or "none"')
        return ServerSpec(
            name=name,
            transport="stdio",
            command=command,
            args=_strings(raw.get("args", []), "`args`"),
            env=_table(raw.get("env", {}), "`env`"),
            cwd=cwd,
            writable=tuple(writable),
            network=network,
        )
    if "url" in raw:
        url = raw["url"]
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError("`url` must be an http:// or https:// URL")
        oauth = raw.get("oauth")
        return ServerSpec(
            name=name,
            transport="http",
            url=url,
            headers=_table(raw.get("headers", {}), "`headers`"),
            oauth=None if oauth is None else OAuthClient.parse(oauth),
        )
    raise ValueError("the entry needs `command` (stdio) or `url` (streamable HTTP)")


@attrs.define(eq=False)
class _Sent:
    """One `tools/call` of ours: its JSON-RPC id once the client has written it."""

    ctx: ToolContext
    tool: str
    request_id: mcp_types.RequestId | None = None
    notes: list[str] = attrs.field(factory=list)
    """Questions tether answered for the person (declined, withdrawn), and why."""
    written: anyio.Event = attrs.field(factory=anyio.Event)

    def note(self, text: str) -> None:
        """Say it now (the call's output) and with the result (the ledger, the model)."""
        self.notes.append(text)
        self.ctx.progress(text)


_SENDING: contextvars.ContextVar[_Sent | None] = contextvars.ContextVar(
    "tether_mcp_sending", default=None
)
"""The call the current task is sending (the tap notes its request id there)."""


class _Tap:
    """The client's write stream, noting the id of each `tools/call` a call sends."""

    def __init__(self, inner: WriteStream[SessionMessage]) -> None:
        self._inner = inner

    async def send(self, item: SessionMessage, /) -> None:
        sent = _SENDING.get()
        message = item.message
        if (
            sent is not None
            and isinstance(message, mcp_types.JSONRPCRequest)
            and message.method == "tools/call"
        ):
            sent.request_id = message.id
            try:
                await self._inner.send(item)
            finally:
                # A write that was interrupted may still have been delivered: it
                # counts as sent, so its cancel is sent too.
                sent.written.set()
            return
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


@asynccontextmanager
async def _tapped(
    transport: AbstractAsyncContextManager[TransportStreams],
) -> AsyncIterator[TransportStreams]:
    async with transport as (read, write):
        yield read, _Tap(write)


@attrs.define(eq=False)
class _Server:
    """One configured server: its client while connected, None otherwise.

    A dropped connection (a second stop gave up on a call) is made again when the next
    call needs it (`connected()`); `_serve` owns every connection.
    """

    name: str
    client: Client | None = None
    process: anyio.abc.Process | None = None
    """A stdio server's process (the supervisor, inside the wall), while connected."""
    failure: str = ""
    """Why the last connection could not be made."""
    _drop: anyio.Event = attrs.field(factory=anyio.Event)
    _wanted: anyio.Event = attrs.field(factory=anyio.Event)
    _changed: anyio.Event = attrs.field(factory=anyio.Event)
    closed: bool = False
    elicitor: Elicitor | None = None
    """Who answers the server's questions (None: they are declined)."""
    running: list[_Sent] = attrs.field(factory=list)
    """The calls this server is running now, oldest first."""
    auth: McpAuth | None = None
    """An HTTP server's OAuth (`_mcpauth.py`), while connected; None for stdio."""

    def refused(self) -> str:
        """Why the server refused tether and no one here can authorise it ("" if not)."""
        return self.auth.refused if self.auth is not None else ""

    def changed(self) -> None:
        """Wake every call waiting for the connection."""
        self._changed.set()
        self._changed = anyio.Event()

    async def connected(self, timeout: float) -> Client:
        """The server's client, connecting again if a stop dropped it.

        Raises:
            ToolFailed: the server is closed, or could not be started again.
        """
        with anyio.move_on_after(timeout):
            while self.client is None and not self.closed:
                changed = self._changed
                self._wanted.set()
                await changed.wait()
                if self.client is None and self.failure:
                    break
        if self.client is None:
            why = f": {self.failure}" if self.failure else ""
            raise ToolFailed(f"MCP server {self.name!r} is not running{why}")
        return self.client

    async def drop(self) -> None:
        """End the connection now: kill a stdio server's tree, close an HTTP stream.

        Returns once the tree is gone (or after `_DROP_BOUND`); `_serve` then closes
        the client and waits for the next call to connect again.
        """
        process = self.process
        self.client = None
        self.process = None
        self._drop.set()
        if process is not None:
            await _kill_tree(process, _DROP_BOUND)

    async def wait_drop(self) -> None:
        await self._drop.wait()
        self._drop = anyio.Event()

    async def wait_wanted(self) -> None:
        await self._wanted.wait()
        self._wanted = anyio.Event()

    async def elicit(
        self, context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        """Answer the server's `elicitation/create`: the elicitor's answer, or decline.

        The question belongs to the call being sent from this task (the SDK's
        multi-round-trip driver), else to the calls the server is running (one, as a
        rule; it cannot say which of several asked). It is withdrawn (`cancel`) once a
        stop has reached every one of them.
        """
        sending = _SENDING.get()
        calls = [sending] if sending is not None else list(self.running)
        if not calls:
            return mcp_types.ElicitResult(action="decline")
        first = calls[0]
        asked = f"{self.name} asked: {params.message}"
        if not isinstance(params, mcp_types.ElicitRequestFormParams):
            first.note(
                f"{asked}: declined (only forms are answered; URL: {params.url})"
            )
            return mcp_types.ElicitResult(action="decline")
        elicitor = self.elicitor
        if elicitor is None:
            first.note(f"{asked}: declined (no one here can answer)")
            return mcp_types.ElicitResult(action="decline")
        request = ElicitationRequest(
            session_id=first.ctx.session_id,
            call_id=first.ctx.call_id,
            tool=first.tool,
            server=self.name,
            message=params.message,
            schema=json.loads(json.dumps(params.requested_schema)),
        )
        answers: list[ElicitationAnswer] = []
        failure = ""
        for call in calls:  # a stop's report then says the question is withdrawn
            call.ctx.ask_person(asked)
        try:
            async with anyio.create_task_group() as tg:

                async def ask() -> None:
                    nonlocal failure
                    try:
                        answers.append(await elicitor(request))
                    except NoOneToAsk as exc:
                        failure = f"no one here can answer: {exc}"
                    except Exception as exc:  # the elicitor's own failure: a decline
                        failure = f"the elicitor raised {type(exc).__name__}: {exc}"
                    tg.cancel_scope.cancel()

                async def withdraw() -> None:
                    for call in calls:
                        await call.ctx.cancelled.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(ask)
                tg.start_soon(withdraw)
        finally:
            for call in calls:
                call.ctx.ask_person("")
        if failure:
            first.note(f"{asked}: declined ({failure})")
            return mcp_types.ElicitResult(action="decline")
        if not answers:
            first.note(f"{asked}: withdrawn by the stop (cancel)")
            return mcp_types.ElicitResult(action="cancel")
        answer = answers[0]
        if answer.action != "accept":
            return mcp_types.ElicitResult(action=answer.action)
        # A field the person left empty takes the form's default (SEP-1034).
        fields = request.schema.get("properties", {})
        defaults = {
            name: field["default"]
            for name, field in fields.items()
            if isinstance(field, dict) and "default" in field
        }
        content = {**defaults, **answer.content}
        return mcp_types.ElicitResult(action="accept", content=content)


def _tree(pid: int) -> list[psutil.Process]:
    """The process and every descendant of it, as psutil sees them now."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


async def _kill_tree(process: anyio.abc.Process, bound: float) -> None:
    """SIGKILL a stdio server's whole tree and wait (bounded) until it is gone.

    Under the namespace containment the process is the supervisor: its death takes
    the namespace, and everything in it, with it. Under the fallback the server has a
    process group of its own; descendants that left it are found by walking the tree.
    """
    procs = _tree(process.pid)
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    for proc in procs:
        with suppress(psutil.Error):
            proc.kill()
    # Polled: nothing wakes a waiter when a process that is not our child dies, and
    # `process.wait()` also waits for pipes a survivor may hold.
    with anyio.move_on_after(bound):
        while process.returncode is None or not all(_gone(p) for p in procs):  # noqa: ASYNC110
            await anyio.sleep(0.01)


def _progress_text(progress: float, total: float | None, message: str | None) -> str:
    count = f"{progress:g}/{total:g}" if total is not None else f"{progress:g}"
    return f"[{count}] {message}" if message else f"[{count}]"


def _block_text(block: mcp_types.ContentBlock) -> str:
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
        kind = "image" if isinstance(block, mcp_types.ImageContent) else "audio"
        return f"[{kind}: {block.mime_type}, {len(block.data) * 3 // 4} bytes]"
    if isinstance(block, mcp_types.ResourceLink):
        return f"[resource: {block.uri}]"
    resource = block.resource
    if isinstance(resource, mcp_types.TextResourceContents):
        return resource.text
    return f"[resource: {resource.uri}, {resource.mime_type or 'binary'}]"


def _result_text(result: mcp_types.CallToolResult) -> str:
    parts = [_block_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _error_path(error: Any) -> str:
    parts = [str(p) for p in error.absolute_path]
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [f for f in error.validator_value if f not in error.instance]
        if missing:
            parts.append(str(missing[0]))
    return ".".join(parts) or "<input>"


class McpTool(Tool):
    """One tool of an MCP server, called through the server's session."""

    def __init__(
        self,
        *,
        server: _Server,
        listed: mcp_types.Tool,
        read_only_hint: bool,
        startup_timeout: float = 10.0,
    ) -> None:
        self._server = server
        self.startup_timeout = startup_timeout
        """How long a call waits for its server to be started again after a drop."""
        self.remote_name = listed.name
        self.name = _NAME_RE.sub("_", f"mcp__{server.name}__{listed.name}")
        self.description = listed.description or listed.title or ""
        self._schema = dict(listed.input_schema)
        annotations = listed.annotations
        self.read_only = bool(annotations is not None and annotations.read_only_hint)
        """The server annotates the tool `readOnlyHint`."""
        self.stop_class = (
            StopClass.READ_ONLY
            if read_only_hint and self.read_only
            else StopClass.EXTENSION
        )
        validator_cls = jsonschema.validators.validator_for(self._schema)
        validator_cls.check_schema(self._schema)
        self._validator = validator_cls(self._schema)

    @property
    def server(self) -> str:
        """The configured name of the tool's server."""
        return self._server.name

    def input_schema(self) -> dict[str, Any]:
        """Return the input schema the server published for the tool."""
        return json.loads(json.dumps(self._schema))  # type: ignore[no-any-return]

    def validate(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Check the input against the server's schema (JSON Schema, `jsonschema`).

        An optional field given `null` that its schema does not take is left out.

        Raises:
            InvalidInput: the input does not match; `.path` names the field.
        """
        if not isinstance(raw, Mapping):
            raise InvalidInput("input must be a JSON object", path="<input>")
        value = dict(raw)
        # An optional field given null whose schema does not take null is left out,
        # as if omitted (as models and MCP clients send a field they leave unset).
        required = self._schema.get("required", ())
        for error in self._validator.iter_errors(value):
            field = list(error.absolute_path)
            if error.instance is None and len(field) == 1 and field[0] not in required:
                value.pop(field[0], None)
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(value))
        if error is not None:
            path = _error_path(error)
            raise InvalidInput(f"invalid input at {path}: {error.message}", path=path)
        return value

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        """Send `tools/call` and wait for the server's real result.

        Raises:
            ToolFailed: the server is gone, answered with an error, or the tool
                reported `isError`.
        """
        server = self._server
        client = server.client
        if client is None:
            client = await server.connected(self.startup_timeout)

        async def on_progress(
            progress: float, total: float | None, message: str | None
        ) -> None:
            ctx.progress(_progress_text(progress, total, message))

        sent = _Sent(ctx, self.name)
        token = _SENDING.set(sent)
        server.running.append(sent)
        result: mcp_types.CallToolResult | Exception
        try:
            async with anyio.create_task_group() as tg:
                # A task's cancel is `tasks/cancel` (`_follow_task`); a cancel of its
                # `tools/call` would close the request's stream before the task is told.
                if self.stop_class is StopClass.EXTENSION and not _as_task(client):
                    tg.start_soon(_cancel_at_stop, client, ctx, sent)
                try:
                    result = await client.call_tool(
                        self.remote_name, dict(args), progress_callback=on_progress
                    )
                except Exception as exc:  # raised below, not wrapped in a group
                    result = exc
                finally:
                    tg.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            if self.stop_class is StopClass.EXTENSION and sent.written.is_set():
                # Given up (a second stop) or the host is closing: the server never
                # answered. It is dropped, its tree gone before the call ends, and
                # started again for the next call.
                with anyio.CancelScope(shield=True):
                    await server.drop()
            raise
        finally:
            _SENDING.reset(token)
            server.running.remove(sent)
        if isinstance(result, Exception) and sent.written.is_set() and _lost(result):
            # Sent, and its answer lost with the stream: never sent again, and whether
            # it took effect is unknown.
            raise ToolFailed(
                f"{self.name}: the server's connection broke before it answered "
                f"({_describe(result)}); whether the call took effect is unknown",
                end_unknown=True,
            ) from None
        if isinstance(result, MCPError) and server.refused():
            raise ToolFailed(
                f"{self.name}: MCP server {server.name!r} {server.refused()}"
            ) from None
        if isinstance(result, MCPError):
            raise ToolFailed(f"{self.name}: {result.error.message}") from None
        if isinstance(result, anyio.BrokenResourceError | anyio.ClosedResourceError):
            raise ToolFailed(f"{self.name}: the server's connection closed") from None
        if isinstance(result, Exception):
            raise result
        text = "\n".join([_result_text(result), *(f"[{n}]" for n in sent.notes)])
        if result.is_error:
            raise ToolFailed(text or f"{self.name} reported an error")
        return text


def _as_task(client: Client) -> bool:
    """Whether the client's calls to this server are made as tasks (it offers them)."""
    session = client.session
    return session.protocol_version in MODERN_PROTOCOL_VERSIONS and offers_tasks(
        session.server_capabilities
    )


def _lost(result: Exception) -> bool:
    """Whether a call's answer was lost with its connection (its end is unknown)."""
    if isinstance(result, MCPError):
        return result.error.code == mcp_types.CONNECTION_CLOSED
    return isinstance(
        result,
        anyio.BrokenResourceError | anyio.ClosedResourceError | httpx2.TransportError,
    )


async def _follow_task(
    created: CreatedTask, claim: ClaimContext
) -> mcp_types.CallToolResult:
    """Follow a call's task to its real end; a stop sends `tasks/cancel` and waits on.

    The end is read through `tether._mcptasks`: `completed` is the result (a
    cancelled write that ran to its end included), `cancelled` ends the call
    aborted, `failed` failed, and a status that can no longer be read unknown.
    """
    sent = _SENDING.get()
    stop = sent.ctx.cancelled if sent is not None else None
    name = sent.tool if sent is not None else claim.tool_name
    try:
        task = await follow_task(claim.session, created.task_id, stop=stop)
    except TaskLost as exc:
        raise ToolFailed(
            f"{name}: task {created.task_id} can no longer be read ({exc}); whether "
            "the call took effect is unknown",
            end_unknown=True,
        ) from None
    status, message = task["status"], task.get("statusMessage") or ""
    result = task.get("result")
    is_error = isinstance(result, dict) and result.get("isError") is True
    state = call_state(status, is_error=is_error)
    match state:
        case "succeeded" | "failed" if status == "completed":
            if not isinstance(result, dict):
                raise ToolFailed(
                    f"{name}: task {created.task_id} completed with no result; "
                    "what it did is unknown",
                    end_unknown=True,
                )
            return mcp_types.CallToolResult.model_validate(result)
        case "aborted":
            raise ToolAborted(f"{name}: the server ended its task cancelled: {message}")
        case "failed":
            error = task.get("error") or {}
            why = error.get("message") if isinstance(error, dict) else None
            raise ToolFailed(f"{name}: its task failed: {why or message or status}")
        case _:  # terminal statuses only reach here
            raise ToolFailed(f"{name}: task ended {status!r}", end_unknown=True)


async def _cancel_at_stop(client: Client, ctx: ToolContext, sent: _Sent) -> None:
    """Send `notifications/cancelled` for the call's request once a stop reaches it.

    The call itself goes on waiting for the server's answer: an EXTENSION call is
    never abandoned on a first stop.
    """
    await ctx.cancelled.wait()
    if not sent.written.is_set():
        await sent.written.wait()
    # Read with no checkpoint after the stop: a question the stop withdrew is
    # answered by a retried `tools/call` (2026-07-28), which must not be the one named.
    request_id = sent.request_id
    assert request_id is not None
    note = mcp_types.CancelledNotification(
        params=mcp_types.CancelledNotificationParams(
            request_id=request_id, reason="the person stopped the turn"
        )
    )
    with suppress(Exception):  # a closed connection: the call learns it by itself
        await client.session.send_notification(note)


@attrs.define(eq=False)
class _Slot:
    ready: anyio.Event = attrs.field(factory=anyio.Event)
    tools: list[McpTool] = attrs.field(factory=list)
    problem: McpProblem | None = None

    def done(self, tools: list[McpTool], problem: McpProblem | None = None) -> None:
        if not self.ready.is_set():
            self.tools, self.problem = tools, problem
            self.ready.set()


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return f"MCP error {exc.error.code}: {exc.error.message}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _stderr_tail(errlog: TextIO) -> str:
    try:
        errlog.seek(0)
        text = errlog.read().strip()
    except (OSError, ValueError):
        return ""
    if not text:
        return ""
    return "; stderr: " + text[-_STDERR_TAIL:]


@attrs.define(eq=False)
class McpTools:
    """The configured MCP servers' tools, live while `open()` is entered."""

    tools: list[McpTool] = attrs.field(factory=list)
    """Every tool of every server that started, in configuration order."""
    problems: list[McpProblem] = attrs.field(factory=list)
    """Servers that were skipped, failed to start, or failed later."""
    _closing: anyio.Event = attrs.field(factory=anyio.Event, alias="closing")
    _workspace: Path = attrs.field(factory=Path.cwd, alias="workspace")
    _elicitor: Elicitor | None = attrs.field(default=None, alias="elicitor")
    _authorise: Authoriser | None = attrs.field(default=None, alias="authorise")
    _asked: set[str] = attrs.field(factory=set)
    """Servers the person was asked to authorise (once each)."""

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        config: Config,
        *,
        startup_timeout: float = 10.0,
        workspace: Path | None = None,
        elicitor: Elicitor | None = None,
        authorise: Authoriser | None = None,
    ) -> AsyncIterator[McpTools]:
        """Start the configured servers and yield their tools; stop them on exit.

        Stdio servers run walled, `workspace` (default: the working directory) the
        folder they may write. A server that fails to start (bad entry, command not
        found, no answer within `startup_timeout` seconds, a protocol error) is
        reported in `.problems`. `elicitor` answers the servers' questions to the
        person (None: they are declined, and the capability is not advertised).
        `authorise` (default: the one `person_authorises` set, if any) is asked once
        for each server whose first connection is refused for want of authorisation.
        """
        mcp = cls(
            workspace=(workspace or Path.cwd()).absolute(),
            elicitor=elicitor,
            authorise=authorise if authorise is not None else authoriser(),
        )
        read_only_hint = config.mcp_read_only_hint
        slots: list[_Slot] = []
        async with anyio.create_task_group() as tg:
            for name, raw in config.mcp_servers.items():
                clean = server_name(name)
                try:
                    spec = parse_spec(clean, raw)
                except ValueError as exc:
                    mcp.problems.append(McpProblem(str(name), str(exc)))
                    continue
                if spec is None:
                    continue
                if "__" in clean or not clean:
                    mcp.problems.append(
                        McpProblem(
                            str(name), "server names may not be empty or hold '__'"
                        )
                    )
                    continue
                slot = _Slot()
                slots.append(slot)
                tg.start_soon(mcp._serve, spec, slot, read_only_hint, startup_timeout)
            for slot in slots:
                await slot.ready.wait()
            seen: set[str] = set()
            for slot in slots:
                if slot.problem is not None:
                    mcp.problems.append(slot.problem)
                for tool in slot.tools:
                    if tool.name in seen:
                        mcp.problems.append(
                            McpProblem(
                                tool.server, f"tool name {tool.name} is taken; skipped"
                            )
                        )
                        continue
                    seen.add(tool.name)
                    mcp.tools.append(tool)
            try:
                yield mcp
            finally:
                mcp._closing.set()

    async def _serve(
        self,
        spec: ServerSpec,
        slot: _Slot,
        read_only_hint: bool,
        startup_timeout: float,
    ) -> None:
        """Own one server's connections from start to shutdown (one task per server).

        The first connection lists the tools; one a stop dropped is made again when a
        call asks for it, until the tools are closed.
        """
        server = _Server(spec.name, elicitor=self._elicitor)
        with anyio.CancelScope() as life:

            async def end_at_close() -> None:
                await self._closing.wait()
                server.closed = True
                server.changed()
                life.cancel()

            async with anyio.create_task_group() as tg:
                tg.start_soon(end_at_close)
                try:
                    while await self._connect(
                        spec, server, slot, read_only_hint, startup_timeout
                    ):
                        if slot.ready.is_set():  # else: authorised just now
                            await server.wait_wanted()
                finally:
                    server.client = None
                    server.closed = True
                    tg.cancel_scope.cancel()

    async def _connect(
        self,
        spec: ServerSpec,
        server: _Server,
        slot: _Slot,
        read_only_hint: bool,
        startup_timeout: float,
    ) -> bool:
        """Make one connection and hold it until it is dropped; False: give up.

        True with the slot not ready: the first connection was refused and the person
        has just authorised the server; connect again at once.
        """
        first = not slot.ready.is_set()
        made = again = False
        errlog = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115
        scope = anyio.CancelScope(deadline=anyio.current_time() + startup_timeout)
        try:
            with scope:
                async with AsyncExitStack() as stack:
                    client = await stack.enter_async_context(
                        await _client_for(spec, stack, errlog, self._workspace, server)
                    )
                    if server.elicitor is None:
                        _decline_unadvertised(client, server)
                    if first:
                        tools = await _list_tools(
                            server,
                            client,
                            read_only_hint,
                            self.problems,
                            startup_timeout,
                        )
                    scope.deadline = math.inf
                    server.client, server.failure = client, ""
                    made = True
                    server.changed()
                    if first:
                        slot.done(tools)
                    await server.wait_drop()
                    server.client = None
            return True
        except Exception as exc:
            server.client = None
            refused = server.refused()
            if first and refused:
                again = await self._ask_person(spec)
                if again:
                    return True
            why = (
                f"{refused}; its tools come with the next start"
                if refused and first
                else refused or _describe(exc) + _stderr_tail(errlog)
            )
            problem = McpProblem(spec.name, why)
            server.failure = problem.reason
            server.changed()
            if slot.ready.is_set():
                self.problems.append(problem)
            slot.done([], problem)
            return made or not first
        finally:
            errlog.close()
            if scope.cancelled_caught:
                server.failure = f"no answer within {startup_timeout:g} s"
                server.changed()
                slot.done([], McpProblem(spec.name, server.failure))
            if not again:
                slot.done(
                    [], McpProblem(spec.name, "the session ended before it started")
                )

    async def _ask_person(self, spec: ServerSpec) -> bool:
        """Whether the person at the terminal authorised `spec` now (asked once)."""
        if self._authorise is None or spec.name in self._asked:
            return False
        self._asked.add(spec.name)
        return await self._authorise(spec.name, spec.url)


async def _walled(spec: ServerSpec, workspace: Path) -> StdioServerParameters:
    """The SDK's parameters for a stdio server, inside the wall (S15) if need be.

    The server starts inside the wall when the containment is `namespace`.

    Raises:
        OSError: the command is not found, or the entry asks for what the fallback
            cannot give (`network = "none"`).
    """
    env = {**get_default_environment(), TetherEnv.AGENT: "1", **spec.env}
    try:
        found = await containment_now()
    except UsageError as exc:
        raise OSError(str(exc)) from None
    if found.kind != "namespace":
        if spec.network != "host":
            raise OSError(
                f'network = "none" needs the namespace containment ({found.reason})'
            )
        return StdioServerParameters(
            command=spec.command, args=list(spec.args), env=env, cwd=spec.cwd
        )
    cwd = Path(spec.cwd) if spec.cwd is not None else workspace
    executable = resolve_command(spec.command, env, cwd)
    walls, options, tmp = namespace_wall(
        executable,
        env=env,
        workspace=workspace,
        writable=spec.writable,
        network=spec.network,
    )
    # The server's streams are the SDK's pipes; the host's death kills the tree.
    options += ["--stdio", f"--parent={os.getpid()}"]
    argv = supervisor_argv(
        "namespace", walls, executable, [spec.command, *spec.args], options=options
    )
    return StdioServerParameters(
        command=argv[0],
        args=argv[1:],
        env={**tree_env(env, pass_env=spec.env), "TMPDIR": tmp},
        cwd=cwd,
    )


async def _client_for(
    spec: ServerSpec,
    stack: AsyncExitStack,
    errlog: TextIO,
    workspace: Path,
    server: _Server,
) -> Client:
    info = mcp_types.Implementation(name="tether", version="0.1.0")
    # The SDK advertises elicitation exactly when a callback is given.
    asks = server.elicit if server.elicitor is not None else None
    if spec.transport == "stdio":
        params = await _walled(spec, workspace)
        return Client(
            _tapped(_stdio(params, errlog, server)),
            client_info=info,
            cache=None,
            elicitation_callback=asks,
            extensions=[TasksClient(_follow_task)],
        )
    # A server given its own Authorization header is not one tether authorises.
    own = any(key.lower() == "authorization" for key in spec.headers)
    server.auth = None if own else McpAuth.unattended(spec.name, spec.url, spec.oauth)
    http = await stack.enter_async_context(
        httpx2.AsyncClient(
            headers=dict(spec.headers),
            timeout=httpx2.Timeout(30.0, read=300.0),
            auth=server.auth,
        )
    )
    transport = streamable_http_client(spec.url, http_client=http)
    return Client(
        _tapped(transport),
        client_info=info,
        cache=None,
        elicitation_callback=asks,
        extensions=[TasksClient(_follow_task)],
    )


def _decline_unadvertised(client: Client, server: _Server) -> None:
    """With no elicitor, a server that asks anyway is declined, with the reason.

    The capability was not advertised (no callback at the handshake); the SDK's
    default would answer an error, which a server reports as its tool failing.
    """
    session = client.session
    if hasattr(session, "_elicitation_callback"):
        session._elicitation_callback = server.elicit


@asynccontextmanager
async def _stdio(
    params: StdioServerParameters, errlog: TextIO, server: _Server
) -> AsyncIterator[TransportStreams]:
    """The stdio transport, holding the server's process so a stop can kill its tree.

    Newline-delimited JSON-RPC on the server's stdin and stdout, as the SDK's
    `stdio_client` speaks it; that one keeps its process to itself. The server runs
    in a session of its own. Closing ends the stdin, gives the server `_EXIT_WAIT`
    to exit, then kills its tree: a hung server never holds a close.
    """
    process = await anyio.open_process(
        [params.command, *params.args],
        env=params.env,
        stderr=errlog,
        cwd=params.cwd,
        start_new_session=True,
    )
    server.process = process
    assert process.stdin is not None
    assert process.stdout is not None
    stdin, stdout = process.stdin, process.stdout
    read_in, read_out = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_in, write_out = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        buffer = b""
        async with read_in:
            with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                async for chunk in stdout:
                    *lines, buffer = (buffer + chunk).split(b"\n")
                    if len(buffer) > _LINE_LIMIT:
                        await read_in.send(
                            ValueError("the server sent a line too long")
                        )
                        return
                    for line in lines:
                        if line.strip():
                            await read_in.send(_parse(line))

    async def writer() -> None:
        with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            async with write_out:
                async for item in write_out:
                    text = item.message.model_dump_json(
                        by_alias=True, exclude_unset=True
                    )
                    await stdin.send(text.encode() + b"\n")
        # The server cannot be written to: the session sees the end of the stream.
        await read_in.aclose()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            tg.start_soon(writer)
            try:
                yield read_out, write_in
            finally:
                with anyio.CancelScope(shield=True):
                    await _close_server(process)
                tg.cancel_scope.cancel()
    finally:
        if server.process is process:
            server.process = None
        with anyio.CancelScope(shield=True):
            for stream in (read_out, write_in):
                await stream.aclose()
            await process.aclose()


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line))
    except ValueError as exc:
        return exc


async def _close_server(process: anyio.abc.Process) -> None:
    """Close the server's stdin, let it exit (bounded), then kill its tree."""
    assert process.stdin is not None
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    with anyio.move_on_after(_EXIT_WAIT):
        while process.returncode is None:  # noqa: ASYNC110 (as in `_kill_tree`)
            await anyio.sleep(0.01)
    await _kill_tree(process, _DROP_BOUND)


async def _list_tools(
    server: _Server,
    client: Client,
    read_only_hint: bool,
    problems: list[McpProblem],
    startup_timeout: float,
) -> list[McpTool]:
    tools: list[McpTool] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        for listed in page.tools:
            try:
                tool = McpTool(
                    server=server,
                    listed=listed,
                    read_only_hint=read_only_hint,
                    startup_timeout=startup_timeout,
                )
            except jsonschema.SchemaError as exc:
                reason = (
                    f"tool {listed.name!r} has an invalid input schema: {exc.message}"
                )
                problems.append(McpProblem(server.name, reason + "; skipped"))
                continue
            tools.append(tool)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools
