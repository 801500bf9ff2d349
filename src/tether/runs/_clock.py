"""The run's wall clock: what time it is and a wait until a time (usage windows).

A parameter of the run, as time is elsewhere: the real one reads `time.time()`; a test
passes one it moves by hand, so a wait for a window's reset is tested without waiting.
"""

from __future__ import annotations

import time
from typing import Protocol, final

import anyio

__all__ = ("RunClock", "WallClock")


class RunClock(Protocol):
    """Wall-clock seconds since the epoch, and a wait until such a time."""

    def now(self) -> float:
        """Seconds since the epoch now."""
        ...

    async def sleep_until(self, when: float) -> None:
        """Return once `now()` is at or past `when` (cancellable)."""
        ...


@final
class WallClock:
    """The machine's wall clock."""

    def now(self) -> float:
        """`time.time()`."""
        return time.time()

    async def sleep_until(self, when: float) -> None:
        """Sleep until `when` by `time.time()`."""
        await anyio.sleep(max(0.0, when - time.time()))
