"""What a run's reads of one place carry from one read to the next, and why it is safe.

A `StopWatch` reads the same place before every move. Some of what a read finds cannot
change without a sign the next read looks at anyway, so the next read compares that
sign instead of deriving the finding again:

- the names in the folder (for the report of other accounts' stops) while the folder's
  look (`statx`, else `fstat`) shows the same identity, times, size and link count,
  and its `st_ctime` was already more than `SETTLED_NS` in the past when the names were
  listed: the kernel sets `st_ctime` on every change of an entry, from a clock that can
  lag by one tick, so only a ctime older than that tick tells a later change from the
  listed state;
- that the listing names no other account's entry, so the scan has nothing to open
  (`alone`), for the same listing and the same names of mount points the scan skips:
  a mount or unmount elsewhere (a new mount table, the same names skipped here) leaves
  the finding as a full read would make it again;
- the reading itself, a value made from the place and the stop's `fstat` alone;
- the directories of the chain, held open (`O_PATH`) as anchors (`Anchors`), and the
  stop last seen: the next read looks each name up again below the directory above it
  and judges what it finds, and uses the anchor only when the name still leads to it.

Why an anchor keeps the walk's guarantee. The walk judges each directory by its own
descriptor so that what it judged is what it walks into. A read with anchors looks up
each name with `statx` (`AT_SYMLINK_NOFOLLOW`) below the anchor above it and compares
the identity found with the anchor's: an open descriptor keeps its inode alive, so no
other file can have that identity meanwhile, and a directory has one name in one
parent; equal identities mean the name leads, now, to the very directory held, and
the look's owner and mode are that directory's now. The look is judged exactly as an
`fstat` of a descriptor opened at that moment would be, and the next name is looked up
below it. A link, a directory renamed, replaced or mounted over shows another identity;
the read then lets every anchor go and walks again, opening each level. The stop is
held the same way once a descriptor of it was judged (spec 02: the stop is judged on a
descriptor): a later read compares its name's identity with the one held and judges
the look; a stop set again is another inode, opened and judged anew. Holding them
keeps the folder's file system busy: an unmount of it waits for the run (a lazy one
detaches it, and the next read finds another identity).

A memo also carries the unique id of the mount of `/` pinned at the watch's start
(`_statx`), so the walk's look at the root tells a reader moved into another mount
namespace (row D9).

Every check of the folder rule (owners, modes, links refused, the pins, the uid
directory, the gate, the file system's type, the stop's type, owner and size) still
runs on every read, on what the kernel says now: spec 02 keeps the chain's checks
cache-free. A memo belongs to
one place of one watch; `StopStore.read` passes none and remembers nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from typing import TYPE_CHECKING, final

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._stop_reading import RawRead, StopReading

__all__ = ("SETTLED_NS", "Anchors", "ReadMemo")

SETTLED_NS = 1_000_000_000
"""How far in the past a folder's `st_ctime` must be for its listing to be kept.

Far above a kernel clock tick (1 to 10 ms), so a listing kept is one no later change can
share a ctime with, whatever the file system's timestamp granularity.
"""


@final
class Anchors:
    """The chain's directories, held open between two reads of one watch's place.

    `fds[i]` is the directory of the walk's level `i` (the first below `/` first, the
    uid directory last), `ids[i]` its `(st_ino, dev major, dev minor)` as `statx` gave
    it when it was opened and judged. `steps` is what a read looks up for each level:
    the directory above (`AT_FDCWD` for the first, looked up by its absolute name), the
    name, and the identity it must lead to. Only the thread that made them uses them.
    """

    __slots__ = (
        "buf",
        "call",
        "chain",
        "clear",
        "ends",
        "fds",
        "folder_id",
        "ids",
        "pins",
        "steps",
        "stop",
        "stopped",
        "thread",
        "uid_id",
    )

    def __init__(
        self,
        fds: tuple[int, ...],
        ids: tuple[tuple[int, int, int], ...],
        names: tuple[bytes, ...],
        call: Callable[..., int],
        pins: tuple[tuple[int, int] | None, tuple[int, int] | None],
    ) -> None:
        self.fds = fds
        self.pins = pins
        """The pins the opening pass compared the folder and the uid directory with."""
        self.call = call
        """`statx`, as `_statx.call` gives it."""
        self.buf = ctypes.create_string_buffer(256)
        """A `struct statx` of the anchors' own: one thread uses them."""
        self.ids = ids
        self.steps = tuple(
            (fds[at - 1] if at else _AT_FDCWD, name, ids[at])
            for at, name in enumerate(names)
        )
        """`(directory above, name, identity)` of each level; `names` are the first
        level's absolute name, then each name below it, the uid directory's last."""
        self.chain = self.steps[:-2]
        """The steps above the folder."""
        self.ends = (self.steps[-2], self.steps[-1])
        """The folder's step and the uid directory's."""
        (ino, major, minor), (uid_ino, uid_major, uid_minor) = ids[-2:]
        self.folder_id = (os.makedev(major, minor), ino)
        """The folder's `(st_dev, st_ino)`, as a read reports it."""
        self.uid_id = (os.makedev(uid_major, uid_minor), uid_ino)
        """The uid directory's `(st_dev, st_ino)`."""
        self.thread = threading.get_ident()
        self.clear: RawRead | None = None
        """The CLEAR answer through these anchors, made once."""
        self.stop: tuple[int, tuple[int, int, int]] | None = None
        """The stop held (`O_PATH`): its descriptor, judged when opened, and identity."""
        self.stopped: tuple[tuple[int, ...], RawRead] | None = None
        """The stop's look (`_statx.Look`) and the STOPPED answer the memo's reading
        gave for it: the look holds every field the reading is made from."""

    def close(self) -> None:
        """Close every descriptor held; a second call does nothing.

        An `O_PATH` descriptor has nothing to flush, so a failed close loses nothing:
        the descriptor is released all the same.
        """
        self.let_stop_go()
        fds, self.fds = self.fds, ()
        self.steps = self.chain = ()
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def let_stop_go(self) -> None:
        """Close the stop's descriptor, if one is held."""
        stop, self.stop = self.stop, None
        if stop is not None:
            with contextlib.suppress(OSError):
                os.close(stop[0])

    def __del__(self) -> None:
        self.close()


_AT_FDCWD = -100


@final
class ReadMemo:
    """The findings a watch's reads of one place reuse while their sign is unchanged."""

    __slots__ = (
        "_clock",
        "_listing",
        "alone",
        "anchors",
        "clear",
        "lists",
        "root_mount",
        "stopped",
    )

    def __init__(
        self, *, clock: Callable[[], int] = time.time_ns, root_mount: int | None = None
    ) -> None:
        self._clock = clock
        self.root_mount = root_mount
        """The unique mount id of `/` at the watch's start; None: not pinned."""
        # Invariant: the stamp is of a look made before the names were listed.
        self._listing: tuple[tuple[int, ...], tuple[str, ...]] | None = None
        self.clear: StopReading | None = None
        """The place's CLEAR reading: a value of the place alone, made once."""
        self.stopped: tuple[tuple[int, ...], StopReading] | None = None
        """The last STOPPED reading and the stop's `fstat` fields it was made from."""
        self.lists = 0
        """How many times the folder was listed (a test reads it)."""
        self.anchors: Anchors | None = None
        """The chain held open by the last plain pass; None: none held."""
        self.alone: tuple[tuple[int, ...], frozenset[str]] | None = None
        """The stamp of a kept listing in which no name is another account's (only
        the person's own and mount points the scan never enters), and the names of
        those mount points it was judged with (`MountPlan.skip`); None: not known to
        be so."""

    def let_go(self) -> None:
        """Close the anchors held, if any."""
        anchors, self.anchors = self.anchors, None
        if anchors is not None:
            anchors.close()

    def mark_alone(self, stamp: tuple[int, ...], skip: frozenset[str]) -> None:
        """Note that the listing kept for `stamp` names no other's but mounts `skip`."""
        if self._listing is not None and self._listing[0] == stamp:
            self.alone = (stamp, skip)

    def names(
        self, folder_fd: int, stamp: tuple[int, ...], ctime_ns: int
    ) -> tuple[str, ...]:
        """The folder's names: listed again unless `stamp` shows the folder as listed.

        `stamp` is the look at `folder_fd` that judged it on this read (`_statx.look`):
        equal exactly when the identity, owner, mode, times, size and link count are;
        `ctime_ns` is the folder's ctime.

        Raises:
            OSError: the folder cannot be listed (an `O_PATH` descriptor).
        """
        if self._listing is not None and self._listing[0] == stamp:
            return self._listing[1]
        self._listing = self.alone = None
        now = self._clock()
        names = tuple(os.listdir(folder_fd))
        self.lists += 1
        if now - ctime_ns > SETTLED_NS:
            self._listing = (stamp, names)
        return names
