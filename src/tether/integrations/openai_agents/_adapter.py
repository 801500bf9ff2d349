"""`TetherTools` and `TetherMCPServer`: the SDK's tools whose calls are tether calls.

The only module that imports the SDK (`agents`); the package re-exports its names.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, final

import anyio
import anyio.abc

from ... import _extras

try:  # the SDK is an extra: without it, the line that says how to install it
    import mcp_types
    from agents import FunctionTool
    from agents.mcp import MCPServer
except ModuleNotFoundError as error:
    raise ImportError(
        _extras.missing("openai-agents", "tether's OpenAI Agents SDK tools")
    ) from error

from ..._ids import new_id
from ...errors import ErrorCode, UsageError
from ...host import StopClass
from ...runtime import ToolResult
from .._calls import CallRunner, RunningCall

if TYPE_CHECKING:
    from types import TracebackType

    from agents import AgentBase, RunContextWrapper, TResponseInputItem
    from agents.tool_context import ToolContext

    from ...host import Tool
    from ...runtime import AbortReport, Runtime

__all__ = ("TetherMCPServer", "TetherTools")

CANCEL_REASON = "the agent run was cancelled"
"""What the ledger and the reports say an SDK cancel was."""


@final
class TetherTools:
    """A runtime's tools for `agents.Agent`, each call a tether call; enter to use.

    ```python
    async with Runtime(workspace=".") as runtime, TetherTools(runtime) as tools:
        agent = Agent(name="helper", tools=tools.function_tools())
    ```

    Leaving the block stops the calls still running (source `shutdown`) and waits for
    them as the runtime would; a started write is waited for by the runtime's close.
    """

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._runner: CallRunner | None = None
        self._group: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> TetherTools:
        """Start the task group the calls run in (the runtime must be entered)."""
        if self.runtime.host is None:
            raise UsageError(
                "enter the Runtime first: `async with Runtime(...) as runtime, "
                "TetherTools(runtime) as tools:`"
            )
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        self._runner = CallRunner(self.runtime, group, reason=CANCEL_REASON)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        """Stop what still runs, give it the runtime's bound, end the task group."""
        runner, group = self._runner, self._group
        assert runner is not None
        assert group is not None
        self._runner = self._group = None
        try:
            await runner.aclose()
        finally:
            group.cancel_scope.cancel()
        return await group.__aexit__(exc_type, exc, tb)

    @property
    def _calls(self) -> CallRunner:
        """The calls' runner, while the tools are entered."""
        if self._runner is None:
            raise UsageError(
                "use the tools inside `async with TetherTools(runtime) as tools:`"
            )
        return self._runner

    def function_tools(self, *names: str) -> list[FunctionTool]:
        """The named tools of the runtime (none named: every one) as SDK tools.

        MCP servers' tools are left out when no name is given: `mcp_server()` hands
        them to the agent as the server they are.

        Raises:
            UsageError: a name is not a tool of the runtime.
        """
        known = {tool.name: tool for tool in self.runtime.tools}
        if not names:
            return [
                self._function_tool(tool)
                for tool in self.runtime.tools
                if _server_of(tool) is None
            ]
        missing = [name for name in names if name not in known]
        if missing:
            raise UsageError(
                f"no tool named {', '.join(missing)} in the runtime "
                f"(it has {', '.join(sorted(known)) or 'none'})"
            )
        return [self._function_tool(known[name]) for name in names]

    def mcp_server(self, name: str) -> TetherMCPServer:
        """The runtime's configured MCP server `name`, for `Agent(mcp_servers=[...])`.

        Raises:
            UsageError: the runtime has no tool of a server by that name.
        """
        tools = [tool for tool in self.runtime.tools if _server_of(tool) == name]
        if not tools:
            servers = sorted(
                {s for s in map(_server_of, self.runtime.tools) if s is not None}
            )
            raise UsageError(
                f"the runtime has no MCP server {name!r} (it has "
                f"{', '.join(servers) or 'none'}; configure it under [mcpServers])"
            )
        return TetherMCPServer(self, name, tools)

    async def abort(self, *, kill: bool = False) -> tuple[AbortReport, ...]:
        """Stop every call of these tools that has not settled; the reports.

        The calls of a run still going end with the truth the model then reads. After
        an SDK cancel, `kill=True` is the second stop: a process is killed now, and a
        started extension whose server never answers stops being waited for (it ends
        unknown and its server is dropped). A started write still runs to its end.
        """
        return await self._calls.abort(kill=kill)

    async def wait_aborted(self) -> tuple[AbortReport, ...]:
        """After an SDK cancel: wait until it has reached every call in flight.

        Returns the report of each call's `Session.abort()` (within the abort bound of
        the cancel reaching the call), those not returned by an earlier call, oldest
        first. A call not cancelled is waited for until it ends.
        """
        return await self._calls.wait_aborted()

    async def wait_settled(self) -> None:
        """Wait until every call in flight or cancelled has reached its real end.

        A process tree is gone, a started write has its result in the ledger.
        """
        await self._calls.wait_settled()

    async def results_after_cancel(self) -> list[TResponseInputItem]:
        """Input items that tell the model what really happened to the cancelled calls.

        Waits until each has settled, then gives, once per call, the call as the model
        made it and its truthful result: not started, ended by the stop (with what it
        printed), or run to its end anyway (with its output). Add them after a
        cancelled run's `to_input_list()`, before the next message.
        """
        items: list[TResponseInputItem] = []
        for running in await self._calls.untold():
            call_id, name, raw = _call_of(running)
            items.append(
                {
                    "type": "function_call",
                    "call_id": call_id,
                    "name": name,
                    "arguments": raw,
                }
            )
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": call_id,
                    "output": running.after_cancel_text(),
                }
            )
        return items

    def _function_tool(self, tool: Tool) -> FunctionTool:
        async def invoke(ctx: ToolContext[Any], raw: str) -> str:
            try:
                args = json.loads(raw) if raw.strip() else {}
            except ValueError as exc:
                return f"{ErrorCode.INVALID_INPUT}: the arguments are not JSON ({exc})"
            if not isinstance(args, dict):
                return f"{ErrorCode.INVALID_INPUT}: the arguments must be a JSON object"
            tag = (ctx.tool_call_id, ctx.tool_name, raw)
            running = await self._calls.call(tool.name, args, tag=tag)
            return running.result_text()

        return FunctionTool(
            name=tool.name,
            description=_described(tool),
            params_json_schema=tool.input_schema(),
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )


class TetherMCPServer(MCPServer):
    """A configured MCP server's tools, each call an `EXTENSION` call through tether.

    Made by `TetherTools.mcp_server()`. The runtime owns the server's connection
    (started with the runtime, walled like every tree tether starts), so `connect()`
    and `cleanup()` do nothing. A cancel of a call sends the server MCP's
    `notifications/cancelled` and keeps waiting for its real result.
    """

    def __init__(self, tools: TetherTools, server: str, members: list[Tool]) -> None:
        super().__init__()
        self._tools = tools
        self._server = server
        self._members = {_remote_name(tool): tool for tool in members}

    @property
    def name(self) -> str:
        """The server's configured name."""
        return self._server

    async def connect(self) -> None:
        """Nothing to do: the runtime started the server."""

    async def cleanup(self) -> None:
        """Nothing to do: the runtime stops the server when it closes."""

    async def list_tools(
        self,
        run_context: RunContextWrapper[Any] | None = None,
        agent: AgentBase[Any] | None = None,
    ) -> list[mcp_types.Tool]:
        """The server's tools as it listed them, with their stop classes' hints."""
        return [
            mcp_types.Tool(
                name=remote,
                description=tool.description or None,
                input_schema=tool.input_schema(),
                annotations=mcp_types.ToolAnnotations(
                    read_only_hint=tool.stop_class is StopClass.READ_ONLY,
                    destructive_hint=tool.stop_class is not StopClass.READ_ONLY,
                ),
            )
            for remote, tool in self._members.items()
        ]

    async def call_tool(
        self,
        tool_name: str,
        arguments: dict[str, Any] | None,
        meta: dict[str, Any] | None = None,
    ) -> mcp_types.CallToolResult:
        """Run one call through tether and return its result (an error says why)."""
        tool = self._members.get(tool_name)
        if tool is None:
            text = (
                f"{ErrorCode.UNKNOWN_TOOL}: {self._server} has no tool {tool_name!r} "
                f"(it has {', '.join(sorted(self._members))})"
            )
            return _call_result(text, error=True)
        # The SDK does not hand a server the model's call id: one of tether's own
        # pairs the call with its result when the model is told after a cancel.
        tag = (new_id("call"), tool_name, json.dumps(arguments or {}))
        running = await self._tools._calls.call(tool.name, arguments or {}, tag=tag)
        return _call_result(running.result_text(), error=not _succeeded(running))

    async def list_prompts(self) -> mcp_types.ListPromptsResult:
        """None: tether serves the server's tools only."""
        return mcp_types.ListPromptsResult(prompts=[])

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None
    ) -> mcp_types.GetPromptResult:
        """Refused: tether serves the server's tools only.

        Raises:
            UsageError: always.
        """
        raise UsageError(
            f"tether serves the tools of MCP server {self._server!r}, not its prompts; "
            "connect the SDK's own MCPServerStdio for prompts"
        )


def _server_of(tool: Tool) -> str | None:
    """The configured MCP server a tool comes from, or None."""
    server = getattr(tool, "server", None)
    return server if isinstance(server, str) and tool.name.startswith("mcp__") else None


def _remote_name(tool: Tool) -> str:
    remote = getattr(tool, "remote_name", None)
    return remote if isinstance(remote, str) else tool.name


def _described(tool: Tool) -> str:
    """The tool's description, with what a stop does to it."""
    says = {
        StopClass.READ_ONLY: "a stop ends it at once",
        StopClass.PROCESS: "a stop terminates its process tree",
        StopClass.MUTATING: "once started, it runs to its end even if stopped",
        StopClass.EXTENSION: "once started, it runs to its end even if stopped",
    }[tool.stop_class]
    return f"{tool.description}\n\n(tether {tool.stop_class}: {says}.)".lstrip()


def _call_of(running: RunningCall) -> tuple[str, str, str]:
    """The model's call id, the name the model used and its raw arguments."""
    call_id, name, raw = running.tag
    return call_id, name, raw


def _succeeded(running: RunningCall) -> bool:
    outcome = running.outcome
    return isinstance(outcome, ToolResult) and not outcome.is_error


def _call_result(text: str, *, error: bool) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text=text)], is_error=error
    )
