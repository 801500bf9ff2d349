"""The in-process host: the host core in the runtime's own process, behind the seam.

`HostConnection` is what the runtime needs of any host: send `tools.execute`, send
`tools.abort` and receive the host's events through a sink. The in-process host is the
default and the fake that the stdio host's contract suite is also run against.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Protocol

import anyio

from ._core import HostCore
from ._protocol import AbortAck, AbortRequest, ExecuteRequest, HostEvent

__all__ = ("HostConnection", "InProcessHost", "Sink")

Sink = Callable[[HostEvent], None]


class HostConnection(Protocol):
    """A connected host, as the runtime sees it."""

    async def execute(self, request: ExecuteRequest) -> None:
        """Send `tools.execute`; returns once the host has the call."""
        ...

    async def abort(self, request: AbortRequest) -> AbortAck:
        """Send `tools.abort` and return the host's answer."""
        ...


class InProcessHost:
    """A `HostConnection` that calls a `HostCore` directly."""

    def __init__(self, core: HostCore, sink: Sink) -> None:
        self.core = core
        self._sink = sink

    async def execute(self, request: ExecuteRequest) -> None:
        """Hand the call to the core (which never blocks)."""
        self.core.execute(request, self._sink)

    def execute_nowait(self, request: ExecuteRequest) -> None:
        """`execute()` without the await: the core never blocks."""
        self.core.execute(request, self._sink)

    async def abort(self, request: AbortRequest) -> AbortAck:
        """Apply the abort in the core and answer at once."""
        return self.core.abort(request)

    @classmethod
    @asynccontextmanager
    async def open(cls, core: HostCore, sink: Sink) -> AsyncIterator[InProcessHost]:
        """Run the core for the lifetime of the block."""
        async with anyio.create_task_group() as tg:
            await tg.start(core.serve)
            try:
                yield cls(core, sink)
            finally:
                tg.cancel_scope.cancel()
