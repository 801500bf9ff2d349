"""Start the board: a token kept owner-only, a loopback socket, uvicorn until Ctrl-C.

The token is new at each start and known to the person alone: it is printed in the URL
and written, owner-only, into the board folder of the account's state dir
(`board-<port>.json`, 0600 in a 0700 folder; removed at the end), a folder every walled
tree has masked (`tether.host._contain.session_masks`) and another account cannot enter.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
from typing import TYPE_CHECKING

from .._config import paths
from .._fs import write_atomic
from .._loopback import listen_loopback, quiet_uvicorn
from ..errors import UsageError

if TYPE_CHECKING:
    import socket
    from collections.abc import Callable, Sequence
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
    return listen_loopback(port)


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
    from ._app import board_app

    port = sock.getsockname()[1]
    token, where = write_token(port)
    app = board_app(sources, token=token, port=port)
    announce(f"http://127.0.0.1:{port}/?token={token}")
    try:
        quiet_uvicorn(app, signals=True).run(sockets=[sock])
    finally:
        where.unlink(missing_ok=True)
        for source in sources:
            source.close()
