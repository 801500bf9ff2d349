"""The in-process host: the host core in the runtime's own process, behind the seam.

It is the default host and the fake that the stdio host's contract suite also runs
against. Its tools run in the runtime's process: a tool that cannot be cancelled (a
thread that ignores the stop) keeps running there; such tools belong in the stdio host.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from ._core import HostCore
    from ._protocol import AbortAck, AbortRequest, ExecuteRequest, KillRequest, Sink

__all__ = ("InProcessHost",)


class InProcessHost:
    """A `HostConnection` that calls a `HostCore` directly."""

    def __init__(self, core: HostCore, sink: Sink) -> None:
        self.core = core
        self._sink = sink

    async def execute(self, request: ExecuteRequest) -> None:
        """Hand the call to the core (which never blocks)."""
        self.core.execute(request, self._sink)

    async def abort(self, request: AbortRequest) -> AbortAck:
        """Apply the abort in the core and answer at once."""
        return self.core.abort(request)

    async def kill(self, request: KillRequest) -> AbortAck:
        """Kill the call's tree in the core and answer at once."""
        return self.core.kill(request)

    def outliving(self) -> dict[str, int]:
        """Stopped calls whose worker still runs here, by tool."""
        return self.core.outliving()

    async def reap_orphans(self) -> list[int]:
        """Nothing to reap: this host is never lost while the runtime lives."""
        return []

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        core: HostCore,
        sink: Sink,
        *,
        notice_after: float = 1.0,
        say: Callable[[str], None] | None = None,
    ) -> AsyncIterator[InProcessHost]:
        """Run the core for the lifetime of the block.

        Closing cancels every tool; a tool that ignores cancellation (a shielded task, a
        worker thread) keeps the block open until it ends. After `notice_after` seconds
        `say` is told which calls it waits for: tools that cannot be cancelled belong in
        the stdio host, whose closing is bounded.
        """
        async with anyio.create_task_group() as tg:
            await tg.start(core.serve)
            try:
                yield cls(core, sink)
            finally:
                tg.cancel_scope.cancel()
                if say is not None:
                    with anyio.CancelScope(shield=True):
                        await _notice_waits(core, notice_after, say)


async def _notice_waits(
    core: HostCore, after: float, say: Callable[[str], None]
) -> None:
    with anyio.move_on_after(after):
        await core.wait_idle()
    left = core.describe_active()
    if left:
        say("closing waits for tools that ignore cancellation: " + "; ".join(left))
