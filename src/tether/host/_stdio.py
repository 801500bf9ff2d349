"""The stdio host: the host core served over JSON-RPC, and the client that starts it.

`tether host --stdio` serves the host core; the runtime's client starts it as a child
process.

The serving side keeps the protocol on a private copy of stdout and points fd 1 at
stderr, so a tool that prints cannot corrupt a frame. The four tool messages go both
ways as in `_protocol.py`; `permission.request` goes from host to runtime, and a stop
withdraws it with `$/cancelRequest`.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread

from .._env import TetherEnv
from .._jsonrpc import (
    Connection,
    FdReceiveStream,
    FdSendStream,
    FrameTooLarge,
    RpcError,
)
from .._threads import builtin_threads
from ..errors import ErrorCode, UsageError
from ._broker import Broker, RuleSet, stop_guard
from ._core import HostCore
from ._proctree import sweep_marked
from ._protocol import (
    AbortAck,
    AbortRequest,
    Approver,
    CallKey,
    ExecuteRequest,
    HostEvent,
    KillRequest,
    OutputEvent,
    PermissionRequest,
    ResultEvent,
    Sink,
)
from ._spawn import start_process
from ._tool import FunctionTool, Tool
from ._wire import (
    abort_ack_from_wire,
    abort_ack_to_wire,
    abort_from_wire,
    abort_to_wire,
    event_from_wire,
    event_to_wire,
    execute_from_wire,
    execute_to_wire,
    kill_from_wire,
    kill_to_wire,
    permission_from_wire,
    permission_to_wire,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence
    from pathlib import Path

__all__ = ("StdioHostClient", "load_tool_refs", "serve_stdio", "tool_ref")

_BUILTIN_MODULE = "tether.host.tools"
EOF_DRAIN = 5.0
"""Seconds the host lets calls in flight finish after stdin closes; a started write or
extension is waited for beyond them (never cut)."""
READY_BOUND = 60.0
"""Seconds the runtime waits for a starting host to answer `host.ready`."""
PROGRESS_BACKLOG = 256 * 1024
"""Bytes of frames waiting to be written above which progress output is not sent."""


def _too_large(event: ResultEvent, exc: FrameTooLarge) -> ResultEvent:
    what = "partial output" if event.code is ErrorCode.TOOL_ABORTED else "result"
    return ResultEvent(
        event.key,
        "",
        code=event.code or ErrorCode.TOOL_FAILED,
        message=f"{event.message or 'the call ended'}; its {what} was not sent: "
        f"{exc.message}",
        end_unknown=event.end_unknown,
    )


def tool_ref(tool: Tool) -> str:
    """Return how the stdio host can load this tool (`module:name` or `builtin:Name`).

    Raises:
        UsageError: the tool cannot be found by import in another process.
    """
    if isinstance(tool, FunctionTool):
        ref = f"{tool.fn.__module__}:{tool.fn.__name__}"
        module = sys.modules.get(tool.fn.__module__)
        if module is not None and getattr(module, tool.fn.__name__, None) is tool:
            return ref
    elif type(tool).__module__.startswith(_BUILTIN_MODULE):
        return f"builtin:{tool.name}"
    raise UsageError(
        f"tool {tool.name} cannot run in the stdio host: define it at module level "
        "with @tool so the host process can import it"
    )


def load_tool_refs(refs: Sequence[str]) -> list[Tool]:
    """Load tools named by `tool_ref()` strings.

    Raises:
        UsageError: a reference cannot be imported or is not a tool.
    """
    tools: list[Tool] = []
    builtins: dict[str, Tool] | None = None
    for ref in refs:
        module_name, _, attr = ref.partition(":")
        if module_name == "builtin":
            if builtins is None:
                from .tools import default_tools

                builtins = {t.name: t for t in default_tools()}
            if attr not in builtins:
                raise UsageError(f"no built-in tool {attr!r}")
            tools.append(builtins[attr])
            continue
        try:
            obj = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise UsageError(f"cannot load tool {ref}: {exc}") from None
        if not isinstance(obj, Tool):
            raise UsageError(f"{ref} is not a tool")
        tools.append(obj)
    return tools


def rules_to_json(rules: RuleSet | None) -> str | None:
    """Serialize permission rules for the host's command line."""
    if rules is None:
        return None
    lists = {
        kind: [getattr(r, "text", str(r)) for r in getattr(rules, kind, ())]
        for kind in ("allow", "ask", "deny")
    }
    return json.dumps(lists)


async def serve_stdio(
    tools: Sequence[Tool],
    *,
    workspace: Path,
    rules: RuleSet | None,
    ask_runtime: bool,
    guard: bool,
    max_concurrent: int,
    tombstone_ttl: float,
    eof_drain: float = EOF_DRAIN,
) -> None:
    """Serve the host core on stdin/stdout until stdin closes.

    After stdin closes, calls in flight get `eof_drain` seconds to report; then a
    started write or extension is still waited for (spec 01: never cut, even with the
    runtime gone), the host says so on stderr, and everything else is cancelled.
    """
    proto_fd = os.dup(1)
    os.dup2(2, 1)  # stray prints of tools go to stderr, never into a frame
    sys.stdout = sys.stderr
    conn: Connection | None = None

    async def ask(request: PermissionRequest) -> bool:
        assert conn is not None
        answer = await conn.request("permission.request", permission_to_wire(request))
        return bool(isinstance(answer, dict) and answer.get("allow") is True)

    approver: Approver | None = ask if ask_runtime else None
    broker = Broker(
        workspace=workspace,
        rules=rules,
        approver=approver,
        guard=stop_guard() if guard else None,
    )
    core = HostCore(
        tools, broker=broker, max_concurrent=max_concurrent, tombstone_ttl=tombstone_ttl
    )

    unsent: dict[CallKey, int] = {}

    def emit(event: HostEvent) -> None:
        assert conn is not None
        key = event.key
        if isinstance(event, OutputEvent):
            if conn.pending_bytes > PROGRESS_BACKLOG:
                # The runtime reads slower than the tool prints: progress waits for
                # nobody (the result still carries head and tail); say what was skipped.
                unsent[key] = unsent.get(key, 0) + len(event.text)
                return
            skipped = unsent.pop(key, 0)
            if skipped:
                note = f"[... {skipped} characters of progress not sent ...]\n"
                event = OutputEvent(key, note + event.text)
        elif isinstance(event, ResultEvent):
            unsent.pop(key, None)
        with contextlib.suppress(RpcError):
            try:
                conn.notify(*event_to_wire(event))
            except FrameTooLarge as exc:
                # S13b: a message too large for the wire fails that call only.
                if isinstance(event, ResultEvent):
                    conn.notify(*event_to_wire(_too_large(event, exc)))

    async def drain() -> None:
        # stdin closed: let calls in flight report (bounded), so piped use sees results.
        with anyio.move_on_after(eof_drain):
            await core.wait_idle()
        writes = core.started_writes()
        if writes:
            # Not bounded on purpose: each started write ends with its real result.
            names = "; ".join(f"{c.key.tool} call {c.key.call_id}" for c in writes)
            print(
                f"tether host: input closed; waiting for {names}"
                " (a started write is never cut)",
                file=sys.stderr,
                flush=True,
            )
            await core.wait_started_writes()

    def execute(params: dict[str, Any]) -> dict[str, Any]:
        core.execute(execute_from_wire(params), emit)
        return {"accepted": True}

    def abort(params: dict[str, Any]) -> dict[str, Any]:
        return abort_ack_to_wire(core.abort(abort_from_wire(params)))

    def kill(params: dict[str, Any]) -> dict[str, Any]:
        return abort_ack_to_wire(core.kill(kill_from_wire(params)))

    conn = Connection(
        FdReceiveStream(0),
        FdSendStream(proto_fd),
        inline={
            "tools.execute": execute,
            "tools.abort": abort,
            "tools.kill": kill,
            "host.ready": lambda params: {"ready": True},
        },
    )
    async with anyio.create_task_group() as tg:
        await tg.start(core.serve)
        await conn.serve(on_eof=drain)
        # The runtime is gone: cancelling what still runs kills its process trees.
        tg.cancel_scope.cancel()


class StdioHostClient:
    """The runtime's `HostConnection` to a `tether host --stdio` child process."""

    def __init__(
        self, conn: Connection, process: anyio.abc.Process, host_id: str
    ) -> None:
        self.conn = conn
        self.process = process
        self.host_id = host_id
        """Marks every process the host started (`TETHER_HOST_ID` in their environment)."""

    async def reap_orphans(self) -> list[int]:
        """After the host died: kill every process it started; return any left alive.

        Each tree's supervisor kills its tree when the host goes; this sweep does not
        rely on that, and ends only when no marked process is left (or after a bound).
        """
        return await anyio.to_thread.run_sync(
            lambda: sweep_marked(self.host_id, name=TetherEnv.HOST_ID, limit=5.0),
            limiter=builtin_threads(),
        )

    def outliving(self) -> dict[str, int]:
        """None here: workers of stopped calls live in the host, which closing ends."""
        return {}

    async def execute(self, request: ExecuteRequest) -> None:
        """Send `tools.execute` and wait for the host to accept it."""
        await self.conn.request("tools.execute", execute_to_wire(request))

    async def abort(self, request: AbortRequest) -> AbortAck:
        """Send `tools.abort` and return the host's answer."""
        return abort_ack_from_wire(
            await self.conn.request("tools.abort", abort_to_wire(request))
        )

    async def kill(self, request: KillRequest) -> AbortAck:
        """Send `tools.kill` and return the host's answer."""
        return abort_ack_from_wire(
            await self.conn.request("tools.kill", kill_to_wire(request))
        )

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        *,
        tools: Sequence[Tool] | None,
        workspace: Path,
        rules: RuleSet | None,
        approver: Approver | None,
        guard: bool,
        max_concurrent: int,
        tombstone_ttl: float,
        sink: Sink,
        on_lost: Callable[[str], None] | None = None,
        close_bound: float = EOF_DRAIN + 2,
    ) -> AsyncIterator[StdioHostClient]:
        """Start the host process and connect to it for the lifetime of the block.

        `tools=None` lets the host process load the standard tools (built-in, plugins,
        MCP servers from config) itself; otherwise each tool is loaded by reference.
        `on_lost(reason)` is called if the host process goes away before the block ends.
        Closing is bounded: the host is killed `close_bound` seconds after its input
        closes (the runtime reaps its process trees and reports the calls it left).
        """
        argv = [
            sys.executable,
            "-m",
            "tether",
            "host",
            "--stdio",
            "--workspace",
            str(workspace),
            "--max-concurrent",
            str(max_concurrent),
            "--tombstone-ttl",
            str(tombstone_ttl),
        ]
        # None: the host loads the built-in, plugin and MCP tools itself.
        for tool in tools or ():
            argv += ["--tool", tool_ref(tool)]
        rules_json = rules_to_json(rules)
        if rules_json is not None:
            argv += ["--rules", rules_json]
        if approver is not None:
            argv.append("--ask-runtime")
        if not guard:
            argv.append("--no-guard")

        async def on_permission(params: dict[str, Any]) -> dict[str, Any]:
            assert approver is not None
            return {"allow": bool(await approver(permission_from_wire(params)))}

        def on_event(method: str) -> Any:
            return lambda params: sink(event_from_wire(method, params))

        host_id = os.urandom(16).hex()
        process = start_process(
            argv,
            stderr=None,
            env={**os.environ, TetherEnv.HOST_ID: host_id},
        )
        assert process.stdin is not None
        assert process.stdout is not None
        conn = Connection(
            process.stdout,
            process.stdin,
            tasks={"permission.request": on_permission},
            notifications={
                "tools.progress": on_event("tools.progress"),
                "tools.result": on_event("tools.result"),
            },
        )
        closing = False

        async def watch() -> None:
            await conn.closed.wait()
            if closing or on_lost is None:
                return
            with anyio.move_on_after(1):
                await process.wait()
            code = process.returncode
            on_lost(
                "the stdio host exited"
                + (f" with code {code}" if code is not None else " (its output closed)")
            )

        try:
            async with anyio.create_task_group() as tg:
                await tg.start(conn.serve)
                tg.start_soon(watch)
                try:
                    # Readiness is explicit: a stop sent while the host still starts
                    # would wait for its start-up, so the block begins once it answers.
                    try:
                        with anyio.fail_after(READY_BOUND):
                            await conn.request("host.ready", {})
                    except RpcError as exc:
                        # A cancellation of the opening closes the connection too: it
                        # is what the caller gets, not a start-up failure.
                        await anyio.lowlevel.checkpoint_if_cancelled()
                        raise UsageError(
                            f"the stdio host did not start ({exc.message}); "
                            "its error output above says why"
                        ) from None
                    except TimeoutError:
                        raise UsageError(
                            f"the stdio host did not answer within {READY_BOUND:g} s "
                            "of its start; its error output above says why"
                        ) from None
                    yield cls(conn, process, host_id)
                finally:
                    closing = True
                    # The host lets calls in flight finish after stdin closes; after
                    # `close_bound` it is killed, and its trees die with it.
                    with anyio.move_on_after(close_bound, shield=True):
                        await process.stdin.aclose()
                        await process.wait()
                    tg.cancel_scope.cancel()
        finally:
            with anyio.move_on_after(5, shield=True):
                if process.returncode is None:
                    process.kill()
                await process.aclose()
