"""Run a program with a pseudo-terminal on stdin, stdout and stderr, to its end."""

from __future__ import annotations

import errno
import os
import select
import subprocess
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


def run_in_pty(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | None = None,
    timeout: float = 30,
) -> tuple[int, str]:
    """Run `argv` in a new session on a fresh pty; return its exit code and output."""
    master, slave = os.openpty()
    proc = subprocess.Popen(
        list(argv),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError as exc:
                if exc.errno != errno.EIO:
                    raise
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=timeout)
    finally:
        os.close(master)
    return code, b"".join(chunks).decode(errors="replace")
