"""Adversarial process trees: bash commands that try to outlive a stop (S13 tests).

Each tree is a bash command whose processes announce themselves on stdout with a line
`tree-pid <pid> <pid namespace>` once they run, before they close their output or hide.
The pid is the one the process sees (`$$`), which under the `namespace` containment is a
pid of the tree's own namespace; `tree_procs()` finds the same processes from outside
(by namespace and pid), so a test can count the whole tree up (no sleeping), stop the
call, and check that none of them is alive afterwards.

Every tree ends by `exec sleep 300` in its main shell (the shell's pid then names the
sleep), so the command runs until stopped.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from typing import TYPE_CHECKING, final

import anyio
import attrs
import psutil

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from pathlib import Path

__all__ = (
    "ESCAPE_TREES",
    "TREES",
    "Tree",
    "alive",
    "announce",
    "flood",
    "make_gate",
    "open_gate",
    "tree_pids",
    "tree_procs",
    "wait_exited",
)

_PID = re.compile(r"tree-pid (\d+) (pid:\[\d+\])\n")
"""A whole announcement line (a line cut between two chunks is not counted yet)."""
_ANNOUNCE = "echo tree-pid $$ $(readlink /proc/self/ns/pid)"
_MAIN = f"{_ANNOUNCE}; exec sleep 300"


def announce() -> str:
    """The shell command that announces the current shell (`tree-pid <pid> <ns>`)."""
    return _ANNOUNCE


def tree_pids(output: str) -> list[int]:
    """Return the pids a tree announced in `output`, in order, as the tree saw them."""
    return [int(m[0]) for m in _PID.findall(output)]


def _ns_of(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _nspid(pid: int) -> int | None:
    """The innermost pid of `pid` (the one it sees itself)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return None


def tree_procs(output: str) -> list[psutil.Process]:
    """Return the announced processes as seen from here, in order (call while alive).

    Raises:
        LookupError: an announced process is not found (already gone).
    """
    wanted = [(int(pid), ns) for pid, ns in _PID.findall(output)]
    mine = _ns_of("self")
    found: dict[tuple[int, str], psutil.Process] = {}
    if any(ns != mine for _, ns in wanted):
        for proc in psutil.process_iter():
            ns = _ns_of(proc.pid)
            if ns != mine and ns is not None:
                inner = _nspid(proc.pid)
                if inner is not None:
                    found[(inner, ns)] = proc
    procs = []
    for pid, ns in wanted:
        if ns == mine:
            procs.append(psutil.Process(pid))
        elif (pid, ns) in found:
            procs.append(found[(pid, ns)])
        else:
            raise LookupError(f"announced process {pid} in {ns} is not found")
    return procs


def alive(procs: Iterable[psutil.Process]) -> list[int]:
    """Return the pids of `procs` still running and not zombies."""
    out = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc.pid)
        except psutil.Error:
            pass
    return out


async def wait_exited(
    procs: Sequence[psutil.Process], *, timeout: float = 10.0
) -> None:
    """Wait until every process of `procs` has exited (a zombie has exited).

    Waits on each process's pidfd, which the kernel makes readable when it exits, so
    nothing is polled; a process already gone (or whose pid was reused) is done.

    Raises:
        TimeoutError: some are still running after `timeout` seconds; names their pids.
    """
    fds: list[int] = []
    try:
        for proc in procs:
            try:
                fd = os.pidfd_open(proc.pid)
            except ProcessLookupError:
                continue
            fds.append(fd)
            if not proc.is_running():  # the pid now names another process
                fds.pop()
                os.close(fd)
        with anyio.move_on_after(timeout):
            for fd in fds:
                await anyio.wait_readable(fd)
            return
    finally:
        for fd in fds:
            os.close(fd)
    left = alive(procs)
    raise TimeoutError(f"processes still running after {timeout:g} s: {left}")


@final
@attrs.frozen
class Tree:
    """One adversarial process tree."""

    name: str
    """Short name, used as the test id."""
    command: str
    """The bash command."""
    pids: int
    """How many `tree-pid` lines it prints once every process is up."""
    obeys_term: bool
    """Whether SIGTERM alone ends every process of the tree (a stop's grace window is
    the whole tree's: one process that ignores it holds the call until the window
    closes)."""
    gated: bool = False
    """Once every process announced, the tree waits for a line on the fifo `go` in its
    working directory (see `open_gate()`), then kills its own supervisor."""


def _bg(inner: str, *, env_i: bool = False) -> str:
    """A `sh -c` that announces its pid, then runs `inner` in its place."""
    clear = "env -i " if env_i else ""
    return f"{clear}sh -c {shlex.quote(f'{_ANNOUNCE}; exec {inner}')}"


_PY = shlex.quote(sys.executable)
_FORKER = """
import os, sys
def say():
    print("tree-pid", os.getpid(), os.readlink("/proc/self/ns/pid"), flush=True)
pid = os.fork()
if pid == 0:
    os.setsid()
    os.execv(sys.executable, [sys.executable, "-c",
        "import os, signal; print('tree-pid', os.getpid(), "
        "os.readlink('/proc/self/ns/pid'), flush=True); signal.pause()"])
say()
os.execv("/bin/sh", ["sh", "-c", "exec sleep 300"])
"""

TREES: tuple[Tree, ...] = (
    Tree(
        name="trap-term",
        command=f"trap '' TERM; {_bg('sleep 300')} & {_MAIN}",
        pids=2,
        obeys_term=False,
    ),
    Tree(
        name="setsid",
        command=f"setsid {_bg('sleep 300')} & {_MAIN}",
        pids=2,
        obeys_term=True,
    ),
    Tree(
        name="double-fork",
        command=f"( {_bg('sleep 300')} & ) & {_MAIN}",
        pids=2,
        obeys_term=True,
    ),
    Tree(
        name="double-fork-setsid-trap",
        command=f"( trap '' TERM; setsid {_bg('sleep 300')} & ) & {_MAIN}",
        pids=2,
        obeys_term=False,
    ),
    Tree(
        name="nohup",
        command=f"nohup {_bg('sleep 300')} & {_MAIN}",
        pids=2,
        obeys_term=True,
    ),
    Tree(
        name="exec-python-forks",
        command=f"exec {_PY} -c {shlex.quote(_FORKER)}",
        pids=2,
        obeys_term=True,
    ),
    Tree(
        name="closed-stdout",
        command=f"{_bg('sleep 300 >&- 2>&-')} & {_MAIN}",
        pids=2,
        obeys_term=True,
    ),
    Tree(
        name="env-i-setsid-trap",
        command=(
            f"( trap '' TERM HUP; env -i setsid "
            f"{_bg('sleep 300', env_i=True)} & ) & {_MAIN}"
        ),
        pids=2,
        obeys_term=False,
    ),
)
"""The trees every process tool must reclaim, under either containment."""

ESCAPE_TREES: tuple[Tree, ...] = (
    Tree(
        name="kill-supervisor-env-i",
        command=(
            f"trap '' TERM HUP; setsid {_bg('sleep 300', env_i=True)} & "
            f"( trap '' TERM HUP; {_bg('sleep 300')} ) & "
            f"{_ANNOUNCE}; read _ < go; kill -9 $PPID; exec sleep 300"
        ),
        pids=3,
        obeys_term=False,
        gated=True,
    ),
)
"""Trees that kill their supervisor (`kill -9 $PPID`) after starting a process that
cleared its environment. The namespace reclaims them like any other (its first process
cannot be killed from inside); under the subreaper fallback the call ends with the
supervisor and the `env -i` process escapes: a documented limit of the fallback."""


def make_gate(cwd: Path) -> Path:
    """Make the fifo a gated tree waits on in `cwd`; return its path."""
    gate = cwd / "go"
    os.mkfifo(gate)
    return gate


async def open_gate(gate: Path) -> None:
    """Let a gated tree go on (it reads one line from the fifo)."""
    async with await anyio.open_file(gate, "w") as fifo:
        await fifo.write("go\n")


def flood(*, obeys_term: bool) -> str:
    """Return a command that writes output as fast as it can (MBs per second)."""
    trap = "trap '' TERM; " if not obeys_term else ""
    return f"{trap}{_ANNOUNCE}; exec yes flood-flood-flood-flood-flood-flood-flood"
