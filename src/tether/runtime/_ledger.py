"""The turn ledger: every call's life, in memory or in a SQLite file.

The ledger is the single writer of call state. Each `CallState` below lists the states a
call may move to; `Ledger.transition()` performs moves and refuses illegal ones, so a call
has exactly one final state and nothing changes after it settles. The runtime's reports
are built from the ledger, which is why they cannot disagree with it.

A SQLite ledger knows which process wrote each call: every `Ledger` on a file holds an
exclusive `flock` on a file of its own in `<ledger>.writers/` for as long as it is open,
and stamps its calls with that file's name. The kernel drops the lock when the process
dies, whatever kills it (and a reused pid cannot hold it), so a call whose writer's lock
is free was left by a dead process: the next `Ledger` or `read_ledger_file()` on the file
records it `END_UNKNOWN` (one transaction), as the next model turn is told. The same
locks say where a session is open: each writer that touches a session (notes it, claims
it to resume it, or appends to its transcript) is kept beside it (`session_writers`) until
it closes, and `delete_session` refuses a session one of them still holds.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import json
import os
import secrets
import sqlite3
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from .._fs import check_owner_only
from ..errors import ErrorCode, StoreError, UsageError
from ._checkpoint import Checkpointer

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = (
    "CallRecord",
    "CallState",
    "Ledger",
    "SessionRecord",
    "delete_session",
    "read_ledger_file",
    "read_sessions",
)


class CallState(enum.StrEnum):
    """The life of a tool call.

    Legal moves: REQUESTED -> PENDING_PERMISSION | QUEUED | RUNNING; PENDING_PERMISSION
    -> QUEUED | RUNNING; QUEUED -> RUNNING; any of these -> ABORTING; any non-final state -> a
    final state (SUCCEEDED, FAILED, ABORTED, END_UNKNOWN). Final states never change.
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
    END_UNKNOWN = "end_unknown"
    """Final: the runtime had to close while the call's operation ran (a write, an
    extension) and the host never reported its end: whether it completed is not known."""

    @property
    def is_final(self) -> bool:
        """Whether the state is final."""
        return self in _FINAL


_FINAL = frozenset(
    {CallState.SUCCEEDED, CallState.FAILED, CallState.ABORTED, CallState.END_UNKNOWN}
)
NEXT_STATES: dict[CallState, frozenset[CallState]] = {
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
    **{final: frozenset() for final in _FINAL},
}
"""The states each state may move to (`CallState`'s docstring, as a table)."""
# The ledger's rows keep states and codes as their plain string values: a row that
# holds only strings, numbers and None is untracked by the cycle collector, so a long
# session's ledger adds nothing to the collector's full passes.
_FINAL_VALUES = frozenset(s.value for s in _FINAL)
_LEGAL_VALUES = {
    old.value: frozenset(s.value for s in new) for old, new in NEXT_STATES.items()
}
_VALUE = {s: s.value for s in CallState}
"""Each state's own value string: `str()` of a member makes a new string each time."""


def _error_code(value: ErrorCode | str | None) -> ErrorCode | None:
    return None if value is None else ErrorCode(value)


@attrs.frozen(kw_only=True)
class CallRecord:
    """One call as the ledger shows it."""

    call_id: str
    tool: str
    state: CallState = attrs.field(converter=CallState)
    code: ErrorCode | None = attrs.field(default=None, converter=_error_code)
    session_id: str = ""
    turn_id: str = ""
    stop_class: str = ""
    requested_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    settled_at: float | None = None
    """When nothing of the call could change anything any more."""
    abort_source: str | None = None
    """Who stopped the call (`user`, `turn`, `shutdown`, ...), if a stop reached it."""
    abort_reason: str | None = None
    """The reason given with the stop."""
    stopped_at: float | None = None
    """When the stop that ended the call was asked for (wall clock)."""
    input: str | None = None
    """The call's input as JSON, bounded like the output."""
    output: str | None = None
    """What the call returned, or printed before a stop; head and tail kept within
    `OUTPUT_BOUND` characters."""
    error: str | None = None
    """The error message when the call did not succeed."""

    @property
    def settled(self) -> bool:
        """Whether the call has settled."""
        return self.settled_at is not None


_COLUMNS = [a.name for a in attrs.fields(CallRecord)]
# Columns added after the first files were written; `_open_db` adds them to old files.
_ADDED_COLUMNS = {
    "stopped_at": "REAL",
    "input": "TEXT",
    "output": "TEXT",
    "error": "TEXT",
    "writer": "TEXT",
}
"""`writer`: the lock file, in `<ledger>.writers/`, of the process that wrote the call
(not a `CallRecord` field)."""
OUTPUT_BOUND = 8192
"""Characters of a call's input and output the ledger keeps: the head and the tail."""


def bounded(text: str, bound: int = OUTPUT_BOUND) -> str:
    """Return `text`, or its head and tail with a line saying how much was left out."""
    if len(text) <= bound:
        return text
    half = bound // 2
    left_out = len(text) - 2 * half
    return f"{text[:half]}\n[... {left_out} characters left out ...]\n{text[-half:]}"


def input_column(value: object) -> str:
    """A call's input as the ledger keeps it: JSON, bounded."""
    try:
        return bounded(json.dumps(value, ensure_ascii=False, default=str))
    except Exception as exc:  # a cycle, or a mapping that fails as it is read
        return f"<input not kept: {type(exc).__name__}: {exc}>"


_REQUESTED = CallState.REQUESTED.value
_INSERT = (
    f"INSERT INTO calls ({', '.join(_COLUMNS)}, writer)"
    f" VALUES ({', '.join(f':{c}' for c in _COLUMNS)}, :writer)"
)
"""A call's first write (on the path of every call: built once)."""
_UPDATE = (
    "UPDATE calls SET "
    + ", ".join(f"{c} = :{c}" for c in _COLUMNS if c not in ("session_id", "call_id"))
    + " WHERE session_id = :session_id AND call_id = :call_id"
)
"""Each later write of a call."""

_BLANK: dict[str, Any] = {
    a.name: (None if a.default is attrs.NOTHING else a.default)
    for a in attrs.fields(CallRecord)
}
_KEYED = ("session_id", "call_id")
"""The columns a row leaves to where it is kept."""

Row = dict[str, Any]
"""A call's columns that differ from the blank record, but its session and call id."""


@attrs.frozen
class SessionRecord:
    """A session the ledger knows of: where it works, its title, when it changed.

    Sessions are kept from their start, before any message.
    """

    session_id: str
    cwd: str
    title: str | None
    updated_at: float
    """Seconds since the epoch."""


class Ledger:
    """Call records in order; optionally written through to a SQLite file (WAL, 0600).

    Rows are kept as plain dicts and become frozen `CallRecord` values when read: a
    call moves through several states on the per-call path, and copying a frozen record
    on each move would cost more than the move. A row holds only the columns set so far
    (a missing one reads as the record's default) and leaves its session and call id
    to where it is kept: a call that succeeds fills ten columns, which keeps its row in
    the smallest dict that holds them, and every call of a long session keeps one.
    """

    def __init__(
        self, path: Path | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.clock = clock
        """Wall-clock seconds since the epoch: when calls are requested, end and
        settle (the executor stamps with it too)."""
        self._rows: dict[str, dict[str, Row]] = {}
        """Rows by session, then by call id, in the order they were requested."""
        self._turns: dict[tuple[str, str], list[str]] = {}
        """Call ids by (session, turn), in order: a report reads one turn, not the
        session."""
        self.path = path
        self._transcripts: dict[str, list[dict[str, Any]]] = {}
        """Messages of agent sessions, by session id, in order (the transcript table)."""
        self._sessions: dict[str, SessionRecord] = {}
        """Sessions noted by this ledger (the sessions table), by id."""
        self._held: set[str] = set()
        """Sessions this writer is kept beside in `session_writers`."""
        self._forgot = False
        """Whether a session's rows were let go of (`forget`): the file has them."""
        self._db: sqlite3.Connection | None = None
        self._writer: _Writer | None = None
        self._checkpoints: Checkpointer | None = None
        if path is not None:
            self._db = _open_db(path)
            # The WAL is checkpointed in a thread, not by the commit of a call's row.
            self._db.execute("PRAGMA wal_autocheckpoint=0")
            self._checkpoints = Checkpointer(path)
            try:
                # Held before any call is written: a call stamped with this writer
                # means its lock was taken.
                self._writer = _Writer.take(path)
                _end_calls_of_dead_writers(
                    self._db, path, clock=clock, own=self._writer.name
                )
            except BaseException:
                self.close()
                raise
            self._db.execute(
                "INSERT OR REPLACE INTO writers (writer, pid, opened_at)"
                " VALUES (?, ?, ?)",
                (self._writer.name, os.getpid(), clock()),
            )

    def close(self) -> None:
        """Close the SQLite file, if any, then let go of the writer's lock.

        The sessions this writer held are no longer open here: its rows of
        `session_writers` go first.
        """
        if self._checkpoints is not None:
            self._checkpoints.close()
            self._checkpoints = None
        if self._db is not None:
            if self._writer is not None and self._held:
                with contextlib.suppress(sqlite3.Error):  # a dead writer's are dropped
                    self._db.execute(
                        "DELETE FROM session_writers WHERE writer = ?",
                        (self._writer.name,),
                    )
            self._db.close()
            self._db = None
        if self._writer is not None:
            # After the file is closed: once the lock is free nothing of this writer
            # is written any more.
            self._writer.release()
            self._writer = None

    def request(
        self,
        session_id: str,
        call_id: str,
        tool: str,
        turn_id: str,
        stop_class: str,
        input: str | None = None,
    ) -> None:
        """Record a new call in state REQUESTED (the per-call path: no record copy).

        Raises:
            UsageError: a record with this session and call id exists.
        """
        row = {
            "tool": tool,
            "turn_id": turn_id,
            "stop_class": stop_class,
            "state": _REQUESTED,
            "requested_at": self.clock(),
            "input": input,
        }
        rows = self._rows.get(session_id)
        if rows is None:
            rows = self._rows[session_id] = {}
        if self._db is not None:
            if call_id in rows:
                raise UsageError(f"call {call_id} is already in the ledger")
            # First: a row the file refused is not kept.
            self._write(session_id, call_id, row, insert=True)
        # One lookup: the row is kept only if the id was free.
        if rows.setdefault(call_id, row) is not row:
            raise UsageError(f"call {call_id} is already in the ledger")
        turn = self._turns.get((session_id, turn_id))
        if turn is None:
            turn = self._turns[(session_id, turn_id)] = []
        turn.append(call_id)

    def add(self, record: CallRecord) -> None:
        """Record a new call.

        Raises:
            UsageError: a record with this session and call id exists.
        """
        sid, cid = record.session_id, record.call_id
        rows = self._rows.setdefault(sid, {})
        if cid in rows:
            raise UsageError(f"call {cid} is already in the ledger")
        row = {name: getattr(record, name) for name in _COLUMNS if name not in _KEYED}
        row["state"] = record.state.value
        row["code"] = None if record.code is None else record.code.value
        if self._db is not None:
            # First: a row the file refused is not kept.
            self._write(sid, cid, row, insert=True)
        rows[cid] = row
        self._turns.setdefault((sid, record.turn_id), []).append(cid)

    def get(self, session_id: str, call_id: str) -> CallRecord:
        """Return the record of a call."""
        row = self._rows[session_id][call_id]
        return CallRecord(session_id=session_id, call_id=call_id, **row)

    def transition(
        self,
        session_id: str,
        call_id: str,
        state: CallState,
        changes: Mapping[str, Any] | None = None,
    ) -> None:
        """Move a call to `state` (with field changes) if the move is legal.

        Raises:
            UsageError: the move is illegal (e.g. out of a final state).
        """
        row = self._rows[session_id][call_id]
        old: str = row["state"]
        new = _VALUE[state]
        if new != old and new not in _LEGAL_VALUES[old]:
            raise UsageError(f"call {call_id}: illegal move {old} -> {new}")
        row["state"] = new
        if changes:
            row |= changes  # no argument tuple, as `update()` makes
            code = changes.get("code")
            if code is not None:
                row["code"] = ErrorCode(code).value
        if self._db is not None:
            self._write(session_id, call_id, row, insert=False)

    def is_settled(self, session_id: str, call_id: str) -> bool:
        """Whether the call has settled."""
        return self._rows[session_id][call_id].get("settled_at") is not None

    def settle(self, session_id: str, call_id: str, at: float) -> None:
        """Mark a final call as settled; harmless if it already is.

        Raises:
            UsageError: the call is not in a final state.
        """
        row = self._rows[session_id][call_id]
        if row.get("settled_at") is not None:
            return
        if row["state"] not in _FINAL_VALUES:
            raise UsageError(f"call {call_id} cannot settle in state {row['state']}")
        row["settled_at"] = at
        if self._db is not None:
            self._write(session_id, call_id, row, insert=False)

    def calls(self, session_id: str, turn_id: str | None = None) -> list[CallRecord]:
        """Return a session's (or one turn's) records in the order they were requested.

        Only calls recorded since this ledger opened; a forgotten session's are read
        from the file.
        """
        rows = self._rows.get(session_id)
        if rows is None:
            return self._calls_in_file(session_id, turn_id) if self._forgot else []
        ids = rows if turn_id is None else self._turns.get((session_id, turn_id), ())
        return [
            CallRecord(session_id=session_id, call_id=cid, **rows[cid]) for cid in ids
        ]

    def every_call(self) -> list[CallRecord]:
        """Every call recorded since this ledger opened, by session, in order."""
        if not self._forgot:
            return [r for session_id in self._rows for r in self.calls(session_id)]
        # The file keeps each session's calls in the order of their first request,
        # as `_rows` does: grouped by session, in the order each session began.
        by_session: dict[str, list[CallRecord]] = {}
        for record in self._calls_in_file():
            by_session.setdefault(record.session_id, []).append(record)
        return [r for records in by_session.values() for r in records]

    def forget(self, session_id: str) -> bool:
        """Let go of a session's rows in memory once each of its calls has settled.

        Only a ledger with a file forgets (the file keeps the rows, and `calls`,
        `every_call` and `find` read them there); one in memory keeps them. A server
        that ends a session per call forgets each, or its memory grows with every
        call. Returns whether the session was forgotten.
        """
        rows = self._rows.get(session_id)
        if self._db is None or rows is None:
            return False
        if any(row.get("settled_at") is None for row in rows.values()):
            return False
        del self._rows[session_id]
        for turn_id in {row["turn_id"] for row in rows.values()}:
            self._turns.pop((session_id, turn_id), None)
        self._transcripts.pop(session_id, None)
        self._sessions.pop(session_id, None)
        self._forgot = True
        return True

    def _calls_in_file(
        self, session_id: str | None = None, turn_id: str | None = None
    ) -> list[CallRecord]:
        """This writer's calls in the file (of one session, or one turn), in order."""
        if self._db is None or self._writer is None:
            return []
        where, args = "writer = ?", [self._writer.name]
        if session_id is not None:
            where, args = f"{where} AND session_id = ?", [*args, session_id]
        if turn_id is not None:
            where, args = f"{where} AND turn_id = ?", [*args, turn_id]
        found = self._db.execute(
            f"SELECT {', '.join(_COLUMNS)} FROM calls WHERE {where} ORDER BY seq", args
        ).fetchall()
        return [_from_row(row) for row in found]

    def find(self, session_id: str, call_id: str) -> CallRecord | None:
        """Return the record of a call of this run or of an earlier one in the file."""
        row = self._rows.get(session_id, {}).get(call_id)
        if row is not None:
            return CallRecord(session_id=session_id, call_id=call_id, **row)
        if self._db is None:
            return None
        found = self._db.execute(
            f"SELECT {', '.join(_COLUMNS)} FROM calls"
            " WHERE session_id = ? AND call_id = ?",
            (session_id, call_id),
        ).fetchone()
        return None if found is None else _from_row(found)

    # -- transcripts of agent sessions ------------------------------------------------

    def add_message(
        self, session_id: str, turn_id: str, message: Mapping[str, Any]
    ) -> None:
        """Append one message (a JSON object) to a session's transcript."""
        data = dict(message)
        if session_id not in self._transcripts:
            self.messages(session_id)  # loads an earlier run's transcript first
        self._hold(session_id)
        # Invariant: an append costs the same however long the transcript is.
        self._transcripts.setdefault(session_id, []).append(data)
        if self._db is not None:
            self._db.execute(
                "INSERT INTO transcript (session_id, turn_id, message, created_at)"
                " VALUES (?, ?, ?, ?)",
                (session_id, turn_id, json.dumps(data), self.clock()),
            )
            self._wrote()

    def messages(self, session_id: str) -> list[dict[str, Any]]:
        """A session's transcript, in order (empty if the session has none)."""
        if session_id not in self._transcripts and self._db is not None:
            rows = self._db.execute(
                "SELECT message FROM transcript WHERE session_id = ? ORDER BY seq",
                (session_id,),
            ).fetchall()
            if rows:
                self._transcripts[session_id] = [json.loads(r[0]) for r in rows]
        return [dict(m) for m in self._transcripts.get(session_id, ())]

    # -- sessions -----------------------------------------------------------------------

    def claim_session(self, session_id: str) -> list[dict[str, Any]]:
        """Hold a session the file keeps, to resume it; return its transcript.

        One transaction checks the session is there (a record or a transcript) and
        keeps this writer beside it: a delete committed before finds it gone here, one
        after is refused while this ledger is open. What this ledger read earlier does
        not count.

        Raises:
            UsageError: the ledger keeps no such session.
        """
        if self._db is None:
            found = session_id in self._transcripts or session_id in self._sessions
        else:
            assert self._writer is not None
            self._db.execute("BEGIN IMMEDIATE")
            try:
                found = _kept_in_file(self._db, session_id)
                if found:
                    self._db.execute(
                        "INSERT OR IGNORE INTO session_writers (session_id, writer)"
                        " VALUES (?, ?)",
                        (session_id, self._writer.name),
                    )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            if not found:
                self._transcripts.pop(session_id, None)
                self._sessions.pop(session_id, None)
            else:
                self._held.add(session_id)
                self._transcripts.pop(session_id, None)  # read again, as kept now
        if not found:
            raise UsageError(
                f"no session {session_id} in the ledger"
                f" {self.path or '(memory)'}; start a new one"
            )
        return self.messages(session_id)

    def _hold(self, session_id: str) -> None:
        """Keep this writer beside the session (`delete_session` refuses it)."""
        if self._db is None or session_id in self._held:
            return
        assert self._writer is not None
        self._db.execute(
            "INSERT OR IGNORE INTO session_writers (session_id, writer) VALUES (?, ?)",
            (session_id, self._writer.name),
        )
        self._held.add(session_id)

    def note_session(
        self, session_id: str, *, cwd: str, title: str | None = None
    ) -> SessionRecord:
        """Keep that a session exists (working in `cwd`) and changed now.

        A title is kept once: the first one given stays.
        """
        known = self.session(session_id)
        now = self.clock()
        record = SessionRecord(
            session_id,
            cwd,
            known.title if known is not None and known.title else title,
            now,
        )
        self._sessions[session_id] = record
        if self._db is not None:
            self._db.execute(
                "INSERT INTO sessions (session_id, cwd, title, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET"
                " cwd = excluded.cwd, title = COALESCE(sessions.title, excluded.title),"
                " updated_at = excluded.updated_at",
                (session_id, cwd, record.title, now, now),
            )
            self._hold(session_id)
            self._wrote()
        return record

    def session(self, session_id: str) -> SessionRecord | None:
        """The session's record, or None if the ledger has never noted it."""
        if session_id not in self._sessions and self._db is not None:
            row = self._db.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE session_id = ?",
                (session_id,),
            ).fetchone()
            if row is not None:
                self._sessions[session_id] = SessionRecord(*row)
        return self._sessions.get(session_id)

    def _write(self, session_id: str, call_id: str, row: Row, *, insert: bool) -> None:
        try:
            self._execute(session_id, call_id, row, insert=insert)
        except UnicodeEncodeError:
            # A lone surrogate (a model's JSON may carry one) cannot be UTF-8: such
            # texts are kept escaped, in the file and in memory alike.
            for name, value in row.items():
                if isinstance(value, str):
                    row[name] = value.encode("utf-8", "backslashreplace").decode()
            self._execute(session_id, call_id, row, insert=insert)

    def _execute(
        self, session_id: str, call_id: str, row: Row, *, insert: bool
    ) -> None:
        assert self._db is not None
        # The file's row has every column: the blank record's, then the row's own.
        row = {**_BLANK, **row, "session_id": session_id, "call_id": call_id}
        if insert:
            assert self._writer is not None
            row["writer"] = self._writer.name
            self._db.execute(_INSERT, row)
        else:
            self._db.execute(_UPDATE, row)
        self._wrote()

    def _wrote(self) -> None:
        """One row was committed (its checkpoint comes in a thread, every so many)."""
        if self._checkpoints is not None:
            self._checkpoints.wrote()


def read_ledger_file(path: Path) -> list[CallRecord]:
    """Read every call record of a SQLite ledger file, in order.

    Calls a dead process left unended are first recorded `END_UNKNOWN` in the file
    (see the module's text) when this account may write it.
    """
    _end_dead_writers_of_file(path)
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        # A file written before the added columns reads them as NULL (it is not
        # changed: this reader opens it read-only).
        have = {row[1] for row in db.execute("PRAGMA table_info(calls)")}
        shown = ", ".join(c if c in have else f"NULL AS {c}" for c in _COLUMNS)
        rows = db.execute(f"SELECT {shown} FROM calls ORDER BY seq").fetchall()
    finally:
        db.close()
    return [_from_row(row) for row in rows]


_SESSION_COLUMNS = "session_id, cwd, title, updated_at"


def read_sessions(path: Path) -> list[SessionRecord]:
    """Every session a SQLite ledger file keeps, the latest changed first.

    The file is opened read-only; one written before sessions were kept has none.
    """
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        if "sessions" not in tables:
            return []
        rows = db.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions ORDER BY updated_at DESC"
        ).fetchall()
    finally:
        db.close()
    return [SessionRecord(*row) for row in rows]


def delete_session(path: Path, session_id: str) -> None:
    """Remove a session's record and transcript from a SQLite ledger file.

    One transaction: killed half-way, the file keeps the session whole. Its calls
    stay (they are the record of what was done). A session the file does not keep,
    or a file that is not there, is no error: there is nothing to remove.

    Raises:
        UsageError: the session is open in a live process (the runtime that noted it
            last still holds its ledger); it is not removed.
        StoreError: the file is not this account's own, or cannot be written.
    """
    if not path.exists():
        return
    check_owner_only(path)
    try:
        _delete_session(path, session_id)
    except sqlite3.Error as exc:
        raise StoreError(
            f"cannot delete session {session_id} from {path}: {exc}"
        ) from None


def _delete_session(path: Path, session_id: str) -> None:
    db = sqlite3.connect(path, isolation_level=None, timeout=5.0)
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        if "sessions" not in tables:
            return
        # Taken before the check: a runtime that notes the session now waits for
        # this transaction, and one that opens it after finds it gone.
        db.execute("BEGIN IMMEDIATE")
        try:
            if "session_writers" in tables:
                _refuse_if_open(db, path, session_id)
                db.execute(
                    "DELETE FROM session_writers WHERE session_id = ?", (session_id,)
                )
            for table in ("transcript", "sessions"):
                db.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    finally:
        db.close()


def _kept_in_file(db: sqlite3.Connection, session_id: str) -> bool:
    """Whether the file keeps the session: its record or a message of it."""
    return any(
        db.execute(
            f"SELECT 1 FROM {table} WHERE session_id = ? LIMIT 1", (session_id,)
        ).fetchone()
        for table in ("sessions", "transcript")
    )


def _refuse_if_open(db: sqlite3.Connection, path: Path, session_id: str) -> None:
    """Raise `UsageError` if a runtime that noted the session still holds its ledger."""
    folder = _writers_dir(path)
    for (writer,) in db.execute(
        "SELECT writer FROM session_writers WHERE session_id = ?", (session_id,)
    ).fetchall():
        if _probe(folder, writer) is not True:
            continue
        pid = db.execute(
            "SELECT pid FROM writers WHERE writer = ?", (writer,)
        ).fetchone()
        where = f"process {pid[0]}" if pid and pid[0] else "another process"
        raise UsageError(
            f"session {session_id} is open in {where}; close it there"
            " (session/close, or quit that editor or tether chat), then delete it"
        )


def _from_row(row: tuple[Any, ...]) -> CallRecord:
    return CallRecord(**dict(zip(_COLUMNS, row, strict=True)))


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
    have = {row[1] for row in db.execute("PRAGMA table_info(calls)")}
    for column, kind in _ADDED_COLUMNS.items():
        if column not in have:
            db.execute(f"ALTER TABLE calls ADD COLUMN {column} {kind}")
    db.execute(
        "CREATE TABLE IF NOT EXISTS writers ("
        "writer TEXT PRIMARY KEY, pid INTEGER, opened_at REAL)"
    )
    db.execute(
        "CREATE TABLE IF NOT EXISTS transcript ("
        "seq INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,"
        " turn_id TEXT, message TEXT NOT NULL, created_at REAL)"
    )
    db.execute(
        "CREATE TABLE IF NOT EXISTS sessions ("
        "session_id TEXT PRIMARY KEY, cwd TEXT NOT NULL, title TEXT,"
        " created_at REAL, updated_at REAL NOT NULL)"
    )
    db.execute(
        "CREATE TABLE IF NOT EXISTS session_writers ("
        "session_id TEXT NOT NULL, writer TEXT NOT NULL,"
        " PRIMARY KEY (session_id, writer))"
    )
    for suffix in ("-wal", "-shm"):
        side = Path(f"{path}{suffix}")
        if side.exists():
            os.chmod(side, 0o600)
    return db


# -- the writers of a ledger file ------------------------------------------------------

_UNENDED = tuple(s.value for s in CallState if not s.is_final)


def _writers_dir(path: Path) -> Path:
    return Path(f"{path}.writers")


@attrs.define
class _Writer:
    """This process's lock on a ledger file: held while the `Ledger` is open."""

    name: str
    lock_path: Path
    fd: int

    @classmethod
    def take(cls, path: Path) -> _Writer:
        folder = _writers_dir(path)
        folder.mkdir(mode=0o700, exist_ok=True)
        _check_folder(folder)
        name = secrets.token_hex(8)
        lock_path = folder / name
        fd = os.open(
            lock_path,
            os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            os.close(fd)
            raise
        return cls(name, lock_path, fd)

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.lock_path.unlink()
        os.close(self.fd)


def _check_folder(folder: Path) -> None:
    """The writers' folder is owner-only like the ledger (a real folder, ours, 0700).

    Raises:
        StoreError: it is not; the message says how to repair it.
    """
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode):
        raise StoreError(f"{folder} is not a folder; remove it and try again")
    if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StoreError(
            f"{folder} is not this account's own (uid {os.geteuid()}, writable by no"
            " one else); move it away and try again"
        )


def _is_dead(folder: Path, writer: str) -> bool:
    """Whether the process that wrote as `writer` died without closing the ledger.

    So it did if its lock file is there and nobody holds its lock. A writer that closed
    removed its file (what it left unended it left on purpose); anything unclear counts
    as alive.
    """
    return _probe(folder, writer) is False


def _probe(folder: Path, writer: str) -> bool | None:
    """Whether `writer`'s lock is held: True, False, or None if that is not known.

    True: its ledger is open in a live process; False: its process died with the
    ledger open; None: its file is gone (it closed its ledger) or cannot be read.
    """
    if not writer or "/" in writer or writer.startswith("."):
        return None
    try:
        fd = os.open(
            folder / writer, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        )
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True  # held: its process lives
    finally:
        os.close(fd)  # the probe's own lock, if it got one, goes with the descriptor
    return False


def _end_calls_of_dead_writers(
    db: sqlite3.Connection,
    path: Path,
    *,
    clock: Callable[[], float],
    own: str | None = None,
) -> None:
    """Record `END_UNKNOWN` each call a dead writer left unended, in one transaction.

    They settle at `clock()`'s time (the ledger's clock, when a ledger opens the file).
    The sessions a dead writer held are open nowhere: its `session_writers` rows go
    in the same transaction.
    """
    have = {row[1] for row in db.execute("PRAGMA table_info(calls)")}
    if "writer" not in have:
        return
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
    holders = "session_writers" in tables
    marks = ", ".join("?" for _ in _UNENDED)
    found = db.execute(
        "SELECT DISTINCT writer FROM calls WHERE writer IS NOT NULL"
        f" AND (state IN ({marks}) OR settled_at IS NULL)",
        _UNENDED,
    ).fetchall()
    if holders:
        found += db.execute("SELECT DISTINCT writer FROM session_writers").fetchall()
    writers = dict.fromkeys(row[0] for row in found if row[0] != own)
    folder = _writers_dir(path)
    dead = [w for w in writers if _is_dead(folder, w)]
    if not dead:
        return
    now = clock()
    db.execute("BEGIN IMMEDIATE")
    try:
        for writer in dead:
            found = db.execute(
                "SELECT pid FROM writers WHERE writer = ?", (writer,)
            ).fetchone()
            who = f"process {found[0]}" if found and found[0] else "process"
            db.execute(
                "UPDATE calls SET state = ?, code = ?, settled_at = ?,"
                " error = 'the ' || ? || ' that ran it ended while the call was '"
                " || state || '; whether it completed is unknown'"
                f" WHERE writer = ? AND state IN ({marks})",
                (
                    CallState.END_UNKNOWN.value,
                    ErrorCode.TOOL_FAILED.value,
                    now,
                    who,
                    writer,
                    *_UNENDED,
                ),
            )
            db.execute(
                "UPDATE calls SET settled_at = ? WHERE writer = ? AND settled_at IS NULL",
                (now, writer),
            )
            if holders:
                db.execute("DELETE FROM session_writers WHERE writer = ?", (writer,))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    for writer in dead:
        with contextlib.suppress(OSError):
            (folder / writer).unlink()


def _end_dead_writers_of_file(path: Path) -> None:
    """`_end_calls_of_dead_writers` on a file this account may write; else nothing."""
    folder = _writers_dir(path)
    try:
        if not folder.is_dir():
            return
        check_owner_only(path)
        _check_folder(folder)
    except (OSError, StoreError):
        return  # not ours to change: it is shown as it is
    db = sqlite3.connect(path, isolation_level=None, timeout=5.0)
    try:
        # A reader has no ledger: what it ends settles at the wall clock's time.
        _end_calls_of_dead_writers(db, path, clock=time.time)
    except sqlite3.Error:
        return  # read-only or busy: shown as it is; the next reader tries again
    finally:
        db.close()
