"""What a new account sees of the recorded stop: a home not made yet reads CLEAR and is
made by the first `tether stop` (as by the first run), a read changes nothing on disk,
and the person's reason is shown, never judged."""

from __future__ import annotations

import json
import os
import subprocess
from typing import TYPE_CHECKING

import pytest
from tests.cli._run import tether

from tether.stop import StopStore, set_stop, stop_reason
from tether.stop._reason import REASON_LIMIT
from tether.stop._setup import STOP_NAME

if TYPE_CHECKING:
    from pathlib import Path


pytestmark = pytest.mark.slow


def _tether(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """`tether ARGS` as a person's shell runs it, with no terminal, in `home`."""
    return tether(
        *args, env={"TETHER_HOME": str(home)}, stdin=subprocess.DEVNULL, person=True
    )


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_status_of_a_home_that_does_not_exist_reads_clear_and_creates_nothing(
    tmp_path: Path,
) -> None:
    """No set-up is one rule: a home not made yet reads CLEAR, as a run
    there would read, says who makes the store, and status makes nothing."""
    home = tmp_path / "not-yet"
    done = _tether("status", home=home)
    assert done.returncode == 0, done.stderr
    assert "CLEAR" in done.stdout
    assert "no stop store yet" in done.stdout
    assert "tether setup" not in done.stdout
    data = json.loads(_tether("status", "--json", home=home).stdout)
    assert data["outcome"] == "CLEAR"
    assert data["reason"] is None
    assert not home.exists()


def test_status_of_a_home_that_is_a_file_holds(tmp_path: Path) -> None:
    """A home that cannot be a folder is not "not made yet": status holds, saying so."""
    home = tmp_path / "a-file"
    home.write_text("", encoding="utf-8")
    data = json.loads(_tether("status", "--json", home=home).stdout)
    assert data["outcome"] == "HOLD"
    assert data["reason"]


def test_status_of_a_fresh_home_reads_clear_and_makes_no_folder(
    tmp_path: Path,
) -> None:
    home = tmp_path / "fresh"
    home.mkdir(mode=0o700)
    data = json.loads(_tether("status", "--json", home=home).stdout)
    assert data["outcome"] == "CLEAR"
    assert _tree(home) == []
    text = _tether("status", home=home).stdout
    assert "no stop store yet" in text


def test_stop_in_a_home_that_does_not_exist_makes_the_own_store_and_sets_it(
    tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No set-up is one rule: `tether stop` makes the own store, the home
    included, as `tether run` does, and the stop stands where a run reads it."""
    missing = tether_home / "not-yet"
    monkeypatch.setenv("TETHER_HOME", str(missing))
    reading = set_stop("lunch")
    assert str(reading.outcome) == "STOPPED"
    assert (
        reading.stop_path == missing / "state" / "stop" / str(os.geteuid()) / STOP_NAME
    )
    assert missing.stat().st_mode & 0o777 == 0o700
    assert (missing / "state").stat().st_mode & 0o777 == 0o700
    assert str(StopStore.from_setup().read().outcome) == "STOPPED"


def test_stop_where_the_own_store_cannot_be_made_fails_and_says_why(
    tether_home: Path,
) -> None:
    """A file where the state dir goes: the stop is NOT set, and the line says why."""
    (tether_home / "state").write_text("", encoding="utf-8")
    with pytest.raises(Exception, match=r"NOT set: .* cannot be made") as caught:
        set_stop("lunch")
    assert "File exists" in str(caught.value)


def test_status_shows_the_persons_reason_and_json_carries_it_as_stop_reason(
    tether_home: Path,
) -> None:
    set_stop("deploy freeze\x1b[31m until\tMonday")
    text = _tether("status", home=tether_home).stdout
    assert "reason deploy freeze [31m until Monday" in text
    data = json.loads(_tether("status", "--json", home=tether_home).stdout)
    assert data["outcome"] == "STOPPED"
    assert data["stop_reason"] == "deploy freeze [31m until Monday"
    assert data["reason"] is None  # "reason" keeps its meaning: why a HOLD


def test_stop_reason_is_null_without_a_reason_and_when_not_stopped(
    tether_home: Path,
) -> None:
    assert (
        json.loads(_tether("status", "--json", home=tether_home).stdout)["stop_reason"]
        is None
    )
    set_stop(None)
    data = json.loads(_tether("status", "--json", home=tether_home).stdout)
    assert data["outcome"] == "STOPPED"
    assert data["stop_reason"] is None


def test_stop_reason_is_bounded_and_a_rewritten_file_never_changes_the_outcome(
    tether_home: Path,
) -> None:
    reading = set_stop("x" * 5000)
    shown = stop_reason(reading)
    assert shown is not None
    assert len(shown) == REASON_LIMIT
    assert shown.endswith("…")
    # Bytes that are not what `tether stop` writes: no reason shown, still STOPPED.
    stop = reading.stop_path
    assert stop.name == STOP_NAME
    stop.write_bytes(b"\xff\xfe not json")
    again = StopStore.from_setup().read()
    assert str(again.outcome) == "STOPPED"
    assert stop_reason(again) is None
