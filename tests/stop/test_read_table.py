"""The bad-input table of the stop read: each case built for real, with its outcome.

Rows follow the checklist of bad inputs (folder and parents, uid directory, stop entry).
Expected outcomes: STOPPED, CLEAR, IGNORED (CLEAR with the stop listed as not honoured)
or HOLD. Cases that need other owners are root-only.
"""

from __future__ import annotations

import os
import socket
import stat
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from tether.stop import ReadOutcome, StopReading

from ._tree import (
    OTHER,
    PERSON,
    Tree,
    make_tree,
    read_within,
    watch_after_clear,
    within,
)

if TYPE_CHECKING:
    from pathlib import Path

Build = Callable[[Tree], None]


def _stop(t: Tree) -> None:
    t.set_stop()


def _none(t: Tree) -> None:
    pass


def _symlink_folder(t: Tree) -> None:
    real = t.parent / "real"
    t.folder.rename(real)
    t.folder.symlink_to(real)


def _symlink_parent(t: Tree) -> None:
    t.set_stop()
    real = t.base / "real-parent"
    t.parent.rename(real)
    t.parent.symlink_to(real)


def _symlink_uid_dir(t: Tree) -> None:
    t.set_stop()
    real = t.folder / "elsewhere"
    t.uid_dir.rename(real)
    t.uid_dir.symlink_to(real)


def _symlink_stop(t: Tree) -> None:
    target = t.uid_dir / "real-stop"
    target.touch()
    os.chown(target, PERSON, PERSON)
    t.stop.symlink_to(target)
    os.lchown(t.stop, PERSON, PERSON)


def _dangling_stop(t: Tree) -> None:
    t.stop.symlink_to(t.uid_dir / "nothing")


def _chown(path: Callable[[Tree], Path], uid: int) -> Build:
    def build(t: Tree) -> None:
        t.set_stop()
        os.chown(path(t), uid, uid)

    return build


def _chmod(path: Callable[[Tree], Path], mode: int) -> Build:
    def build(t: Tree) -> None:
        t.set_stop()
        os.chmod(path(t), mode)

    return build


def _sticky_parent_of_other(t: Tree) -> None:
    t.set_stop()
    os.chown(t.parent, OTHER, OTHER)
    os.chmod(t.parent, 0o1777)


def _folder_of_person(t: Tree) -> None:
    t.set_stop()
    os.chown(t.folder, PERSON, PERSON)
    os.chmod(t.folder, 0o755)


def _fifo(t: Tree) -> None:
    os.mkfifo(t.stop, 0o644)
    os.chown(t.stop, PERSON, PERSON)


def _socket(t: Tree) -> None:
    here = os.getcwd()
    os.chdir(t.uid_dir)
    try:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind("stop")
        sock.close()
    finally:
        os.chdir(here)


def _device(t: Tree) -> None:
    os.mknod(t.stop, stat.S_IFCHR | 0o644, os.makedev(1, 3))
    os.chown(t.stop, PERSON, PERSON)


def _directory(t: Tree) -> None:
    t.stop.mkdir()
    os.chown(t.stop, PERSON, PERSON)


def _sized(size: int) -> Build:
    def build(t: Tree) -> None:
        t.set_stop(size=size)

    return build


def _linked_elsewhere(t: Tree) -> None:
    t.set_stop()
    os.link(t.stop, t.base / "another-name")


def _link_to_others_file(t: Tree) -> None:
    theirs = t.base / "theirs"
    theirs.touch()
    os.chown(theirs, OTHER, OTHER)
    os.link(theirs, t.stop)


def _stop_of(uid: int) -> Build:
    def build(t: Tree) -> None:
        t.set_stop(owner=uid)

    return build


def _future(t: Tree) -> None:
    t.set_stop()
    later = time.time_ns() + 10**9 * 86400 * 365
    os.utime(t.stop, ns=(later, later))


def _epoch(t: Tree) -> None:
    t.set_stop()
    os.utime(t.stop, ns=(0, 0))


def _mode(mode: int) -> Build:
    def build(t: Tree) -> None:
        t.set_stop(mode=mode)

    return build


def _folder_missing(t: Tree) -> None:
    os.rmdir(t.uid_dir)
    os.rmdir(t.folder)


def _folder_is(kind: str) -> Build:
    def build(t: Tree) -> None:
        _folder_missing(t)
        if kind == "file":
            t.folder.touch()
        else:
            os.mkfifo(t.folder)

    return build


def _uid_dir_missing(t: Tree) -> None:
    os.rmdir(t.uid_dir)


def _uid_dir_is_file(t: Tree) -> None:
    os.rmdir(t.uid_dir)
    t.uid_dir.touch()
    os.chown(t.uid_dir, PERSON, PERSON)


def _others_stop_in_folder(t: Tree) -> None:
    theirs = t.folder / str(OTHER)
    theirs.mkdir(mode=0o755)
    os.chown(theirs, OTHER, OTHER)
    (theirs / "stop").touch()
    os.chown(theirs / "stop", OTHER, OTHER)


def _fullwidth(uid: int) -> str:
    return "".join(chr(0xFF10 + int(d)) for d in str(uid))  # int() would parse these


def _decoys(t: Tree) -> None:
    for name in (f"0{PERSON}", f"{PERSON} ", f"{PERSON}.bak", _fullwidth(PERSON)):
        decoy = t.folder / name
        decoy.mkdir()
        (decoy / "stop").touch()


FOLDER = pytest.mark.rule("folder-rule")
OUTCOMES = pytest.mark.rule("read-outcomes")
ONE_FD = pytest.mark.rule("one-descriptor")
NOT_HONOURED = pytest.mark.rule("not-honoured")
ROOT = pytest.mark.root


def _case(
    name: str, build: Build, expected: str, *marks: pytest.MarkDecorator
) -> object:
    return pytest.param(build, expected, id=name, marks=[ROOT, *marks])


CASES = [
    # The stop entry itself.
    _case("stop-of-the-person", _stop, "STOPPED", OUTCOMES, ONE_FD),
    _case("no-stop", _none, "CLEAR", OUTCOMES),
    _case("empty-stop", _sized(0), "STOPPED", ONE_FD),
    _case("stop-at-the-size-bound", _sized(4096), "STOPPED", ONE_FD),
    _case("oversized-stop", _sized(4097), "HOLD", ONE_FD),
    _case("stop-with-a-link-elsewhere", _linked_elsewhere, "STOPPED", ONE_FD),
    _case("stop-dated-in-the-future", _future, "STOPPED", ONE_FD),
    _case("stop-dated-at-the-epoch", _epoch, "STOPPED", ONE_FD),
    _case("stop-mode-0000", _mode(0), "STOPPED", ONE_FD),
    _case("stop-world-writable", _mode(0o666), "STOPPED", ONE_FD),
    _case("stop-is-a-symlink-to-a-stop", _symlink_stop, "HOLD", ONE_FD),
    _case("stop-is-a-dangling-symlink", _dangling_stop, "HOLD", ONE_FD),
    _case("stop-is-a-fifo", _fifo, "HOLD", ONE_FD),
    _case("stop-is-a-socket", _socket, "HOLD", ONE_FD),
    _case("stop-is-a-char-device", _device, "HOLD", ONE_FD),
    _case("stop-is-a-directory", _directory, "HOLD", ONE_FD),
    _case("stop-owned-by-another", _stop_of(OTHER), "IGNORED", NOT_HONOURED),
    _case("stop-owned-by-root", _stop_of(0), "IGNORED", NOT_HONOURED),
    _case("stop-owned-by-the-overflow-uid", _stop_of(65534), "HOLD", ONE_FD),
    _case("hard-link-to-anothers-file", _link_to_others_file, "IGNORED", NOT_HONOURED),
    _case(
        "anothers-stop-in-the-folder", _others_stop_in_folder, "IGNORED", NOT_HONOURED
    ),
    _case("decoy-names-never-honoured", _decoys, "IGNORED", NOT_HONOURED),
    # The folder and its parents.
    _case("folder-is-a-symlink", _symlink_folder, "HOLD", FOLDER),
    _case("parent-is-a-symlink", _symlink_parent, "HOLD", FOLDER),
    _case("folder-owned-by-another", _chown(lambda t: t.folder, OTHER), "HOLD", FOLDER),
    _case("parent-owned-by-another", _chown(lambda t: t.parent, OTHER), "HOLD", FOLDER),
    _case("folder-owned-by-the-person", _folder_of_person, "STOPPED", FOLDER),
    _case("folder-0775-no-sticky", _chmod(lambda t: t.folder, 0o775), "HOLD", FOLDER),
    _case("folder-0777-no-sticky", _chmod(lambda t: t.folder, 0o777), "HOLD", FOLDER),
    _case("folder-1777-root", _chmod(lambda t: t.folder, 0o1777), "STOPPED", FOLDER),
    _case("parent-0777-no-sticky", _chmod(lambda t: t.parent, 0o777), "HOLD", FOLDER),
    _case("sticky-parent-of-another", _sticky_parent_of_other, "HOLD", FOLDER),
    _case("folder-missing", _folder_missing, "HOLD", FOLDER),
    _case("folder-is-a-file", _folder_is("file"), "HOLD", FOLDER),
    _case("folder-is-a-fifo", _folder_is("fifo"), "HOLD", FOLDER),
    # The uid directory.
    _case("uid-dir-is-a-symlink", _symlink_uid_dir, "HOLD", FOLDER),
    _case("uid-dir-missing", _uid_dir_missing, "HOLD", FOLDER),
    _case("uid-dir-is-a-file", _uid_dir_is_file, "HOLD", FOLDER),
    _case("uid-dir-squatted", _chown(lambda t: t.uid_dir, OTHER), "HOLD", FOLDER),
    _case("uid-dir-0777", _chmod(lambda t: t.uid_dir, 0o777), "HOLD", FOLDER),
    _case("uid-dir-1777", _chmod(lambda t: t.uid_dir, 0o1777), "HOLD", FOLDER),
    _case("uid-dir-0775", _chmod(lambda t: t.uid_dir, 0o775), "HOLD", FOLDER),
    _case("uid-dir-0711", _chmod(lambda t: t.uid_dir, 0o711), "STOPPED", FOLDER),
]


def _fresh_read(tree: Tree, build: Build) -> StopReading:
    build(tree)
    return read_within(tree.place()).reading


def _watch_read(tree: Tree, build: Build) -> StopReading:
    def read() -> StopReading:
        watch = watch_after_clear(tree)
        build(tree)
        return watch.read()

    return within(read)  # one thread: the anchors are the thread's that made them


@pytest.mark.parametrize(("build", "expected"), CASES)
@pytest.mark.parametrize(
    "read", [_fresh_read, _watch_read], ids=["fresh-read", "watch-after-clear"]
)
def test_folder_rule_and_read_outcomes_table(
    tmp_path: Path,
    read: Callable[[Tree, Build], StopReading],
    build: Build,
    expected: str,
) -> None:
    """Each bad input, made for real, reads as its expected outcome and never blocks:
    in a fresh read, and in a watch's next read after clear ones, which goes through
    the chain the watch holds open (the read that answers almost every move)."""
    tree = make_tree(tmp_path)
    reading = read(tree, build)
    if expected == "IGNORED":
        assert reading.outcome is ReadOutcome.CLEAR, reading
        assert reading.not_honoured, reading
        assert all(n.owner_uid != PERSON for n in reading.not_honoured)
    else:
        assert reading.outcome is ReadOutcome(expected), reading
    if reading.outcome is ReadOutcome.HOLD:
        assert reading.reason
    if reading.outcome is ReadOutcome.STOPPED:
        assert reading.set_by_uid == PERSON
        assert reading.set_at is not None
        assert reading.ctime is not None
        assert reading.nlink is not None
