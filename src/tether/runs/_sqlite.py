"""The embedded store: one SQLite file in the account's state dir, WAL, owner-only.

Every write is one `BEGIN IMMEDIATE` transaction, so taking a claim is atomic across
processes: the select of a free item and the insert of its claim happen under SQLite's
single writer lock. `synchronous=NORMAL` in WAL mode: a commit survives a process crash
(the crash tests kill runs mid-write); a power loss may drop the last commits but never
corrupts the file, and a claim lost that way belonged to a run that died with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, final

from .._fs import check_owner_only
from ..errors import StoreError
from . import _rows as rows
from ._store import crash_point, stale
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

__all__ = ("SqliteStore",)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    brief TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'queued',
    epoch INTEGER NOT NULL DEFAULT 0,
    holder TEXT
);
CREATE INDEX IF NOT EXISTS items_free ON items(seq) WHERE state = 'queued' AND holder IS NULL;
CREATE TABLE IF NOT EXISTS claims (
    item TEXT PRIMARY KEY,
    run TEXT NOT NULL,
    lane TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    expires REAL NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS claims_run ON claims(run);
CREATE TABLE IF NOT EXISTS runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    state TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    pid_start REAL NOT NULL,
    started_at REAL NOT NULL,
    plan TEXT NOT NULL,
    repo TEXT NOT NULL,
    takeover_of TEXT,
    expires REAL
);
CREATE TABLE IF NOT EXISTS lanes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    run TEXT NOT NULL,
    item TEXT NOT NULL,
    state TEXT NOT NULL,
    branch TEXT NOT NULL,
    worktree TEXT NOT NULL,
    stage INTEGER NOT NULL DEFAULT 0,
    saved_ref TEXT,
    saved_commit TEXT,
    note TEXT,
    stage_name TEXT,
    session_stage TEXT,
    session_id TEXT,
    session_transcript TEXT,
    held_reason TEXT
);
CREATE INDEX IF NOT EXISTS lanes_run ON lanes(run);
CREATE TABLE IF NOT EXISTS receipts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run TEXT NOT NULL,
    lane TEXT NOT NULL,
    item TEXT NOT NULL,
    stage TEXT NOT NULL,
    exit_status INTEGER NOT NULL,
    log_tail TEXT NOT NULL,
    commits TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    run TEXT NOT NULL,
    lane TEXT,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_run ON events(run);
"""

_SAVES_TABLE = """
CREATE TABLE IF NOT EXISTS saves (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run TEXT NOT NULL,
    lane TEXT NOT NULL,
    ref TEXT NOT NULL,
    saved_commit TEXT NOT NULL
)
"""
"""Every save of every lane (its view's ref and commit), in the order made."""

_SAVES_INDEX = "CREATE INDEX IF NOT EXISTS saves_run ON saves(run)"

_SAVES_OF_BEFORE = """
INSERT INTO saves (run, lane, ref, saved_commit)
SELECT run, lane, substr(detail, 1, instr(detail, ' ') - 1),
       substr(detail, instr(detail, ' ') + 1)
FROM events WHERE kind = 'saved' AND lane IS NOT NULL AND instr(detail, ' ') > 0
ORDER BY seq
"""
"""Once, as the table is made in a store of before: the saves its ledger recorded
(`REF COMMIT`)."""

_LANE_FACTS = (
    "stage_name",
    "session_stage",
    "session_id",
    "session_transcript",
    "held_reason",
)
"""The lanes' columns added after the first schema (all TEXT, NULL in older rows)."""

_STAGE_NAMES_OF_BEFORE = """
UPDATE lanes SET stage_name = (
    SELECT e.detail FROM events e WHERE e.lane = lanes.id AND e.kind = 'stage-start'
    ORDER BY e.seq DESC LIMIT 1
)
"""
"""Once, as the column is added: the stage each lane of before started last."""

_BUSY_MS = 30_000


def _prepare_file(path: Path) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        pass
    else:
        os.close(fd)
    check_owner_only(path)


def _has_saves(conn: sqlite3.Connection) -> bool:
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'saves'"
    ).fetchone()
    return found is not None


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring a store made by an earlier version up to the schema.

    The columns added since: items.holder, runs.expires, and the lane's facts
    (`_LANE_FACTS`); the table of saves.
    """
    cols = {row[1] for row in conn.execute("PRAGMA table_info(items)")}
    if cols and "holder" not in cols:
        with contextlib.suppress(sqlite3.OperationalError):  # a peer migrated first
            conn.execute("ALTER TABLE items ADD COLUMN holder TEXT")
            conn.execute(
                "UPDATE items SET holder = "
                "(SELECT run FROM claims c WHERE c.item = items.id)"
            )
    cols = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
    if cols and "expires" not in cols:
        with contextlib.suppress(sqlite3.OperationalError):  # a peer migrated first
            conn.execute("ALTER TABLE runs ADD COLUMN expires REAL")
    cols = {row[1] for row in conn.execute("PRAGMA table_info(lanes)")}
    if cols and not _has_saves(conn):
        conn.execute("BEGIN IMMEDIATE")
        try:
            if not _has_saves(conn):  # a peer migrated first
                conn.execute(_SAVES_TABLE)
                conn.execute(_SAVES_OF_BEFORE)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    for column in _LANE_FACTS:
        if cols and column not in cols:
            with contextlib.suppress(sqlite3.OperationalError):  # a peer migrated first
                conn.execute(f"ALTER TABLE lanes ADD COLUMN {column} TEXT")
                if column == "stage_name":
                    conn.execute(_STAGE_NAMES_OF_BEFORE)


@final
class SqliteStore:
    """The embedded store (see the module docstring); implements `Store`."""

    def __init__(
        self, conn: sqlite3.Connection, url: str, clock: Callable[[], float], lock: int
    ) -> None:
        """Wrap an open connection; use `SqliteStore.open()`."""
        self._conn = conn
        self._lock = lock
        self.url = url
        """The file's path."""
        self._clock = clock

    @classmethod
    def open(cls, path: Path, *, clock: Callable[[], float] = time.time) -> SqliteStore:
        """Open (creating it owner-only if needed) the store file at `path`.

        Raises:
            StoreError: the file breaks the owner-only rule or is not a SQLite store.
        """
        try:
            _prepare_file(path)
            conn = sqlite3.connect(
                path,
                timeout=_BUSY_MS / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_MS}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            _migrate(conn)
            conn.executescript(_SCHEMA)
            conn.execute(_SAVES_TABLE)
            conn.execute(_SAVES_INDEX)
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"{path} is not a usable tether store ({exc}); move it away and try again"
            ) from None
        except StoreError:
            raise
        except OSError as exc:
            raise StoreError(f"cannot open the store {path}: {exc.strerror}") from None
        for suffix in ("-wal", "-shm"):
            side = Path(f"{path}{suffix}")
            with contextlib.suppress(FileNotFoundError):
                os.chmod(side, 0o600, follow_symlinks=False)
        lock = os.open(
            f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        return cls(conn, str(path), clock, lock)

    def close(self) -> None:
        """Close the connection (again: nothing)."""
        self._conn.close()
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1

    def now(self) -> float:
        """The store's clock: this machine's (the file is never shared across hosts)."""
        return self._clock()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn
        # Writers queue on a lock file first: SQLite's own busy handler sleeps and
        # retries with backoff, which under eight contending writers wastes most of
        # the time; a blocking flock wakes the next writer as soon as one commits.
        # The lock is dropped by the kernel if the process dies inside.
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            fcntl.flock(self._lock, fcntl.LOCK_UN)

    # -- the queue -----------------------------------------------------------------
    def add_item(self, item: str, brief: str) -> bool:
        """Queue a work item; False when an item of that id is already there."""
        with self._write() as conn:
            cur = conn.execute(
                "INSERT OR IGNORE INTO items (id, brief) VALUES (?, ?)", (item, brief)
            )
            return cur.rowcount == 1

    def retry(self, item: str) -> bool:
        """Put a failed item back in the queue; False when it is not failed."""
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE items SET state = 'queued' WHERE id = ? AND state = 'failed'",
                (item,),
            )
            return cur.rowcount == 1

    def items(self) -> list[QueueItem]:
        """Every work item, in the order they were added."""
        found = self._conn.execute(
            "SELECT i.id, i.brief, i.state, c.run FROM items i "
            "LEFT JOIN claims c ON c.item = i.id ORDER BY i.seq"
        ).fetchall()
        return [
            QueueItem(id=r[0], brief=r[1], state=r[2], claimed_by=r[3]) for r in found
        ]

    # -- runs ----------------------------------------------------------------------
    def create_run(self, run: RunRow) -> None:
        """Record a new run."""
        with self._write() as conn:
            conn.execute(
                "INSERT INTO runs (id, state, host, pid, pid_start, started_at, plan, "
                "repo, takeover_of, expires) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run.id,
                    run.state.value,
                    run.host,
                    run.pid,
                    run.pid_start,
                    run.started_at,
                    run.plan,
                    run.repo,
                    run.takeover_of,
                    run.expires,
                ),
            )

    def set_run_state(self, run: str, state: RunState) -> None:
        """Record a run's new state: only a move `RunState` allows (else `StoreError`)."""
        froms = sorted(s.value for s in RUN_MOVES_INTO[state])
        with self._write() as conn:
            done = conn.execute(
                "UPDATE runs SET state = ? WHERE id = ? "
                f"AND state IN ({', '.join('?' * len(froms))})",
                (state.value, run, *froms),
            )
            if done.rowcount == 0:
                row = conn.execute(
                    "SELECT state FROM runs WHERE id = ?", (run,)
                ).fetchone()
                raise StoreError(refused_move(run, row[0] if row else None, state))

    def beat(self, run: str, lease: float) -> None:
        """The run's own heartbeat: it lives `lease` more seconds on the store's clock."""
        with self._write() as conn:
            conn.execute(
                "UPDATE runs SET expires = ? WHERE id = ?", (self._clock() + lease, run)
            )

    def run(self, run: str) -> RunRow | None:
        """One run, or None."""
        row = self._conn.execute(
            f"SELECT {rows.RUN_COLS} FROM runs WHERE id = ?", (run,)
        ).fetchone()
        return None if row is None else rows.run(row)

    def runs(self) -> list[RunRow]:
        """Every run, oldest first."""
        found = self._conn.execute(f"SELECT {rows.RUN_COLS} FROM runs ORDER BY seq")
        return [rows.run(r) for r in found.fetchall()]

    # -- claims --------------------------------------------------------------------
    def _insert_claim(
        self,
        conn: sqlite3.Connection,
        item: str,
        epoch: int,
        run: str,
        lane: str,
        host: str,
        pid: int,
        lease: float,
    ) -> Claim:
        claim = Claim(
            item=item,
            run=run,
            lane=lane,
            epoch=epoch + 1,
            expires=self._clock() + lease,
            host=host,
            pid=pid,
        )
        conn.execute(
            "UPDATE items SET epoch = ?, holder = ? WHERE id = ?",
            (claim.epoch, run, item),
        )
        conn.execute(
            "INSERT OR REPLACE INTO claims (item, run, lane, epoch, expires, host, pid) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (item, run, lane, claim.epoch, claim.expires, host, pid),
        )
        crash_point("claim")
        return claim

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
        # Invariant: items.holder is the run of the item's claim row, kept in the same
        # transactions, so the free items are one partial index away.
        query = (
            "SELECT i.id, i.epoch FROM items i WHERE i.state = 'queued' "
            "AND i.holder IS NULL"
        )
        args: tuple[object, ...] = ()
        if only is not None:
            if not only:
                return None
            query += f" AND i.id IN ({', '.join('?' for _ in only)})"
            args = tuple(only)
        with self._write() as conn:
            row = conn.execute(query + " ORDER BY i.seq LIMIT 1", args).fetchone()
            if row is None:
                return None
            return self._insert_claim(conn, row[0], row[1], run, lane, host, pid, lease)

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
        with self._write() as conn:
            row = conn.execute(
                "SELECT i.epoch, c.run FROM items i LEFT JOIN claims c ON c.item = i.id "
                "WHERE i.id = ? AND i.state = 'queued'",
                (item,),
            ).fetchone()
            if row is None or (row[1] is not None and row[1] != previous):
                return None
            return self._insert_claim(conn, item, row[0], run, lane, host, pid, lease)

    def _check_current(self, conn: sqlite3.Connection, claim: Claim, act: str) -> None:
        row = conn.execute(
            "SELECT epoch, run FROM claims WHERE item = ?", (claim.item,)
        ).fetchone()
        if row is None or row[0] != claim.epoch or row[1] != claim.run:
            raise stale(act, claim, None if row is None else (row[0], row[1]))

    def renew(self, claim: Claim, lease: float) -> Claim:
        """Extend a claim's lease; `StaleClaim` when it is no longer current."""
        with self._write() as conn:
            self._check_current(conn, claim, "renewal")
            crash_point("renew")
            expires = self._clock() + lease
            conn.execute(
                "UPDATE claims SET expires = ? WHERE item = ?", (expires, claim.item)
            )
        return Claim(
            item=claim.item,
            run=claim.run,
            lane=claim.lane,
            epoch=claim.epoch,
            expires=expires,
            host=claim.host,
            pid=claim.pid,
        )

    def release(self, claim: Claim) -> None:
        """Give the item back to the queue; `StaleClaim` when no longer current."""
        with self._write() as conn:
            self._check_current(conn, claim, "release")
            conn.execute("DELETE FROM claims WHERE item = ?", (claim.item,))
            conn.execute("UPDATE items SET holder = NULL WHERE id = ?", (claim.item,))

    def finish(self, claim: Claim, *, failed: bool = False) -> None:
        """Mark the item done (or failed), drop the claim; `StaleClaim` when stale."""
        with self._write() as conn:
            self._check_current(conn, claim, "finish")
            conn.execute(
                "UPDATE items SET state = ?, holder = NULL WHERE id = ?",
                ("failed" if failed else "done", claim.item),
            )
            conn.execute("DELETE FROM claims WHERE item = ?", (claim.item,))

    def claims(self, run: str | None = None) -> list[Claim]:
        """Claims held now (by `run`, if given)."""
        query = f"SELECT {rows.CLAIM_COLS} FROM claims"
        args: tuple[str, ...] = ()
        if run is not None:
            query += " WHERE run = ?"
            args = (run,)
        found = self._conn.execute(query + " ORDER BY item", args).fetchall()
        return [rows.claim(r) for r in found]

    # -- lanes, receipts, ledger -----------------------------------------------------
    def add_lane(self, lane: LaneRow) -> None:
        """Record a new lane."""
        values = rows.lane_values(lane)
        with self._write() as conn:
            conn.execute(
                f"INSERT INTO lanes ({', '.join(values)}) "
                f"VALUES ({', '.join('?' * len(values))})",
                tuple(values.values()),
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
        sets: list[str] = []
        args: list[object] = []
        if state is not None:
            sets.append("state = ?")
            args.append(state.value)
        if stage is not None:
            sets.append("stage = ?")
            args.append(stage)
        if saved is not None:
            sets += ["saved_ref = ?", "saved_commit = ?"]
            args += list(saved)
        facts = {"note": note, "stage_name": stage_name, "held_reason": held_reason}
        for column, value in facts.items():
            if value is not None:
                sets.append(f"{column} = ?")
                args.append(value)
        if not sets:
            return
        where, keys = "id = ?", [lane]
        if state is not None:  # only a move LaneState allows (two writers, one lane)
            froms = sorted(s.value for s in LANE_MOVES_INTO[state])
            where += f" AND state IN ({', '.join('?' * len(froms))})"
            keys += froms
        with self._write() as conn:
            done = conn.execute(
                f"UPDATE lanes SET {', '.join(sets)} WHERE {where}", (*args, *keys)
            )
            if state is not None and done.rowcount == 0:
                row = conn.execute(
                    "SELECT state FROM lanes WHERE id = ?", (lane,)
                ).fetchone()
                raise StoreError(refused_move(lane, row[0] if row else None, state))
            if saved is not None:
                conn.execute(
                    "INSERT INTO saves (run, lane, ref, saved_commit) "
                    "SELECT run, id, ?, ? FROM lanes WHERE id = ?",
                    (*saved, lane),
                )

    def record_session(self, lane: str, session: AgentSession) -> None:
        """Record the agent session a lane's stage started (a take-over resumes it)."""
        values = rows.session_values(session)
        with self._write() as conn:
            conn.execute(
                f"UPDATE lanes SET {', '.join(f'{c} = ?' for c in values)} WHERE id = ?",
                (*values.values(), lane),
            )

    def saved_refs(self, run: str) -> dict[str, list[str]]:
        """Per lane of `run`, the view ref of every save, oldest first."""
        found: dict[str, list[str]] = {}
        for lane, ref in self._conn.execute(
            "SELECT lane, ref FROM saves WHERE run = ? ORDER BY seq", (run,)
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
        found = self._conn.execute(
            f"SELECT {rows.LANE_COLS} FROM lanes WHERE {column} = ? ORDER BY seq",
            (value,),
        ).fetchall()
        return [rows.lane(r) for r in found]

    def record_receipt(self, claim: Claim, receipt: Receipt) -> None:
        """Record an agent's receipt under a current claim (`StaleClaim` if stale)."""
        with self._write() as conn:
            self._check_current(conn, claim, "receipt")
            conn.execute(
                "INSERT INTO receipts (run, lane, item, stage, exit_status, log_tail, "
                "commits, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    receipt.run,
                    receipt.lane,
                    receipt.item,
                    receipt.stage,
                    receipt.exit_status,
                    receipt.log_tail,
                    json.dumps(list(receipt.commits)),
                    receipt.at or self._clock(),
                ),
            )

    def receipts(self, run: str) -> list[Receipt]:
        """A run's receipts, in order."""
        found = self._conn.execute(
            f"SELECT {rows.RECEIPT_COLS} FROM receipts WHERE run = ? ORDER BY seq",
            (run,),
        ).fetchall()
        return [rows.receipt(r) for r in found]

    def log(
        self, run: str, kind: str, *, lane: str | None = None, detail: str = ""
    ) -> None:
        """Append a row to the ledger."""
        with self._write() as conn:
            conn.execute(
                "INSERT INTO events (at, run, lane, kind, detail) VALUES (?, ?, ?, ?, ?)",
                (self._clock(), run, lane, kind, detail),
            )

    def events(self, run: str | None = None) -> list[Event]:
        """Ledger rows (of `run`, if given), in order."""
        query = f"SELECT {rows.EVENT_COLS} FROM events"
        args: tuple[str, ...] = ()
        if run is not None:
            query += " WHERE run = ?"
            args = (run,)
        found = self._conn.execute(query + " ORDER BY seq", args).fetchall()
        return [rows.event(r) for r in found]
