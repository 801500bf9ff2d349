"""Reclaim 1,000 adversarial process trees through the Bash tool and count survivors.

Each call runs one of `tether.testing._trees.TREES` (TERM trap, setsid, double fork,
nohup, exec'd Python that forks and re-execs, closed stdout), waits until every process
announced itself, stops the call (SIGTERM), cancels it when the grace window closes
(SIGKILL of every descendant), then checks every announced pid with psutil. Target
(spec 05): 0 survivors.

Usage: .venv/bin/python benchmarks/process_trees.py [--trees 1000] [--parallel 8]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import anyio
import psutil

from tether.host._tool import ToolContext
from tether.host.tools.bash import Bash
from tether.testing._trees import TREES, Tree, tree_pids


async def reclaim(
    bash: Bash, workspace: Path, tree: Tree, grace: float
) -> tuple[int, int]:
    """Run, stop and settle one tree; return (processes seen, processes alive after)."""
    chunks: list[str] = []
    up = anyio.Event()

    def progress(text: str) -> None:
        chunks.append(text)
        if len(tree_pids("".join(chunks))) >= tree.pids:
            up.set()

    ctx = ToolContext(
        call_id="t", session_id="s", workspace=workspace, on_progress=progress
    )
    scope = anyio.CancelScope()
    done = anyio.Event()

    async def call() -> None:
        with scope:
            await bash.run(ctx, {"command": tree.command})
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(30):
            await up.wait()
        procs = [psutil.Process(p) for p in tree_pids("".join(chunks))]
        ctx.cancelled.set()
        with anyio.move_on_after(grace):
            await done.wait()
        scope.cancel()
        await done.wait()
    return len(procs), sum(p.is_running() for p in procs)


async def main(count: int, parallel: int, grace: float) -> None:
    """Reclaim `count` trees, `parallel` at a time."""
    bash = Bash()
    seen = survivors = 0
    limiter = anyio.CapacityLimiter(parallel)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)

        async def one(i: int) -> None:
            nonlocal seen, survivors
            async with limiter:
                n, alive = await reclaim(bash, workspace, TREES[i % len(TREES)], grace)
            seen += n
            survivors += alive

        async with anyio.create_task_group() as tg:
            for i in range(count):
                tg.start_soon(one, i)
    elapsed = time.perf_counter() - started
    kinds = ", ".join(t.name for t in TREES)
    print(f"trees: {count} ({kinds}), {parallel} at a time, grace {grace:g} s")
    print(f"processes announced: {seen}; survivors: {survivors}")
    print(f"total time: {elapsed:.1f} s ({elapsed / count * 1000:.1f} ms per tree)")
    if survivors:
        raise SystemExit(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=1000)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--grace", type=float, default=0.1)
    args = parser.parse_args()
    anyio.run(main, args.trees, args.parallel, args.grace)
