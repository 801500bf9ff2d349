"""Finding and killing processes by an environment marker (one way: psutil).

Every process tether starts inherits a marker in its environment (`TETHER_TREE=<token>`
for one tree, `TETHER_HOST_ID=<token>` for every process of a stdio host). When the
process that should have reaped them is gone, the marker finds them again. A process
that cleared its environment (`env -i`) is not found this way: under the `namespace`
containment the kernel reclaims it anyway; under the `subreaper` fallback it is one of
the limits written down in docs/tools-process.md.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time

import psutil

from .._env import TetherEnv

__all__ = ("TREE_MARKER", "marked_pids", "sweep_marked")

TREE_MARKER = TetherEnv.TREE
"""Environment variable naming the tree a process belongs to (an unguessable token)."""
SUPERVISOR_GRACE = 1.0
"""Seconds a sweep lets a live tree supervisor finish on its own first: one whose host
is gone kills its whole tree (`env -i` processes included, which no marker finds)."""
EXIT_WAIT = 0.05
"""Seconds one round of a sweep waits for the processes it killed to exit (through
their pidfds) before it scans again for processes they started meanwhile."""


def _marked(proc: psutil.Process, name: str, token: str) -> bool:
    try:
        return (
            proc.environ().get(name) == token and proc.status() != psutil.STATUS_ZOMBIE
        )
    except psutil.Error:
        return False


def marked_pids(token: str, *, name: str = TREE_MARKER) -> list[int]:
    """Return the live (non-zombie) pids whose environment holds `name=token`."""
    return [proc.pid for proc in psutil.process_iter() if _marked(proc, name, token)]


def _kill_pinned(pid: int, name: str, token: str) -> int | None:
    """SIGKILL `pid` if it still carries the marker; return its pidfd to wait on.

    The pid is pinned first (a pidfd), then its marker checked again, so a pid recycled
    since the scan is never signalled.
    """
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        if _marked(psutil.Process(pid), name, token):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
            return fd
    except (OSError, psutil.Error):
        pass
    os.close(fd)
    return None


def _wait_exited(fds: list[int], timeout: float) -> None:
    """Wait until every pidfd in `fds` says its process exited, or `timeout` passes."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    pending = len(fds)
    deadline = time.monotonic() + timeout
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        for fd, _ in poller.poll(left * 1000):
            poller.unregister(fd)
            pending -= 1


def _is_supervisor(pid: int) -> bool:
    from ._contain import SUPERVISOR

    try:
        return str(SUPERVISOR) in psutil.Process(pid).cmdline()
    except psutil.Error:
        return False


def _wait_for_supervisors(found: list[int], timeout: float) -> None:
    """Let the tree supervisors among `found` end their trees and exit, up to `timeout`."""
    fds = []
    for pid in found:
        if _is_supervisor(pid):
            with contextlib.suppress(OSError):
                fds.append(os.pidfd_open(pid))
    try:
        _wait_exited(fds, timeout)
    finally:
        for fd in fds:
            os.close(fd)


def sweep_marked(
    token: str, *, name: str = TREE_MARKER, limit: float = 2.0
) -> list[int]:
    """SIGKILL every process marked `name=token` until none is left; blocking.

    Tree supervisors found alive first get a bounded moment to end their own trees
    (they kill processes no marker finds). Then each round kills what a scan finds,
    waits (on pidfds) for those processes to exit, and scans again: a process may fork
    while it is killed. At most `limit` seconds.

    Returns:
        The marked pids still alive when the time ran out (empty when all are gone).
    """
    deadline = time.monotonic() + limit
    _wait_for_supervisors(
        marked_pids(token, name=name), min(SUPERVISOR_GRACE, limit / 2)
    )
    while True:
        found = marked_pids(token, name=name)
        if not found or time.monotonic() > deadline:
            return found
        fds = [
            fd for pid in found if (fd := _kill_pinned(pid, name, token)) is not None
        ]
        try:
            _wait_exited(fds, min(EXIT_WAIT, max(0.0, deadline - time.monotonic())))
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
