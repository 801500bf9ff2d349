"""A SQLite ledger's WAL is checkpointed in a thread of its own, never by the commit of
a call's row on the event loop (a checkpoint syncs two files: tens of milliseconds on
a loaded machine), and every row stays readable."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from tether.runtime import CallState, _checkpoint
from tether.runtime._ledger import Ledger, read_ledger_file

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def _write_calls(ledger: Ledger, n: int) -> None:
    """`n` calls of three rows each (requested, running, succeeded and settled)."""
    for i in range(n):
        ledger.request("s", f"c{i}", "Echo", "t", "read_only", '{"text": "x"}')
        ledger.transition("s", f"c{i}", CallState.RUNNING, {"started_at": 1.0})
        ledger.transition(
            "s",
            f"c{i}",
            CallState.SUCCEEDED,
            {"ended_at": 1.0, "settled_at": 1.0, "output": "x"},
        )


def test_the_writer_never_checkpoints_its_wal_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the thread's checkpoints taken away, the WAL grows well past SQLite's own
    line (1,000 pages: there the writer's commit would have checkpointed it, and the
    WAL would have started again from its head, its file staying near that size)."""
    monkeypatch.setattr(_checkpoint, "checkpoint", lambda path: None)
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    try:
        _write_calls(ledger, 400)  # about 2,000 pages of WAL
        page = 4096
        assert os.path.getsize(f"{path}-wal") > 1500 * page
    finally:
        ledger.close()
    assert len(read_ledger_file(path)) == 400


def test_checkpoints_run_in_a_thread_and_every_row_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every so many rows a checkpoint runs, each on a thread other than the
    writer's; closing waits for the one under way, and every row is in the file."""
    where: list[threading.Thread] = []
    real = _checkpoint.checkpoint

    def noted(path: Path) -> None:
        where.append(threading.current_thread())
        real(path)

    monkeypatch.setattr(_checkpoint, "checkpoint", noted)
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    try:
        _write_calls(ledger, 2 * _checkpoint.CHECKPOINT_EVERY // 3 + 1)
    finally:
        ledger.close()
    assert where
    assert threading.current_thread() not in where
    records = read_ledger_file(path)
    assert len(records) == 2 * _checkpoint.CHECKPOINT_EVERY // 3 + 1
    assert {r.state for r in records} == {CallState.SUCCEEDED}
