"""`tether demo`, the main job of the README, run as users run it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


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
