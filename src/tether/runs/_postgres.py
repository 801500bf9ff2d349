"""The PostgreSQL store: one database that several machines share (spec 00, spec 03).

Each act is one statement, or one short transaction, on a connection in autocommit mode:

- Taking a claim is a single statement: the first free item is locked with
  `SELECT ... FOR UPDATE SKIP LOCKED` (a run never waits on an item another run is taking;
  it takes the next one), its epoch raised and its claim row written, all or nothing.
- Renewal, release, finish and receipts carry the claim's (run, epoch) in their `WHERE`:
  a stale lane's statement touches no row, and is refused (`StaleClaim`).
- Leases and ledger times come from the database's clock, not the caller's: machines'
  clocks drift apart, and a lease written on one host is judged expired on another, so
  both must read one time line (the server's).
- Commits are durable: a session whose server defaults to `synchronous_commit = off`
  (or `local`) turns it on. A claim lost to a server crash would let a peer take the
  same item at the same epoch while the first run, which did not crash with the server,
  still works on it.

The schema is made on first use and carries a version row; several runs that start at
once serialize on an advisory lock, so making it is idempotent. A database made by a
newer tether is refused rather than written to.
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any, Final, final

import psycopg
from psycopg import conninfo

from ..errors import StoreError, UsageError
from . import _rows as rows
from ._store import crash_point, stale
from ._url import has_password, redact
from ._values import (
    LANE_MOVES_INTO,
    RUN_MOVES_INTO,
    AgentSession,
    Claim,
    Event,
    LaneRow,
    LaneState,
    QueueItem,
    Receipt,
    RunRow,
    RunState,
    refused_move,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

__all__ = ("SCHEMA_VERSION", "PostgresStore", "redact")

SCHEMA_VERSION: Final = 2
"""The schema this build writes; a database at a higher version is refused."""

_LOCK_KEY: Final = 0x7E7E_0001
"""The advisory lock (per database) that makes the schema once when runs start at once."""

_CONNECT_TIMEOUT: Final = 10
"""Seconds to wait for the server when the URL does not say (`connect_timeout`)."""

_NOW: Final = "COALESCE(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)"
"""The store's clock in SQL: the server's, unless a test gave the store a clock."""

_MIGRATIONS: Final = (
    # 0 -> 1: the first schema (as the embedded store's).
    """
    CREATE TABLE items (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id text NOT NULL UNIQUE,
        brief text NOT NULL,
        state text NOT NULL DEFAULT 'queued',
        epoch bigint NOT NULL DEFAULT 0,
        holder text
    );
    CREATE INDEX items_free ON items (seq) WHERE state = 'queued' AND holder IS NULL;
    CREATE TABLE claims (
        item text PRIMARY KEY,
        run text NOT NULL,
        lane text NOT NULL,
        epoch bigint NOT NULL,
        expires float8 NOT NULL,
        host text NOT NULL,
        pid integer NOT NULL
    );
    CREATE INDEX claims_run ON claims (run);
    CREATE TABLE runs (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id text NOT NULL UNIQUE,
        state text NOT NULL,
        host text NOT NULL,
        pid integer NOT NULL,
        pid_start float8 NOT NULL,
        started_at float8 NOT NULL,
        plan text NOT NULL,
        repo text NOT NULL,
        takeover_of text,
        expires float8
    );
    CREATE TABLE lanes (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id text NOT NULL UNIQUE,
        run text NOT NULL,
        item text NOT NULL,
        state text NOT NULL,
        branch text NOT NULL,
        worktree text NOT NULL,
        stage integer NOT NULL DEFAULT 0,
        saved_ref text,
        saved_commit text,
        note text
    );
    CREATE INDEX lanes_run ON lanes (run);
    CREATE INDEX lanes_item ON lanes (item);
    CREATE TABLE receipts (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run text NOT NULL,
        lane text NOT NULL,
        item text NOT NULL,
        stage text NOT NULL,
        exit_status integer NOT NULL,
        log_tail text NOT NULL,
        commits text NOT NULL,
        at float8 NOT NULL
    );
    CREATE INDEX receipts_run ON receipts (run);
    CREATE TABLE events (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        at float8 NOT NULL,
        run text NOT NULL,
        lane text,
        kind text NOT NULL,
        detail text NOT NULL
    );
    CREATE INDEX events_run ON events (run);
    """,
    # 1 -> 2: a lane's facts as columns (the stage it started, its agent session,
    # why its save failed), NULL in the rows of before but the stage, which the
    # ledger holds; every save of a lane, those of before from the ledger.
    """
    ALTER TABLE lanes
        ADD COLUMN stage_name text,
        ADD COLUMN session_stage text,
        ADD COLUMN session_id text,
        ADD COLUMN session_transcript text,
        ADD COLUMN held_reason text;
    UPDATE lanes SET stage_name = (
        SELECT e.detail FROM events e WHERE e.lane = lanes.id AND e.kind = 'stage-start'
        ORDER BY e.seq DESC LIMIT 1
    );
    CREATE TABLE saves (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run text NOT NULL,
        lane text NOT NULL,
        ref text NOT NULL,
        saved_commit text NOT NULL
    );
    CREATE INDEX saves_run ON saves (run);
    INSERT INTO saves (run, lane, ref, saved_commit)
    SELECT run, lane, split_part(detail, ' ', 1), split_part(detail, ' ', 2)
    FROM events WHERE kind = 'saved' AND lane IS NOT NULL AND detail LIKE '% %'
    ORDER BY seq;
    """,
)


def _parse(url: str) -> dict[str, Any]:
    try:
        params = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        # libpq quotes the part it could not read, which may be the password itself.
        why = "" if has_password(url) else f" ({_first_line(exc)})"
        raise UsageError(
            f"store {redact(url)} is not a valid PostgreSQL URL{why}; "
            "write it as postgresql://USER:PASSWORD@HOST:PORT/DATABASE"
        ) from None
    params.setdefault("connect_timeout", _CONNECT_TIMEOUT)
    return params


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    # libpq says "connection failed: connection to server at ..., port N failed: WHY".
    text = text.rsplit(" failed: ", 1)[-1]
    return text.splitlines()[0].strip() if text else type(exc).__name__


_UNREACHABLE: Final = (
    "refused",
    "timeout",
    "timed out",
    "resolve",
    "no such file",
    "unreachable",
)
"""Words of libpq's messages for a server that is not there (as opposed to one saying no)."""


def _connect_error(url: str, params: dict[str, Any], exc: psycopg.Error) -> Exception:
    """The one-line error for a connection that could not be made (no password in it)."""
    where = redact(url)
    why = _first_line(exc)
    password = params.get("password")
    if password:
        why = why.replace(str(password), "***")
    lowered = why.lower()
    if "password" in lowered or "authentication" in lowered:
        return StoreError(
            f"the PostgreSQL store {where} refused the login ({why}); "
            "fix the user and password in the URL (or in ~/.pgpass)"
        )
    if "does not exist" in lowered and "database" in lowered:
        return StoreError(
            f"the PostgreSQL store {where} has no such database ({why}); "
            "create it (createdb) or fix the URL"
        )
    if "invalid" in lowered and "option" in lowered:
        return UsageError(
            f"store {where} is not a valid PostgreSQL URL ({why}); "
            "write it as postgresql://USER:PASSWORD@HOST:PORT/DATABASE"
        )
    if any(sign in lowered for sign in _UNREACHABLE):
        return StoreError(
            f"cannot reach the PostgreSQL store {where} ({why}); "
            "start the server or fix the URL's host and port"
        )
    return StoreError(f"cannot open the PostgreSQL store {where}: {why}")


def _prepare_schema(conn: psycopg.Connection[Any], where: str) -> None:
    """Make or migrate the schema once, whoever starts first; refuse a newer one."""

    def version() -> int:
        # A query of the catalog, not to_regclass(): a backend's name cache may keep
        # "no such table" from before the lock was taken, and miss a peer's new table.
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE "
            "schemaname = current_schema() AND tablename = 'tether_schema')"
        ).fetchone()
        if row is None or not row[0]:
            return 0
        got = conn.execute("SELECT max(version) FROM tether_schema").fetchone()
        return 0 if got is None or got[0] is None else int(got[0])

    found = version()
    if found == SCHEMA_VERSION:
        return
    if found < SCHEMA_VERSION:
        with conn.transaction():
            # Runs starting at once wait here; the first makes the schema, the others
            # then find it made (DDL is transactional in PostgreSQL).
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            found = version()
            if found == 0:
                conn.execute("CREATE TABLE tether_schema (version integer NOT NULL)")
            for step in _MIGRATIONS[found:]:
                conn.execute(step)
            if found < SCHEMA_VERSION:
                conn.execute("DELETE FROM tether_schema")
                conn.execute(
                    "INSERT INTO tether_schema (version) VALUES (%s)", (SCHEMA_VERSION,)
                )
    if found > SCHEMA_VERSION:
        raise StoreError(
            f"the PostgreSQL store {where} has schema version {found}, newer than this "
            f"tether's ({SCHEMA_VERSION}); upgrade tether on this machine"
        )


@final
class PostgresStore:
    """The shared store (see the module docstring); implements `Store`."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        url: str,
        password: str | None,
        clock: Callable[[], float] | None,
    ) -> None:
        """Wrap an open connection; use `PostgresStore.open()`."""
        self._conn = conn
        self._password = password
        self._clock = clock
        self.url = redact(url)
        """The URL without its password, for messages."""

    @classmethod
    def open(
        cls, url: str, *, clock: Callable[[], float] | None = None
    ) -> PostgresStore:
        """Connect to the store at `url`, making its schema if it has none.

        `clock` replaces the server's clock (tests move time by hand).

        Raises:
            UsageError: `url` is not a valid PostgreSQL URL.
            StoreError: the server cannot be reached, refuses the login, has no such
                database, or keeps a schema newer than this build's.
        """
        params = _parse(url)
        try:
            conn = psycopg.connect(**params, autocommit=True)
        except psycopg.Error as exc:
            raise _connect_error(url, params, exc) from None
        store = cls(conn, url, params.get("password"), clock)
        try:
            with store._failing("open"):
                row = conn.execute("SELECT current_setting('synchronous_commit')")
                if row.fetchone() in (("off",), ("local",)):
                    conn.execute("SET synchronous_commit = on")
                _prepare_schema(conn, store.url)
        except BaseException:
            conn.close()
            raise
        return store

    def close(self) -> None:
        """Close the connection (again: nothing)."""
        self._conn.close()

    @contextlib.contextmanager
    def _failing(self, act: str) -> Iterator[None]:
        """A database error as one line that names the store (never its password)."""
        try:
            yield
        except psycopg.Error as exc:
            why = _first_line(exc)
            if self._password:
                why = why.replace(self._password, "***")
            raise StoreError(
                f"the PostgreSQL store {self.url} failed to {act}: {why}"
            ) from None

    def _all(self, act: str, query: str, args: dict[str, Any]) -> list[tuple[Any, ...]]:
        with self._failing(act):
            return self._conn.execute(query, args).fetchall()

    def _one(
        self, act: str, query: str, args: dict[str, Any]
    ) -> tuple[Any, ...] | None:
        with self._failing(act):
            return self._conn.execute(query, args).fetchone()

    def _now_arg(self) -> float | None:
        return None if self._clock is None else self._clock()

    def now(self) -> float:
        """The server's clock (or the test's), as leases are written and judged."""
        row = self._one("read its clock", f"SELECT {_NOW}", {"now": self._now_arg()})
        assert row is not None
        return float(row[0])

    # -- the queue -----------------------------------------------------------------
    def add_item(self, item: str, brief: str) -> bool:
        """Queue a work item; False when an item of that id is already there."""
        row = self._one(
            "queue an item",
            "INSERT INTO items (id, brief) VALUES (%(id)s, %(brief)s) "
            "ON CONFLICT (id) DO NOTHING RETURNING id",
            {"id": item, "brief": brief},
        )
        return row is not None

    def retry(self, item: str) -> bool:
        """Put a failed item back in the queue; False when it is not failed."""
        row = self._one(
            "retry an item",
            "UPDATE items SET state = 'queued' WHERE id = %(id)s AND state = 'failed' "
            "RETURNING id",
            {"id": item},
        )
        return row is not None

    def items(self) -> list[QueueItem]:
        """Every work item, in the order they were added."""
        found = self._all(
            "list the queue",
            "SELECT i.id, i.brief, i.state, c.run FROM items i "
            "LEFT JOIN claims c ON c.item = i.id ORDER BY i.seq",
            {},
        )
        return [
            QueueItem(id=r[0], brief=r[1], state=r[2], claimed_by=r[3]) for r in found
        ]

    # -- runs ----------------------------------------------------------------------
    def create_run(self, run: RunRow) -> None:
        """Record a new run."""
        self._one(
            "record a run",
            "INSERT INTO runs (id, state, host, pid, pid_start, started_at, plan, repo, "
            "takeover_of, expires) VALUES (%(id)s, %(state)s, %(host)s, %(pid)s, "
            "%(pid_start)s, %(started_at)s, %(plan)s, %(repo)s, %(takeover_of)s, "
            "%(expires)s) RETURNING id",
            {
                "id": run.id,
                "state": run.state.value,
                "host": run.host,
                "pid": run.pid,
                "pid_start": run.pid_start,
                "started_at": run.started_at,
                "plan": run.plan,
                "repo": run.repo,
                "takeover_of": run.takeover_of,
                "expires": run.expires,
            },
        )

    def set_run_state(self, run: str, state: RunState) -> None:
        """Record a run's new state: only a move `RunState` allows (else `StoreError`)."""
        done = self._one(
            "record a run's state",
            "UPDATE runs SET state = %(state)s WHERE id = %(id)s "
            "AND state = ANY(%(froms)s) RETURNING id",
            {
                "state": state.value,
                "id": run,
                "froms": sorted(s.value for s in RUN_MOVES_INTO[state]),
            },
        )
        if done is None:
            row = self._one(
                "read a run", "SELECT state FROM runs WHERE id = %(id)s", {"id": run}
            )
            raise StoreError(refused_move(run, row[0] if row else None, state))

    def beat(self, run: str, lease: float) -> None:
        """The run's own heartbeat: it lives `lease` more seconds on the server's clock."""
        self._one(
            "record a heartbeat",
            f"UPDATE runs SET expires = {_NOW} + %(lease)s WHERE id = %(id)s "
            "RETURNING id",
            {"lease": lease, "id": run, "now": self._now_arg()},
        )

    def run(self, run: str) -> RunRow | None:
        """One run, or None."""
        row = self._one(
            "read a run",
            f"SELECT {rows.RUN_COLS} FROM runs WHERE id = %(id)s",
            {"id": run},
        )
        return None if row is None else rows.run(row)

    def runs(self) -> list[RunRow]:
        """Every run, oldest first."""
        found = self._all(
            "list runs", f"SELECT {rows.RUN_COLS} FROM runs ORDER BY seq", {}
        )
        return [rows.run(r) for r in found]

    # -- claims --------------------------------------------------------------------
    def _claim_args(
        self, run: str, lane: str, host: str, pid: int, lease: float
    ) -> dict[str, Any]:
        return {
            "run": run,
            "lane": lane,
            "host": host,
            "pid": pid,
            "lease": lease,
            "now": self._now_arg(),
        }

    _CLAIM_INSERT = (
        "INSERT INTO claims (item, run, lane, epoch, expires, host, pid) "
        f"SELECT t.id, %(run)s, %(lane)s, t.epoch, {_NOW} + %(lease)s, %(host)s, "
        "%(pid)s FROM taken t "
    )
    _CLAIM_RETURNING = f"RETURNING {rows.CLAIM_COLS}"
    # A free item has no claim row (items.holder and claims change together); a
    # take-over replaces the row of the run it takes over.
    _CLAIM_UPSERT = (
        _CLAIM_INSERT + "ON CONFLICT (item) DO UPDATE SET run = EXCLUDED.run, "
        "lane = EXCLUDED.lane, epoch = EXCLUDED.epoch, expires = EXCLUDED.expires, "
        "host = EXCLUDED.host, pid = EXCLUDED.pid " + _CLAIM_RETURNING
    )
    _CLAIM_INSERT += _CLAIM_RETURNING

    def take_claim(
        self,
        run: str,
        lane: str,
        *,
        only: Sequence[str] | None,
        host: str,
        pid: int,
        lease: float,
    ) -> Claim | None:
        """Atomically claim the first queued, unclaimed item (of `only`, if given)."""
        if only is not None and not only:
            return None
        # Invariant: items.holder is the run of the item's claim row, kept in the same
        # statements, so the free items are one partial index away. SKIP LOCKED: an
        # item another run is taking this instant is passed over, never waited on.
        where = "" if only is None else "AND id = ANY(%(only)s) "
        args = self._claim_args(run, lane, host, pid, lease)
        args["only"] = None if only is None else list(only)
        row = self._one(
            "take a claim",
            "WITH free AS (SELECT id FROM items WHERE state = 'queued' "
            f"AND holder IS NULL {where}ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED), "
            "taken AS (UPDATE items i SET epoch = i.epoch + 1, holder = %(run)s "
            "FROM free WHERE i.id = free.id RETURNING i.id, i.epoch) "
            + self._CLAIM_INSERT,
            args,
        )
        if row is None:
            return None
        crash_point("claim")
        return rows.claim(row)

    def take_over_claim(
        self,
        item: str,
        run: str,
        lane: str,
        *,
        previous: str,
        host: str,
        pid: int,
        lease: float,
    ) -> Claim | None:
        """Claim `item` for a take-over: free, or still held by the run `previous`."""
        args = self._claim_args(run, lane, host, pid, lease)
        args.update(item=item, previous=previous)
        # The item's row is locked (waiting for a peer that is taking it), then judged
        # on its newest version: free, or held by `previous`.
        row = self._one(
            "take over a claim",
            "WITH cur AS (SELECT id FROM items WHERE id = %(item)s AND state = 'queued' "
            "AND (holder IS NULL OR holder = %(previous)s) FOR UPDATE), "
            "taken AS (UPDATE items i SET epoch = i.epoch + 1, holder = %(run)s "
            "FROM cur WHERE i.id = cur.id RETURNING i.id, i.epoch) "
            + self._CLAIM_UPSERT,
            args,
        )
        if row is None:
            return None
        crash_point("claim")
        return rows.claim(row)

    def _refuse(self, act: str, claim: Claim) -> None:
        row = self._one(
            "read a claim",
            "SELECT epoch, run FROM claims WHERE item = %(item)s",
            {"item": claim.item},
        )
        raise stale(act, claim, None if row is None else (row[0], row[1]))

    @staticmethod
    def _fence(claim: Claim) -> dict[str, Any]:
        return {"item": claim.item, "epoch": claim.epoch, "run": claim.run}

    _CURRENT = "item = %(item)s AND epoch = %(epoch)s AND run = %(run)s"
    """A claim row that is still the lane's: the fence of every act under a claim."""

    def renew(self, claim: Claim, lease: float) -> Claim:
        """Extend a claim's lease; `StaleClaim` when it is no longer current."""
        crash_point("renew")
        row = self._one(
            "renew a claim",
            f"UPDATE claims SET expires = {_NOW} + %(lease)s WHERE {self._CURRENT} "
            "RETURNING expires",
            {**self._fence(claim), "lease": lease, "now": self._now_arg()},
        )
        if row is None:
            self._refuse("renewal", claim)
            raise AssertionError  # pragma: no cover - _refuse raises
        return Claim(
            item=claim.item,
            run=claim.run,
            lane=claim.lane,
            epoch=claim.epoch,
            expires=row[0],
            host=claim.host,
            pid=claim.pid,
        )

    def _drop(self, act: str, claim: Claim, state: str) -> None:
        row = self._one(
            act,
            f"WITH gone AS (DELETE FROM claims WHERE {self._CURRENT} RETURNING item) "
            "UPDATE items SET holder = NULL, state = %(state)s FROM gone "
            "WHERE items.id = gone.item RETURNING items.id",
            {**self._fence(claim), "state": state},
        )
        if row is None:
            self._refuse(act, claim)

    def release(self, claim: Claim) -> None:
        """Give the item back to the queue; `StaleClaim` when no longer current."""
        self._drop("release", claim, "queued")

    def finish(self, claim: Claim, *, failed: bool = False) -> None:
        """Mark the item done (or failed), drop the claim; `StaleClaim` when stale."""
        self._drop("finish", claim, "failed" if failed else "done")

    def claims(self, run: str | None = None) -> list[Claim]:
        """Claims held now (by `run`, if given)."""
        query = f"SELECT {rows.CLAIM_COLS} FROM claims"
        if run is not None:
            query += " WHERE run = %(run)s"
        found = self._all("list claims", query + " ORDER BY item", {"run": run})
        return [rows.claim(r) for r in found]

    # -- lanes, receipts, ledger -----------------------------------------------------
    def add_lane(self, lane: LaneRow) -> None:
        """Record a new lane."""
        values = rows.lane_values(lane)
        self._one(
            "record a lane",
            f"INSERT INTO lanes ({', '.join(values)}) VALUES "
            f"({', '.join(f'%({c})s' for c in values)}) RETURNING id",
            values,
        )

    def update_lane(
        self,
        lane: str,
        *,
        state: LaneState | None = None,
        stage: int | None = None,
        saved: tuple[str, str] | None = None,
        note: str | None = None,
        stage_name: str | None = None,
        held_reason: str | None = None,
    ) -> None:
        """Change a lane's state, next stage, saved (ref, commit) or a fact."""
        values: dict[str, Any] = {}
        if state is not None:
            values["state"] = state.value
        if stage is not None:
            values["stage"] = stage
        if saved is not None:
            values["saved_ref"], values["saved_commit"] = saved
        facts = {"note": note, "stage_name": stage_name, "held_reason": held_reason}
        values.update((c, v) for c, v in facts.items() if v is not None)
        if not values:
            return
        sets = ", ".join(f"{column} = %({column})s" for column in values)
        where = "id = %(lane_id)s"
        if state is not None:  # only a move LaneState allows (two writers, one lane)
            values["froms"] = sorted(s.value for s in LANE_MOVES_INTO[state])
            where += " AND state = ANY(%(froms)s)"
        update = f"UPDATE lanes SET {sets} WHERE {where} RETURNING id, run"
        if saved is not None:  # and the save kept in the lane's list, at once
            update = (
                f"WITH up AS ({update}) INSERT INTO saves (run, lane, ref, "
                "saved_commit) SELECT run, id, %(saved_ref)s, %(saved_commit)s "
                "FROM up RETURNING lane"
            )
        done = self._one("record a lane", update, {**values, "lane_id": lane})
        if state is not None and done is None:
            row = self._one(
                "read a lane", "SELECT state FROM lanes WHERE id = %(id)s", {"id": lane}
            )
            raise StoreError(refused_move(lane, row[0] if row else None, state))

    def record_session(self, lane: str, session: AgentSession) -> None:
        """Record the agent session a lane's stage started (a take-over resumes it)."""
        values = rows.session_values(session)
        self._one(
            "record an agent session",
            f"UPDATE lanes SET {', '.join(f'{c} = %({c})s' for c in values)} "
            "WHERE id = %(lane_id)s RETURNING id",
            {**values, "lane_id": lane},
        )

    def saved_refs(self, run: str) -> dict[str, list[str]]:
        """Per lane of `run`, the view ref of every save, oldest first."""
        found: dict[str, list[str]] = {}
        for lane, ref in self._all(
            "list saves",
            "SELECT lane, ref FROM saves WHERE run = %(run)s ORDER BY seq",
            {"run": run},
        ):
            found.setdefault(lane, []).append(ref)
        return found

    def lanes(self, run: str) -> list[LaneRow]:
        """A run's lanes, in the order they opened."""
        return self._lane_rows("run", run)

    def item_lanes(self, item: str) -> list[LaneRow]:
        """Every lane (of any run) that worked on `item`, in the order they opened."""
        return self._lane_rows("item", item)

    def _lane_rows(self, column: str, value: str) -> list[LaneRow]:
        found = self._all(
            "list lanes",
            f"SELECT {rows.LANE_COLS} FROM lanes WHERE {column} = %(value)s "
            "ORDER BY seq",
            {"value": value},
        )
        return [rows.lane(r) for r in found]

    def record_receipt(self, claim: Claim, receipt: Receipt) -> None:
        """Record an agent's receipt under a current claim (`StaleClaim` if stale)."""
        # FOR SHARE: a take-over of the item waits until this receipt is in, so the
        # receipt is recorded before the claim changes hands or not at all.
        row = self._one(
            "record a receipt",
            "INSERT INTO receipts (run, lane, item, stage, exit_status, log_tail, "
            "commits, at) SELECT %(r_run)s, %(r_lane)s, %(r_item)s, %(stage)s, "
            f"%(exit_status)s, %(log_tail)s, %(commits)s, COALESCE(%(at)s, {_NOW}) "
            f"WHERE EXISTS (SELECT 1 FROM claims WHERE {self._CURRENT} FOR SHARE) "
            "RETURNING seq",
            {
                **self._fence(claim),
                "r_run": receipt.run,
                "r_lane": receipt.lane,
                "r_item": receipt.item,
                "stage": receipt.stage,
                "exit_status": receipt.exit_status,
                "log_tail": receipt.log_tail,
                "commits": json.dumps(list(receipt.commits)),
                "at": receipt.at or None,
                "now": self._now_arg(),
            },
        )
        if row is None:
            self._refuse("receipt", claim)

    def receipts(self, run: str) -> list[Receipt]:
        """A run's receipts, in order."""
        found = self._all(
            "list receipts",
            f"SELECT {rows.RECEIPT_COLS} FROM receipts WHERE run = %(run)s ORDER BY seq",
            {"run": run},
        )
        return [rows.receipt(r) for r in found]

    def log(
        self, run: str, kind: str, *, lane: str | None = None, detail: str = ""
    ) -> None:
        """Append a row to the ledger."""
        self._one(
            "append to the ledger",
            f"INSERT INTO events (at, run, lane, kind, detail) VALUES ({_NOW}, "
            "%(run)s, %(lane)s, %(kind)s, %(detail)s) RETURNING seq",
            {
                "run": run,
                "lane": lane,
                "kind": kind,
                "detail": detail,
                "now": self._now_arg(),
            },
        )

    def events(self, run: str | None = None) -> list[Event]:
        """Ledger rows (of `run`, if given), in order."""
        query = f"SELECT {rows.EVENT_COLS} FROM events"
        if run is not None:
            query += " WHERE run = %(run)s"
        found = self._all("read the ledger", query + " ORDER BY seq", {"run": run})
        return [rows.event(r) for r in found]
