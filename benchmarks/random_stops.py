"""Random multi-call stops, with the stdio host killed at random in a tenth of them.

Run: .venv/bin/python benchmarks/random_stops.py [--stops N] [--host stdio|inprocess]
         [--seed S] [--flood-seconds T]

Each stop is a turn of 2-8 calls drawn from every stop class (a read-only call that
ignores its token, a process call that traps SIGTERM and one that obeys it, a slow write,
a slow extension, an instant echo), stopped at a random moment; in a tenth of the turns
the stdio host is SIGKILLed at a random moment too (then a fresh runtime is opened). After
each turn settles, the ledger is checked against what really happened:

- a report that says settled has every call of the turn settled in the ledger;
- no call is left in a non-final state;
- with the host alive, a write recorded SUCCEEDED left its file, one recorded ABORTED
  ("never started") left none, and none is recorded FAILED or END_UNKNOWN;
- `abort()` returns within its bound.

Every breach is a false report. Last, a stopped flood: four Bash calls running `yes` for
`--flood-seconds`, then stopped; the peak RSS of the runtime (and of its host process)
is sampled every 20 ms.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import psutil

sys.path.insert(0, str(Path(__file__).parent))
import contextlib

from _common import machine, summary

from tether import Runtime, ToolAborted
from tether.host._stdio import StdioHostClient
from tether.runtime import CallState
from tether.testing import Echo, Obedient, SlowExtension, SlowWrite, Stubborn, Stuck
from tether.tools import default_tools

TOOLS = [Echo, Obedient, SlowExtension, SlowWrite, Stubborn, Stuck]
RULES = {"allow": [t.name for t in TOOLS] + ["Bash"]}
GRACE = 0.1
BOUND = 1.0


def _draw(rng: random.Random, n: int, ws: Path) -> tuple[str, dict[str, Any]]:
    kind = rng.choice(["Echo", "Obedient", "SlowExtension", "SlowWrite", "Stubborn"])
    kind = rng.choice([kind, "Stuck"])
    match kind:
        case "SlowWrite":
            path = ws / f"w{n}.txt"
            return kind, {"path": str(path), "seconds": rng.uniform(0.0, 0.15)}
        case "SlowExtension":
            return kind, {"seconds": rng.uniform(0.0, 0.15)}
        case "Stuck":
            return kind, {"seconds": rng.uniform(0.05, 0.3)}
        case "Echo":
            return kind, {"text": "x"}
        case _:
            return kind, {}


class Tally:
    def __init__(self) -> None:
        self.stops = 0
        self.calls = 0
        self.kills = 0
        self.false: list[str] = []
        self.aborts: list[float] = []


async def _turn(
    rt: Runtime, rng: random.Random, ws: Path, counter: list[int], tally: Tally
) -> bool:
    """One random stop; returns True if the host was killed in it."""
    session = rt.session()
    kill = rt.host_kind == "stdio" and rng.random() < 0.1
    calls: list[tuple[str, str, dict[str, Any]]] = []
    for _ in range(rng.randint(2, 8)):
        counter[0] += 1
        name, args = _draw(rng, counter[0], ws)
        calls.append((f"c{counter[0]}", name, args))
    tally.calls += len(calls)

    async with anyio.create_task_group() as tg, session.turn() as turn:

        async def call(cid: str, name: str, args: dict[str, Any]) -> None:
            with contextlib.suppress(ToolAborted):
                await turn.call(name, args, call_id=cid)

        for cid, name, args in calls:
            tg.start_soon(call, cid, name, args)
        await anyio.sleep(rng.uniform(0.0, 0.05))
        killed_first = kill and rng.random() < 0.5
        if killed_first:
            _kill(rt)
        report = await session.abort()
        if report.elapsed > 0.1 and os.environ.get("RANDOM_STOPS_DEBUG"):
            print(f"slow abort {report.elapsed:.3f} s, killed first: {killed_first}")
            print(report)
        tally.aborts.append(report.elapsed)
        if report.elapsed > BOUND:
            tally.false.append(f"abort took {report.elapsed:.3f} s > {BOUND} s")
        if kill and rt.host_kind != "inprocess":
            _kill(rt)
    with anyio.fail_after(10):
        await session.settled()
    tally.stops += 1
    records = {r.call_id: r for r in session.ledger_calls()}
    if report.settled and not all(
        records[cid].settled for cid, _, _ in calls if cid in records
    ):
        tally.false.append("report said settled while a call was not")
    for cid, name, args in calls:
        rec = records[cid]
        if not rec.state.is_final:
            tally.false.append(f"{name} {cid} left {rec.state}")
        if name != "SlowWrite" or kill:
            continue
        exists = await anyio.Path(args["path"]).exists()
        if rec.state is CallState.SUCCEEDED and not exists:
            tally.false.append(f"write {cid} SUCCEEDED without its file")
        if rec.state is CallState.ABORTED and exists:
            tally.false.append(f"write {cid} ABORTED (never started) but wrote")
        if rec.state in (CallState.FAILED, CallState.END_UNKNOWN):
            tally.false.append(f"write {cid} {rec.state} with the host alive")
    return kill


def _kill(rt: Runtime) -> None:
    if isinstance(rt.host, StdioHostClient) and rt.host.process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(rt.host.process.pid, signal.SIGKILL)


async def stops(count: int, host: str, seed: int) -> Tally:
    rng = random.Random(seed)
    tally = Tally()
    counter = [0]
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        while tally.stops < count:
            async with Runtime(
                workspace=ws,
                tools=TOOLS,
                permissions=RULES,
                guard=False,
                grace=GRACE,
                abort_bound=BOUND,
                host=host,  # type: ignore[arg-type]
            ) as rt:
                while tally.stops < count:
                    if await _turn(rt, rng, ws, counter, tally):
                        tally.kills += 1
                        break
    return tally


async def flood(seconds: float, host: str) -> tuple[int, int, float]:
    """Peak RSS growth (bytes) over four stopped `yes` calls, the base RSS, abort time."""
    bash = [t for t in default_tools() if t.name == "Bash"]
    with tempfile.TemporaryDirectory() as ws:
        async with Runtime(
            workspace=ws,
            tools=bash,
            permissions=RULES,
            guard=False,
            grace=GRACE,
            abort_bound=BOUND,
            host=host,  # type: ignore[arg-type]
        ) as rt:
            procs = [psutil.Process()]
            if isinstance(rt.host, StdioHostClient):
                procs.append(psutil.Process(rt.host.process.pid))

            def rss() -> int:
                return sum(p.memory_info().rss for p in procs)

            base = rss()
            peak = base
            session = rt.session()
            async with anyio.create_task_group() as tg, session.turn() as turn:

                async def call() -> None:
                    with contextlib.suppress(ToolAborted):
                        await turn.call("Bash", {"command": "yes"})

                for _ in range(4):
                    tg.start_soon(call)
                end = anyio.current_time() + seconds
                while anyio.current_time() < end:
                    peak = max(peak, rss())
                    await anyio.sleep(0.02)
                report = await session.abort()
                peak = max(peak, rss())
            await session.settled()
    return peak - base, base, report.elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stops", type=int, default=1000)
    parser.add_argument("--host", choices=["inprocess", "stdio"], default="stdio")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--flood-seconds", type=float, default=3.0)
    args = parser.parse_args()
    print(machine())
    t0 = anyio.run(_now)
    tally = anyio.run(stops, args.stops, args.host, args.seed)
    took = anyio.run(_now) - t0
    print(
        f"{tally.stops} random stops ({tally.calls} calls) on the {args.host} host, "
        f"host killed in {tally.kills}, {took:.0f} s: {len(tally.false)} false reports"
    )
    for line in tally.false[:20]:
        print("  false:", line)
    print(summary(f"abort() return time (bound {BOUND:g} s)", tally.aborts))
    grown, base, elapsed = anyio.run(flood, args.flood_seconds, args.host)
    print(
        f"stopped flood (4 x `yes` for {args.flood_seconds:g} s, {args.host} host): "
        f"peak RSS {base + grown >> 20} MiB, {grown >> 20} MiB over the start; "
        f"abort() {elapsed * 1000:.1f} ms"
    )


async def _now() -> float:
    return anyio.current_time()


if __name__ == "__main__":
    main()
