"""Real folders for stop tests: a parent, a shared folder, the person's uid directory."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import attrs

from tether.stop._read import Place, RawRead, read_place

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


def read_within(place: Place, seconds: float = 5.0, **kw: Any) -> RawRead:
    """Read in a thread and fail if the read blocks (a FIFO must never block)."""
    box: list[RawRead] = []
    worker = threading.Thread(
        target=lambda: box.append(read_place(place, **kw)), daemon=True
    )
    worker.start()
    worker.join(seconds)
    assert box, f"the read blocked for more than {seconds} s"
    return box[0]
