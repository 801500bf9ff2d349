"""A relay between an MCP client and a stdio server that logs every message it passes.

`python mcp_relay.py LOG COMMAND [ARG ...]` starts COMMAND and copies the client's lines
to its stdin and its lines to the client, appending each to LOG as `> line` (client to
server) or `< line` (server to client), flushed at once: the file says what was on the
wire even after the relay and its server are killed.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import IO


def _pump(source: IO[bytes], sink: IO[bytes], log: IO[str], mark: str) -> None:
    lock = _LOCK
    for line in iter(source.readline, b""):
        with lock:
            log.write(f"{mark} {line.decode(errors='replace').rstrip()}\n")
            log.flush()
        sink.write(line)
        sink.flush()
    sink.close()


_LOCK = threading.Lock()


def main() -> None:
    log = open(sys.argv[1], "a", encoding="utf-8")  # noqa: SIM115
    child = subprocess.Popen(
        sys.argv[2:], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert child.stdin is not None
    assert child.stdout is not None
    up = threading.Thread(
        target=_pump, args=(sys.stdin.buffer, child.stdin, log, ">"), daemon=True
    )
    up.start()
    _pump(child.stdout, sys.stdout.buffer, log, "<")
    sys.exit(child.wait())


if __name__ == "__main__":
    main()
