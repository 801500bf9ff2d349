"""Setting and lifting: the atomic write, its mode, the reserve that makes room for a stop
on a full file system, loud failure where there is none or the file system is read-only,
and the lift log."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tests.mounts import mounted

from tether.errors import Refused, StoreError
from tether.stop import ReadOutcome, SetupRecord, StopStore, lift_stop, set_stop
from tether.stop._reserve import RESERVE_NAME
from tether.stop._setup import LIFT_LOG_NAME, MAX_STOP_SIZE

from ._tree import PERSON, make_tree

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.mark.rule("atomic-stop")
def test_atomic_stop_is_written_with_mode_01644_and_no_temp_file_left() -> None:
    """The stop lands whole, owned by the person, mode 01644, with nothing beside it but
    the reserve."""
    reading = set_stop("going out")
    assert reading.outcome is ReadOutcome.STOPPED
    st = os.stat(reading.stop_path, follow_symlinks=False)
    assert stat.S_IMODE(st.st_mode) == 0o1644
    assert st.st_uid == os.geteuid()
    assert sorted(os.listdir(reading.stop_path.parent)) == [RESERVE_NAME, "stop"]
    assert json.loads(reading.stop_path.read_bytes())["reason"] == "going out"


@pytest.mark.rule("atomic-stop")
def test_atomic_stop_keeps_a_long_reason_within_the_size_bound() -> None:
    """A very long reason is cut so the stop stays within its bound and still reads STOPPED."""
    reading = set_stop("x" * 100_000)
    assert reading.outcome is ReadOutcome.STOPPED
    assert reading.stop_path.stat().st_size <= 4096


@pytest.mark.root
@pytest.mark.rule("atomic-stop")
def test_atomic_stop_replaces_a_foreign_file_at_the_stop_name(tmp_path: Path) -> None:
    """A file of another owner at the stop's name is replaced by the person's stop."""
    uid_dir = Path(os.environ["TETHER_HOME"]) / "state" / "stop" / str(os.geteuid())
    StopStore.from_setup()
    (uid_dir / "stop").touch()
    os.chown(uid_dir / "stop", PERSON, PERSON)
    assert StopStore.from_setup().read().not_honoured
    reading = set_stop()
    assert reading.outcome is ReadOutcome.STOPPED
    assert reading.not_honoured == ()


@pytest.mark.root
@pytest.mark.rule("atomic-stop")
def test_atomic_stop_refuses_a_caller_who_is_not_the_person(tmp_path: Path) -> None:
    """Only the person may set or lift: another owner's stop would not be honoured."""
    tree = make_tree(tmp_path)
    record = SetupRecord(folder=tree.folder, person_uid=PERSON)
    # The account that may is named, as its person logs in where the system names it.
    honoured = rf"honours the stop of (\w+ \()?uid {PERSON}\)?; run tether stop as"
    with pytest.raises(Refused, match=honoured):
        set_stop(record=record)
    with pytest.raises(Refused, match=honoured.replace("stop as", "lift as")):
        lift_stop(record=record)


@pytest.mark.rule("atomic-stop")
def test_atomic_stop_lift_removes_the_stop_and_appends_who_and_when() -> None:
    """Lift removes the stop and appends one lift record naming who and when."""
    first = set_stop()
    result = lift_stop()
    assert result.lifted
    assert StopStore.from_setup().read().outcome is ReadOutcome.CLEAR
    log = (
        (first.stop_path.parent / LIFT_LOG_NAME)
        .read_text(encoding="utf-8")
        .splitlines()
    )
    assert len(log) == 1
    entry = json.loads(log[0])
    assert entry["lifted_by_uid"] == os.geteuid()
    assert entry["lifted_at"] == result.lifted_at.isoformat()
    again = lift_stop()
    assert not again.lifted


@pytest.fixture
def small_mount(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KiB tmpfs with room for 16 files, unmounted afterwards."""
    with mounted(tmp_path / "mnt", options="size=64k,nr_inodes=16,mode=1777") as where:
        yield where


def _fill_blocks(where: Path) -> None:
    """Write a file in `where` until the file system has no block left."""
    fd = os.open(where / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError, match="No space left") as full:  # noqa: PT012
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)
    assert full.value.errno == errno.ENOSPC


def _fill_inodes(where: Path) -> None:
    """Make empty files in `where` until the file system has no inode left."""
    with pytest.raises(OSError, match="No space left"):  # noqa: PT012
        for n in range(1000):
            (where / f"empty-{n}").touch()


def _armed(folder: Path) -> SetupRecord:
    uid_dir = folder / str(os.geteuid())
    uid_dir.mkdir(mode=0o755)
    return SetupRecord(folder=folder, person_uid=os.geteuid())


@pytest.mark.root
@pytest.mark.rule("atomic-stop")
def test_atomic_stop_fails_loudly_on_a_full_disk(small_mount: Path) -> None:
    """Where not even an empty file can be made (no block, no inode, no reserve),
    `set_stop` raises 'NOT set' (ENOSPC) and leaves no file."""
    record = _armed(small_mount)
    _fill_blocks(small_mount)
    _fill_inodes(small_mount)
    with pytest.raises(StoreError, match=r"NOT set.*ENOSPC"):
        set_stop(record=record)
    assert os.listdir(record.uid_dir) == []
    assert StopStore.from_setup(record).read().outcome is ReadOutcome.CLEAR


@pytest.mark.root
@pytest.mark.rule("atomic-stop")
def test_a_full_file_system_still_takes_the_stop_in_its_reserve(
    small_mount: Path,
) -> None:
    """S15: a tree may fill the file system the stop lives on. A lift made the reserve;
    once no block is left the stop is written into it, reason and all, and reads
    STOPPED; without a reserve it is set without its reason. Nothing half made is left,
    and a lift where there is room again makes the reserve anew."""
    record = _armed(small_mount)
    set_stop("first", record=record)
    lift_stop(record=record)
    assert (record.uid_dir / RESERVE_NAME).stat().st_size == MAX_STOP_SIZE
    _fill_blocks(small_mount)
    reading = set_stop("the disk is full", record=record)
    assert reading.outcome is ReadOutcome.STOPPED
    assert "written into its reserve" in " ".join(reading.notes)
    assert json.loads(record.stop_path.read_bytes())["reason"] == "the disk is full"
    assert stat.S_IMODE(record.stop_path.stat().st_mode) == 0o1644
    assert sorted(os.listdir(record.uid_dir)) == [LIFT_LOG_NAME, "stop"]
    # Set again on the full disk: the reserve is used up, the stop stands without text.
    again = set_stop("once more", record=record)
    assert again.outcome is ReadOutcome.STOPPED
    assert "without its reason" in " ".join(again.notes)
    assert record.stop_path.stat().st_size == 0
    assert sorted(os.listdir(record.uid_dir)) == [LIFT_LOG_NAME, "stop"]
    assert StopStore.from_setup(record).read().outcome is ReadOutcome.STOPPED
    (small_mount / "filler").unlink()
    lift_stop(record=record)
    assert sorted(os.listdir(record.uid_dir)) == [RESERVE_NAME, LIFT_LOG_NAME]


@pytest.mark.root
@pytest.mark.rule("atomic-stop")
def test_atomic_stop_fails_loudly_on_a_read_only_filesystem(small_mount: Path) -> None:
    """On a read-only filesystem `set_stop` raises 'NOT set' (EROFS)."""
    record = _armed(small_mount)
    subprocess.run(["mount", "-o", "remount,ro", str(small_mount)], check=True)
    with pytest.raises(StoreError, match=r"NOT set.*EROFS"):
        set_stop(record=record)
    assert StopStore.from_setup(record).read().outcome is ReadOutcome.CLEAR
