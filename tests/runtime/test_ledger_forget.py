"""A ledger with a file forgets a settled session's rows (the file keeps them), and
reads the same afterwards: `calls`, `every_call` and `find` answer as before. One in
memory keeps its rows: they are its only copy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.runtime import CallRecord, CallState
from tether.runtime._ledger import Ledger

if TYPE_CHECKING:
    from pathlib import Path


def _settled(ledger: Ledger, session_id: str, call_id: str, turn_id: str) -> None:
    ledger.request(session_id, call_id, "Echo", turn_id, "read_only", "{}")
    ledger.transition(
        session_id,
        call_id,
        CallState.SUCCEEDED,
        {"output": call_id, "ended_at": 2.0, "settled_at": 2.0},
    )


def _reads(
    ledger: Ledger,
) -> tuple[
    list[CallRecord], list[CallRecord], list[CallRecord], list[CallRecord], object
]:
    return (
        ledger.every_call(),
        ledger.calls("a"),
        ledger.calls("a", "t2"),
        ledger.calls("b", "t1"),
        ledger.find("b", "c5"),
    )


def test_forgotten_sessions_read_the_same_from_the_file(tmp_path: Path) -> None:
    """Interleaved sessions: after forgetting two of three, every read is as before,
    and a call another writer of the file recorded is not this ledger's."""
    path = tmp_path / "ledger.db"
    other = Ledger(path)
    _settled(other, "x", "c0", "t")
    ledger = Ledger(path)
    _settled(ledger, "a", "c1", "t1")
    _settled(ledger, "b", "c2", "t1")
    _settled(ledger, "a", "c3", "t2")
    ledger.request("c", "c4", "Echo", "t", "read_only", "{}")  # still running
    _settled(ledger, "b", "c5", "t1")
    before = _reads(ledger)
    assert [r.call_id for r in before[0]] == ["c1", "c3", "c2", "c5", "c4"]
    assert ledger.forget("a")
    assert ledger.forget("b")
    assert not ledger.forget("c")  # a call of it has not settled
    assert list(ledger._rows) == ["c"]
    assert set(ledger._turns) == {("c", "t")}
    after = _reads(ledger)
    assert after == before
    assert ledger.calls("x") == []
    ledger.close()
    other.close()


def test_a_ledger_in_memory_keeps_its_rows() -> None:
    """Without a file the rows are the only copy: nothing is forgotten."""
    ledger = Ledger()
    _settled(ledger, "a", "c1", "t")
    assert not ledger.forget("a")
    assert [r.call_id for r in ledger.every_call()] == ["c1"]
    assert [r.call_id for r in ledger.calls("a")] == ["c1"]
