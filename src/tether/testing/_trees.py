"""Adversarial process trees: bash commands that try to outlive a stop (S13 tests).

Each tree is a bash command whose processes announce themselves on stdout with a line
`tree-pid <pid>` once they run, before they close their output or hide. A test counts
these lines (`tree_pids()`) to know the whole tree is up (no sleeping), records the
pids, stops the call, and checks that none of them is alive afterwards.

Every tree ends by `exec sleep 300` in its main shell (the shell's pid then names the
sleep), so the command runs until stopped.
"""

from __future__ import annotations

import re
import shlex
import sys
from typing import final

import attrs

__all__ = ("TREES", "Tree", "flood", "tree_pids")

_PID = re.compile(r"tree-pid (\d+)")
_ANNOUNCE = "echo tree-pid $$"
_MAIN = f"{_ANNOUNCE}; exec sleep 300"


def tree_pids(output: str) -> list[int]:
    """Return the pids a tree announced in `output`, in order."""
    return [int(m) for m in _PID.findall(output)]


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
    """Whether SIGTERM alone ends the main command."""


def _bg(inner: str) -> str:
    """A `sh -c` that announces its pid, then runs `inner` in its place."""
    return f"sh -c {shlex.quote(f'{_ANNOUNCE}; exec {inner}')}"


_PY = shlex.quote(sys.executable)
_FORKER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.setsid()
    os.execv(sys.executable, [sys.executable, "-c",
        "import os, signal; print('tree-pid', os.getpid(), flush=True); signal.pause()"])
print("tree-pid", os.getpid(), flush=True)
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
        obeys_term=True,
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
)
"""The trees every process tool must reclaim."""


def flood(*, obeys_term: bool) -> str:
    """Return a command that writes output as fast as it can (MBs per second)."""
    trap = "trap '' TERM; " if not obeys_term else ""
    return f"{trap}{_ANNOUNCE}; exec yes flood-flood-flood-flood-flood-flood-flood"
