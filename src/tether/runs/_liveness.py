"""Is a run's process alive? The pid and its start time, on the run's own host.

A pid alone may have been recycled, so a run records its process's start time and the
restart path compares both. On another host nothing can be checked from here: the
claims' leases decide (spec 03: an expired lease is taken only through the restart path).
"""

from __future__ import annotations

import os
import socket

import psutil

from ._values import ACTIVE_RUN_STATES, RunRow

__all__ = ("here", "is_dead", "process_alive", "process_start")

_START_SLACK = 0.5
"""Seconds of difference allowed between two readings of one process's start time."""


def here() -> str:
    """This host's name, as runs record it."""
    return socket.gethostname()


def process_start(pid: int | None = None) -> float:
    """The start time of `pid` (this process by default), as psutil reports it."""
    return psutil.Process(pid if pid is not None else os.getpid()).create_time()


def process_alive(host: str, pid: int, started: float) -> bool | None:
    """True or False for a process on this host; None when it is on another host."""
    if host != here():
        return None
    try:
        return abs(process_start(pid) - started) <= _START_SLACK
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        # It exists but cannot be looked at (another account's): count it as alive.
        return True


def is_dead(run: RunRow, *, leases_expired: bool) -> bool:
    """Whether a run that should be working has lost its process (the restart path)."""
    if run.state not in ACTIVE_RUN_STATES:
        return False
    alive = process_alive(run.host, run.pid, run.pid_start)
    if alive is None:
        return leases_expired
    return not alive
