"""The reader never hangs and never raises: real FUSE mounts that never answer, a FUSE
daemon whose flush fails, FUSE judged by type, and links in the shared folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest

from tether.stop import ReadOutcome, SetupRecord, StopStore
from tether.stop._reader import READ_BOUND, Place, read_place
from tether.stop._setup import save_setup

from ._mounts import fuse_fs, hung_mount
from ._tree import OTHER, PERSON, make_tree, read_within

if TYPE_CHECKING:
    from pathlib import Path

BOUND = 0.3
"""The bound these tests give a reading (the default is 2 s)."""
MARGIN = 3.0
"""What a loaded two-core machine may add to a bound before a test calls it a hang."""


def _hung_place(point: Path, **kw: object) -> Place:
    folder = point / "shared"
    return Place(
        folder=folder,
        store_dir=folder,
        person_uid=PERSON,
        bound=BOUND,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.root
@pytest.mark.rule("bounded-read")
def test_bounded_read_holds_within_its_bound_on_a_mount_that_never_answers(
    tmp_path: Path,
) -> None:
    """A folder on a FUSE mount whose daemon never answers (opted in at setup) reads
    HOLD within the bound, naming the path that hung; the next reading holds at once
    without another thread, and reads recover once the mount is gone."""
    os.chmod(tmp_path, 0o755)
    place = _hung_place(tmp_path / "hung", allow_untrusted_fs=True)
    with hung_mount(tmp_path / "hung"):
        start = time.monotonic()
        first = read_within(place, BOUND + MARGIN).reading
        took = time.monotonic() - start
        assert first.outcome is ReadOutcome.HOLD, first
        assert f"did not finish within {BOUND:g} s" in (first.reason or "")
        assert str(tmp_path / "hung") in (first.reason or "")
        assert took < BOUND + MARGIN
        threads = _threads()
        start = time.monotonic()
        again = read_within(place, MARGIN).reading
        assert time.monotonic() - start < BOUND, "a blocked worker must hold at once"
        assert again.outcome is ReadOutcome.HOLD
        assert "hung at" in (again.reason or "")
        assert _threads() == threads
    deadline = time.monotonic() + 10
    while True:  # the aborted mount releases the worker; then reads say why they hold
        after = read_within(place, BOUND + MARGIN).reading
        if "hung at" not in (after.reason or "") or time.monotonic() > deadline:
            break
    assert after.outcome is ReadOutcome.HOLD
    assert "hung at" not in (after.reason or "")


def _threads() -> int:
    """The stop reader's workers alive in this process."""
    return sum(t.name.startswith("tether-stop-reader") for t in threading.enumerate())


@pytest.mark.root
@pytest.mark.rule("bounded-read")
def test_bounded_read_an_untrusted_mount_on_the_way_holds_without_touching_it(
    tmp_path: Path,
) -> None:
    """Without the opt-in, a FUSE mount on the folder's path holds at once, judged from
    the mount table: no system call enters the mount that would not answer."""
    os.chmod(tmp_path, 0o755)
    place = _hung_place(tmp_path / "hung")
    with hung_mount(tmp_path / "hung"):
        start = time.monotonic()
        reading = read_within(place, MARGIN).reading
        assert time.monotonic() - start < BOUND
    assert reading.outcome is ReadOutcome.HOLD
    assert "fuse.tetherhang" in (reading.reason or "")
    assert f"mounted at {tmp_path / 'hung'}" in (reading.reason or "")


@pytest.mark.root
@pytest.mark.rule("bounded-read")
def test_bounded_read_the_scan_never_follows_a_link_nor_enters_a_mount(
    tmp_path: Path,
) -> None:
    """A link in the sticky folder pointing into a mount that never answers,
    and such a mount on another account's directory in the folder, do not block the
    reading; a link to a directory holding a stop is not reported either."""
    tree = make_tree(tmp_path)
    tree.set_stop()
    (tmp_path / "hung").mkdir()
    os.symlink(tmp_path / "hung" / "x", tree.folder / "evil")
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (decoy / "stop").touch()
    os.symlink(decoy, tree.folder / "2002")
    other_dir = tree.folder / str(OTHER)
    other_dir.mkdir()
    os.chown(other_dir, OTHER, OTHER)
    with hung_mount(tmp_path / "hung"), hung_mount(other_dir):
        start = time.monotonic()
        reading = read_within(tree.place(bound=BOUND), MARGIN).reading
        assert time.monotonic() - start < BOUND + MARGIN
    assert reading.outcome is ReadOutcome.STOPPED, reading
    assert reading.not_honoured == ()


@pytest.mark.root
@pytest.mark.rule("bounded-read")
def test_bounded_read_status_returns_within_the_bound_on_a_hung_folder(
    tmp_path: Path,
) -> None:
    """`tether status --json` on a folder that hangs exits 0 within the default bound
    with HOLD naming what hung."""
    os.chmod(tmp_path, 0o755)
    point = tmp_path / "hung"
    save_setup(
        SetupRecord(
            folder=point / "shared", person_uid=os.geteuid(), allow_untrusted_fs=True
        )
    )
    with hung_mount(point):
        start = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "tether", "status", "--json"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        took = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["outcome"] == "HOLD"
    assert "did not finish within 2 s" in status["reason"]
    assert str(point) in status["reason"]
    assert took < 2.0 + 15.0  # interpreter start on a loaded machine, plus the bound


@pytest.mark.root
@pytest.mark.rule("bounded-read")
def test_bounded_read_set_stop_says_so_and_returns_on_a_hung_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`set_stop` on a folder that hangs fails within its bound, saying what hung and
    that the stop may not be set, instead of blocking the person's terminal."""
    import tether.stop._verbs as verbs
    from tether.errors import StoreError
    from tether.stop import set_stop

    monkeypatch.setattr(verbs, "WRITE_BOUND", BOUND)
    os.chmod(tmp_path, 0o755)
    point = tmp_path / "hung"
    record = SetupRecord(
        folder=point / "shared", person_uid=os.geteuid(), allow_untrusted_fs=True
    )
    with hung_mount(point):
        start = time.monotonic()
        with pytest.raises(StoreError, match="may not be set") as failed:
            set_stop("x", record=record)
        assert time.monotonic() - start < BOUND + MARGIN
    assert str(point) in str(failed.value)


@pytest.mark.root
@pytest.mark.rule("bounded-read")
def test_bounded_read_a_close_that_fails_holds(tmp_path: Path) -> None:
    """A FUSE daemon that answers every flush with EIO: the `close()` of the stop's
    descriptor fails, and `read_place` and `StopWatch.read` hold instead of raising."""
    os.chmod(tmp_path, 0o755)
    with fuse_fs(tmp_path / "fs", "eio", PERSON) as point:
        place = Place(
            folder=point,
            store_dir=point,
            person_uid=PERSON,
            allow_untrusted_fs=True,
            bound=5.0,
        )
        reading = read_place(place).reading
        watched = StopStore(place=place).watch().read()
    for one in (reading, watched):
        assert one.outcome is ReadOutcome.HOLD, one
        assert "closing" in (one.reason or "")
        assert "EIO" in (one.reason or "")


@pytest.mark.root
@pytest.mark.rule("folder-rule")
def test_folder_rule_fuse_is_judged_by_type_at_the_folder_and_at_the_uid_dir(
    tmp_path: Path,
) -> None:
    """A `fuse.bindfs` mount whose daemon makes up owners holds, whether it is mounted
    on the folder or on `<folder>/<uid>`; opting in at setup reads through it."""
    tree = make_tree(tmp_path)
    with fuse_fs(tmp_path / "fs", "bindfs", PERSON) as point:
        place = Place(folder=point, store_dir=point, person_uid=PERSON, bound=5.0)
        held = read_place(place).reading
        opted = read_place(attrs_evolve(place, allow_untrusted_fs=True)).reading
    assert held.outcome is ReadOutcome.HOLD
    assert "fuse.bindfs" in (held.reason or "")
    assert opted.outcome is ReadOutcome.STOPPED, opted
    with fuse_fs(tree.uid_dir, "bindfs", PERSON):
        on_uid_dir = read_place(tree.place(bound=5.0)).reading
    assert on_uid_dir.outcome is ReadOutcome.HOLD
    assert f"mounted at {tree.uid_dir}" in (on_uid_dir.reason or "")


def attrs_evolve(place: Place, **changes: Any) -> Place:
    import attrs

    return attrs.evolve(place, **changes)


@pytest.mark.root
@pytest.mark.rule("bounded-read")
def test_bounded_read_setup_returns_on_a_hung_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Choosing a folder that hangs fails within the bound with a usage error; the board
    of a record naming it shows a failed check that names what hung."""
    import tether.stop._board as board_module
    from tether.errors import UsageError
    from tether.stop import build_board, choose_setup

    monkeypatch.setattr(board_module, "WRITE_BOUND", BOUND)
    os.chmod(tmp_path, 0o755)
    point = tmp_path / "hung"
    record = SetupRecord(
        folder=point / "shared", person_uid=os.geteuid(), allow_untrusted_fs=True
    )
    with hung_mount(point):
        start = time.monotonic()
        with pytest.raises(UsageError, match="did not finish"):
            choose_setup(folder=point / "other", person_uid=os.geteuid())
        board = build_board(record)
        assert time.monotonic() - start < 2 * BOUND + READ_BOUND + MARGIN
    assert not board.ok
    assert any("hung at" in check.detail for check in board.checks), board.checks
