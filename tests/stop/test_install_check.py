"""`tether setup --system` runs the installed tether as each bound account: it can run it,
and cannot change it (tests run as root: the bound account is a uid of its own)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import tether.stop._system as system_module
from tether.cli._stopview import system_board_json, system_board_lines
from tether.stop._sysboard import bind_accounts, run_check_reason

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.root, pytest.mark.rule("system-binding"), pytest.mark.slow]

PERSON = 1001
AGENT = 1002


@pytest.fixture
def folder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="tether-install-check-", dir="/tmp"))
    os.chmod(base, 0o755)
    monkeypatch.setattr(system_module, "SYSTEM_DIR", base / "etc-tether")
    yield base / "srv" / "tether"
    shutil.rmtree(base, ignore_errors=True)


def test_an_install_every_account_can_run_passes(
    folder: Path, everyones_python: Path
) -> None:
    board = bind_accounts(folder=folder, person_uid=PERSON, accounts=[AGENT])
    assert board.installs == ((AGENT, None),)
    lines = [text for _, text in system_board_lines(board)]
    assert any(
        line.startswith(f"  pass  uid {AGENT}")  # and its name, when it has one
        and line.endswith(" cannot change the code its runs execute")
        for line in lines
    ), lines


def test_an_install_the_account_cannot_run_fails_and_says_why(
    folder: Path, everyones_python: Path
) -> None:
    """The interpreter under a folder only root may enter (a pyenv in root's 0700
    home): the modes of the code itself say nothing is writable, yet the account
    cannot run it; the board says so instead of `cannot change`."""
    os.chmod(everyones_python.parents[2], 0o700)
    board = bind_accounts(folder=folder, person_uid=PERSON, accounts=[AGENT])
    ((uid, why),) = board.installs
    assert uid == AGENT
    assert why is not None
    assert "cannot run the installed tether" in why
    assert "Permission denied" in why
    lines = [text for _, text in system_board_lines(board)]
    assert not any("cannot change the code" in line for line in lines)
    assert any(line.startswith("  FAIL  ") and "cannot run" in line for line in lines)
    shown = system_board_json(board)["bindings"]
    assert isinstance(shown, list)
    assert [b["install_ok"] for b in shown] == [False]


def test_an_install_that_fails_as_the_account_says_its_error(tmp_path: Path) -> None:
    """An interpreter the account can run whose tether does not import."""
    if not Path("/usr/bin/python3").exists():
        pytest.skip("no /usr/bin/python3")
    why = run_check_reason(AGENT, tmp_path / "binding.json", "/usr/bin/python3")
    assert why is not None
    assert "fails as it" in why
    assert "No module named 'tether'" in why
