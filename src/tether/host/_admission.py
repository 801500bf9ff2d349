"""Admission: at most N calls run at once; the others wait in order, cancellably.

A slot is released when its call no longer runs *or* is abandoned: an abandoned
read-only call whose worker is still blocked gives its slot back at the stop, so stopped
calls can never starve new ones.
"""

from __future__ import annotations

from collections import deque

import anyio
import attrs

__all__ = ("Admission",)


@attrs.define(eq=False)
class Admission:
    """A FIFO limit on concurrently running calls."""

    limit: int
    running: int = 0
    _waiters: deque[anyio.Event] = attrs.field(factory=deque)

    def take(self) -> bool:
        """Take a place if one is free now (no one waits before this call)."""
        if self.running < self.limit and not self._waiters:
            self.running += 1
            return True
        return False

    async def acquire(self) -> None:
        """Wait for a place; cancelling the wait leaves no trace in the queue."""
        if self.take():
            return
        event = anyio.Event()
        self._waiters.append(event)
        try:
            await event.wait()
        except BaseException:
            if event.is_set():
                # The place was handed to us as we were cancelled: pass it on.
                self.give_back()
            else:
                self._waiters.remove(event)
            raise

    @property
    def queued(self) -> int:
        """Number of calls waiting for a place."""
        return len(self._waiters)

    def give_back(self) -> None:
        """Give a place back; each place taken is given back once."""
        if self._waiters:
            # The place moves to the first waiter; `running` stays the same.
            self._waiters.popleft().set()
        else:
            self.running -= 1
