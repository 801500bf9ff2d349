"""Start the board: a token kept owner-only, a loopback socket, uvicorn until Ctrl-C.

The token is new at each start and known to the person alone: it is printed in the URL
and written, owner-only, into the board folder of the account's state dir
(`board-<port>.json`, 0600 in a 0700 folder; removed at the end), a folder every walled
tree has masked (`tether.host._contain.session_masks`) and another account cannot enter.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import signal
import socket
import stat
from typing import TYPE_CHECKING

from .._config import paths
from .._fs import write_atomic
from ..errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from pathlib import Path

    from ._source import BoardSource

__all__ = ("DEFAULT_PORT", "board_socket", "serve", "write_token")

DEFAULT_PORT = 8765
"""The loopback port `tether board` takes unless `--port` says another."""


def board_socket(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:`port` (0: any free port).

    Raises:
        UsageError: the port is taken or may not be used.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(64)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(
                f"port {port} on 127.0.0.1 is taken; choose another with --port "
                "(--port 0: any free one)"
            ) from None
        raise UsageError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}") from None
    return sock


def _private_folder() -> Path:
    """The board folder, 0700 and this account's, made if missing.

    Raises:
        UsageError: it is not a folder of this account's.
    """
    folder = paths().board_dir
    folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise UsageError(
            f"{folder} is not a folder of this account's; remove it and start again"
        )
    if st.st_mode & 0o077:
        os.chmod(folder, 0o700)
    return folder


def write_token(port: int) -> tuple[str, Path]:
    """A new token for the board on `port`, written owner-only; the token and file."""
    token = secrets.token_urlsafe(32)
    where = _private_folder() / f"board-{port}.json"
    record = {
        "url": f"http://127.0.0.1:{port}/?token={token}",
        "port": port,
        "token": token,
        "pid": os.getpid(),
    }
    write_atomic(where, (json.dumps(record) + "\n").encode(), mode=0o600)
    return token, where


def serve(
    sources: Sequence[BoardSource],
    sock: socket.socket,
    *,
    announce: Callable[[str], None],
) -> None:
    """Serve the board over `sources` on `sock` until Ctrl-C (or SIGTERM)."""
    import uvicorn

    from ._app import board_app

    port = sock.getsockname()[1]
    token, where = write_token(port)
    app = board_app(sources, token=token, port=port)
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_level="warning",
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=1,
    )

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            """Ctrl-C and SIGTERM end the board quietly.

            uvicorn raises them again after its shutdown, which would end the
            process before the token's file is removed.
            """
            before = {
                sig: signal.signal(sig, self.handle_exit)
                for sig in (signal.SIGINT, signal.SIGTERM)
            }
            try:
                yield
            finally:
                for sig, handler in before.items():
                    signal.signal(sig, handler)

    announce(f"http://127.0.0.1:{port}/?token={token}")
    try:
        _Server(config).run(sockets=[sock])
    finally:
        where.unlink(missing_ok=True)
        for source in sources:
            source.close()
