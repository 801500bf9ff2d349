"""Per-call overhead of the executor: a no-op tool through `turn.call` vs a direct await.

Run: .venv/bin/python benchmarks/executor_overhead.py [--calls N] [--rounds R]
Target (spec 05): <= 50 us per call on the in-process host.
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


async def measure(calls: int, rounds: int) -> tuple[list[float], list[float]]:
    through: list[float] = []
    direct: list[float] = []
    with tempfile.TemporaryDirectory() as ws:
        ctx = ToolContext(call_id="c", session_id="s", workspace=Path(ws))
        async with Runtime(workspace=ws, tools=[Noop], guard=False) as rt:
            session = rt.session()
            for _ in range(rounds):
                async with session.turn() as turn:
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        await turn.call("Noop", {})
                    through.append((time.perf_counter() - t0) / calls)
                t0 = time.perf_counter()
                for _ in range(calls):
                    await Noop.run(ctx, {})
                direct.append((time.perf_counter() - t0) / calls)
    return through, direct


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    through, direct = anyio.run(measure, args.calls, args.rounds)
    overhead = [t - d for t, d in zip(through, direct, strict=True)]
    print(machine())
    print(
        f"turn.call no-op: median {statistics.median(through) * 1e6:.1f} us/call; "
        f"direct await: median {statistics.median(direct) * 1e6:.2f} us/call"
    )
    print(
        f"overhead per call over {args.rounds} rounds of {args.calls}: "
        f"p50 {percentile(overhead, 50) * 1e6:.1f} us, p90 {percentile(overhead, 90) * 1e6:.1f} us, "
        f"max {max(overhead) * 1e6:.1f} us"
    )


if __name__ == "__main__":
    main()
