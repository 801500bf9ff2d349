"""The ledger keeps each call's input, bounded output, error, and who stopped it and when;
`tether ledger` shows sessions, turns and calls with filters (a tether choice)."""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING

import anyio
import pytest
from tests.cli._run import tether

from tether import Runtime, ToolAborted
from tether.runtime import CallState
from tether.testing import Echo, Fail, event_log
from tether.tools import default_tools

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def _a_stopped_turn(ledger: Path, workspace: Path) -> str:
    """Echo succeeds, Fail fails, Bash is stopped by the user; returns the session id."""
    async with (
        Runtime(
            workspace=workspace,
            tools=[Echo, Fail, *default_tools()],
            permissions={"allow": ["Bash(echo:*)", "Bash(sleep:*)"]},
            grace=2.0,
            ledger=ledger,
        ) as runtime,
        event_log(runtime) as events,
    ):
        session = runtime.session()
        async with anyio.create_task_group() as tg, session.turn() as turn:
            await turn.call("Echo", {"text": "x" * 20000})
            await turn.call("Fail", {"message": "it broke"})

            async def bash() -> None:
                with pytest.raises(ToolAborted):
                    await turn.call("Bash", {"command": "echo started; sleep 30"})

            tg.start_soon(bash)
            await events.wait_for(
                lambda e: getattr(e, "text", "").startswith("started"), timeout=20
            )
            await session.abort(reason="enough")
        await session.settled()
        return session.id


async def test_the_ledger_keeps_input_output_error_and_the_stop(
    tmp_path: Path, workspace: Path
) -> None:
    """Each record holds the input, the output's head and tail, the error message, who
    stopped the call, why and when."""
    ledger = tmp_path / "ledger.sqlite"
    await _a_stopped_turn(ledger, workspace)
    from tether.runtime._ledger import OUTPUT_BOUND, read_ledger_file

    echo, fail, bash = read_ledger_file(ledger)
    assert echo.state is CallState.SUCCEEDED
    assert (echo.input or "").startswith('{"text": "xxxx')
    assert "characters left out" in (echo.input or "")
    assert echo.output is not None
    assert len(echo.output) < OUTPUT_BOUND + 100
    assert echo.output.startswith("x" * 100)
    assert echo.output.endswith("x" * 100)
    assert "characters left out" in echo.output
    assert (fail.state, fail.error) == (CallState.FAILED, "it broke")
    assert json.loads(fail.input or "") == {"message": "it broke"}
    assert bash.state is CallState.ABORTED
    assert (bash.abort_source, bash.abort_reason) == ("user", "enough")
    assert bash.stopped_at is not None
    assert bash.requested_at <= bash.stopped_at <= (bash.ended_at or 0)
    assert (bash.output or "").startswith("started")
    assert json.loads(bash.input or "") == {"command": "echo started; sleep 30"}


async def test_tether_ledger_lists_sessions_then_calls_with_filters(
    tmp_path: Path, workspace: Path
) -> None:
    """Sessions first; a session's calls turn by turn with whole ids; `--state aborted`
    keeps only the stopped call; `--json` carries every field."""
    ledger = tmp_path / "ledger.sqlite"
    sid = await _a_stopped_turn(ledger, workspace)
    listing = tether("ledger", "--file", str(ledger))
    assert listing.returncode == 0, listing.stderr
    assert listing.stdout.splitlines()[0] == f"Ledger {ledger}: 1 sessions"
    assert sid in listing.stdout
    assert "aborted 1, failed 1, succeeded 1" in listing.stdout

    calls = tether("ledger", sid[:14], "--file", str(ledger))
    assert calls.returncode == 0, calls.stderr
    text = calls.stdout
    assert "stopped by user (enough) at " in text
    assert "error: it broke" in text
    assert 'input {"command": "echo started; sleep 30"}' in text

    aborted = tether(
        "ledger", sid, "--file", str(ledger), "--state", "aborted", "--json"
    )
    data = json.loads(aborted.stdout)
    assert [c["tool"] for c in data["calls"]] == ["Bash"]
    call = data["calls"][0]
    assert call["call_id"] in text  # the whole id, as the text view shows it
    assert call["abort_reason"] == "enough"
    assert call["state"] == "aborted"


def test_tether_ledger_on_a_fresh_home_answers_empty(tether_home: Path) -> None:
    """No ledger yet: nothing has run, so an empty answer that says where it looked
    (exit 0); a file named with --file that is not there is an error."""
    proc = tether("ledger")
    assert proc.returncode == 0, proc.stderr
    assert "0 sessions (nothing has run yet)" in proc.stdout
    as_json = tether("ledger", "--json")
    assert as_json.returncode == 0
    assert json.loads(as_json.stdout)["sessions"] == []
    named = tether("ledger", "--file", str(tether_home / "nope.sqlite"))
    assert named.returncode == 2
    assert named.stderr.startswith("tether: no ledger at ")
    assert "--file" in named.stderr


def test_an_older_ledger_file_is_read_and_upgraded(tmp_path: Path) -> None:
    """A file written before the added columns is read as it is, and gains them when a
    runtime opens it for writing."""
    from tether.runtime._ledger import Ledger, read_ledger_file

    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE calls (seq INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT"
        " NOT NULL, turn_id TEXT, call_id TEXT NOT NULL, tool TEXT, stop_class TEXT,"
        " state TEXT NOT NULL, code TEXT, requested_at REAL, started_at REAL,"
        " ended_at REAL, settled_at REAL, abort_source TEXT, abort_reason TEXT,"
        " UNIQUE (session_id, call_id))"
    )
    db.execute(
        "INSERT INTO calls (session_id, turn_id, call_id, tool, state, requested_at)"
        " VALUES ('s', 't', 'c', 'Read', 'succeeded', 1.0)"
    )
    db.commit()
    db.close()
    path.chmod(0o600)
    (old,) = read_ledger_file(path)
    assert (old.call_id, old.input, old.output) == ("c", None, None)
    Ledger(path).close()
    columns = {
        row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(calls)")
    }
    assert {"input", "output", "error", "stopped_at"} <= columns


def test_the_demo_tables_show_whole_call_ids_and_each_writes_file() -> None:
    """On an 80-column output the demo's tables keep every call id whole, and each
    write's row names its file."""
    import re

    proc = tether("demo", "turn", "--grace", "0.3", env={"COLUMNS": "80"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if "call_" in line]
    assert rows
    assert all(re.search(r"call_[0-9a-f]+-\d+ ", row) for row in rows), rows
    assert not any("…" in row.split("│")[1] for row in rows if "│" in row)
    table = proc.stdout.split("Ledger after turn.settled", 1)[1].splitlines()
    writes = [row for row in table if "SlowWrite" in row]
    assert ["approved.txt" in writes[0], "never.txt" in writes[1]] == [True, True]


async def test_a_call_refused_after_the_stop_is_recorded_with_why_and_when(
    workspace: Path,
) -> None:
    """A call asked for after the turn's stop never starts; its record still says who
    stopped the turn, when, and the error the caller saw."""
    from tether.testing import Echo

    async with Runtime(workspace=workspace, tools=[Echo]) as runtime:
        session = runtime.session()
        async with session.turn() as turn:
            await session.abort(reason="done for today")
            with pytest.raises(ToolAborted) as caught:
                await turn.call("Echo", {"text": "late"})
        (record,) = session.ledger_calls()
    assert record.state is CallState.ABORTED
    assert record.error == str(caught.value)
    assert record.error.startswith("not started: the turn was stopped by user")
    assert (record.abort_source, record.abort_reason) == ("user", "done for today")
    assert record.stopped_at is not None
    assert record.stopped_at <= (record.ended_at or 0)
