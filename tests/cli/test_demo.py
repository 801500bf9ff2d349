"""`tether demo`, the main job of the README, run as users run it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests.cli._run import tether

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("host", ["inprocess", "stdio"])
def test_demo_stops_a_turn_and_reports_the_truth(host: str) -> None:
    """The demo's stop: lookup aborted at once, Bash terminated then killed, the started
    write finishes for real, the prompted write never runs; everything settles."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether",
            "demo",
            "turn",
            "--json",
            "--grace",
            "0.3",
            "--host",
            host,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(proc.stdout)
    report = result["report"]
    assert report["settled"] is False
    whys = sorted(p["why"].split(":")[0] for p in report["pending"])
    assert whys == ["mutating", "process"]
    states = [(r["tool"], r["state"]) for r in result["ledger"]]
    assert states == [
        ("Hang", "aborted"),
        ("Bash", "aborted"),
        ("SlowWrite", "succeeded"),
        ("SlowWrite", "aborted"),
    ]
    assert all(r["settled"] for r in result["ledger"])
    assert "approved.txt" in result["files_in_workspace"]
    assert "never.txt" not in result["files_in_workspace"]


def test_the_unattended_demo_halts_lifts_takes_over_and_finishes() -> None:
    """`tether demo`: a stop halts the run (exit 3) with the work saved aside and the
    claims released, a lift leaves it halted, a take-over restores and finishes; exit 0
    offline, well under a minute."""
    proc = tether("demo", "--busy", "0.5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "demo: the run exited 3 (halted)" in out
    assert out.count("saved aside: refs/tether/saved/") == 2
    assert "claims held now: 0 (released)" in out
    assert "tether lift  -> the run stays halted" in out
    assert out.count("saved work") == 2  # restored by the take-over
    for item in ("fix-typo", "add-license"):
        assert f"branch tether/{item}: {item}: implement / {item}: review" in out
    # Never stopped: the draft its implement stage left is committed by tether.
    assert (
        "branch tether/add-changelog: add-changelog: implement / implement: work the "
        "stage left uncommitted / add-changelog: review"
    ) in out
    assert "demo: the take-over exited 0" in out
