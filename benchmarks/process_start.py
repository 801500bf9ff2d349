"""Process start: a short Bash call and a short Grep call, end to end, on one backend.

Run: .venv/bin/python benchmarks/process_start.py [--runs N] [--backend asyncio|trio]

Each call is driven as the host drives it (`await tool.run(ctx, args)`): Bash runs
`true` in a new process tree (supervisor, containment, the command, every process
reaped), Grep searches a folder of 20 small files. The figure is the time from the call
to its result. Where processes start in the event loop's thread (`host/_spawn.py`),
the time `Popen` holds that thread is measured too, for the supervisor and for rg:
that is the time the loop can do nothing else while a process starts.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from _common import machine, summary

from tether.host import ToolContext
from tether.host.tools.bash import Bash
from tether.host.tools.grep import Grep, rg_path


async def timed_calls(workspace: Path, runs: int) -> dict[str, list[float]]:
    """Time `runs` Bash and Grep calls, alternating, after 5 of each to warm up."""
    bash, grep = Bash(), Grep()
    ctx = ToolContext(call_id="p", session_id="s", workspace=workspace)
    samples: dict[str, list[float]] = {"Bash `true`": [], "Grep, 20 files": []}
    for n in range(runs + 5):
        for name, tool, args in (
            ("Bash `true`", bash, {"command": "true"}),
            ("Grep, 20 files", grep, {"pattern": "needle"}),
        ):
            started = time.perf_counter()
            await tool.run(ctx, args)
            if n >= 5:
                samples[name].append(time.perf_counter() - started)
    return samples


def loop_held(workspace: Path, runs: int, backend: str) -> dict[str, list[float]]:
    """Time `start_process` itself: the event loop's thread is held that long."""
    from tether.host._contain import containment, supervisor_argv, wall_paths
    from tether.host._spawn import DEVNULL, ChildProcess, start_process
    from tether.stop import protected_paths

    kind = containment().kind
    walls = wall_paths(protected_paths(), workspace=workspace)
    tree = supervisor_argv(
        kind, walls if kind == "namespace" else [], "/bin/true", ["true"]
    )
    samples: dict[str, list[float]] = {
        "start_process, supervisor": [],
        "start_process, rg": [],
    }

    async def reclaim(process: ChildProcess) -> None:
        process.kill()
        await process.aclose()

    async def run() -> None:
        for _ in range(runs):
            started = time.perf_counter()
            process = start_process(tree, cwd=workspace, start_new_session=True)
            samples["start_process, supervisor"].append(time.perf_counter() - started)
            await reclaim(process)
            started = time.perf_counter()
            process = start_process([rg_path(), "--version"], stdout=DEVNULL)
            samples["start_process, rg"].append(time.perf_counter() - started)
            await reclaim(process)

    anyio.run(run, backend=backend)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    args = parser.parse_args()
    print(machine())
    print(f"backend {args.backend}, load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        for n in range(20):
            (workspace / f"f{n}.txt").write_text("hay\n" * 50 + "needle\n")
        subprocess.run([rg_path(), "--version"], capture_output=True, check=True)
        calls = anyio.run(timed_calls, workspace, args.runs, backend=args.backend)
        for name, seconds in calls.items():
            print(summary(name, seconds))
        try:
            held = loop_held(workspace, args.runs, args.backend)
        except ImportError:
            print("start_process: not in this tree", file=sys.stderr)
            return
        for name, seconds in held.items():
            print(summary(name, seconds))


if __name__ == "__main__":
    main()
