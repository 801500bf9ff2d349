"""The built-in tools' own worker threads, apart from anyio's default limiter.

A user's tool that blocks in `anyio.to_thread.run_sync` and ignores the stop keeps its
thread, and with it a place in anyio's default limiter (40 threads). Built-in tools take
their places from a limiter of their own, so abandoned user workers can never starve
Read, Write, Edit, Glob, Grep or WebFetch; so does the host's own work in threads
(sweeping and killing process trees, the containment probe). Processes start without
a thread at all (`host/_spawn.py`).
"""

from __future__ import annotations

import anyio
from anyio.lowlevel import RunVar

__all__ = ("BUILTIN_THREADS", "builtin_threads")

BUILTIN_THREADS = 16
"""Worker threads the built-in tools may use at once, per event loop."""

_limiter: RunVar[anyio.CapacityLimiter] = RunVar("tether_builtin_threads")


def builtin_threads() -> anyio.CapacityLimiter:
    """Return the built-in tools' thread limiter of the running event loop."""
    try:
        return _limiter.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(BUILTIN_THREADS)
        _limiter.set(limiter)
        return limiter
