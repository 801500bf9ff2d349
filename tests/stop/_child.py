"""A forked child for tests that change what only a process of its own may change
(its mount namespace, its user namespace, its ids, its root)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable


def in_child(fn: Callable[[], str]) -> str:
    """Run `fn` in a forked child and return the text it returned.

    An exception in the child comes back as `child failed: <repr>`.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        os.close(read_end)
        try:
            text = fn()
        except BaseException as exc:
            text = f"child failed: {exc!r}"
        os.write(write_end, text.encode())
        os._exit(0)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode()
