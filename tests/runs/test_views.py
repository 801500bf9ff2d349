"""The views of a run: `runs show` plain and JSON, and the dated digest."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.waiting import wait_until

from tether.stop import StopStore, set_stop

from .support import (
    WAIT_FOR_GO,
    make_repo,
    run_id_of,
    start,
    tether,
    write_plan,
)


@pytest.mark.rule("digest")
def test_a_halted_run_shows_its_lanes_and_writes_the_day_s_digest(
    tmp_path: Path,
) -> None:
    """`runs show` lists each lane's item, state, saved ref and claim; the digest in
    the person's directory of the stop folder names the halt, saves and releases."""
    repo = make_repo(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    plan = write_plan(
        tmp_path,
        repo,
        items=["one"],
        stages=[
            ("work", "echo x > x.txt; " + WAIT_FOR_GO.format(stage="w")),
            ("review", "true"),
        ],
    )
    proc = start("run", str(plan), env={"MARKS": str(marks)})
    run = run_id_of(proc)
    wait_until(lambda: (marks / "one.w").exists(), what="agent busy")
    set_stop("lunch")
    (marks / "go").touch()
    assert proc.wait(timeout=60) == 3
    shown = tether("runs", "show", run)
    assert shown.returncode == 0
    lines = shown.stdout.splitlines()
    assert lines[0] == f"run {run}  halted"
    assert lines[1].startswith("  one  halted  released  refs/tether/saved/")
    as_json = json.loads(tether("runs", "show", run, "--json").stdout)
    assert as_json["lanes"][0]["saved_ref"] == lines[1].split()[-1]
    missing = tether("runs", "show", "run_nope")
    assert missing.returncode == 2
    assert "no run run_nope" in missing.stderr
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    digest = StopStore.from_setup().place.uid_dir / f"digest-{day}.md"
    text = digest.read_text(encoding="utf-8")
    assert f"## run {run} — halted" in text
    assert "stop observed stop" in text
    assert "lunch" in text  # the person's reason
    assert "saved aside refs/tether/saved/" in text
    assert "released one" in text
    assert "receipt one / work: exit 0" in text
    assert oct(digest.stat().st_mode & 0o777) == "0o600"
