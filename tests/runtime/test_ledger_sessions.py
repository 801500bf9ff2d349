"""`delete_session`: a session's record and transcript leave a ledger file in one
transaction, its calls stay, and a session a live ledger holds open is refused."""

from __future__ import annotations

import os
import sqlite3
from typing import TYPE_CHECKING

import pytest

from tether.errors import UsageError
from tether.runtime import CallState, delete_session, read_sessions
from tether.runtime._ledger import Ledger, read_ledger_file

if TYPE_CHECKING:
    from pathlib import Path


def _kept(path: Path, session_id: str) -> None:
    """Note a session with one message and one finished call, then close the ledger."""
    ledger = Ledger(path)
    ledger.note_session(session_id, cwd="/w", title="first")
    ledger.add_message(session_id, "t1", {"role": "user", "content": "hi"})
    ledger.request(session_id, "c1", "Read", "t1", "read_only", "{}")
    ledger.transition(
        session_id, "c1", CallState.SUCCEEDED, {"ended_at": 1.0, "settled_at": 1.0}
    )
    ledger.close()


def test_the_record_and_transcript_go_and_the_calls_stay(tmp_path: Path) -> None:
    """After the delete the file lists only the other session and has no message of
    the deleted one; both sessions' calls are still there. Deleting it again, or an
    id never kept, changes nothing and raises nothing."""
    path = tmp_path / "sessions.sqlite"
    _kept(path, "s1")
    _kept(path, "s2")
    delete_session(path, "s1")
    assert [r.session_id for r in read_sessions(path)] == ["s2"]
    reopened = Ledger(path)
    assert reopened.messages("s1") == []
    assert reopened.session("s1") is None
    assert reopened.messages("s2") == [{"role": "user", "content": "hi"}]
    reopened.close()
    assert [(c.session_id, c.call_id) for c in read_ledger_file(path)] == [
        ("s1", "c1"),
        ("s2", "c1"),
    ]
    delete_session(path, "s1")
    delete_session(path, "never")
    delete_session(tmp_path / "absent.sqlite", "s1")
    assert not (tmp_path / "absent.sqlite").exists()


def test_a_session_a_live_ledger_holds_is_refused_and_kept(tmp_path: Path) -> None:
    """While a ledger that noted the session is open, the delete raises a one-line
    `UsageError` naming this process and removes nothing; once it closes, the delete
    goes through."""
    path = tmp_path / "sessions.sqlite"
    _kept(path, "s1")
    holder = Ledger(path)
    holder.note_session("s1", cwd="/w")
    with pytest.raises(UsageError) as refused:
        delete_session(path, "s1")
    assert str(refused.value).startswith(
        f"session s1 is open in process {os.getpid()}; close it there"
    )
    assert "\n" not in str(refused.value)
    assert [r.session_id for r in read_sessions(path)] == ["s1"]
    holder.close()
    delete_session(path, "s1")
    assert read_sessions(path) == []


def test_a_file_written_before_session_writers_were_kept(tmp_path: Path) -> None:
    """A file whose sessions table has no `session_writers` beside it (an older
    tether) still deletes; opening it as a ledger adds the table."""
    path = tmp_path / "sessions.sqlite"
    _kept(path, "s1")
    db = sqlite3.connect(path)
    db.execute("DROP TABLE session_writers")
    db.commit()
    db.close()
    delete_session(path, "s1")
    assert read_sessions(path) == []
    Ledger(path).close()
    db = sqlite3.connect(path)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
    db.close()
    assert "session_writers" in tables


def _writer_rows(path: Path) -> list[tuple[str, str]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(
            "SELECT session_id, writer FROM session_writers ORDER BY session_id"
        ).fetchall()
    finally:
        db.close()


def test_a_transcript_written_without_a_note_is_held_while_open(
    tmp_path: Path,
) -> None:
    """A ledger that only appends messages (as `tether chat` and the `Agent` API do;
    they never note the session) holds the session as one that notes it does: the
    delete is refused while it is open, and goes through once it closes."""
    path = tmp_path / "sessions.sqlite"
    writer = Ledger(path)
    writer.add_message("s2", "t1", {"role": "user", "content": "chat"})
    with pytest.raises(UsageError, match="session s2 is open in process"):
        delete_session(path, "s2")
    assert Ledger(path).messages("s2") == [{"role": "user", "content": "chat"}]
    writer.close()
    delete_session(path, "s2")
    assert Ledger(path).messages("s2") == []


def test_a_claim_after_a_delete_finds_no_session_and_one_before_holds_it(
    tmp_path: Path,
) -> None:
    """`claim_session` checks the file, not what this ledger read earlier: after a
    delete it raises "no session" and writes nothing back; a claimed session is held
    (its delete refused) and its transcript returned."""
    path = tmp_path / "sessions.sqlite"
    _kept(path, "s1")
    _kept(path, "s2")
    reader = Ledger(path)
    assert reader.messages("s1") == [{"role": "user", "content": "hi"}]
    delete_session(path, "s1")
    with pytest.raises(UsageError, match="no session s1 in the ledger"):
        reader.claim_session("s1")
    assert reader.claim_session("s2") == [{"role": "user", "content": "hi"}]
    with pytest.raises(UsageError, match="session s2 is open in process"):
        delete_session(path, "s2")
    reader.close()
    assert [r.session_id for r in read_sessions(path)] == ["s2"]
    assert Ledger(path).messages("s1") == []


def test_writer_rows_go_when_their_ledger_closes_or_its_process_died(
    tmp_path: Path,
) -> None:
    """`session_writers` does not only grow: a ledger that closes takes its rows
    with it, and the next ledger on the file drops those of a writer that died."""
    path = tmp_path / "sessions.sqlite"
    closing = Ledger(path)
    closing.note_session("s1", cwd="/w")
    dead = Ledger(path)
    dead.add_message("s2", "t1", {"role": "user", "content": "hi"})
    assert [s for s, _ in _writer_rows(path)] == ["s1", "s2"]
    closing.close()
    assert [s for s, _ in _writer_rows(path)] == ["s2"]
    # The process dies: its lock goes with its descriptor, its lock file stays.
    assert dead._writer is not None
    assert dead._db is not None
    os.close(dead._writer.fd)
    dead._db.close()
    Ledger(path).close()
    assert _writer_rows(path) == []
