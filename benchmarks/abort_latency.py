"""`Session.abort()` return time with a read-only call that never returns.

Run: .venv/bin/python benchmarks/abort_latency.py [--runs N] [--host inprocess|stdio]
Target (spec 05): p50 <= 0.5 ms, p99 <= 2 ms on the in-process host.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))
import contextlib

from _common import machine, summary

from tether import Runtime, ToolAborted
from tether.runtime import ToolProgress
from tether.testing import Hang


async def measure(runs: int, host: str) -> list[float]:
    times: list[float] = []
    with tempfile.TemporaryDirectory() as ws:
        async with Runtime(
            workspace=ws,
            tools=[Hang],
            guard=False,
            host=host,  # type: ignore[arg-type]
        ) as rt:
            events = rt.subscribe()
            session = rt.session()
            for _ in range(runs):
                async with anyio.create_task_group() as tg, session.turn() as turn:

                    async def call() -> None:
                        with contextlib.suppress(ToolAborted):
                            await turn.call("Hang", {"marker": "m"})

                    tg.start_soon(call)
                    while True:
                        event = await events.receive()
                        if isinstance(event, ToolProgress) and event.text == "started":
                            break
                    t0 = time.perf_counter()
                    report = await session.abort()
                    times.append(time.perf_counter() - t0)
                    assert report.settled
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--host", choices=["inprocess", "stdio"], default="inprocess")
    args = parser.parse_args()
    times = anyio.run(measure, args.runs, args.host)
    print(machine())
    print(
        summary(
            f"abort() return time, hung READ_ONLY call, {args.host} host", times[50:]
        )
    )


if __name__ == "__main__":
    main()
