"""Real folders for stop tests: a parent, a shared folder, the person's uid directory."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from tether.stop import ReadOutcome, StopStore, StopWatch
from tether.stop._reader import Place, RawRead, read_place
from tether.stop._statx import root_mount

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")

PERSON = 1001 if os.geteuid() == 0 else os.geteuid()
"""The person honoured in these tests (uid 1001 when the tests run as root)."""
OTHER = 1002
"""Another account."""


@attrs.define
class Tree:
    """`<base>/parent/shared/<PERSON>/stop`, made for real, root-owned above the uid dir."""

    base: Path

    @property
    def parent(self) -> Path:
        return self.base / "parent"

    @property
    def folder(self) -> Path:
        return self.parent / "shared"

    @property
    def uid_dir(self) -> Path:
        return self.folder / str(PERSON)

    @property
    def stop(self) -> Path:
        return self.uid_dir / "stop"

    def place(self, **kw: object) -> Place:
        return Place(folder=self.folder, store_dir=self.folder, person_uid=PERSON, **kw)  # type: ignore[arg-type]

    def set_stop(
        self, *, owner: int = PERSON, size: int = 0, mode: int = 0o1644
    ) -> Path:
        fd = os.open(self.stop, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.ftruncate(fd, size)
        os.fchmod(fd, mode)
        if os.geteuid() == 0:
            os.fchown(fd, owner, owner)
        os.close(fd)
        return self.stop


def make_tree(base: Path) -> Tree:
    """Build the tree: parent 0755 root, folder 1777 root, uid dir 0755 owned by PERSON."""
    tree = Tree(base)
    os.chmod(base, 0o755)
    tree.parent.mkdir(mode=0o755)
    tree.folder.mkdir()
    os.chmod(tree.folder, 0o1777)
    tree.uid_dir.mkdir()
    os.chmod(tree.uid_dir, 0o755)
    if os.geteuid() == 0:
        os.chown(tree.uid_dir, PERSON, PERSON)
    return tree


def within(fn: Callable[[], T], seconds: float = 5.0) -> T:
    """Call `fn` in a thread of its own; fail if it blocks (a FIFO must never block)."""
    box: list[tuple[T] | BaseException] = []

    def call() -> None:
        try:
            box.append((fn(),))
        except BaseException as exc:
            box.append(exc)

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(seconds)
    assert box, f"the read blocked for more than {seconds} s"
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0][0]


def read_within(place: Place, seconds: float = 5.0, **kw: Any) -> RawRead:
    """Read in a thread and fail if the read blocks (a FIFO must never block)."""
    return within(lambda: read_place(place, **kw), seconds)


def watch_after_clear(tree: Tree) -> StopWatch:
    """A watch of `tree`'s place after CLEAR reads, its next read through the chain
    it holds (`_read_memo.Anchors`): the path of almost every read a run makes.

    The anchors are the calling thread's: read the watch in this thread.
    """
    watch = StopStore(place=tree.place()).watch()
    memo = watch._views[0].memo
    memo._clock = lambda: 10**20  # the folder was made long before
    for _ in range(2):
        assert watch.read().outcome is ReadOutcome.CLEAR
    if root_mount() is not None:  # else every read is a full one
        assert memo.anchors is not None, "the reads do not go through anchors"
    return watch
