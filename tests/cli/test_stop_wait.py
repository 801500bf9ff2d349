"""`tether stop --wait`: it waits on what the bound accounts publish, within its bound.

In-process, as root (the person here), with a system binding of the test's own and a
record written as the agents' account writes it (`os.chown`): the wait prints the run
and gives up at its timeout while the run works, and returns once the record says
halted. A record changing while it is read is always read whole (atomic replace).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import tether.stop._system as system_module
from tether._fs import write_atomic_at
from tether.cli.stop import _wait
from tether.runs._publish import published_runs, seats
from tether.stop import bind_accounts

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.root, pytest.mark.slow]

AGENTS = 1002
RUN = "run_0123456789ab-1"


@pytest.fixture
def run_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="tether-wait-", dir="/tmp"))
    os.chmod(base, 0o755)
    monkeypatch.setattr(system_module, "SYSTEM_DIR", base / "etc-tether")
    folder = base / "srv"
    bind_accounts(folder=folder, person_uid=os.geteuid(), accounts=[AGENTS])
    where = folder / str(AGENTS) / "runs" / RUN
    where.mkdir(parents=True)
    for path in (where.parent, where):
        os.chown(path, AGENTS, AGENTS)
        os.chmod(path, 0o755)
    yield where
    shutil.rmtree(base, ignore_errors=True)


def _publish(
    where: Path, state: str, pad: int = 0, updated: str = "2999-01-01T00:00:00+00:00"
) -> None:
    record = {
        "version": 1,
        "id": RUN,
        "state": state,
        "started_at": "2026-01-01T00:00:00+00:00",
        "updated_at": updated,
        "lanes": [{"item": "fix-typo", "lane": "lane_1", "state": "in-call"}],
        "stop": {"seen_at": "2026-01-01T00:00:01+00:00", "lanes": []},
        "pad": "x" * pad,
    }
    fd = os.open(where, os.O_PATH | os.O_DIRECTORY)
    try:
        write_atomic_at(
            fd,
            "status.json",
            json.dumps(record).encode(),
            mode=0o644,
            owner=(AGENTS, AGENTS),
        )
    finally:
        os.close(fd)


def test_stop_wait_gives_up_at_its_bound_then_returns_once_halted(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _publish(run_dir, "halting")
    bound = seats()
    assert [s.account_uid for s in bound] == [AGENTS]
    assert _wait(bound, 0.3) is False
    said = capsys.readouterr()
    assert f"{RUN} halting" in said.out
    assert "still working after 0.3 s" in said.err
    _publish(run_dir, "halted")
    assert _wait(bound, 5.0) is True
    assert "every run that honours the stop has halted" in capsys.readouterr().out


def test_stop_wait_reads_a_record_rewritten_meanwhile_whole(run_dir: Path) -> None:
    """The account replaces its record as the person reads it: never a part of one."""
    _publish(run_dir, "running")
    (seat,) = seats()
    done = threading.Event()

    def rewrite() -> None:
        n = 0
        while not done.is_set():
            _publish(run_dir, "running", pad=(n % 7) * 40_000)
            n += 1

    writer = threading.Thread(target=rewrite)
    writer.start()
    try:
        for _ in range(200):
            (record,) = published_runs(seat)
            assert "error" not in record, record
    finally:
        done.set()
        writer.join()


def test_a_working_run_that_stopped_publishing_is_said_to_be_stale(
    run_dir: Path,
) -> None:
    """A run killed outright publishes nothing more: the person is told, not misled."""
    from tether.cli._seatview import STALE_AFTER, run_line, seat_runs

    _publish(run_dir, "halting", updated="2000-01-01T00:00:00+00:00")
    _, (record,), _ = seat_runs()
    assert record["stale"] is True
    assert f"no word for more than {STALE_AFTER:g} s" in run_line(record)
    _publish(run_dir, "halted", updated="2000-01-01T00:00:00+00:00")
    _, (record,), _ = seat_runs()
    assert record["stale"] is False  # a finished run says nothing more, rightly
