"""Claims taken and finished per second, 8 workers, tether beside the PostgreSQL queues.

Spec 05: SQLite ≥ 2,000/s; PostgreSQL ≥ 1.0 times the best PostgreSQL queue measured
beside it (procrastinate, pgqueuer) with the same workload.

Each round queues N items in a fresh database, then 8 worker processes (each with its
own connection, as 8 runs would have) take one item at a time and finish it as done,
until none is left. The figure is items over the wall time from the start signal to
the last worker's end. After each round the rows are checked: every item finished,
each exactly once, and the ids the workers took are the ids queued.

With PostgreSQL, procrastinate and pgqueuer (`_claim_queues.py`: their own set-up and
worker calls) are measured in the same rounds on the same server, with the same items
and workers, each library in two set-ups (`_claim_queues.NAMES`); each round runs
them all in turn, starting one further along each round, so load that drifts over the
run reaches every one. The ratio is tether's median over the best median beside it.

    .venv/bin/python benchmarks/claims.py --items 4000 --workers 8 --rounds 5
    .venv/bin/python benchmarks/claims.py --backend postgres --items 4000 --rounds 5
    .venv/bin/python benchmarks/claims.py --backend postgres --durable --json
    .venv/bin/python benchmarks/claims.py --store postgresql://USER:PW@HOST/DB

`--backend postgres` starts a throwaway PostgreSQL cluster for the run (the test suite's,
`tests/runs/pg.py`: initdb + pg_ctl on loopback, disk flushes off as a test cluster has
them; `--durable` turns them on) and drops it at the end; `--store URL` uses a server
you name (each round works in fresh databases it creates and drops, so the URL's user
needs CREATEDB). The queues come from the `bench` dependency group:
`.venv/bin/python -m pip install --group bench`; `--tether-only` measures without them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
import _claim_queues as queues
from _common import machine

from tether.runs import Store, open_store

Gate = Callable[[], None]
"""Called by a worker once connected: says it is ready, returns at the start signal."""

Work = Callable[[str, int, Gate], Sequence[object]]
"""One worker's loop over the database at the URL: the ids it took and finished."""

TIMEOUT = 300.0
"""The longest a round may take before it is judged hung (seconds)."""


# -- tether ------------------------------------------------------------------------------


def _tether_prepare(url: str, items: int) -> list[str]:
    store: Store = open_store(url)
    try:
        for i in range(items):
            store.add_item(f"item{i}", "b")
    finally:
        store.close()
    return [f"item{i}" for i in range(items)]


def _tether_work(url: str, n: int, gate: Gate) -> list[str]:
    store = open_store(url)
    try:
        gate()
        taken = []
        while True:
            claim = store.take_claim(
                f"run{n}", "lane", only=None, host="h", pid=n, lease=60
            )
            if claim is None:
                return taken
            store.finish(claim)
            taken.append(claim.item)
    finally:
        store.close()


def _tether_verify(url: str, expected: Sequence[str]) -> None:
    store = open_store(url)
    try:
        states: dict[str, list[str]] = {}
        for item in store.items():
            states.setdefault(item.state, []).append(item.id)
        held = store.claims()
    finally:
        store.close()
    found = {state: sorted(ids) for state, ids in states.items()}
    if found != {"done": sorted(expected)} or held:
        summary = {state: len(ids) for state, ids in found.items()}
        raise AssertionError(
            f"tether: items after the round {summary}, {len(held)} claims held; "
            f"expected {len(expected)} done"
        )


# -- one round of one system -------------------------------------------------------------


def _child(work: Work, url: str, n: int, ready: Any, go: Any, out: Any) -> None:
    gated = False

    def gate() -> None:
        nonlocal gated
        gated = True
        ready.put(n)
        go.wait()

    try:
        taken = list(work(url, n, gate))
        out.put((n, time.perf_counter(), taken, None))
    except BaseException:  # the parent reports it; a silent child would hang it
        if not gated:
            ready.put(n)
        out.put((n, time.perf_counter(), [], traceback.format_exc()))


def one_round(
    name: str, work: Work, url: str, workers: int, expected: Sequence[object]
) -> float:
    """Items per second for `workers` processes of `work`; fails unless each queued id
    was taken by exactly one worker."""
    ctx = multiprocessing.get_context("fork")
    ready, go, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_child, args=(work, url, n, ready, go, out))
        for n in range(workers)
    ]
    for p in procs:
        p.start()
    try:
        for _ in procs:  # every worker has connected (or failed)
            ready.get(timeout=TIMEOUT)
        start = time.perf_counter()
        go.set()
        results = [out.get(timeout=TIMEOUT) for _ in procs]
    except BaseException:
        for p in procs:  # a hung round: its workers go with it
            p.kill()
        raise
    finally:
        for p in procs:
            p.join()
    failed = [r[3] for r in results if r[3] is not None]
    if failed:
        raise RuntimeError(f"{name}: a worker failed:\n{failed[0]}")
    taken = [item for r in results for item in r[2]]
    if sorted(taken, key=str) != sorted(expected, key=str):
        raise AssertionError(
            f"{name}: {len(taken)} takes ({len(set(taken))} distinct) "
            f"of {len(expected)} items: lost or taken twice"
        )
    return len(expected) / (max(r[1] for r in results) - start)


def measure(name: str, url: str, items: int, workers: int) -> float:
    """Set `name` up in the fresh database at `url`, time one round, check the rows."""
    if name == "tether":
        names = _tether_prepare(url, items)
        rate = one_round(name, _tether_work, url, workers, names)
        _tether_verify(url, names)
        return rate
    ids = queues.prepare(name, url, items)

    def work(u: str, n: int, gate: Gate) -> list[int]:
        return queues.work(name, u, n, gate)

    rate = one_round(name, work, url, workers, ids)
    queues.verify(name, url, ids)
    return rate


# -- stores ------------------------------------------------------------------------------

Fresh = Callable[[], contextlib.AbstractContextManager[str]]
"""Makes a fresh database for one system's round; yields its URL, drops it after."""


@contextlib.contextmanager
def _sqlite_stores() -> Iterator[tuple[Fresh, str]]:
    @contextlib.contextmanager
    def fresh() -> Iterator[str]:
        with tempfile.TemporaryDirectory() as tmp:
            yield str(Path(tmp) / "runs.sqlite3")

    import sqlite3

    yield fresh, f"SQLite {sqlite3.sqlite_version}"


@contextlib.contextmanager
def _postgres_stores(server: str | None, durable: bool) -> Iterator[tuple[Fresh, str]]:
    import psycopg
    from tests.runs import pg

    with contextlib.ExitStack() as stack:
        admin = server or stack.enter_context(pg.cluster(durable=durable))
        with psycopg.connect(admin) as conn:
            row = conn.execute(
                "SELECT current_setting('server_version'), current_setting('fsync')"
            ).fetchone()
        version = f"PostgreSQL {row[0]} (fsync {row[1]})" if row else "PostgreSQL"

        def fresh() -> contextlib.AbstractContextManager[str]:
            return pg.fresh_database(admin, f"bench_{os.urandom(4).hex()}")

        yield fresh, version


# -- the run -----------------------------------------------------------------------------


def _order(systems: Sequence[str], round_: int) -> list[str]:
    """The systems in turn, each round starting one further along."""
    k = round_ % len(systems)
    return [*systems[k:], *systems[:k]]


def _stats(rates: Sequence[float]) -> dict[str, float]:
    return {
        "median": statistics.median(rates),
        "min": min(rates),
        "max": max(rates),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
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
    parser.add_argument(
        "--tether-only",
        action="store_true",
        help="PostgreSQL: measure tether alone, without the queues beside it",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    backend = "postgres" if args.store else args.backend
    systems = ["tether"]
    if backend == "postgres" and not args.tether_only:
        if (problem := queues.missing()) is not None:
            sys.exit(problem)
        systems += queues.NAMES
    stores = (
        _postgres_stores(args.store, args.durable)
        if backend == "postgres"
        else _sqlite_stores()
    )
    load_before = os.getloadavg()
    rounds: list[dict[str, Any]] = []
    with stores as (fresh, server):
        for r in range(args.rounds):
            rates: dict[str, float] = {}
            order = _order(systems, r)
            for name in order:
                with fresh() as url:
                    rates[name] = measure(name, url, args.items, args.workers)
            rounds.append(
                {
                    "order": order,
                    "rates": {name: rates[name] for name in systems},
                    "ratio": _ratio(rates),
                    "load": round(os.getloadavg()[0], 2),
                }
            )
            if not args.json:
                print(_round_line(r, rounds[-1]), flush=True)
    load_after = os.getloadavg()
    figures = {name: _stats([r["rates"][name] for r in rounds]) for name in systems}
    medians = {name: f["median"] for name, f in figures.items()}
    peers = [n for n in systems if n != "tether"]
    best = max(peers, key=medians.__getitem__) if peers else None
    report: dict[str, Any] = {
        "machine": machine(),
        "uname": " ".join(os.uname()),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "server": server,
        "backend": backend,
        "durable": args.durable,
        "items": args.items,
        "workers": args.workers,
        "rounds": rounds,
        "figures": figures,
        "best_peer": best,
        "ratio": _ratio(medians),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(machine())
    print(
        f"{server}; load {load_before[0]:.2f} before, {load_after[0]:.2f} after; "
        f"{args.workers} workers, {args.items} items, {args.rounds} rounds, "
        "take + finish per item"
    )
    for name, f in figures.items():
        print(
            f"{name}: median {f['median']:,.0f}/s, "
            f"min {f['min']:,.0f}, max {f['max']:,.0f}"
        )
    if best is not None:
        per_round = [r["ratio"] for r in rounds]
        print(
            f"ratio tether / {best} (the best beside it, medians): "
            f"{report['ratio']:.2f}x; per round {min(per_round):.2f}-"
            f"{max(per_round):.2f}x"
        )


def _ratio(rates: dict[str, float]) -> float | None:
    """Tether's rate over the best of the others, or None when measured alone."""
    others = [v for n, v in rates.items() if n != "tether"]
    return rates["tether"] / max(others) if others else None


def _round_line(r: int, found: dict[str, Any]) -> str:
    rates = ", ".join(f"{n} {v:,.0f}/s" for n, v in found["rates"].items())
    ratio = "" if found["ratio"] is None else f", ratio {found['ratio']:.2f}x"
    return f"round {r + 1} (load {found['load']:.2f}): {rates}{ratio}"


if __name__ == "__main__":
    main()
