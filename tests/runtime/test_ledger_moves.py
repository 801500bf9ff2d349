"""The ledger's moves keep `CallState`'s rules: a call starts only from a state before
RUNNING, ends once, and the file agrees."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from tether.errors import UsageError
from tether.runtime import CallState
from tether.runtime._ledger import Ledger, read_ledger_file

if TYPE_CHECKING:
    from pathlib import Path


def test_start_then_succeed_ends_and_settles_the_call(tmp_path: Path) -> None:
    """A started call that succeeds is final and settled, in memory and in the file."""
    ledger = Ledger(tmp_path / "ledger.db")
    ledger.request("s", "c1", "Echo", "t", "read_only", "{}")
    ledger.transition("s", "c1", CallState.RUNNING, {"started_at": 10.0})
    assert ledger.get("s", "c1").state is CallState.RUNNING
    ledger.transition(
        "s",
        "c1",
        CallState.SUCCEEDED,
        {"output": "out", "ended_at": 11.0, "settled_at": 11.0},
    )
    record = ledger.get("s", "c1")
    ledger.close()
    assert record.state is CallState.SUCCEEDED
    assert (record.started_at, record.ended_at, record.settled_at) == (10.0, 11.0, 11.0)
    assert (record.output, record.error, record.code) == ("out", None, None)
    assert read_ledger_file(tmp_path / "ledger.db") == [record]


def test_a_final_call_neither_starts_nor_succeeds_again() -> None:
    """Final states never change: both moves refuse, and the row is left as it was."""
    ledger = Ledger()
    ledger.request("s", "c1", "Echo", "t", "read_only", "{}")
    ledger.transition("s", "c1", CallState.ABORTED)
    before = ledger.get("s", "c1")
    with pytest.raises(UsageError, match="aborted -> running"):
        ledger.transition("s", "c1", CallState.RUNNING, {"started_at": 1.0})
    with pytest.raises(UsageError, match="aborted -> succeeded"):
        ledger.transition("s", "c1", CallState.SUCCEEDED, {"output": "late"})
    assert ledger.get("s", "c1") == before


def test_a_queued_call_may_start_an_aborting_one_may_not() -> None:
    """RUNNING follows the states before it; a call being terminated never restarts."""
    ledger = Ledger()
    ledger.request("s", "c1", "Bash", "t", "process", "{}")
    ledger.transition("s", "c1", CallState.QUEUED)
    ledger.transition("s", "c1", CallState.RUNNING)
    ledger.transition("s", "c1", CallState.ABORTING)
    with pytest.raises(UsageError, match="aborting -> running"):
        ledger.transition("s", "c1", CallState.RUNNING)


def test_records_read_alike_from_memory_and_file_by_turn_and_session(
    tmp_path: Path,
) -> None:
    """Rows keep only what was set; every record still reads whole, in request order."""
    ledger = Ledger(tmp_path / "ledger.db")
    ledger.request("s", "c1", "Echo", "t1", "read_only", "{}")
    ledger.request("s", "c2", "Echo", "t2", "", None)
    ledger.request("other", "c1", "Echo", "t1", "mutating", "{}")
    ledger.transition("s", "c1", CallState.RUNNING, {"started_at": 10.0})
    ledger.transition("s", "c1", CallState.SUCCEEDED, {"output": "out"})
    ledger.transition("s", "c2", CallState.FAILED, {"code": "TOOL_FAILED"})
    first, second = ledger.calls("s")
    assert ledger.calls("s", "t1") == [first]
    assert (first.state, first.output, first.input) == (
        CallState.SUCCEEDED,
        "out",
        "{}",
    )
    assert ledger.calls("s", "t2") == [second]
    assert ledger.find("s", "c2") == second == ledger.get("s", "c2")
    assert ledger.find("s", "nope") is None
    assert (second.session_id, second.stop_class, second.input) == ("s", "", None)
    assert (second.state, second.started_at, second.settled_at) == (
        CallState.FAILED,
        None,
        None,
    )
    assert not ledger.is_settled("s", "c2")
    ledger.settle("s", "c2", 12.0)
    assert ledger.is_settled("s", "c2")
    assert ledger.get("other", "c1").stop_class == "mutating"
    records = [*ledger.calls("s"), *ledger.calls("other")]
    ledger.close()
    assert read_ledger_file(tmp_path / "ledger.db") == records


def test_a_call_id_is_recorded_once_per_session() -> None:
    ledger = Ledger()
    ledger.request("s", "c1", "Echo", "t", "read_only", "{}")
    with pytest.raises(UsageError, match="already in the ledger"):
        ledger.request("s", "c1", "Echo", "t", "read_only", "{}")
    ledger.request("s2", "c1", "Echo", "t", "read_only", "{}")
    assert [r.tool for r in ledger.calls("s", "t")] == ["Echo"]


def test_a_dead_writers_calls_settle_at_the_time_of_the_ledgers_clock(
    tmp_path: Path,
) -> None:
    """A ledger that opens a file a dead process left a call unended in records it
    `end_unknown`, settled at its own clock's time (a tether choice: one clock)."""
    path = tmp_path / "ledger.db"
    dead = Ledger(path, clock=lambda: 100.0)
    dead.request("s", "c1", "Bash", "t", "process", "{}")
    dead.transition("s", "c1", CallState.RUNNING, {"started_at": 101.0})
    # The process dies: its lock goes with its descriptor, its lock file stays.
    assert dead._writer is not None
    assert dead._db is not None
    os.close(dead._writer.fd)
    dead._db.close()

    Ledger(path, clock=lambda: 200.0).close()
    [record] = read_ledger_file(path)
    assert record.state is CallState.END_UNKNOWN
    assert (record.started_at, record.settled_at) == (101.0, 200.0)
