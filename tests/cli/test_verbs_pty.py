"""The verbs as a person runs them: through a real pseudo-terminal, and refused without
one or inside an agent session (exit 2, one line)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import TYPE_CHECKING

import pytest
from tests.cli._run import person_env, tether, tether_in_pty

from tether.stop import SetupRecord, StopStore
from tether.stop._setup import save_setup

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow


_env = person_env
_in_pty = tether_in_pty


def _plain(*args: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m tether ARGS` with no terminal at all."""
    return tether(*args, stdin=subprocess.DEVNULL, timeout=30, person=True)


def _status() -> dict[str, object]:
    done = _plain("status", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert isinstance(data, dict)
    return data


@pytest.mark.rule("verbs-caller")
def test_verbs_caller_stop_and_lift_through_a_terminal() -> None:
    """At a terminal, stop sets the stop (status STOPPED) and lift removes it (CLEAR)."""
    code, out = _in_pty("stop", "--reason", "lunch")
    assert code == 0, out
    assert "STOPPED" in out
    status = _status()
    assert status["outcome"] == "STOPPED"
    assert status["set_by_uid"] == os.geteuid()
    code, out = _in_pty("lift")
    assert code == 0, out
    assert "lifted" in out
    assert _status()["outcome"] == "CLEAR"


@pytest.mark.rule("verbs-caller")
def test_verbs_caller_setup_through_a_terminal_prints_the_board() -> None:
    """At a terminal, setup records the choice and prints the board."""
    code, out = _in_pty("setup", "--no-shared-folder")
    assert code == 0, out
    assert "folder rule" in out
    assert "pass" in out
    assert "obey the guard" in out
    assert "containment of process trees" in out


@pytest.mark.rule("verbs-caller")
@pytest.mark.parametrize("verb", ["stop", "lift", "setup"])
def test_verbs_caller_refused_without_a_terminal(verb: str) -> None:
    """With stdin not a terminal, stop, lift and setup refuse with exit 2 and one line."""
    done = _plain(verb)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "refused: stdin is not a terminal" in lines[0]
    assert _status()["outcome"] == "CLEAR"


@pytest.mark.rule("verbs-caller")
@pytest.mark.parametrize(
    "marker", ["CLAUDECODE", "CODEX_SANDBOX", "TETHER_AGENT", "GEMINI_CLI"]
)
def test_verbs_caller_refused_in_an_agent_session_even_with_a_terminal(
    marker: str,
) -> None:
    """An agent marker in the environment refuses the verb (exit 2) despite a terminal."""
    code, out = _in_pty("stop", env=_env(**{marker: "1"}))
    assert code == 2, out
    assert f"({marker} is set)" in out
    assert _status()["outcome"] == "CLEAR"


@pytest.mark.rule("verbs-caller")
def test_verbs_caller_status_needs_no_terminal_and_has_the_spec_shape() -> None:
    """`status --json` runs without a terminal, exit 0, with exactly the spec's keys."""
    StopStore.from_setup()  # what a run's first reading makes: the account's own store
    status = _status()
    assert status == {
        "outcome": "CLEAR",
        "reason": None,
        "set_by_uid": None,
        "set_at": None,
        "stop_reason": None,
        "folder": None,
        "not_honoured": [],
        "runs": [],
    }


@pytest.mark.rule("read-outcomes")
def test_read_outcomes_status_exits_0_on_hold_with_the_reason(
    tether_home: Path,
) -> None:
    """A HOLD is an outcome, not a failure: exit 0 and the reason in the JSON."""
    save_setup(
        SetupRecord(folder=tether_home / "no-such-folder", person_uid=os.geteuid())
    )
    status = _status()
    assert status["outcome"] == "HOLD"
    assert "cannot be found" in str(status["reason"])
    assert status["folder"] == str(tether_home / "no-such-folder")


@pytest.mark.rule("atomic-stop")
def test_atomic_stop_status_reports_the_stop_time_in_iso_8601() -> None:
    """After `tether stop`, status gives `set_at` in ISO 8601."""
    code, out = _in_pty("stop")
    assert code == 0, out
    status = _status()
    assert isinstance(status["set_at"], str)
    assert status["set_at"].endswith("+00:00")


@pytest.mark.root
@pytest.mark.rule("atomic-stop")
def test_atomic_stop_cli_exits_1_on_a_read_only_filesystem(tmp_path: Path) -> None:
    """On a read-only folder `tether stop` exits 1 with a message and claims nothing."""
    where = tmp_path / "ro"
    where.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=1777", "tmpfs", str(where)],
        check=True,
    )
    try:
        (where / str(os.geteuid())).mkdir(mode=0o755)
        save_setup(SetupRecord(folder=where, person_uid=os.geteuid()))
        subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        code, out = _in_pty("stop")
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)
    assert code == 1, out
    assert "the stop was NOT set" in out
    assert "EROFS" in out


@pytest.mark.parametrize("verb", ["setup", "stop", "lift", "status"])
def test_verbs_help_has_examples(verb: str) -> None:
    """Every verb's `--help` shows examples."""
    done = _plain(verb, "--help")
    assert done.returncode == 0, done.stderr
    assert "Examples:" in done.stdout
    assert f"tether {verb}" in done.stdout


@pytest.mark.rule("read-outcomes")
def test_read_outcomes_status_holds_on_a_setup_record_writable_by_others() -> None:
    """A setup record that breaks the owner-only rule makes status say HOLD, exit 0."""
    save_setup(SetupRecord(person_uid=os.geteuid()))
    from tether.stop import setup_path

    os.chmod(setup_path(), 0o622)
    status = _status()
    assert status["outcome"] == "HOLD"
    assert "writable by others" in str(status["reason"])


@pytest.mark.rule("atomic-stop")
def test_atomic_stop_cli_removes_an_empty_directory_at_the_stop_name_and_says_so(
    tether_home: Path,
) -> None:
    """Row D12: an empty directory at the stop's name no longer makes `tether stop` exit
    1; it is removed, the stop is set, and the output says what was there."""
    from tether.stop import StopStore

    stop = StopStore.from_setup().place.stop_path
    stop.mkdir()
    code, out = _in_pty("stop")
    assert code == 0, out
    assert "removed a directory" in out
    assert _status()["outcome"] == "STOPPED"


@pytest.mark.rule("atomic-stop")
def test_atomic_stop_cli_lift_then_status_is_clear_and_the_stop_is_gone() -> None:
    """After stop and lift through a terminal, status reads CLEAR and no stop file is
    left behind (the lift is reported to runs by their watches)."""
    code, out = _in_pty("stop")
    assert code == 0, out
    code, out = _in_pty("lift")
    assert code == 0, out
    assert "lift recorded at" in out
    from tether.stop import StopStore

    assert not StopStore.from_setup().place.stop_path.exists()
    assert _status()["outcome"] == "CLEAR"


@pytest.mark.root
@pytest.mark.rule("bounded-read")
def test_bounded_read_stop_and_status_return_with_a_link_into_a_hung_mount(
    tmp_path: Path,
) -> None:
    """Another account's link in the shared folder, pointing into a mount that
    never answers, no longer makes `tether stop` hang after writing the stop, nor
    `tether status`; both return at once with STOPPED."""
    from tests.stop._mounts import hung_mount

    os.chmod(tmp_path, 0o755)
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, 0o1777)
    (folder / str(os.geteuid())).mkdir(mode=0o755)
    save_setup(SetupRecord(folder=folder, person_uid=os.geteuid()))
    with hung_mount(tmp_path / "hung"):
        os.symlink(tmp_path / "hung" / "x", folder / "evil")
        start = time.monotonic()
        code, out = _in_pty("stop")
        status = _status()
        took = time.monotonic() - start
    assert code == 0, out
    assert "STOPPED" in out
    assert status["outcome"] == "STOPPED"
    assert took < 20, "two interpreter starts, no wait on the mount"
