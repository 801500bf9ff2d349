"""tether's own worker threads, apart from anyio's default limiter.

A user's tool that blocks in `anyio.to_thread.run_sync` and ignores the stop keeps its
thread, and with it a place in anyio's default limiter (40 threads). tether's own work
in threads takes its places from a limiter of its own, so abandoned user workers can
never starve it: the built-in tools (Read, Write, Edit, Glob, Grep, WebFetch), the
host's sweeping and killing of process trees and its containment probe, a run's lanes
and the ACP server. Processes start without a thread at all (`host/_spawn.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar, TypeVarTuple

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ("BUILTIN_THREADS", "builtin_threads", "in_thread")

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")

BUILTIN_THREADS = 16
"""Worker threads tether's own work may use at once, per event loop."""

_limiter: RunVar[anyio.CapacityLimiter] = RunVar("tether_builtin_threads")


def builtin_threads() -> anyio.CapacityLimiter:
    """Return tether's own thread limiter of the running event loop."""
    try:
        return _limiter.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(BUILTIN_THREADS)
        _limiter.set(limiter)
        return limiter


async def in_thread(fn: Callable[[*_Ts], _T], *args: *_Ts) -> _T:
    """Run `fn(*args)` in a thread of tether's own limiter; cancelling waits for it."""
    return await anyio.to_thread.run_sync(fn, *args, limiter=builtin_threads())
