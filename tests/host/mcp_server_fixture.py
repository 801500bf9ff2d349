"""An MCP server for the tests, built with the SDK's `MCPServer` (formerly FastMCP).

Run as `python mcp_server_fixture.py` for stdio, or `python mcp_server_fixture.py --http`
to serve streamable HTTP on a free loopback port (the port is printed on stdout as
`PORT <n>` once the socket listens); `--linger` keeps it alive after its stdin closes; `--legacy` makes it a server of
the handshake era (2025-11-25: no `server/discover`, questions sent mid-call). Over stdio, every message the server receives is
recorded, so a test can ask (tool `events`) whether `notifications/cancelled` arrived.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any, Literal

import anyio
import mcp_types
from mcp.server.elicitation import (
    AcceptedElicitation,
    ElicitationResult,
    render_elicitation_schema,
)
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from types import TracebackType

server = MCPServer("fixture")

_events: list[str] = []
_changed = anyio.Event()


def record(event: str) -> None:
    """Append an event and wake every waiter."""
    global _changed
    _events.append(event)
    _changed.set()
    _changed = anyio.Event()


@server.tool()
async def echo(text: str, times: int = 1) -> str:
    """Return the text, repeated."""
    return " ".join([text] * times)


@server.tool()
async def slow(steps: int, ctx: Context) -> str:
    """Report one progress notification per step, then finish."""
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1}")
        await anyio.sleep(0.01)
    return f"done after {steps} steps"


class Order(BaseModel):
    """The form `ask` puts to the person (MCP's flat schema: string, integer, boolean,
    enum)."""

    name: str = Field(description="Who it is for")
    count: int = Field(description="How many")
    gift: bool = Field(default=False, description="Wrap it")
    color: Literal["red", "green"] = Field(default="red", description="Which color")


def order_form() -> Elicit[Order]:
    """The resolver of `ask`'s order: a question to the person."""
    return Elicit("Order something?", Order)


@server.tool()
async def ask(order: Annotated[ElicitationResult[Order], Resolve(order_form)]) -> str:
    """Ask the person for an order (the SDK's resolver, either revision); say what
    came back: `accept {...}`, `decline` or `cancel`."""
    record(f"ask {order.action}")
    if isinstance(order, AcceptedElicitation):
        return f"accept {order.data.model_dump_json()}"
    return order.action


@server.tool()
async def ask_anyway(ctx: Context) -> str | mcp_types.InputRequiredResult:
    """Ask for an order whatever the client advertised (2026-07-28's input_required
    round); say the answer's action, and an accepted form's content as it came."""
    answers = ctx.input_responses
    if not answers:
        question = mcp_types.ElicitRequest(
            params=mcp_types.ElicitRequestFormParams(
                message="Order something?",
                requested_schema=render_elicitation_schema(Order),
            )
        )
        return mcp_types.InputRequiredResult(input_requests={"order": question})
    answer = answers["order"]
    assert isinstance(answer, mcp_types.ElicitResult)
    if answer.action == "accept":
        return f"accept {json.dumps(answer.content, sort_keys=True)}"
    return answer.action


@server.tool()
async def can_elicit(ctx: Context) -> str:
    """`yes` when the client advertised the elicitation capability, else `no`."""
    caps = ctx.request_context.session.client_capabilities
    return "yes" if caps is not None and caps.elicitation is not None else "no"


@server.tool()
async def fail(why: str) -> str:
    """Fail with the given reason (the result carries isError)."""
    raise ToolError(why)


@server.tool()
async def die() -> str:
    """End the server process at once, mid-call."""
    os._exit(3)


@server.tool()
async def stubborn(seconds: float) -> str:
    """Ignore cancellation and finish after `seconds`."""
    record("stubborn started")
    with anyio.CancelScope(shield=True):
        await anyio.sleep(seconds)
    record("stubborn finished")
    return f"finished after {seconds} s"


@server.tool()
async def hang() -> str:
    """Never return; a cancel ends the handler (and, as MCP says, no answer is sent)."""
    record("hang started")
    try:
        await anyio.sleep_forever()
    except anyio.get_cancelled_exc_class():
        record("hang cancelled")
        raise
    return "unreachable"


@server.tool()
async def deaf(ctx: Context) -> str:
    """Ignore the cancel: send a progress notification every 50 ms, forever."""
    record("deaf started")
    with anyio.CancelScope(shield=True):
        step = 0
        while True:
            step += 1
            await ctx.report_progress(step, None, f"tick {step}")
            await anyio.sleep(0.05)
    return "unreachable"


@server.tool(annotations=mcp_types.ToolAnnotations(read_only_hint=True))
async def peek() -> str:
    """Read something slowly (never finishes unless cancelled)."""
    record("peek started")
    try:
        await anyio.sleep_forever()
    except anyio.get_cancelled_exc_class():
        record("peek cancelled")
        raise
    return "unreachable"


@server.tool()
def attempt(path: str) -> str:
    """Try to append to `path`: `wrote`, or `refused <errno name>` (the wall's tests)."""
    try:
        with open(path, "a") as f:
            f.write("x")
    except OSError as exc:
        return f"refused {errno.errorcode.get(exc.errno or 0, exc.errno)}"
    return "wrote"


@server.tool()
def where() -> str:
    """The server's PID namespace and environment names, as JSON."""
    names = sorted(os.environ)
    return json.dumps({"pidns": os.readlink("/proc/self/ns/pid"), "env": names})


@server.tool()
def spawn(marker: str) -> str:
    """Start a detached process (its own session) that sleeps, named by `marker`."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", marker],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return str(child.pid)


@server.tool()
def reach(port: int) -> str:
    """Connect to 127.0.0.1:`port`: `connected` or `refused <reason>`."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return "connected"
    except OSError as exc:
        return f"refused {exc}"


@server.tool()
async def events(wait_for: str = "", timeout: float = 5.0) -> str:
    """Return the recorded events, once `wait_for` is among them (or after `timeout`)."""
    with anyio.move_on_after(timeout):
        while wait_for and not any(wait_for in e for e in _events):
            await _changed.wait()
    return "\n".join(_events)


class RecordingReader:
    """Wrap the server's read stream, recording each incoming message."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def _note(self, item: SessionMessage | Exception) -> SessionMessage | Exception:
        if isinstance(item, SessionMessage):
            data = item.message.model_dump(by_alias=True, exclude_none=True)
            method = data.get("method")
            if method == "server/discover" and "--legacy" in sys.argv:
                # Unknown to a server of the handshake era: the client falls back.
                return SessionMessage(
                    mcp_types.JSONRPCRequest(
                        jsonrpc="2.0", id=data["id"], method="legacy/unknown"
                    )
                )
            if method is not None:
                params = data.get("params") or {}
                record(f"recv {method} {params.get('requestId', data.get('id', ''))}")
        return item

    async def receive(self) -> SessionMessage | Exception:
        return self._note(await self._inner.receive())

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> RecordingReader:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> RecordingReader:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def serve_stdio() -> None:
    """Serve over stdin/stdout, recording what arrives."""
    low = server._lowlevel_server
    async with stdio_server() as (read, write):
        await low.run(RecordingReader(read), write, low.create_initialization_options())


async def serve_http() -> None:
    """Serve streamable HTTP on a free loopback port, printed once it listens."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    anyio.run(serve_http if "--http" in sys.argv else serve_stdio)
    if "--linger" in sys.argv:
        # A server that outlives its closed stdin: only a signal ends it.
        time.sleep(300)
