"""The processes of a hung command's tree, found by a marker in their command lines.

A tree may run in a PID namespace of its own: its processes are found from here by the
marker (a `sleep` length no other test uses), not by the pids they see.
"""

from __future__ import annotations

import random

import psutil

__all__ = ("STARTING", "alive", "hung_command", "marked", "new_mark", "sleeps")

STARTING = 60.0
"""Seconds a `tether mcp serve` (or `tether mcp login`) process is waited for until it
serves (or asks): its start costs ~2.5 s of CPU (importing the MCP SDK), which a
machine at load 13 on 2 cores stretches past 20 s. A wait for a condition, not a
bound tether promises: what a test promises (a grace window kept, an exit status) is
asserted apart."""


def hung_command(mark: str) -> str:
    """A shell that ignores SIGTERM and leaves a child in the background."""
    return f"trap '' TERM; sleep {mark} & sleep {mark}; wait"


def new_mark() -> str:
    """A sleep's length no other test's tree has: its processes are found by it."""
    return f"60.{random.randrange(10**8):08d}"


def marked(mark: str) -> list[psutil.Process]:
    """The shell and both sleeps of the hung command."""
    return [
        proc
        for proc in psutil.process_iter(["cmdline"])
        if any(mark in part for part in proc.info["cmdline"] or ())
    ]


def sleeps(procs: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in procs if p.info["cmdline"][:1] == ["sleep"]]


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
