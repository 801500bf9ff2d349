"""`tether mcp serve --http`: the MCP server over streamable HTTP, on loopback, behind a token.

The SDK's session manager speaks both wires at one URL. A client of the 2025 revisions
opens an MCP session (`Mcp-Session-Id`); each session has its own `McpServe`, so a
cancelled call's end is told in that client's next result, and its cancel is
`notifications/cancelled` as on stdio (a broken response stream is not a cancel there:
the client may resume it). A 2026-07-28 client sends each request on its own, with no
session: closing a request's response stream is its cancel, every such request is served
by one stateless `McpServe` (whose cancels tell no next call), and the truth reaches the
client through the tasks extension (`_tasks.py`) and the ledger.

A client that ends its MCP session (`DELETE`) while its calls run has them stopped as a
shutdown, as on stdio when the client closes the pipe; so has every call when the
server closes.

Who can reach it: the socket is bound to loopback, so only processes of this machine;
each request must carry the token printed at start (`Authorization: Bearer ...`), new at
each start, and the `Host`/`Origin` headers must name the loopback address (no DNS
rebinding). Trees tether starts get neither the token nor any variable naming it.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import secrets
from collections import deque
from typing import TYPE_CHECKING, Any, final

import anyio
import anyio.abc

from .._loopback import quiet_uvicorn
from ._server import McpServe, mcp_server
from ._tasks import TaskTable

if TYPE_CHECKING:
    import socket
    from collections.abc import MutableMapping

    from mcp.server.context import ServerRequestContext
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from ..runtime import Runtime
    from ..stop import StopWatch

    Message = MutableMapping[str, Any]

__all__ = ("McpHttp",)

_SESSION_HEADER = b"mcp-session-id"
_CANCELLED = b"notifications/cancelled"
_MAX_NOTED_BODY = 64 * 1024
"""Bodies read for a `notifications/cancelled` are this small; a larger one is passed
on unread (a cancel is a few dozen bytes)."""


@final
class McpHttp:
    """tether's MCP server on a loopback socket, until `close()` (or Ctrl-C with `signals`).

    `sock` is a listening loopback socket (`tether._loopback.listen_loopback`); `token`
    the bearer token every request must carry (None: a new one). `signals`: Ctrl-C and
    SIGTERM close the server (the command's choice; a test's loop keeps its own).
    """

    def __init__(
        self,
        runtime: Runtime,
        sock: socket.socket,
        *,
        token: str | None = None,
        watch: StopWatch | None = None,
        hold: str | None = None,
        signals: bool = False,
    ) -> None:
        self.runtime = runtime
        self.sock = sock
        self.token = token if token is not None else secrets.token_urlsafe(32)
        self.watch = watch
        self.hold = hold
        self.signals = signals
        host, port = sock.getsockname()[:2]
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.url = f"http://{self.address}/mcp"
        """Where clients send their requests."""
        self.sessions: dict[str, McpServe] = {}
        """One `McpServe` per MCP session, by its `Mcp-Session-Id`."""
        self.stateless: McpServe | None = None
        self.tasks = TaskTable()
        self._closed = anyio.Event()
        self._signals = anyio.CancelScope()

    def close(self) -> None:
        """End the server: calls still running are stopped as a shutdown."""
        for serve in self._live():
            serve.closing = True
        self._closed.set()

    async def _close_on_signal(self) -> None:
        import signal

        with (
            self._signals,
            anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received,
        ):
            async for _ in received:
                self.close()
                return

    def _new_serve(self, tg: anyio.abc.TaskGroup, *, stateless: bool) -> McpServe:
        serve = McpServe(
            self.runtime,
            tg,
            watch=self.watch,
            hold=self.hold,
            tell_next=not stateless,
            stream_cancels=stateless,
        )
        serve.closing = self._closed.is_set()
        return serve

    def _serve_for(self, tg: anyio.abc.TaskGroup) -> Any:
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        def serve_for(ctx: ServerRequestContext[Any, Any]) -> McpServe:
            sid = None
            if ctx.request is not None and ctx.protocol_version not in (
                MODERN_PROTOCOL_VERSIONS
            ):
                sid = ctx.request.headers.get(_SESSION_HEADER.decode())
            if sid is None:
                if self.stateless is None:
                    self.stateless = self._new_serve(tg, stateless=True)
                return self.stateless
            serve = self.sessions.get(sid)
            if serve is None:
                serve = self.sessions[sid] = self._new_serve(tg, stateless=False)
            return serve

        return serve_for

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until `close()`; `task_status.started(url)` once requests are taken.

        On the way out every call still running is stopped as a shutdown (a process
        gets its grace window, a started write runs to its end), then the runtime
        closes.
        """
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
        from mcp.server.transport_security import TransportSecuritySettings

        async with self.runtime, anyio.create_task_group() as tg:
            server = mcp_server(
                self._serve_for(tg),
                on_call_tool=self.tasks.call_tool,
                tools=self.runtime.tools,
            )
            self.tasks.register(server)
            port = self.sock.getsockname()[1]
            names = [self.address, f"localhost:{port}"]
            manager = StreamableHTTPSessionManager(
                server,
                security_settings=TransportSecuritySettings(
                    allowed_hosts=names,
                    allowed_origins=[f"http://{name}" for name in names],
                ),
            )
            uv = quiet_uvicorn(self._asgi(manager), signals=False)
            async with anyio.create_task_group() as web:
                web.start_soon(uv.serve, [self.sock])
                if self.signals:
                    web.start_soon(self._close_on_signal)
                with anyio.fail_after(10):
                    while not uv.started:  # noqa: ASYNC110 (uvicorn sets a flag)
                        await anyio.sleep(0.005)
                async with manager.run():
                    task_status.started(self.url)
                    await self._closed.wait()
                # The sessions' handlers are cancelled: each call stopped as a shutdown.
                uv.should_exit = True
                self._signals.cancel()
            # Every call's request has been cancelled (each stopped as a shutdown);
            # what a cancel could not reach is stopped here.
            for session in list(self.runtime.sessions):
                if session.unsettled_turns():
                    await session.abort(
                        source="shutdown", reason="the MCP server is closing"
                    )
            for serve in self._live():
                serve.pump.cancel()

    def _live(self) -> list[McpServe]:
        """Every `McpServe` of a session not ended, and the stateless one."""
        stateless = [] if self.stateless is None else [self.stateless]
        return [*self.sessions.values(), *stateless]

    def _asgi(self, manager: StreamableHTTPSessionManager) -> Any:
        """The ASGI app: `/mcp` behind the token, cancels noted, ended sessions dropped."""
        expected = f"Bearer {self.token}".encode()

        async def app(scope: Message, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return
            if scope["path"] not in ("/mcp", "/mcp/"):
                await _refuse(send, 404, "not found: tether serves MCP at /mcp")
                return
            headers = dict(scope["headers"])
            if not hmac.compare_digest(headers.get(b"authorization", b""), expected):
                await _refuse(
                    send,
                    401,
                    "unauthorized: send the token `tether mcp serve --http` printed "
                    "at start, as `Authorization: Bearer <token>`",
                )
                return
            sid = headers.get(_SESSION_HEADER, b"").decode("latin-1") or None
            if scope["method"] == "POST" and sid is not None:
                receive = await self._note_cancel(sid, receive)
            await manager.handle_request(scope, receive, send)
            if scope["method"] == "DELETE" and sid is not None:
                ended = self.sessions.pop(sid, None)
                if ended is not None:
                    ended.pump.cancel()

        return app

    async def _note_cancel(self, sid: str, receive: Any) -> Any:
        """Read the body first; note a `notifications/cancelled` for its session.

        The SDK cancels a call's handler both for the client's cancel and when the
        session ends; the note, made before the transport sees the message, tells
        the two apart, so the ledger says which.
        """
        read: deque[Message] = deque()
        size = 0
        while size <= _MAX_NOTED_BODY:
            message = await receive()
            read.append(message)
            size += len(message.get("body", b""))
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        body = b"".join(m.get("body", b"") for m in read)
        serve = self.sessions.get(sid)
        if serve is not None and _CANCELLED in body:
            with contextlib.suppress(ValueError, AttributeError, TypeError, KeyError):
                note = json.loads(body)
                if note.get("method") == _CANCELLED.decode():
                    serve.peer_cancelled.add(note["params"]["requestId"])

        async def replay() -> Message:
            return read.popleft() if read else await receive()

        return replay


async def _refuse(send: Any, status: int, text: str) -> None:
    body = json.dumps({"error": text}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *([(b"www-authenticate", b"Bearer")] if status == 401 else []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
