"""A clock the test moves by hand, for code that takes its time as a parameter."""

from __future__ import annotations


class Clock:
    """A wall clock the test moves by hand: `clock.now += 0.5`."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
