"""Claims taken per second, 8 workers (spec 05: SQLite ≥ 2,000/s, PostgreSQL ≥ 5,000/s).

Each round queues N items in a fresh store, then 8 worker processes (each with its own
connection, as 8 runs would have) take claims until none is left. The figure is the
number of claims over the wall time from the first take to the last; rounds give
percentiles. Every item is checked to be claimed exactly once.

    .venv/bin/python benchmarks/claims.py --items 4000 --workers 8 --rounds 5
    .venv/bin/python benchmarks/claims.py --backend postgres --items 4000 --rounds 5
    .venv/bin/python benchmarks/claims.py --store postgresql://USER:PW@HOST/DB

`--backend postgres` starts a throwaway PostgreSQL cluster for the run (the test suite's,
`tests/runs/pg.py`: initdb + pg_ctl on loopback, durable commits off as a test cluster
has them; `--durable` turns them on) and drops it at the end; `--store URL` uses a server you name (each round
works in a fresh database it creates and drops, so the URL's user needs CREATEDB).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
from _common import machine

from tether.runs import Store, open_store


def _worker(url: str, n: int, go: object, out: object) -> None:
    store = open_store(url)
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


def one_round(url: str, items: int, workers: int) -> float:
    store: Store = open_store(url)
    for i in range(items):
        store.add_item(f"item{i}", "b")
    store.close()
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(url, n, go, out)) for n in range(workers)
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
    assert sorted(taken) == sorted(f"item{i}" for i in range(items)), "lost or double"
    return items / (end - start)


@contextlib.contextmanager
def _sqlite_stores() -> Iterator[Callable[[], contextlib.AbstractContextManager[str]]]:
    @contextlib.contextmanager
    def fresh() -> Iterator[str]:
        with tempfile.TemporaryDirectory() as tmp:
            yield str(Path(tmp) / "runs.sqlite3")

    yield fresh


@contextlib.contextmanager
def _postgres_stores(
    server: str | None, durable: bool
) -> Iterator[Callable[[], contextlib.AbstractContextManager[str]]]:
    from tests.runs import pg

    with contextlib.ExitStack() as stack:
        admin = server or stack.enter_context(pg.cluster(durable=durable))

        def fresh() -> contextlib.AbstractContextManager[str]:
            return pg.fresh_database(admin, f"bench_{os.urandom(4).hex()}")

        yield fresh


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=4000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument(
        "--store", help="a postgresql:// URL of a server to use (implies postgres)"
    )
    parser.add_argument(
        "--durable",
        action="store_true",
        help="the throwaway cluster flushes its commits to disk (fsync on)",
    )
    args = parser.parse_args()
    backend = "postgres" if args.store else args.backend
    stores = (
        _postgres_stores(args.store, args.durable)
        if backend == "postgres"
        else _sqlite_stores()
    )
    rates = []
    with stores as fresh:
        for _ in range(args.rounds):
            with fresh() as url:
                rates.append(one_round(url, args.items, args.workers))
    print(machine())
    print(
        f"{backend} claims/s with {args.workers} workers, {args.items} items, "
        f"{args.rounds} rounds: median {statistics.median(rates):,.0f}, "
        f"min {min(rates):,.0f}, max {max(rates):,.0f}"
    )


if __name__ == "__main__":
    main()
