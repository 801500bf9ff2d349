"""Per-call cost of `turn.call` with the defaults a user gets, as a ratio to the floor.

Run: .venv/bin/python benchmarks/executor_overhead.py [--calls N] [--rounds R]

Three figures from one run, rounds interleaved so that machine load hits all alike:

- defaults: a no-op READ_ONLY tool through `turn.call` on a `Runtime` built with the
  defaults (the stop guard on, the account's permission rules, the in-process host);
- no guard: the same with `guard=False`, to show what the guard itself costs;
- floor: one anyio task spawned into a task group plus one event round trip (the task
  sets an event the caller waits on), the least any call through a host can cost.

Targets (issue "one shell model" item 8 and spec 05): defaults <= 2x the floor; the
executor's own overhead <= 50 us per call.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine, percentile

from tether import Runtime, ToolContext, tool
from tether.host import StopClass


@tool(stop_class=StopClass.READ_ONLY)
async def Noop(ctx: ToolContext) -> str:
    """Do nothing."""
    return ""


async def _floor(calls: int) -> float:
    """Seconds per task spawn plus event round trip."""

    async def child(done: anyio.Event) -> None:
        done.set()

    async with anyio.create_task_group() as tg:
        t0 = time.perf_counter()
        for _ in range(calls):
            done = anyio.Event()
            tg.start_soon(child, done)
            await done.wait()
        return (time.perf_counter() - t0) / calls


async def _through(rt: Runtime, calls: int) -> float:
    session = rt.session()
    async with session.turn() as turn:
        t0 = time.perf_counter()
        for _ in range(calls):
            await turn.call("Noop", {})
        return (time.perf_counter() - t0) / calls


async def measure(calls: int, rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"defaults": [], "no guard": [], "floor": []}
    with tempfile.TemporaryDirectory() as ws:
        async with (
            Runtime(workspace=ws, tools=[Noop]) as defaults,
            Runtime(workspace=ws, tools=[Noop], guard=False) as bare,
        ):
            assert defaults.guard is not None, "the defaults must have the guard on"
            await _through(defaults, calls // 10)  # warm both paths
            await _through(bare, calls // 10)
            for _ in range(rounds):
                out["defaults"].append(await _through(defaults, calls))
                out["no guard"].append(await _through(bare, calls))
                out["floor"].append(await _floor(calls))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    found = anyio.run(measure, args.calls, args.rounds)
    print(machine())
    floor = found["floor"]
    for name, per_call in found.items():
        ratios = [c / f for c, f in zip(per_call, floor, strict=True)]
        print(
            f"{name:>8}: median {statistics.median(per_call) * 1e6:7.1f} us/call, "
            f"p90 {percentile(per_call, 90) * 1e6:7.1f} us; ratio to the floor "
            f"p50 {percentile(ratios, 50):.2f}x, p90 {percentile(ratios, 90):.2f}x"
        )
    print(f"{args.rounds} rounds of {args.calls} calls, each round measuring all three")


if __name__ == "__main__":
    main()
