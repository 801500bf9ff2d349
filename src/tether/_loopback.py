"""Listening sockets on loopback only: what tether serves over HTTP, this machine alone reaches.

`tether board` and `tether mcp serve --http` serve the person's own account (its runs,
its tools run as the person): a socket they listen on is bound to a loopback address, and
any other host is refused before anything listens.
"""

from __future__ import annotations

import contextlib
import errno
import signal
import socket
from typing import TYPE_CHECKING, Any

from .errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ("LOOPBACK_HOSTS", "listen_loopback", "loopback_host", "quiet_uvicorn")

LOOPBACK_HOSTS = {"127.0.0.1": "127.0.0.1", "localhost": "127.0.0.1", "::1": "::1"}
"""The host names accepted, and the address each binds."""


def loopback_host(host: str, *, what: str) -> str:
    """The loopback address `host` names.

    Raises:
        UsageError: `host` is not loopback; the line says why (`what` serves the
            person's account, so only this machine may reach it).
    """
    address = LOOPBACK_HOSTS.get(host.strip("[]").lower())
    if address is None:
        raise UsageError(
            f"{what} listens on loopback only (127.0.0.1 or ::1), not {host!r}: "
            "what it serves runs as you, so only this machine may reach it; "
            "to reach it from elsewhere, forward the port over SSH"
        )
    return address


def listen_loopback(port: int, host: str = "127.0.0.1") -> socket.socket:
    """A listening socket on loopback `host`:`port` (0: any free port).

    Raises:
        UsageError: the port is taken or may not be used.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it: a response's head and body, written apart,
        # would otherwise wait for the client's delayed ACK (40 ms) each.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(64)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(
                f"port {port} on {host} is taken; choose another with --port "
                "(--port 0: any free one)"
            ) from None
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


def quiet_uvicorn(app: Any, *, signals: bool) -> Any:
    """A uvicorn server for `app` that logs only warnings and keeps no lifespan.

    With `signals`, Ctrl-C and SIGTERM end it quietly: uvicorn would raise them again
    after its shutdown, which would end the process before its own cleanup. Without,
    it takes no signal (whoever runs it ends it: `server.should_exit = True`).
    """
    import uvicorn

    config = uvicorn.Config(
        app,
        lifespan="off",
        log_level="warning",
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=1,
    )

    class _Server(uvicorn.Server):
        async def serve(self, sockets: list[socket.socket] | None = None) -> None:
            try:
                await super().serve(sockets)
            finally:
                self._leave_the_loop()

        def _leave_the_loop(self) -> None:
            """Close its listening and accepted sockets through the event loop.

            A cancelled `serve()` skips uvicorn's shutdown: its sockets stay registered
            with the loop's selector after they are closed, and the next socket of the
            same loop given the same file descriptor is never watched (its clients wait
            unserved). Closing them through the loop drops the registrations; after a
            shutdown of its own, there is nothing left to close.
            """
            for server in getattr(self, "servers", ()):
                server.close()
            for connection in list(self.server_state.connections):
                transport = getattr(connection, "transport", None)
                if transport is not None:
                    transport.close()

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if not signals:
                yield
                return
            before = {
                sig: signal.signal(sig, self.handle_exit)
                for sig in (signal.SIGINT, signal.SIGTERM)
            }
            try:
                yield
            finally:
                for sig, handler in before.items():
                    signal.signal(sig, handler)

    return _Server(config)
