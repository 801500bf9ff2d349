"""Claims taken per second on the embedded SQLite store, 8 workers (spec 05: ≥ 2,000/s).

Each round queues N items in a fresh store, then 8 worker processes (each with its own
connection, as 8 runs would have) take claims until none is left. The figure is the
number of claims over the wall time from the first take to the last; rounds give
percentiles. Every item is checked to be claimed exactly once.

    .venv/bin/python benchmarks/claims.py --items 4000 --workers 8 --rounds 5
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine

from tether.runs._sqlite import SqliteStore


def _worker(path: str, n: int, go: object, out: object) -> None:
    store = SqliteStore.open(Path(path))
    go.wait()  # type: ignore[attr-defined]
    taken = []
    while True:
        claim = store.take_claim(
            f"run{n}", "lane", only=None, host="h", pid=n, lease=60
        )
        if claim is None:
            break
        taken.append(claim.item)
    out.put((n, time.perf_counter(), taken))  # type: ignore[attr-defined]
    store.close()


def one_round(items: int, workers: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.sqlite3"
        store = SqliteStore.open(path)
        for i in range(items):
            store.add_item(f"item{i}", "b")
        store.close()
        ctx = multiprocessing.get_context("fork")
        go = ctx.Event()
        out = ctx.Queue()
        procs = [
            ctx.Process(target=_worker, args=(str(path), n, go, out))
            for n in range(workers)
        ]
        for p in procs:
            p.start()
        time.sleep(0.5)  # every worker has opened its connection
        start = time.perf_counter()
        go.set()
        results = [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join()
        end = max(r[1] for r in results)
        taken = [item for r in results for item in r[2]]
        assert sorted(taken) == sorted(f"item{i}" for i in range(items)), (
            "lost or double"
        )
        return items / (end - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=4000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rates = [one_round(args.items, args.workers) for _ in range(args.rounds)]
    print(machine())
    print(
        f"claims/s with {args.workers} workers, {args.items} items, {args.rounds} rounds: "
        f"median {statistics.median(rates):,.0f}, min {min(rates):,.0f}, "
        f"max {max(rates):,.0f}"
    )


if __name__ == "__main__":
    main()
