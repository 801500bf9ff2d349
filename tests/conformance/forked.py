"""The command the MCP conformance suite runs per scenario when a warm client serves.

It hands its standard streams, its environment and the scenario's URL (its last
argument) to `client.py --serve` on the socket `TETHER_CONFORMANCE_SOCKET` names, and
exits with the scenario run's status. Standard library only: it starts in milliseconds.
"""

from __future__ import annotations

import json
import os
import socket
import sys


def main() -> None:
    request = json.dumps({"url": sys.argv[-1], "env": dict(os.environ)}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(os.environ["TETHER_CONFORMANCE_SOCKET"])
        socket.send_fds(connection, [request], [0, 1, 2])
        connection.shutdown(socket.SHUT_WR)
        status = connection.recv(16)
    sys.exit(int(status) if status.strip().isdigit() else 1)


if __name__ == "__main__":
    main()
