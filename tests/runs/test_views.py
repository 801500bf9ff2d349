"""The views of a run: `runs show` plain and JSON, and the dated digest."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest

from tether.stop import StopStore

from .support import (
    halted_run,
    make_repo,
    tether,
)

if TYPE_CHECKING:
    from pathlib import Path


pytestmark = pytest.mark.slow


@pytest.mark.rule("digest")
def test_a_halted_run_shows_its_lanes_and_writes_the_day_s_digest(
    tmp_path: Path,
) -> None:
    """`runs show` lists each lane's item, state, saved ref and claim; the digest in
    the person's directory of the stop folder names the halt, saves and releases."""
    run = halted_run(
        tmp_path,
        make_repo(tmp_path),
        item="one",
        work="echo x > x.txt; ",
        reason="lunch",
    )
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
