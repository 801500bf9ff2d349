"""Peak memory of a stopped flood: Bash running `yes` for a while, then a stop.

Runs the command through a `Runtime` with the in-process host (tool, host core and
runtime all in this process, so this process's peak RSS covers every side) and with the
stdio host (the host child's RSS sampled while the flood runs). Prints the peak RSS
growth over the baseline taken just before the call, and how much output the command
printed. Target: the growth stays under 64 MB whatever the output (the output kept is
bounded from the first byte: 30 kB of result, 1 MB streamed).

Usage: .venv/bin/python benchmarks/flood_memory.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import tempfile
from pathlib import Path

import anyio
import psutil

from tether import Runtime, ToolAborted
from tether.host.tools.bash import Bash

FLOOD = "exec yes flood-flood-flood-flood-flood-flood-flood"
BOUND_MB = 64.0
"""The stated bound on peak RSS growth, MB."""


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def flood(host: str, seconds: float) -> tuple[float, int]:
    """Flood for `seconds`, stop; return (peak RSS growth in MB, bytes printed)."""
    with tempfile.TemporaryDirectory() as tmp:
        async with Runtime(
            workspace=Path(tmp),
            tools=[Bash()],
            permissions={"allow": ["Bash"]},
            guard=False,
            grace=0.3,
            host=host,  # type: ignore[arg-type]
        ) as rt:
            child = getattr(rt.host, "process", None)
            watched = psutil.Process(child.pid if child is not None else None)
            session = rt.session()
            async with session.turn() as turn:  # warm up: every import done
                await turn.call("Bash", {"command": "true"})
            base = watched.memory_info().rss / 2**20
            peak = [base]
            before = _peak_mb()
            printed = 0
            async with anyio.create_task_group() as tg, session.turn() as turn:

                async def call() -> None:
                    with contextlib.suppress(ToolAborted):
                        await turn.call("Bash", {"command": FLOOD})

                async def sample() -> None:
                    while True:
                        peak[0] = max(peak[0], watched.memory_info().rss / 2**20)
                        await anyio.sleep(0.05)

                tg.start_soon(call)
                tg.start_soon(sample)
                yes_seen: list[psutil.Process] = []
                with anyio.fail_after(30):
                    while not yes_seen:
                        await anyio.sleep(0.05)
                        for proc in watched.children(recursive=True):
                            with contextlib.suppress(psutil.Error):
                                if proc.name() == "yes":
                                    yes_seen.append(proc)
                await anyio.sleep(seconds)  # the flood runs this long, by design
                for proc in yes_seen:
                    with contextlib.suppress(psutil.Error):
                        printed = max(printed, proc.io_counters().write_chars)
                await session.abort()
                await session.settled()
                tg.cancel_scope.cancel()
            if child is None:
                return _peak_mb() - before, printed
            return peak[0] - base, printed


async def main(seconds: float) -> None:
    """Measure both hosts."""
    worst = 0.0
    for host in ("inprocess", "stdio"):
        growth, printed = await flood(host, seconds)
        worst = max(worst, growth)
        print(
            f"{host}: `yes` for {seconds:g} s printed {printed / 2**20:.0f} MB; "
            f"peak RSS growth {growth:.1f} MB (bound {BOUND_MB:g} MB)"
        )
    if worst > BOUND_MB:
        raise SystemExit(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    anyio.run(main, parser.parse_args().seconds)
