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
