"""Reclaim adversarial process trees through the Bash tool and count survivors.

Each call runs one of `tether.testing._trees.TREES` (TERM trap, setsid, double fork,
nohup, exec'd Python that forks and re-execs, closed stdout, `env -i setsid`) or of
`ESCAPE_TREES` (starts an `env -i setsid` child, then `kill -9 $PPID`), waits until every
process announced itself, stops the call (SIGTERM), cancels it when the grace window
closes (SIGKILL of every descendant), then checks every announced process with psutil.
Target (spec 05): 0 survivors. Under the `subreaper` fallback the escape trees are
counted apart: their `env -i` child escaping is the fallback's documented limit.

Usage: .venv/bin/python benchmarks/process_trees.py [--trees 1000] [--parallel 8]
       [--containment namespace|subreaper|both]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from pathlib import Path

import anyio
import psutil

from tether.errors import ToolFailed
from tether.host import containment
from tether.host._tool import ToolContext
from tether.host.tools.bash import Bash
from tether.testing._trees import (
    ESCAPE_TREES,
    TREES,
    Tree,
    alive,
    make_gate,
    open_gate,
    tree_pids,
    tree_procs,
)


async def reclaim(
    bash: Bash, workspace: Path, tree: Tree, grace: float
) -> tuple[int, int]:
    """Run, stop and settle one tree; return (processes seen, processes alive after)."""
    chunks: list[str] = []
    up = anyio.Event()
    gate = make_gate(workspace) if tree.gated else None

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
        # ToolFailed: a killed supervisor under the fallback.
        with scope, contextlib.suppress(ToolFailed):
            await bash.run(ctx, {"command": tree.command})
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(30):
            await up.wait()
        procs = tree_procs("".join(chunks))
        if gate is not None:
            await open_gate(gate)
        ctx.cancelled.set()
        with anyio.move_on_after(grace):
            await done.wait()
        scope.cancel()
        await done.wait()
    left = alive(procs)
    for pid in left:  # leave the machine clean whatever was measured
        psutil.Process(pid).kill()
    return len(procs), len(left)


async def run(
    trees: tuple[Tree, ...], count: int, parallel: int, grace: float
) -> tuple[int, int, float]:
    """Reclaim `count` trees, `parallel` at a time; (seen, survivors, seconds)."""
    bash = Bash()
    seen = survivors = 0
    limiter = anyio.CapacityLimiter(parallel)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:

        async def one(i: int) -> None:
            nonlocal seen, survivors
            workspace = Path(tmp) / str(i)
            workspace.mkdir()
            async with limiter:
                n, left = await reclaim(bash, workspace, trees[i % len(trees)], grace)
            seen += n
            survivors += left

        async with anyio.create_task_group() as tg:
            for i in range(count):
                tg.start_soon(one, i)
    return seen, survivors, time.perf_counter() - started


async def main(count: int, parallel: int, grace: float, kinds: list[str]) -> None:
    """Measure every kind of containment asked for; fail on a survivor it must hold."""
    failed = False
    for kind in kinds:
        os.environ["TETHER_CONTAINMENT"] = kind
        print(f"containment: {kind} ({containment().reason})")
        seen, survivors, elapsed = await run(TREES, count, parallel, grace)
        names = ", ".join(t.name for t in TREES)
        print(f"  trees: {count} ({names}), {parallel} at a time, grace {grace:g} s")
        print(f"  processes announced: {seen}; survivors: {survivors}")
        print(
            f"  total time: {elapsed:.1f} s ({elapsed / count * 1000:.1f} ms per tree)"
        )
        failed |= survivors > 0
        escapes = max(1, count // 10)
        seen, survivors, elapsed = await run(ESCAPE_TREES, escapes, parallel, grace)
        names = ", ".join(t.name for t in ESCAPE_TREES)
        limit = " (the fallback's documented limit)" if kind == "subreaper" else ""
        print(f"  escape trees: {escapes} ({names})")
        print(f"  processes announced: {seen}; survivors: {survivors}{limit}")
        failed |= survivors > 0 and kind == "namespace"
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=1000)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--grace", type=float, default=0.1)
    parser.add_argument(
        "--containment", choices=["namespace", "subreaper", "both"], default="both"
    )
    args = parser.parse_args()
    chosen = (
        ["namespace", "subreaper"] if args.containment == "both" else [args.containment]
    )
    anyio.run(main, args.trees, args.parallel, args.grace, chosen)
