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
headers = { Authorization = "Bearer ..." }
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
never sends it (the host does not start the tool); once `tools/call` is sent, the call
is never abandoned and its real result is awaited. With the opt-in
`mcp_read_only_hint`, tools the server annotates `readOnlyHint` become `READ_ONLY`: a
stop cancels the waiting task, and the SDK then sends MCP `notifications/cancelled` for
the request before the cancellation goes on. Progress notifications become
`ctx.progress(...)`.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

import anyio
import attrs

from .. import _extras

try:  # the SDK is an extra: without it, the line that says how to install it
    import httpx2
    import jsonschema  # type: ignore[import-untyped]
    import mcp_types
    from mcp import Client, MCPError, StdioServerParameters
    from mcp.client.stdio import get_default_environment, stdio_client
    from mcp.client.streamable_http import streamable_http_client
except ImportError as error:
    raise ImportError(_extras.missing("mcp", "tether's MCP tools")) from error

from .._env import TetherEnv
from ..errors import InvalidInput, ToolFailed, UsageError
from ._contain import Network, containment_now, supervisor_argv, tree_env
from ._proctree import namespace_wall, resolve_command
from ._tool import StopClass, Tool, ToolContext

if TYPE_CHECKING:
    from .._config import Config

__all__ = ("McpProblem", "McpTool", "McpTools")

_NAME_RE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_PAGES = 100
_STDERR_TAIL = 800


@attrs.frozen
class McpProblem:
    """A server that was skipped or failed, and why."""

    server: str
    reason: str

    def __str__(self) -> str:
        return f"MCP server {self.server!r}: {self.reason}"


@attrs.frozen(kw_only=True)
class _ServerSpec:
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


def _parse_spec(name: str, raw: object) -> _ServerSpec | None:
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
        return _ServerSpec(
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
        return _ServerSpec(
            name=name,
            transport="http",
            url=url,
            headers=_table(raw.get("headers", {}), "`headers`"),
        )
    raise ValueError("the entry needs `command` (stdio) or `url` (streamable HTTP)")


@attrs.define(eq=False)
class _Server:
    """One running server: its client while the session lives, None after."""

    name: str
    client: Client | None


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
    ) -> None:
        self._server = server
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

        Raises:
            InvalidInput: the input does not match; `.path` names the field.
        """
        if not isinstance(raw, Mapping):
            raise InvalidInput("input must be a JSON object", path="<input>")
        value = dict(raw)
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
        client = self._server.client
        if client is None:
            raise ToolFailed(f"MCP server {self.server!r} is not running")

        async def on_progress(
            progress: float, total: float | None, message: str | None
        ) -> None:
            ctx.progress(_progress_text(progress, total, message))

        try:
            result = await client.call_tool(
                self.remote_name, dict(args), progress_callback=on_progress
            )
        except MCPError as exc:
            raise ToolFailed(f"{self.name}: {exc.error.message}") from None
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            raise ToolFailed(f"{self.name}: the server's connection closed") from None
        text = _result_text(result)
        if result.is_error:
            raise ToolFailed(text or f"{self.name} reported an error")
        return text


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

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        config: Config,
        *,
        startup_timeout: float = 10.0,
        workspace: Path | None = None,
    ) -> AsyncIterator[McpTools]:
        """Start the configured servers and yield their tools; stop them on exit.

        Stdio servers run walled, `workspace` (default: the working directory) the
        folder they may write. A server that fails to start (bad entry, command not
        found, no answer within `startup_timeout` seconds, a protocol error) is
        reported in `.problems`.
        """
        mcp = cls(workspace=(workspace or Path.cwd()).absolute())
        read_only_hint = config.mcp_read_only_hint
        slots: list[_Slot] = []
        async with anyio.create_task_group() as tg:
            for name, raw in config.mcp_servers.items():
                clean = _NAME_RE.sub("_", str(name))
                try:
                    spec = _parse_spec(clean, raw)
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
        spec: _ServerSpec,
        slot: _Slot,
        read_only_hint: bool,
        startup_timeout: float,
    ) -> None:
        """Own one server's session from start to shutdown (one task per server)."""
        errlog = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115
        scope = anyio.CancelScope(deadline=anyio.current_time() + startup_timeout)
        server = _Server(spec.name, None)
        try:
            with scope:
                async with AsyncExitStack() as stack:
                    client = await stack.enter_async_context(
                        await _client_for(spec, stack, errlog, self._workspace)
                    )
                    tools = await _list_tools(
                        server, client, read_only_hint, self.problems
                    )
                    scope.deadline = math.inf
                    server.client = client
                    slot.done(tools)
                    await self._closing.wait()
                    server.client = None
        except Exception as exc:
            server.client = None
            problem = McpProblem(spec.name, _describe(exc) + _stderr_tail(errlog))
            if slot.ready.is_set():
                self.problems.append(problem)
            slot.done([], problem)
        finally:
            errlog.close()
            if scope.cancelled_caught:
                slot.done(
                    [], McpProblem(spec.name, f"no answer within {startup_timeout:g} s")
                )
            slot.done([], McpProblem(spec.name, "the session ended before it started"))


async def _walled(spec: _ServerSpec, workspace: Path) -> StdioServerParameters:
    """The SDK's parameters for a stdio server, inside the wall (S15) if need be.

    The server starts inside the wall when the containment is `namespace`.

    Raises:
        OSError: the command is not found, or the entry asks for what the fallback
            cannot give (`network = "none"`).
    """
    env = {**get_default_environment(), TetherEnv.AGENT.value: "1", **spec.env}
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
    spec: _ServerSpec, stack: AsyncExitStack, errlog: TextIO, workspace: Path
) -> Client:
    info = mcp_types.Implementation(name="tether", version="0.1.0")
    if spec.transport == "stdio":
        params = await _walled(spec, workspace)
        return Client(stdio_client(params, errlog=errlog), client_info=info, cache=None)
    http = await stack.enter_async_context(
        httpx2.AsyncClient(
            headers=dict(spec.headers), timeout=httpx2.Timeout(30.0, read=300.0)
        )
    )
    transport = streamable_http_client(spec.url, http_client=http)
    return Client(transport, client_info=info, cache=None)


async def _list_tools(
    server: _Server, client: Client, read_only_hint: bool, problems: list[McpProblem]
) -> list[McpTool]:
    tools: list[McpTool] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        for listed in page.tools:
            try:
                tool = McpTool(
                    server=server, listed=listed, read_only_hint=read_only_hint
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
