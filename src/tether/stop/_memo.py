"""What a run's reads of one place carry from one read to the next, and why it is safe.

A `StopWatch` reads the same place before every move. Some of what a read finds cannot
change without a sign the next read looks at anyway, so the next read compares that
sign instead of deriving the finding again:

- the names in the folder (for the report of other accounts' stops) while the folder's
  look (`statx`, else `fstat`) shows the same identity, times, size and link count, and its `st_ctime` was
  already more than `SETTLED_NS` in the past when the names were listed: the kernel sets
  `st_ctime` on every change of an entry, from a clock that can lag by one tick, so
  only a ctime older than that tick tells a later change from the listed state;
- that the listing names no other account's entry, so the scan has nothing to open
  (`alone`), for the same listing and mount table;
- the reading itself, a value made from the place and the stop's `fstat` alone.

A memo also carries the unique id of the mount of `/` pinned at the watch's start
(`_statx`), so the walk's look at the root tells a reader moved into another mount
namespace (row D9).

Every check of the folder rule (the walk, owners, modes, the pins, the uid directory,
the gate, the file system's type, the stop's own `open` and `fstat`) still runs on every
read: spec 02 keeps the chain's checks cache-free. A memo belongs to
one place of one watch; `StopStore.read` passes none and remembers nothing.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, final

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._reading import StopReading

__all__ = ("SETTLED_NS", "ReadMemo")

SETTLED_NS = 1_000_000_000
"""How far in the past a folder's `st_ctime` must be for its listing to be kept.

Far above a kernel clock tick (1 to 10 ms), so a listing kept is one no later change can
share a ctime with, whatever the file system's timestamp granularity.
"""


@final
class ReadMemo:
    """The findings a watch's reads of one place reuse while their sign is unchanged."""

    __slots__ = (
        "_clock",
        "_listing",
        "alone",
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
        self.alone: tuple[tuple[int, ...], int] | None = None
        """The stamp of a kept listing in which no name is another account's (only
        the person's own and mount points the scan never enters), and the mount
        table's generation it was judged on; None: not known to be so."""

    def mark_alone(self, stamp: tuple[int, ...], generation: int) -> None:
        """Note that the listing kept for `stamp` names no other account's entry."""
        if self._listing is not None and self._listing[0] == stamp:
            self.alone = (stamp, generation)

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
