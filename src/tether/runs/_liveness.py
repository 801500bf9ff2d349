"""Is a run's process alive? The pid and its start time, on the run's own host.

A pid alone may have been recycled, so a run records its process's start time and the
restart path compares both. On another host nothing can be checked from here: the
claims' leases decide, on the store's clock (spec 03: an expired lease is taken only
through the restart path).

A host is named by a stable id, not its name alone: two machines of one name (cloned
images, containers) must not judge each other's pids. The id is the host name and the
machine id (`/etc/machine-id`, kept across boots); `TETHER_MACHINE_ID` sets it outright.
"""

from __future__ import annotations

import functools
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from .._env import TetherEnv
from ..errors import StoreError
from ._values import ACTIVE_RUN_STATES, RunRow, RunState

if TYPE_CHECKING:
    from ._store import Store

__all__ = (
    "effective_state",
    "found_dead",
    "here",
    "is_dead",
    "process_alive",
    "process_start",
)

_START_SLACK = 0.5
"""Seconds of difference allowed between two readings of one process's start time."""

_MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))


@functools.cache
def _machine_id() -> str:
    for path in _MACHINE_ID_FILES:
        try:
            text = path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text:
            return text[:12]
    return ""


def here() -> str:
    """This host's id, as runs and claims record it: `TETHER_MACHINE_ID`, else name/machine."""
    chosen = os.environ.get(TetherEnv.MACHINE_ID, "").strip()
    if chosen:
        return chosen
    machine = _machine_id()
    name = socket.gethostname()
    return f"{name}/{machine}" if machine else name


def process_start(pid: int | None = None) -> float:
    """The start time of `pid` (this process by default), as psutil reports it."""
    return psutil.Process(pid if pid is not None else os.getpid()).create_time()


def process_alive(
    host: str, pid: int, started: float, *, here_id: str | None = None
) -> bool | None:
    """True or False for a process on this host; None when it is on another host.

    `here_id` is this host's id (`here()` by default).
    """
    me = here_id if here_id is not None else here()
    # Earlier versions recorded the bare host name: that is this host too.
    if host != me and host != me.split("/", 1)[0]:
        return None
    try:
        return abs(process_start(pid) - started) <= _START_SLACK
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        # It exists but cannot be looked at (another account's): count it as alive.
        return True


def is_dead(run: RunRow, *, leases_expired: bool, here_id: str | None = None) -> bool:
    """Whether a run that should be working has lost its process (the restart path).

    On the run's own host its process decides; on another, its leases only.
    """
    if run.state not in ACTIVE_RUN_STATES:
        return False
    alive = process_alive(run.host, run.pid, run.pid_start, here_id=here_id)
    if alive is None:
        return leases_expired
    return not alive


def _leases_expired(store: Store, run: RunRow, now: float) -> bool:
    """Whether the run's own heartbeat and every claim's lease ended before `now`."""
    if run.expires is not None and run.expires >= now:
        return False
    return all(claim.expires < now for claim in store.claims(run.id))


def found_dead(store: Store, run: RunRow, *, here_id: str | None = None) -> bool:
    """Whether an active run's process is gone (its host's) or its leases expired.

    Records nothing: `effective_state` records what it finds; a read-only view (the
    board) shows it.
    """
    return run.state in ACTIVE_RUN_STATES and is_dead(
        run,
        leases_expired=_leases_expired(store, run, store.now()),
        here_id=here_id,
    )


def effective_state(
    store: Store, run: RunRow, *, here_id: str | None = None
) -> RunState:
    """A run's state, after the restart path: an active run whose process died is dead.

    A run of this host (`here_id`, default `here()`) is judged by its process; a run of
    another host by its leases, on the store's clock. A dead run found this way is
    recorded as such in the store.
    """
    if not found_dead(store, run, here_id=here_id):
        return run.state
    if run.host == (here_id if here_id is not None else here()):
        why = f"process {run.pid} on {run.host} is gone"
    else:
        why = f"its leases expired on the store's clock (host {run.host})"
    try:
        store.set_run_state(run.id, RunState.DEAD)
    except StoreError:
        # Its state moved since it was read (it ended, or a peer found it dead first):
        # the store's word stands, and only the one that moved it records why.
        now = store.run(run.id)
        if now is None:
            raise
        return now.state
    store.log(run.id, "dead", detail=why)
    return RunState.DEAD
