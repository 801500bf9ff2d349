"""Time from a stop to the Grep call's end, with its `rg` process killed and reaped.

Run: .venv/bin/python benchmarks/grep_stop.py [--runs N]
Target (spec 05): the Grep worker is gone <= 100 ms after a stop on a large tree.

Each run starts Grep on a tree of about 200k lines with a pattern that keeps ripgrep
busy for seconds, waits until rg is searching (the tool reports its pid), stops the call
the way the host stops a READ_ONLY call (sets `ctx.cancelled` and cancels the task), and
measures until the call has returned, which Grep does only once rg is reaped. The pid is
then checked to be gone.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path

import anyio
import psutil
from _common import machine, summary, write_tree

from tether.host import ToolContext
from tether.host.tools.grep import Grep

SLOW_PATTERN = "[a-z ]*a[a-z ]{32}[0-9]{7}"


async def one_stop(tree: Path) -> tuple[float, bool]:
    """Stop one running Grep; return (seconds from stop to the call's end, pid gone)."""
    seen = anyio.Event()
    pids: list[int] = []

    def on_progress(text: str) -> None:
        if found := re.search(r"rg pid (\d+)", text):
            pids.append(int(found.group(1)))
            seen.set()

    ctx = ToolContext(
        call_id="c", session_id="s", workspace=tree, on_progress=on_progress
    )
    scope = anyio.CancelScope()
    ended = 0.0

    async def call() -> None:
        nonlocal ended
        with scope:
            await Grep().run(ctx, {"pattern": SLOW_PATTERN})
        ended = time.perf_counter()

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await seen.wait()
            if psutil.Process(pids[0]).status() == psutil.STATUS_ZOMBIE:
                raise RuntimeError("rg finished before the stop; the tree is too small")
            stopped = time.perf_counter()
            ctx.cancelled.set()
            scope.cancel()
    return ended - stopped, not psutil.pid_exists(pids[0])


async def main(runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        lines = write_tree(tree, dirs=20, files=10, lines=1000, seed=14)
        times: list[float] = []
        survivors = 0
        for _ in range(runs):
            elapsed, gone = await one_stop(tree)
            times.append(elapsed)
            survivors += not gone
        print(f"machine: {machine()}")
        print(f"tree: {lines} lines in 200 files; pattern {SLOW_PATTERN!r}")
        print(summary("grep stop -> call ended, rg reaped", times))
        print(f"rg pids still present after the call ended: {survivors} of {runs}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    anyio.run(main, parser.parse_args().runs)
