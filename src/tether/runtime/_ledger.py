"""The turn ledger: every call's life, in memory or in a SQLite file.

The ledger is the single writer of call state. Each `CallState` below lists the states a
call may move to; `Ledger.transition()` performs moves and refuses illegal ones, so a call
has exactly one final state and nothing changes after it settles. The runtime's reports
are built from the ledger, which is why they cannot disagree with it.
"""

from __future__ import annotations

import enum
import os
import sqlite3
from pathlib import Path
from typing import Any

import attrs

from .._fs import check_owner_only
from ..errors import ErrorCode, StoreError, UsageError

__all__ = ("CallRecord", "CallState", "Ledger", "read_ledger_file")


class CallState(enum.StrEnum):
    """The life of a tool call.

    Legal moves: REQUESTED -> PENDING_PERMISSION | QUEUED | RUNNING; PENDING_PERMISSION
    -> QUEUED | RUNNING; QUEUED -> RUNNING; any of these -> ABORTING; any non-final state -> a
    final state (SUCCEEDED, FAILED, ABORTED). Final states never change.
    """

    REQUESTED = "requested"
    """The runtime accepted the call and is sending it to the host."""
    PENDING_PERMISSION = "pending_permission"
    """The host is waiting for the approver."""
    QUEUED = "queued"
    """Waiting for an admission place."""
    RUNNING = "running"
    """The tool's operation has started."""
    ABORTING = "aborting"
    """A stop was requested and the call is terminating (PROCESS): not yet ended."""
    SUCCEEDED = "succeeded"
    """Final: the tool returned a result."""
    FAILED = "failed"
    """Final: the tool or the host reported an error other than a stop."""
    ABORTED = "aborted"
    """Final: a stop ended the call (TOOL_ABORTED)."""

    @property
    def is_final(self) -> bool:
        """Whether the state is final."""
        return self in _FINAL


_FINAL = frozenset({CallState.SUCCEEDED, CallState.FAILED, CallState.ABORTED})
_LEGAL: dict[CallState, frozenset[CallState]] = {
    CallState.REQUESTED: frozenset(
        {
            CallState.PENDING_PERMISSION,
            CallState.QUEUED,
            CallState.RUNNING,
            CallState.ABORTING,
        }
        | _FINAL
    ),
    CallState.PENDING_PERMISSION: frozenset(
        {CallState.QUEUED, CallState.RUNNING, CallState.ABORTING} | _FINAL
    ),
    CallState.QUEUED: frozenset({CallState.RUNNING, CallState.ABORTING} | _FINAL),
    CallState.RUNNING: frozenset({CallState.ABORTING} | _FINAL),
    CallState.ABORTING: _FINAL,
}


@attrs.frozen(kw_only=True)
class CallRecord:
    """One call as the ledger shows it."""

    call_id: str
    tool: str
    state: CallState
    code: ErrorCode | None = None
    session_id: str = ""
    turn_id: str = ""
    stop_class: str = ""
    requested_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    settled_at: float | None = None
    """When nothing of the call could change anything any more."""
    abort_source: str | None = None
    abort_reason: str | None = None

    @property
    def settled(self) -> bool:
        """Whether the call has settled."""
        return self.settled_at is not None


_COLUMNS = [a.name for a in attrs.fields(CallRecord)]


class Ledger:
    """Call records in order; optionally written through to a SQLite file (WAL, 0600)."""

    def __init__(self, path: Path | None = None) -> None:
        self._records: dict[tuple[str, str], CallRecord] = {}
        self.path = path
        self._db: sqlite3.Connection | None = None
        if path is not None:
            self._db = _open_db(path)

    def close(self) -> None:
        """Close the SQLite file, if any."""
        if self._db is not None:
            self._db.close()
            self._db = None

    def add(self, record: CallRecord) -> None:
        """Record a new call.

        Raises:
            UsageError: a record with this session and call id exists.
        """
        key = (record.session_id, record.call_id)
        if key in self._records:
            raise UsageError(f"call {record.call_id} is already in the ledger")
        self._records[key] = record
        self._write(record, insert=True)

    def get(self, session_id: str, call_id: str) -> CallRecord:
        """Return the record of a call."""
        return self._records[(session_id, call_id)]

    def transition(
        self,
        session_id: str,
        call_id: str,
        state: CallState,
        **changes: Any,
    ) -> CallRecord:
        """Move a call to `state` (with field changes) if the move is legal.

        Raises:
            UsageError: the move is illegal (e.g. out of a final state).
        """
        old = self._records[(session_id, call_id)]
        if state is not old.state and state not in _LEGAL.get(old.state, frozenset()):
            raise UsageError(f"call {call_id}: illegal move {old.state} -> {state}")
        new = attrs.evolve(old, state=state, **changes)
        self._records[(session_id, call_id)] = new
        self._write(new, insert=False)
        return new

    def settle(self, session_id: str, call_id: str, at: float) -> CallRecord:
        """Mark a final call as settled; harmless if it already is."""
        old = self._records[(session_id, call_id)]
        if old.settled_at is not None:
            return old
        if not old.state.is_final:
            raise UsageError(f"call {call_id} cannot settle in state {old.state}")
        new = attrs.evolve(old, settled_at=at)
        self._records[(session_id, call_id)] = new
        self._write(new, insert=False)
        return new

    def calls(self, session_id: str, turn_id: str | None = None) -> list[CallRecord]:
        """Return a session's (or one turn's) records in the order they were requested."""
        return [
            r
            for (sid, _), r in self._records.items()
            if sid == session_id and (turn_id is None or r.turn_id == turn_id)
        ]

    def _write(self, record: CallRecord, *, insert: bool) -> None:
        if self._db is None:
            return
        row = {name: getattr(record, name) for name in _COLUMNS}
        row["state"] = str(record.state)
        row["code"] = None if record.code is None else str(record.code)
        if insert:
            cols = ", ".join(_COLUMNS)
            marks = ", ".join(f":{c}" for c in _COLUMNS)
            self._db.execute(f"INSERT INTO calls ({cols}) VALUES ({marks})", row)
        else:
            sets = ", ".join(
                f"{c} = :{c}" for c in _COLUMNS if c not in ("session_id", "call_id")
            )
            self._db.execute(
                f"UPDATE calls SET {sets} WHERE session_id = :session_id AND call_id = :call_id",
                row,
            )


def read_ledger_file(path: Path) -> list[CallRecord]:
    """Read every call record of a SQLite ledger file, in order."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute(
            f"SELECT {', '.join(_COLUMNS)} FROM calls ORDER BY seq"
        ).fetchall()
    finally:
        db.close()
    out = []
    for row in rows:
        values: dict[str, Any] = dict(zip(_COLUMNS, row, strict=True))
        values["state"] = CallState(values["state"])
        values["code"] = None if values["code"] is None else ErrorCode(values["code"])
        out.append(CallRecord(**values))
    return out


def _open_db(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        # Create the file owner-only before SQLite opens it.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        os.close(fd)
    try:
        check_owner_only(path)
    except StoreError:
        raise
    except OSError as exc:
        raise StoreError(f"cannot use ledger file {path}: {exc.strerror}") from None
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS calls ("
        "seq INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,"
        " turn_id TEXT, call_id TEXT NOT NULL, tool TEXT, stop_class TEXT,"
        " state TEXT NOT NULL, code TEXT, requested_at REAL, started_at REAL,"
        " ended_at REAL, settled_at REAL, abort_source TEXT, abort_reason TEXT,"
        " UNIQUE (session_id, call_id))"
    )
    for suffix in ("-wal", "-shm"):
        side = Path(f"{path}{suffix}")
        if side.exists():
            os.chmod(side, 0o600)
    return db
