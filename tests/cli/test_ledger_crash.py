"""A process that dies mid-call: `tether ledger` shows its call `end_unknown`, never
`running`, and a live writer's running call is left as it is, however they interleave."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from tests.cli._run import tether

from tether.runtime import CallState
from tether.runtime._ledger import read_ledger_file

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.slow


WRITER = """
import sys
import anyio
from pathlib import Path
from tether.testing import Stuck, runtime_for

async def main(ledger: str, workspace: str) -> None:
    async with runtime_for(Path(workspace), [Stuck], guard=False, ledger=Path(ledger)) as rt:
        session = rt.session()
        async with anyio.create_task_group() as tg, session.turn() as turn:
            tg.start_soon(turn.call, "Stuck", {})
            while not [r for r in session.ledger_calls() if r.state == "running"]:
                await anyio.sleep(0.005)
            print(session.id, flush=True)
            await anyio.sleep_forever()

anyio.run(main, *sys.argv[1:])
"""
"""A process that opens a SQLite ledger, starts a call that runs for an hour, prints
its session id once the call is `running` in the file, and waits."""


@pytest.fixture
def writers(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()


def start_writer(
    started: list[subprocess.Popen[str]], ledger: Path, workspace: Path
) -> subprocess.Popen[str]:
    workspace.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(ledger), str(workspace)],
        stdout=subprocess.PIPE,
        text=True,
    )
    started.append(proc)
    return proc


def session_of(proc: subprocess.Popen[str]) -> str:
    """The session id the writer prints once its call runs (it ends the line)."""
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line.startswith("session_"), f"the writer said {line!r}"
    return line


def calls_of(ledger: Path, session: str) -> list[dict[str, Any]]:
    done = tether("ledger", session, "--file", str(ledger), "--json")
    assert done.returncode == 0, done.stderr
    calls: list[dict[str, Any]] = json.loads(done.stdout)["calls"]
    return calls


def test_a_killed_writers_call_is_end_unknown_and_a_live_ones_still_runs(
    tmp_path: Path, writers: list[subprocess.Popen[str]]
) -> None:
    ledger = tmp_path / "ledger.sqlite"
    doomed = start_writer(writers, ledger, tmp_path / "a")
    doomed_session = session_of(doomed)
    live = start_writer(writers, ledger, tmp_path / "b")
    live_session = session_of(live)

    # Before the kill, neither is touched by a reader.
    [running] = calls_of(ledger, doomed_session)
    assert running["state"] == "running"

    os.kill(doomed.pid, signal.SIGKILL)
    assert doomed.wait(timeout=10) == -signal.SIGKILL

    [dead] = calls_of(ledger, doomed_session)
    assert dead["state"] == "end_unknown"
    assert dead["code"] == "TOOL_FAILED"
    assert dead["settled"] is True
    assert dead["error"] == (
        f"the process {doomed.pid} that ran it ended while the call was running;"
        " whether it completed is unknown"
    )
    [alive] = calls_of(ledger, live_session)
    assert alive["state"] == "running"
    assert alive["settled"] is False

    # The text view says it too, and the correction was written to the file itself.
    shown = tether("ledger", doomed_session, "--file", str(ledger))
    assert shown.returncode == 0, shown.stderr
    assert "Stuck  end_unknown TOOL_FAILED" in shown.stdout
    listing = tether("ledger", "--file", str(ledger))
    [line] = [line for line in listing.stdout.splitlines() if doomed_session in line]
    assert "end_unknown 1" in line
    assert "running" not in line
    db = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT session_id, state FROM calls ORDER BY seq").fetchall()
    finally:
        db.close()
    assert rows == [(doomed_session, "end_unknown"), (live_session, "running")]
    # The dead writer's lock file is gone; the live one's is held.
    assert len(list(Path(f"{ledger}.writers").iterdir())) == 1


def test_a_writer_opening_while_readers_read_is_never_marked(
    tmp_path: Path, writers: list[subprocess.Popen[str]]
) -> None:
    """The race: readers that correct the file run all through a writer's opening
    and its call's start; its call is never seen `end_unknown`, while a dead
    writer's is, in the same file."""
    ledger = tmp_path / "ledger.sqlite"
    doomed = start_writer(writers, ledger, tmp_path / "a")
    doomed_session = session_of(doomed)
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.wait(timeout=10)

    fresh = start_writer(writers, ledger, tmp_path / "b")
    seen: dict[str, set[str]] = {}
    reads = 0
    deadline = time.monotonic() + 30
    assert fresh.stdout is not None
    while time.monotonic() < deadline:
        for record in read_ledger_file(ledger):
            seen.setdefault(record.session_id, set()).add(str(record.state))
        reads += 1
        if (
            len(seen) == 2
            and "running" in seen[next(s for s in seen if s != doomed_session)]
        ):
            break
    fresh_session = session_of(fresh)
    for _ in range(20):  # and on, while it runs
        for record in read_ledger_file(ledger):
            seen.setdefault(record.session_id, set()).add(str(record.state))
    assert reads > 1
    assert seen[doomed_session] == {"end_unknown"}
    assert CallState.END_UNKNOWN.value not in seen[fresh_session]
    assert seen[fresh_session] <= {"requested", "running"}
    [alive] = calls_of(ledger, fresh_session)
    assert alive["state"] == "running"
