"""The board's source of this account's runs reads and never writes: a run whose
process is gone is shown dead, and the store still says what the run last wrote."""

from __future__ import annotations

import subprocess
import time

from tether._board._source import OwnRuns
from tether.runs._liveness import here
from tether.runs._open import default_store_path
from tether.runs._sqlite import SqliteStore
from tether.runs._values import RunRow, RunState


def test_a_run_whose_process_is_gone_is_shown_dead_and_not_recorded_so() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    default_store_path().parent.mkdir(parents=True, mode=0o700)
    store = SqliteStore.open(default_store_path())
    try:
        store.create_run(
            RunRow(
                id="run_gone-1",
                state=RunState.RUNNING,
                host=here(),
                pid=gone.pid,
                pid_start=time.time() - 5,
                started_at=time.time(),
                plan="plan.toml",
                repo="/nowhere",
            )
        )
        source = OwnRuns()
        try:
            (card,) = source.runs()
        finally:
            source.close()
        assert (card.id, card.state) == ("run_gone-1", "dead")
        row = store.run("run_gone-1")
        assert row is not None
        assert row.state is RunState.RUNNING
        assert [e.kind for e in store.events("run_gone-1")] == []
    finally:
        store.close()


def test_an_account_that_never_ran_shows_no_runs_and_makes_no_store() -> None:
    source = OwnRuns()
    assert source.runs() == []
    assert source.digest() is None
    assert not default_store_path().exists()
