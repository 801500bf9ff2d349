"""The client the MCP conformance suite drives: tether's own MCP client, as a runtime uses it.

The suite (`@modelcontextprotocol/conformance`, client mode) starts one scenario's server,
then runs this file with the server's URL as its last argument and the scenario's name in
`MCP_CONFORMANCE_SCENARIO` (its data, if any, in `MCP_CONFORMANCE_CONTEXT`). The server is
configured as a streamable-HTTP entry of `mcpServers`, exactly as a person configures one,
and a `Runtime` connects to it (the handshake the SDK negotiates, `tools/list`), then calls
its tools in a turn, as a model's calls are made: the calls the scenario's data names, else
every tool the server listed, with an input built from its schema. A server's question is
answered by a person who accepts the form and leaves every field empty.

Exit status 0 when the runtime connected; 1 (with the reason on stderr) when it did not.
By hand, in this folder once `npm ci` has installed the suite: `npx conformance client
--command "python client.py" --scenario tools_call`. The test runs it warm instead
(`client.py --serve SOCKET WORKERS`, with `forked.py` as the suite's command).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import tempfile
import traceback
from contextlib import suppress
from typing import Any

import anyio
import httpx2

from tether._config import Config
from tether._loopback import listen_loopback
from tether.errors import TetherError
from tether.host._mcpauth import OAuthClient, TokenFile
from tether.host._mcplogin import login
from tether.runtime import ElicitationAnswer, ElicitationRequest, Runtime
from tether.tools import McpTool

SERVER = "conformance"
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
"""Where the suite's CIMD scenario takes the client's metadata document to be."""
_CHILD_LIMIT = 60
"""Seconds a forked scenario run may take (one takes about a second)."""
_SERVE_LIMIT = 900
"""Seconds the warm client serves at most, should the test that started it be killed."""

_SAMPLES: dict[str, Any] = {
    "string": "tether",
    "number": 1.5,
    "integer": 2,
    "boolean": True,
    "object": {},
    "array": [],
    "null": None,
}


def _sample(schema: dict[str, Any]) -> Any:
    """A value the schema accepts: its default, its first enum value or const, or a
    plain value of its type (an object's required properties filled in)."""
    if "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties", {})
        return {
            name: _sample(properties.get(name, {}))
            for name in schema.get("required", [])
        }
    return _SAMPLES.get(kind, "tether")


def _calls(
    scenario: str, context: dict[str, Any], tools: dict[str, McpTool]
) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls the scenario expects, in order."""
    named = context.get("toolCalls")
    if isinstance(named, list):
        return [(call["name"], dict(call.get("arguments") or {})) for call in named]
    if scenario == "json-schema-2020-12-preservation":
        # The echo tool is given the other tool's input schema as the client holds it.
        [focal] = [t for t in tools.values() if "echo" not in t.remote_name]
        [echo] = [t for t in tools.values() if "echo" in t.remote_name]
        return [(echo.remote_name, {"schema": focal.input_schema()})]
    return [(name, _sample(tool.input_schema())) for name, tool in tools.items()]


async def _leave_fields_empty(request: ElicitationRequest) -> ElicitationAnswer:
    print(f"asked: {request.message}", file=sys.stderr)
    return ElicitationAnswer("accept", {})


def _entry(url: str, scenario: str, context: dict[str, Any]) -> dict[str, Any]:
    """The server's `mcpServers` entry, as a person writes it for this server: with
    the client the scenario pre-registered, and for an OAuth server the URL of the
    client metadata document the person published (the suite's, for CIMD)."""
    entry: dict[str, Any] = {"url": url}
    if scenario.startswith("auth/"):
        oauth = {"client_metadata_url": CLIENT_METADATA_URL}
        for key in ("client_id", "client_secret"):
            if isinstance(context.get(key), str):
                oauth[key] = context[key]
        entry["oauth"] = oauth
    return entry


async def _login(url: str, client: OAuthClient) -> None:
    """`tether mcp login conformance`, this client the person's browser: it follows the
    authorisation URL (the scenario's server approves at once) to the login's loopback
    receiver."""

    async def browse(authorization_url: str) -> None:
        async with httpx2.AsyncClient(follow_redirects=True, timeout=30) as browser:
            page = await browser.get(authorization_url)
        print(f"browser: {page.status_code} {page.url}", file=sys.stderr)

    sock = listen_loopback(0)
    try:
        async with anyio.create_task_group() as tg:
            result = await login(
                TokenFile.open(SERVER, url, start_over=True, client=client),
                sock=sock,
                show=lambda text: tg.start_soon(browse, text),
                timeout=30,
            )
    finally:
        sock.close()
    print(f"login: asked={result.asked} tools={result.tools}", file=sys.stderr)


async def _run(url: str) -> int:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    entry = _entry(url, scenario, context)
    config = Config(mcp_servers={SERVER: entry})
    with (
        tempfile.TemporaryDirectory() as home,
        tempfile.TemporaryDirectory() as workspace,
    ):
        os.environ["TETHER_HOME"] = home  # this scenario's tokens, no other's
        if scenario.startswith("auth/"):
            try:
                await _login(url, OAuthClient.parse(entry["oauth"]))
            except TetherError as exc:
                print(f"login: {exc}", file=sys.stderr)
        async with Runtime(
            workspace=workspace,
            config=config,
            elicitor=_leave_fields_empty,
            permissions={"allow": [f"mcp__{SERVER}__*"]},
        ) as runtime:
            problems = [p for p in runtime.problems if SERVER in p]
            for problem in problems:
                print(problem, file=sys.stderr)
            tools = {
                t.remote_name: t
                for t in runtime.tools
                if isinstance(t, McpTool) and t.server == SERVER
            }
            if not tools and problems:
                return 1
            session = runtime.session()
            async with session.turn() as turn:
                for name, args in _calls(scenario, context, tools):
                    tool = tools.get(name)
                    called = tool.name if tool is not None else f"mcp__{SERVER}__{name}"
                    result = await turn.call(called, args)
                    if result.is_error and "`tether mcp login" in str(result.output):
                        # The server wants more: the person logs in again, then retries.
                        await _login(url, OAuthClient.parse(entry["oauth"]))
                        result = await turn.call(called, args)
                    state = "error" if result.is_error else "ok"
                    print(f"{name}: {state}: {result.output}")
    return 0


def _answer(connection: socket.socket) -> None:
    """Run one scenario in this forked child: the shim's streams, environment and URL."""
    signal.alarm(_CHILD_LIMIT)  # a scenario the suite gave up on ends here too
    message, fds, _, _ = socket.recv_fds(connection, 1 << 16, 3)
    while chunk := connection.recv(1 << 16):
        message += chunk
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    request = json.loads(message)
    os.environ.clear()
    os.environ.update(request["env"])
    status = 1
    try:
        status = anyio.run(_run, request["url"])
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        with suppress(OSError):
            connection.sendall(str(status).encode())
        os._exit(status)


def serve(path: str, workers: int) -> None:
    """Serve scenarios on a Unix socket, each run in a fork of this process.

    The suite starts a client per scenario, every scenario of a revision at once; a fork
    of a process that has imported tether and the SDK once starts in milliseconds
    instead of most of a second, and at most `workers` run at a time (the others wait
    their turn in the socket's queue), so a busy machine does not time them out
    (`forked.py` is the command the suite runs).
    """
    import httpcore2

    import tether.host._mcp  # noqa: F401 (imported once, before every fork)

    with tempfile.TemporaryDirectory() as workspace:  # what a runtime imports, too
        Runtime(workspace=workspace, config=Config())
    # Each HTTP client reads the CA bundle (a second of CPU on a busy machine); the
    # scenarios' servers are plain HTTP on loopback, so the forks share one context.
    context = httpcore2.default_ssl_context()
    httpcore2.default_ssl_context = lambda **_: context

    signal.alarm(_SERVE_LIMIT)
    running: set[int] = set()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(256)
        print("ready", flush=True)
        while True:
            connection, _ = listener.accept()
            while len(running) >= workers:
                running.discard(os.wait()[0])
            pid = os.fork()
            if pid == 0:
                listener.close()
                _answer(connection)
            running.add(pid)
            connection.close()
            with suppress(ChildProcessError):
                while running and (done := os.waitpid(-1, os.WNOHANG)[0]):
                    running.discard(done)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        serve(sys.argv[2], int(sys.argv[3]))
        return
    if len(sys.argv) < 2:
        sys.exit("usage: client.py SERVER_URL (the conformance suite appends it)")
    sys.exit(anyio.run(_run, sys.argv[-1]))


if __name__ == "__main__":
    main()
