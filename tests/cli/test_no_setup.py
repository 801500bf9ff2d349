"""No set-up is one rule: on an account never set up, `tether stop`, `tether
status` and `tether run` use the same own store, and a stop the person sets there is one
a run honours. Real processes, a real pseudo-terminal for the verbs, real git."""

from __future__ import annotations

import json
import os
import pwd
from typing import TYPE_CHECKING

import pytest
from tests.cli._run import tether_in_pty
from tests.runs.support import (
    WAIT_FOR_GO,
    close_opened,
    git,
    make_repo,
    open_default_store,
    run_id_of,
    start,
    tether,
    write_plan,
)
from tests.waiting import wait_until

from tether.runs import LaneState

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


pytestmark = pytest.mark.slow


@pytest.fixture
def fresh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A `TETHER_HOME` that does not exist yet: an account that never ran tether."""
    home = tmp_path / "fresh-home"
    monkeypatch.setenv("TETHER_HOME", str(home))
    yield home
    close_opened()


def _verb(*args: str) -> tuple[int, str]:
    """`tether ARGS` as the person types it: on a terminal, no agent markers."""
    return tether_in_pty(*args)


def _outcome() -> str:
    done = tether("status", "--json")
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)["outcome"]
    assert isinstance(outcome, str)
    return outcome


def test_a_stop_set_on_a_fresh_home_keeps_a_run_from_starting_anything(
    fresh_home: Path, tmp_path: Path
) -> None:
    """Status reads CLEAR, `tether stop` sets the stop there (no setup), status reads
    it, and a run started then is refused (exit 3) with who set the stop and why:
    nothing recorded, nothing claimed, no branch. After a lift a new run does the work."""
    repo = make_repo(tmp_path)
    plan = write_plan(tmp_path, repo, items=["q1"], stages=[("work", "true")])
    assert _outcome() == "CLEAR"
    code, out = _verb("stop", "--reason", "not yet")
    assert code == 0, out
    assert fresh_home.is_dir()
    assert _outcome() == "STOPPED"
    done = tether("run", str(plan))
    assert done.returncode == 3, done.stdout + done.stderr
    me = f"{pwd.getpwuid(os.geteuid()).pw_name} (uid {os.geteuid()})"
    assert f"not started: a stop set by {me} stands (not yet)" in done.stdout
    assert "run_" not in done.stdout
    store = open_default_store()
    assert store.runs() == []
    assert store.claims() == []
    assert git(repo, "branch", "--list", "tether/*") == ""
    code, out = _verb("lift")
    assert code == 0, out
    assert _outcome() == "CLEAR"
    again = tether("run", str(plan))
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_run_on_a_fresh_home_halts_on_the_stop_the_person_sets_there(
    fresh_home: Path, tmp_path: Path
) -> None:
    """A run makes the fresh home's own store; `tether stop`, typed while its agent
    works, is the stop it reads: the agent's call ends, no further stage starts, the
    lane is saved and halted, exit 3."""
    repo = make_repo(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    plan = write_plan(
        tmp_path,
        repo,
        items=["q1"],
        stages=[
            ("work", "echo wip > wip.txt; " + WAIT_FOR_GO.format(stage="w")),
            ("more", "true"),
        ],
    )
    proc = start("run", str(plan), env={"MARKS": str(marks)})
    run_id_of(proc)
    wait_until(lambda: (marks / "q1.w").exists(), what="the agent busy")
    code, out = _verb("stop")
    assert code == 0, out
    (marks / "go").touch()
    assert proc.wait(timeout=60) == 3, proc.communicate()
    store = open_default_store()
    (row,) = store.runs()
    (lane,) = store.lanes(row.id)
    assert lane.state is LaneState.HALTED
    assert lane.saved_ref is not None
    assert git(repo, "show", f"{lane.saved_ref}:wip.txt") == "wip"
