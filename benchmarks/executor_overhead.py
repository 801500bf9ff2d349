"""Per-call cost of `turn.call` with the defaults a user gets, as a ratio to the floor.

Run: .venv/bin/python benchmarks/executor_overhead.py [--calls N] [--rounds R]
     .venv/bin/python benchmarks/executor_overhead.py --instructions --calls 3000
     (needs valgrind; fewer calls leave the one-off costs of a run in the figure)

Three figures from one run, rounds interleaved so that machine load hits all alike:

- defaults: a no-op READ_ONLY tool through `turn.call` on a `Runtime` built with the
  defaults (the stop guard on, the account's permission rules, the in-process host);
- no guard: the same with `guard=False`, to show what the guard itself costs;
- floor: one anyio task spawned into a task group plus one event round trip (the task
  sets an event the caller waits on), the least any call through a host can cost.

Each round is timed twice: wall-clock, and CPU time of this process (what load from
other processes on the machine changes least). `--instructions` counts the instructions
one call and one floor cost, under valgrind (slow, but the same on a busy machine).

Targets (spec 05 and the hardening work): defaults <= 2x the floor; the executor's own
overhead <= 50 us per call.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import statistics
import subprocess
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


Timing = tuple[float, float]
"""Seconds per call: wall clock, CPU time of this process."""


async def _floor(calls: int) -> Timing:
    """Seconds per task spawn plus event round trip."""

    async def child(done: anyio.Event) -> None:
        done.set()

    async with anyio.create_task_group() as tg:
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(calls):
            done = anyio.Event()
            tg.start_soon(child, done)
            await done.wait()
        t1, c1 = time.perf_counter(), time.process_time()
    return (t1 - t0) / calls, (c1 - c0) / calls


async def _through(rt: Runtime, calls: int) -> Timing:
    session = rt.session()
    async with session.turn() as turn:
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(calls):
            await turn.call("Noop", {})
        t1, c1 = time.perf_counter(), time.process_time()
    return (t1 - t0) / calls, (c1 - c0) / calls


async def measure(calls: int, rounds: int) -> dict[str, list[Timing]]:
    out: dict[str, list[Timing]] = {"defaults": [], "no guard": [], "floor": []}
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


async def _one_kind(kind: str, calls: int) -> None:
    """Warm up, then make `calls` of one kind (run under valgrind by `--instructions`)."""
    with tempfile.TemporaryDirectory() as ws:
        async with Runtime(workspace=ws, tools=[Noop]) as rt:
            await _through(rt, 200)
            await _floor(200)
            # What was built so far is left out of the collector's passes: a full pass
            # over the interpreter's own objects would land in one run and not the other.
            gc.collect()
            gc.freeze()
            if calls:
                await (_through(rt, calls) if kind == "defaults" else _floor(calls))


def _instructions(calls: int) -> None:
    """Instructions per call and per floor: a run of N minus a run of none, over N."""
    if shutil.which("valgrind") is None:
        sys.exit("--instructions needs valgrind (apt-get install valgrind)")

    def count(kind: str, n: int) -> int:
        out = subprocess.run(
            [
                *("valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"),
                *(sys.executable, __file__, "--one", kind, "--calls", str(n)),
            ],
            capture_output=True,
            text=True,
            check=True,
            # One hash seed for every run: the runs' dicts and sets then grow alike, and
            # the difference between them is the calls' own work.
            env={**os.environ, "PYTHONHASHSEED": "0"},
        ).stderr
        found = re.search(r"Collected : (\d+)", out)
        assert found, out
        return int(found.group(1))

    per = {k: (count(k, calls) - count(k, 0)) / calls for k in ("defaults", "floor")}
    print(machine())
    print(
        f"instructions per call: defaults {per['defaults']:,.0f}, floor "
        f"{per['floor']:,.0f}; ratio {per['defaults'] / per['floor']:.2f}x "
        f"({calls} calls, valgrind)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--one", choices=("defaults", "floor"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        anyio.run(_one_kind, args.one, args.calls)
        return
    if args.instructions:
        _instructions(args.calls)
        return
    found = anyio.run(measure, args.calls, args.rounds)
    print(machine())
    for clock, i in (("wall", 0), ("cpu", 1)):
        floor = [t[i] for t in found["floor"]]
        for name, timings in found.items():
            per_call = [t[i] for t in timings]
            ratios = [c / f for c, f in zip(per_call, floor, strict=True)]
            print(
                f"{clock:>4} {name:>8}: median {statistics.median(per_call) * 1e6:6.1f}"
                f" us/call, p90 {percentile(per_call, 90) * 1e6:6.1f} us; ratio to "
                f"the floor p50 {percentile(ratios, 50):.2f}x, p90 "
                f"{percentile(ratios, 90):.2f}x"
            )
    print(f"{args.rounds} rounds of {args.calls} calls, each round measuring all three")


if __name__ == "__main__":
    main()
