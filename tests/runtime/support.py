"""Runtime test support: the test tools and the runtime's events, waited on."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from tether import Runtime
from tether.runtime import RuntimeEvent, ToolProgress
from tether.testing import (
    Echo,
    Fail,
    Hang,
    Obedient,
    SlowExtension,
    SlowWrite,
    Stubborn,
    Stuck,
)

TEST_TOOLS = [Echo, Fail, Hang, Obedient, SlowExtension, SlowWrite, Stubborn, Stuck]
ALLOW_ALL = {"allow": [t.name for t in TEST_TOOLS]}


class Events:
    """The runtime's events, with bounded waits for the one a test needs."""

    def __init__(self, stream: MemoryObjectReceiveStream[RuntimeEvent]) -> None:
        self.stream = stream
        self.seen: list[RuntimeEvent] = []

    async def wait(self, predicate: Callable[[RuntimeEvent], bool]) -> RuntimeEvent:
        for event in self.seen:
            if predicate(event):
                return event
        with anyio.fail_after(10):
            async for event in self.stream:
                self.seen.append(event)
                if predicate(event):
                    return event
        raise AssertionError("event stream closed")  # pragma: no cover

    async def started(self, count: int = 1) -> None:
        """Wait until `count` calls have reported `started` (their operation began)."""
        for n in range(1, count + 1):
            await self.wait(
                lambda e, n=n: (
                    sum(
                        1
                        for x in self.seen
                        if isinstance(x, ToolProgress) and x.text == "started"
                    )
                    >= n
                )
            )

    def drain(self) -> None:
        while True:
            try:
                self.seen.append(self.stream.receive_nowait())
            except anyio.WouldBlock:
                return


@asynccontextmanager
async def events_of(runtime: Runtime) -> AsyncIterator[Events]:
    stream = runtime.subscribe()
    async with stream:
        yield Events(stream)
