"""A tree's start with the full wall (S15) against another tree's, side by side.

Run: .venv/bin/python benchmarks/wall_start.py --before OTHER/src [--pairs 12] [--calls 40]

Each pair runs `--calls` Bash `true` calls (a whole process tree each: supervisor,
containment, the command, every process reaped, as the host calls the tool) in a fresh
interpreter, once with `PYTHONPATH` on `--before` (the source of a checkout before the
change, e.g. `git archive <commit> src | tar -x -C /tmp/before`) and once on this
checkout, in turn. Each run reports its p50 per call and the CPU its trees took; the
figure is the median of the pairs' ratios (after / before), so a machine whose speed
drifts while it runs still gives a fair ratio.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import machine

HERE = Path(__file__).resolve()
SRC = HERE.parents[1] / "src"


def calls(count: int) -> None:
    """Child mode: time `count` Bash `true` calls; print p50 and CPU per call (ms)."""
    import anyio

    from tether.host import ToolContext
    from tether.host.tools.bash import Bash

    async def run(workspace: Path) -> list[float]:
        ctx = ToolContext(call_id="w", session_id="s", workspace=workspace)
        bash, took = Bash(), []
        for n in range(count + 3):
            started = time.perf_counter()
            await bash.run(ctx, {"command": "true"})
            if n >= 3:
                took.append(time.perf_counter() - started)
        return took

    with tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        took = anyio.run(run, Path(tmp))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    print(f"{statistics.median(took) * 1e3:.3f} {cpu / (count + 3) * 1e3:.3f}")


def one(src: Path, count: int) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, str(HERE), "--child", str(count)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    p50, cpu = done.stdout.split()
    return float(p50), float(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path)
    parser.add_argument("--pairs", type=int, default=12)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        calls(args.child)
        return
    if args.before is None:
        parser.error("--before OTHER/src is required")
    print(machine())
    print(f"load average {os.getloadavg()[0]:.2f}")
    rows = []
    for _ in range(args.pairs):
        old = one(args.before.resolve(), args.calls)
        new = one(SRC, args.calls)
        rows.append((old, new))
        print(
            f"before p50 {old[0]:.2f} ms cpu {old[1]:.2f} ms | "
            f"after p50 {new[0]:.2f} ms cpu {new[1]:.2f} ms"
        )
    wall = [n[0] / o[0] for o, n in rows]
    cpu = [n[1] / o[1] for o, n in rows]
    med = statistics.median
    print(f"load average {os.getloadavg()[0]:.2f}")
    print(
        f"Bash `true` p50 per call: before {med(o[0] for o, _ in rows):.2f} ms, "
        f"after {med(n[0] for _, n in rows):.2f} ms; ratio p50 {med(wall):.3f} "
        f"({min(wall):.3f}-{max(wall):.3f})"
    )
    print(
        f"CPU per call: before {med(o[1] for o, _ in rows):.2f} ms, after "
        f"{med(n[1] for _, n in rows):.2f} ms; ratio p50 {med(cpu):.3f} "
        f"({min(cpu):.3f}-{max(cpu):.3f})"
    )


if __name__ == "__main__":
    main()
