"""What a run's reads reuse from one read to the next (`ReadMemo`): each change that
could make a reused finding wrong is still seen on the very next read."""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import time
from typing import TYPE_CHECKING

import pytest

from tether.stop import ReadOutcome, StopStore
from tether.stop._read_memo import SETTLED_NS, ReadMemo
from tether.stop._reader import RawRead, read_place

from ._child import in_child
from ._tree import OTHER, PERSON, Tree, make_tree

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path


def _later() -> int:
    """A clock past the settling window, so every listing made is kept."""
    return time.time_ns() + 10 * SETTLED_NS


def _read(tree: Tree, memo: ReadMemo) -> RawRead:
    return read_place(tree.place(), memo=memo)


def _foreign_dir(tree: Tree) -> Path:
    where = tree.folder / str(OTHER)
    where.mkdir(mode=0o755)
    if os.geteuid() == 0:
        os.chown(where, OTHER, OTHER)
    return where


def _foreign_stop(where: Path) -> None:
    stop = where / "stop"
    stop.touch()
    if os.geteuid() == 0:
        os.chown(stop, OTHER, OTHER)


@contextlib.contextmanager
def _tmpfs(where: Path) -> Iterator[Path]:
    where.mkdir(exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=1777", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"needs CAP_SYS_ADMIN to mount a tmpfs ({done.stderr.strip()})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


@pytest.mark.rule("folder-rule")
def test_folder_rule_a_kept_listing_still_sees_a_new_foreign_stop_on_the_next_read(
    tmp_path: Path,
) -> None:
    """A tether choice: an unchanged folder is not listed again, and a new account's
    directory with a stop in it is reported by the very next read."""
    tree = make_tree(tmp_path)
    memo = ReadMemo(clock=_later)
    assert _read(tree, memo).reading.not_honoured == ()
    assert _read(tree, memo).reading.not_honoured == ()
    assert memo.lists == 1  # the second read reused the listing
    _foreign_stop(_foreign_dir(tree))
    reading = _read(tree, memo).reading
    assert reading.outcome is ReadOutcome.CLEAR
    assert [n.owner_uid for n in reading.not_honoured] == [OTHER]
    assert memo.lists == 2


@pytest.mark.rule("folder-rule")
def test_folder_rule_a_stop_left_in_a_known_foreign_directory_is_seen_on_the_next_read(
    tmp_path: Path,
) -> None:
    """A tether choice: the listing is reused, never what is inside the listed
    directories; a stop put into one already listed is reported by the next read."""
    tree = make_tree(tmp_path)
    other = _foreign_dir(tree)
    memo = ReadMemo(clock=_later)
    assert _read(tree, memo).reading.not_honoured == ()
    _foreign_stop(other)
    reading = _read(tree, memo).reading
    assert [n.path for n in reading.not_honoured] == [other / "stop"]
    assert memo.lists == 1


@pytest.mark.rule("folder-rule")
def test_folder_rule_a_folder_changed_within_the_settling_window_is_listed_every_read(
    tmp_path: Path,
) -> None:
    """A tether choice: a folder whose ctime is too recent to tell a later change from
    the listed state is never trusted from memory (its ctime may not move again)."""
    tree = make_tree(tmp_path)
    memo = ReadMemo(clock=lambda: os.stat(tree.folder).st_ctime_ns)
    for _ in range(3):
        _read(tree, memo)
    assert memo.lists == 3


_CLONE_NEWNS = 0x00020000
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_MNT_DETACH = 2


def _in_own_mount_namespace(fn: Callable[[], str]) -> str:
    """Run `fn` in a forked child with a mount namespace of its own, no propagation in.

    Mounts that other processes on the machine make then never reach the child's
    table, so what `fn` counts depends on its own mounts alone.
    """

    def own() -> str:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(_CLONE_NEWNS) != 0:
            return f"SKIP|unshare: {os.strerror(ctypes.get_errno())}"
        libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None)
        return fn()

    text = in_child(own)
    if text.startswith("SKIP|"):
        pytest.skip(f"needs CAP_SYS_ADMIN for a mount namespace ({text[5:]})")
    return text


@pytest.mark.rule("folder-rule")
def test_folder_rule_the_filesystem_type_is_judged_on_every_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spec 02: the chain's checks are cache-free: a run's reads judge the shared
    folder's file system type each time, even with nothing changed between them."""
    import tether.stop._reader as reader

    judged: list[str] = []
    judge = reader._judge_fs

    def counting(fd: int, where: Path, *mount: object) -> None:
        judged.append(str(where))
        judge(fd, where, *mount)  # type: ignore[arg-type]

    monkeypatch.setattr(reader, "_judge_fs", counting)
    tree = make_tree(tmp_path)
    memo = ReadMemo()
    outcomes = [_read(tree, memo).reading.outcome for _ in range(4)]
    assert outcomes == ["CLEAR"] * 4
    assert len(judged) == 4


@pytest.mark.root
@pytest.mark.rule("folder-rule")
def test_folder_rule_a_mount_over_the_folder_holds_the_next_read_of_a_run(
    tmp_path: Path,
) -> None:
    """A tmpfs mounted over the folder during a run holds the run's next read, though
    every finding about the old folder was in memory."""
    tree = make_tree(tmp_path)
    tree.set_stop()
    watch = StopStore(place=tree.place()).watch()
    assert watch.read().outcome is ReadOutcome.STOPPED
    with _tmpfs(tree.folder):
        os.mkdir(tree.uid_dir, 0o755)
        os.chown(tree.uid_dir, PERSON, PERSON)
        reading = watch.read()
        assert reading.outcome is ReadOutcome.HOLD
        assert "the setting changed" in (reading.reason or "")


@pytest.mark.rule("read-outcomes")
def test_read_outcomes_a_stop_touched_or_opened_to_others_is_reported_anew(
    tmp_path: Path,
) -> None:
    """A tether choice: the STOPPED reading is reused only while the stop's `fstat`
    shows the same times, mode, owner and links; each change is in the next reading."""
    tree = make_tree(tmp_path)
    stop = tree.set_stop()
    watch = StopStore(place=tree.place()).watch()
    first = watch.read()
    assert first.outcome is ReadOutcome.STOPPED
    assert watch.read() is first  # nothing changed: the same value
    os.utime(stop, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    touched = watch.read()
    assert touched.set_at is not None
    assert touched.set_at.year == 2001
    os.chmod(stop, 0o1646)
    opened = watch.read()
    assert any("writable by others" in note for note in opened.notes)
    os.link(stop, tree.folder / "extra")
    linked = watch.read()
    assert linked.nlink == 2
    assert any("has 2 links" in note for note in linked.notes)
