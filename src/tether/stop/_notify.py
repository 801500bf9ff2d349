"""The kernel's word that a file a watch compares may have changed (`inotify`).

A `StopWatch` compares, before every move, the `lstat` of its setup record and of the
system binding with the ones it started with (two `statx` calls). Those files change
only when a person or an administrator runs setup. So a watch asks the kernel to say
when they might have changed, and makes the two looks only then: `Files` arms one
`inotify` watch on each file and on every directory above it, and the mount table's
`poll` of every read (`_mounts.table`) also polls the `inotify` descriptor, so a read
whose poll says nothing happened skips the two looks.

What an armed file cannot change without a word:

- the file itself (written, truncated, its mode, owner or links changed, moved or
  removed): a watch on its inode, whichever name it is written through;
- its name (a file moved over it, created, removed): its directory's entry events;
- any directory above it moved, removed or replaced: each one's own events and its
  parent's entry events, up to `/`;
- a file system mounted anywhere: the mount table's own `poll` changes its generation,
  which a watch compares too.

Arming refuses, and the watch makes its two looks on every read as before, where the
word cannot be trusted: a path with a symbolic link in it (the looks follow it, the
watches would not), a file system whose changes may not pass through this kernel (a
network one, FUSE, an overlay whose lower layers change beneath it; `NOTIFY_TYPES`),
a directory that cannot be watched (no read permission, no `inotify` left), a missing
`inotify`. An event queue that overflowed, or a watch the kernel dropped, re-arms.
After a `fork` the child starts with a notifier of its own: a shared queue would let
one process read the other's events.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import struct
import threading
from typing import TYPE_CHECKING, final

from ._mounts import also_poll, plan

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._mounts import Table

__all__ = ("NOTIFY_TYPES", "Files")

NOTIFY_TYPES = frozenset(
    {
        "ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "zfs", "f2fs",
        "bcachefs", "jfs", "reiserfs", "nilfs2", "squashfs", "erofs", "iso9660", "udf",
        "vfat", "msdos", "exfat", "ntfs3", "hfs", "hfsplus",
    }
)  # fmt: skip
"""File systems whose every change passes through this kernel's VFS, which reports it."""

_IN_MODIFY = 0x2
_IN_ATTRIB = 0x4
_IN_CLOSE_WRITE = 0x8
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_DONT_FOLLOW = 0x2000000
_SELF = _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_DONT_FOLLOW
_FILE_MASK = _SELF | _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE
_DIR_MASK = _SELF | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
_REARM = _IN_Q_OVERFLOW | _IN_IGNORED | _IN_DELETE_SELF | _IN_MOVE_SELF
_EVENT = struct.Struct("iIII")


@final
class _Notifier:
    """One `inotify` instance of this process, the events that matter counted.

    An event on an armed file, or on the name of the next step of an armed path in a
    directory above it, bumps `generation`; one that moved or dropped a watched
    directory (or an overflow, which may hide any) bumps `rearms` too. Other entries
    of those directories (a busy `/tmp`) are read and let pass.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fd = -1
        self.generation = 0
        self.rearms = 0
        self._names: dict[int, set[bytes]] = {}  # a directory's watch: names on a path
        self._files: set[int] = set()  # the armed files' watches
        self._add: Callable[..., int] | None = None
        self._failed = False

    def start(self) -> bool:
        """Make the instance on first use; False: no `inotify` here."""
        with self.lock:
            if self.fd >= 0 or self._failed:
                return self.fd >= 0
            fd = -1
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
                self._add = libc.inotify_add_watch
            except (OSError, AttributeError):
                fd = -1
            if fd < 0:
                self._failed = True
                return False
            self.fd = fd
        also_poll(fd, self.drain)
        return True

    def add(self, path: bytes, below: bytes | None) -> int:
        """Watch `path`: the watch's descriptor, or -errno when the kernel refuses.

        `path` is a file (`below` None) or a directory whose entry `below` is the next
        step of an armed path.
        """
        add = self._add
        if add is None:
            return -errno.ENOSYS
        wd = add(self.fd, path, _DIR_MASK if below is not None else _FILE_MASK)
        if wd < 0:
            return -ctypes.get_errno()
        with self.lock:
            if below is None:
                self._files.add(wd)
            else:
                self._names.setdefault(wd, set()).add(below)
        return wd

    def drain(self) -> None:
        """Read every event queued (the table's poll found the descriptor readable)."""
        with self.lock:
            while True:
                try:
                    data = os.read(self.fd, 65536)
                except BlockingIOError:
                    return
                except OSError:
                    self.generation += 1
                    self.rearms += 1
                    return
                if not data:
                    return
                self._judge(data)

    def _judge(self, data: bytes) -> None:
        at = 0
        while at + _EVENT.size <= len(data):
            wd, mask, _, size = _EVENT.unpack_from(data, at)
            name = data[at + _EVENT.size : at + _EVENT.size + size].rstrip(b"\0")
            at += _EVENT.size + size
            if mask & _REARM:
                self.generation += 1
                self.rearms += 1
                if mask & _IN_IGNORED:
                    self._names.pop(wd, None)
                    self._files.discard(wd)
            elif wd in self._files or name in self._names.get(wd, ()):
                self.generation += 1


_NOTIFIER = _Notifier()


def _forget_after_fork() -> None:
    global _NOTIFIER
    old, _NOTIFIER = _NOTIFIER, _Notifier()
    if old.fd >= 0:
        with contextlib.suppress(OSError):
            os.close(old.fd)


os.register_at_fork(after_in_child=_forget_after_fork)


@final
class Files:
    """Files a watch compares, armed so that a read knows when to look at them again.

    A read asks `quiet`; when it is not, the read calls `prepare` (which arms what
    needs arming) before it looks at the files, and `confirm` with its answer once
    the looks found them unchanged: from then on, `quiet` is True until the kernel
    reports an event that matters or the mount table changes.
    """

    __slots__ = ("_at", "_paths", "_rearms", "_refused", "_table", "_who")

    def __init__(self, paths: tuple[str, ...]) -> None:
        self._paths = paths
        self._who: _Notifier | None = None  # the notifier armed with
        self._at = -1  # its generation confirmed; -1: none
        self._rearms = -1
        self._table = -1
        self._refused: tuple[object, ...] = ()  # the state arming was refused in

    def quiet(self, table: int) -> bool:
        """Whether nothing that matters was reported since the last `confirm`.

        `table`: the mount table's generation now.
        """
        who = self._who
        return (
            who is _NOTIFIER
            and who.generation == self._at
            and who.rearms == self._rearms
            and table == self._table
        )

    def prepare(self, now: Table) -> tuple[int, ...]:
        """Arm the files where they need it, before the looks; what `confirm` takes.

        Arms again after a watch was moved or dropped, after a mount, and the first
        time; where a file cannot be armed (`_arm`), the ticket confirms nothing, and
        arming is not tried again until one of those happens.
        """
        who = _NOTIFIER
        table = now[1]
        if self._who is not who or who.rearms != self._rearms or table != self._table:
            self._who = None
            state = (who, who.rearms, table)
            if state == self._refused:
                return ()  # refused in this very state: not tried on every read
            if table < 0 or not who.start():
                self._refused = state
                return ()
            rearms = who.rearms
            if not all(_arm(who, path, now) for path in self._paths):
                self._refused = state
                return ()
            self._who, self._rearms, self._table = who, rearms, table
        return (who.generation, who.rearms, table)

    def confirm(self, ticket: tuple[int, ...]) -> None:
        """The looks made after `prepare` found every file unchanged."""
        if ticket and ticket[1] == self._rearms and ticket[2] == self._table:
            self._at = ticket[0]


def _arm(who: _Notifier, path: str, now: Table) -> bool:
    """Watch `path` and each directory above it.

    Where `path` is not there, the directory it would be made in is watched. False
    where the watches would not be told of every change.
    """
    if not path.startswith("/") or os.path.realpath(path) != path:
        return False  # relative, or a link on the way: the looks follow it
    mounts = plan(os.path.dirname(path), path, now)
    if mounts is None or not all(m.kind in NOTIFY_TYPES for m in mounts.crossed):
        return False
    parts = path.strip("/").split("/")
    found = False
    for depth in range(len(parts), -1, -1):  # the file first, then each directory
        place = "/" + "/".join(parts[:depth])
        below = None if depth == len(parts) else os.fsencode(parts[depth])
        wd = who.add(os.fsencode(place), below)
        if wd >= 0:
            found = True
        elif found or wd != -errno.ENOENT:
            return False  # a directory that exists but cannot be watched
    return found
