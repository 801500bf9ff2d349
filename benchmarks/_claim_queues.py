"""The PostgreSQL queues that `claims.py` measures beside tether: procrastinate, pgqueuer.

Each queue is set up through its own API (procrastinate's schema manager, pgqueuer's
install), filled with the same number of jobs as tether's items, and worked by its own
worker calls: procrastinate `JobManager.fetch_job` + `finish_job` over its psycopg
connector, pgqueuer `Queries.dequeue(batch_size=1)` + `log_jobs`. That is the take and
the finish of one job, as a worker of either library makes them; the libraries' own
worker loops add task dispatch, heartbeats and (pgqueuer) a buffered log on top, none
of which a take needs.

Each library is measured in two set-ups, and the better one is its figure:
procrastinate's connector as it makes its own pool (which checks a connection each
time it lends one, and wraps each call in BEGIN and COMMIT: round trips more than the
statement's own) and the same connector handed a pool of autocommit connections that
are not checked (the statement alone); pgqueuer over asyncpg (the driver its README
starts with) and over psycopg (tether's and procrastinate's driver).

This module knows nothing of processes or timing: `claims.py` forks the workers and
times them. It imports the libraries lazily, so tether's figures need neither.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence

INSTALL = ".venv/bin/python -m pip install --group bench"
"""The one line that installs the queues (the `bench` dependency group)."""

NAMES = ("procrastinate", "procrastinate-pool", "pgqueuer", "pgqueuer-psycopg")
"""The systems measured beside tether, each a library in one set-up."""

_TASK = "bench"


def missing() -> str | None:
    """None when both queues import; else a message naming the install line."""
    try:
        import asyncpg  # noqa: F401
        import pgqueuer  # noqa: F401
        import procrastinate  # noqa: F401
    except ImportError as error:
        return (
            f"{error.name} is not installed; the PostgreSQL figures measure it beside "
            f"tether. From the checkout: {INSTALL} (or --tether-only)"
        )
    return None


# -- procrastinate -----------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _procrastinate(url: str, own_pool: bool = False) -> AsyncIterator[Any]:
    """Procrastinate's psycopg connector, open, with one connection (as tether's and
    pgqueuer's workers have); `own_pool`: handed a pool of autocommit connections that
    are not checked when lent."""
    import psycopg_pool
    from procrastinate import PsycopgConnector

    if not own_pool:
        connector = PsycopgConnector(conninfo=url, min_size=1, max_size=1)
        await connector.open_async()
        try:
            yield connector
        finally:
            await connector.close_async()
        return
    pool = psycopg_pool.AsyncConnectionPool(
        url, min_size=1, max_size=1, kwargs={"autocommit": True}, open=False
    )
    await pool.open(wait=True)
    try:
        connector = PsycopgConnector()
        await connector.open_async(pool)  # its documented way to use a given pool
        yield connector
    finally:
        await pool.close()


async def _procrastinate_prepare(url: str, items: int) -> list[int]:
    from procrastinate import jobs, manager, schema

    async with _procrastinate(url) as connector:
        await schema.SchemaManager(connector).apply_schema_async()
        queued = [
            jobs.Job(
                queue="default",
                lock=None,
                queueing_lock=None,
                task_name=_TASK,
                task_kwargs={"n": i},
            )
            for i in range(items)
        ]
        done = await manager.JobManager(connector).batch_defer_jobs_async(queued)
        return [int(job.id) for job in done if job.id is not None]


async def _procrastinate_work(
    url: str, n: int, gate: Callable[[], None], own_pool: bool
) -> list[int]:
    from procrastinate import jobs, manager

    async with _procrastinate(url, own_pool) as connector:
        jm = manager.JobManager(connector)
        worker_id = await jm.register_worker()
        gate()
        taken: list[int] = []
        while (job := await jm.fetch_job(queues=None, worker_id=worker_id)) is not None:
            await jm.finish_job(job, status=jobs.Status.SUCCEEDED, delete_job=False)
            assert job.id is not None
            taken.append(job.id)
        return taken


async def _procrastinate_left(url: str) -> dict[str, list[int]]:
    import psycopg

    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute("SELECT status::text, id FROM procrastinate_jobs")
        return _by_status(await cur.fetchall())


def _by_status(rows: Sequence[tuple[Any, ...]]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for status, job in rows:
        found.setdefault(str(status), []).append(int(job))
    return {status: sorted(ids) for status, ids in found.items()}


# -- pgqueuer ----------------------------------------------------------------------------


class _Connection(Protocol):
    async def close(self) -> None: ...


async def _pgqueuer_connect(url: str, driver: str) -> tuple[_Connection, Any]:
    from pgqueuer.queries import Queries

    if driver == "asyncpg":
        import asyncpg

        conn: Any = await asyncpg.connect(url)
        return conn, Queries.from_asyncpg_connection(conn)
    import psycopg

    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    return conn, Queries.from_psycopg_connection(conn)


async def _pgqueuer_prepare(url: str, items: int) -> list[int]:
    conn, queries = await _pgqueuer_connect(url, "psycopg")
    try:
        await queries.install()
        ids = await queries.enqueue([_TASK] * items, [None] * items, [0] * items)
        return [int(i) for i in ids]
    finally:
        await conn.close()


async def _pgqueuer_work(
    url: str, n: int, gate: Callable[[], None], driver: str
) -> list[int]:
    from pgqueuer.domain.types import QueueEntrypoint, QueueManagerId
    from pgqueuer.queries import EntrypointExecutionParameter

    conn, queries = await _pgqueuer_connect(url, driver)
    try:
        # concurrency_limit 0: unlimited, so the dequeue is the plain pick-and-claim.
        entrypoints = {
            QueueEntrypoint(_TASK): EntrypointExecutionParameter(concurrency_limit=0)
        }
        manager = QueueManagerId(uuid.uuid4())
        gate()
        taken: list[int] = []
        while picked := await queries.dequeue(
            batch_size=1,
            entrypoints=entrypoints,
            queue_manager_id=manager,
            global_concurrency_limit=None,
            heartbeat_timeout=timedelta(seconds=300),
        ):
            await queries.log_jobs([(job, "successful", None) for job in picked])
            taken.extend(int(job.id) for job in picked)
        return taken
    finally:
        await conn.close()


async def _pgqueuer_left(url: str) -> dict[str, list[int]]:
    import psycopg
    from pgqueuer.adapters.persistence.qb import QueryBuilderEnvironment

    settings = QueryBuilderEnvironment().settings
    async with await psycopg.AsyncConnection.connect(url) as conn:
        # A finished job leaves the queue table for the log, which also keeps a row
        # of its enqueue ('queued') and its pick ('picked'): the queue must be
        # empty, and the log hold each job once as 'successful'.
        cur = await conn.execute(f"SELECT status::text, id FROM {settings.queue_table}")
        rows = [("still in the queue: " + str(s), i) for s, i in await cur.fetchall()]
        cur = await conn.execute(
            f"SELECT status::text, job_id FROM {settings.queue_table_log} "
            "WHERE status NOT IN ('queued', 'picked')"
        )
        return _by_status([*rows, *await cur.fetchall()])


# -- the interface claims.py uses ------------------------------------------------------


def prepare(name: str, url: str, items: int) -> list[int]:
    """Install `name`'s schema in the database at `url`, queue `items` jobs; their ids."""
    if name.startswith("procrastinate"):
        return asyncio.run(_procrastinate_prepare(url, items))
    return asyncio.run(_pgqueuer_prepare(url, items))


def work(name: str, url: str, n: int, gate: Callable[[], None]) -> list[int]:
    """One worker: connect, call `gate()` (it blocks until the start), take and finish
    jobs one at a time until none is left; the ids it took."""
    if name.startswith("procrastinate"):
        own_pool = name == "procrastinate-pool"
        return asyncio.run(_procrastinate_work(url, n, gate, own_pool))
    driver = "psycopg" if name == "pgqueuer-psycopg" else "asyncpg"
    return asyncio.run(_pgqueuer_work(url, n, gate, driver))


def verify(name: str, url: str, expected: Sequence[int]) -> None:
    """Fail unless every job of the round was finished once: the rows, not the
    workers' word."""
    if name.startswith("procrastinate"):
        left, done = asyncio.run(_procrastinate_left(url)), "succeeded"
    else:
        left, done = asyncio.run(_pgqueuer_left(url)), "successful"
    want = {done: sorted(expected)}
    if left != want:
        summary = {status: len(ids) for status, ids in left.items()}
        raise AssertionError(
            f"{name}: rows after the round {summary}, expected {len(expected)} {done}"
        )
