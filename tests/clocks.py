"""A clock the test moves by hand, for code that takes its time as a parameter, and
the time a loaded machine kept a process from running."""

from __future__ import annotations

import os


class Clock:
    """A wall clock the test moves by hand: `clock.now += 0.5`."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def cpu_wait(pid: int | str = "self") -> float:
    """Seconds the threads of process `pid` have spent ready to run but waiting for a
    CPU (the kernel's run-queue delay, `/proc/<pid>/task/*/schedstat`), since each
    started; 0.0 where the kernel does not tell.

    The difference across an operation is the time a loaded machine, not the code,
    added to its wall time: a test of a wall-clock bound subtracts it and still holds
    the code to the bound on a quiet machine, where it is ~0.
    """
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):  # the thread ended meanwhile
            continue
    return total / 1e9
