"""The mount table, read before a stop is: which mounts a reading would cross.

A reading must never hang. On a local kernel filesystem (ext4, xfs, tmpfs, ...) a
`stat` or `open` returns; on a FUSE or network filesystem it waits for a daemon or a
server that may never answer. Before touching a path the reader asks this module which
mounts lie on it (`plan`): a mount whose owners cannot be trusted holds at once, without
a system call into it; any mount that is not local sends the reading to a bounded worker
(`_bounded`); mount points inside the shared folder are never entered by the scan of
other accounts' stops.

`/proc/self/mountinfo` is parsed once and parsed again only after the kernel flags a
change (the file is pollable: `POLLPRI` after any mount or unmount), so a plan costs
one `poll` on the fast path. Where the table cannot be read, every reading is bounded.
This module does not open the folder or the stop (`_folder`, `_reader` do).
"""

from __future__ import annotations

import itertools
import os
import select
from _thread import allocate_lock

from .._slotted import Slotted

TYPE_CHECKING = False
if TYPE_CHECKING:  # `typing` is not imported at run time: see `_slotted`
    from collections.abc import Callable
    from typing import Final

__all__ = (
    "LOCAL_TYPES",
    "Mount",
    "MountPlan",
    "Table",
    "also_poll",
    "plan",
    "table",
    "untrusted_fs_why",
)

LOCAL_TYPES = frozenset(
    {
        "ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "overlay", "zfs",
        "f2fs", "bcachefs", "jfs", "reiserfs", "nilfs2", "squashfs", "erofs",
        "iso9660", "udf", "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2",
        "mqueue", "hugetlbfs", "securityfs", "debugfs", "tracefs", "bpf", "pstore",
        "configfs", "efivarfs", "binfmt_misc", "autofs", "nsfs", "vfat", "msdos",
        "exfat", "ntfs", "ntfs3", "hfs", "hfsplus",
    }
)  # fmt: skip
"""Kernel filesystems served by the local machine: a system call on them returns."""


# spec 02: owners cannot be trusted on these (made up at mount time, or remote).
_UNTRUSTED_TYPES = frozenset(
    {
        "vfat", "msdos", "umsdos", "exfat", "ntfs", "ntfs3", "fuseblk", "hfs", "hfsplus",
        "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs", "ceph", "glusterfs",
        "lustre", "gfs2", "ocfs2", "davfs", "ncpfs", "virtiofs",
        "fuse.sshfs", "fuse.rclone", "fuse.s3fs", "fuse.davfs2", "fuse.glusterfs",
        "fuse.gvfsd-fuse", "fuse.smbnetfs", "fuse.curlftpfs",
    }
)  # fmt: skip
_NETWORK_HINT = ("nfs", "cifs", "smb", "9p", "afs", "ceph", "gluster", "sshfs", "davfs")


class Mount(Slotted):
    """One line of the mount table."""

    __match_args__ = ("point", "kind", "options", "mount_id")
    __slots__ = ("kind", "mount_id", "options", "point")

    def __init__(self, point: str, kind: str, options: str, mount_id: int = -1) -> None:
        self.point: Final = point
        """Where it is mounted (absolute, unescaped)."""
        self.kind: Final = kind
        """The filesystem type (`ext4`, `fuse.sshfs`, `nfs4`, ...)."""
        self.options: Final = options
        """Mount and superblock options, comma-separated."""
        self.mount_id: Final = mount_id
        """The table's id of the mount (what `statx` gives as `stx_mnt_id`); -1:
        not known."""


class MountPlan(Slotted):
    """What the mount table says about one place, before it is read."""

    __match_args__ = ("crossed", "skip", "local", "untrusted", "generation")
    __slots__ = ("crossed", "generation", "local", "skip", "untrusted", "whys")

    def __init__(
        self,
        crossed: tuple[Mount, ...],
        skip: frozenset[str],
        local: bool,
        untrusted: tuple[Mount, str] | None = None,
        generation: int = -1,
    ) -> None:
        self.whys: Final = {
            mount.mount_id: untrusted_fs_why(mount.kind, mount.options)
            for mount in crossed
            if mount.mount_id >= 0
        }
        """`untrusted_fs_why` of each crossed mount by its id ('' for a trusted one):
        a descriptor's mount id (`_statx.look`) judges its file system without another
        system call, and without judging the same mount's type again on every read."""
        self.crossed: Final = crossed
        """Mounts the reading crosses: at or above the folder, at or under the uid
        dir."""
        self.skip: Final = skip
        """Names in the folder that are (or hold) mount points: the scan never enters
        them."""
        self.local: Final = local
        """Every crossed mount is local: the reading may run inline."""
        self.untrusted: Final = untrusted
        """The first crossed mount whose owners cannot be trusted, and why (spec 02)."""
        self.generation: Final = generation
        """The generation of the table the plan was made from."""


def untrusted_fs_why(kind: str, options: str) -> str:
    """Return '' for a filesystem whose owners can be trusted, else why not."""
    if kind in _UNTRUSTED_TYPES or any(hint in kind for hint in _NETWORK_HINT):
        if any(hint in kind for hint in _NETWORK_HINT):
            return (
                f"the folder is on a network filesystem ({kind}): caches can hide a new "
                "stop and owners may be squashed or mapped"
            )
        return f"the folder is on {kind}, where file owners are made up at mount time"
    if kind == "fuse" or kind.startswith("fuse."):
        # Judged by type: the owners a FUSE daemon reports are whatever it chooses
        # (bindfs maps them; `uid=` never reaches the mount table).
        return (
            f"the folder is on {kind}, a FUSE file system: its daemon reports "
            "whatever owners it chooses"
        )
    return ""


def _unescape(field: bytes) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo.
    out = bytearray()
    at = 0
    while at < len(field):
        code = field[at + 1 : at + 4]
        if field[at] == 0x5C and len(code) == 3 and code.isdigit():
            out.append(int(code, 8))
            at += 4
        else:
            out.append(field[at])
            at += 1
    return out.decode(errors="surrogateescape")


def parse_mountinfo(data: bytes) -> tuple[Mount, ...]:
    """Parse `/proc/self/mountinfo` text into mounts (malformed lines are dropped)."""
    found: list[Mount] = []
    for line in data.splitlines():
        head, sep, tail = line.partition(b" - ")
        if not sep:
            continue
        left = head.split(b" ")
        right = tail.split(b" ")
        if len(left) < 6 or len(right) < 3:
            continue
        options = (left[5] + b"," + right[2]).decode(errors="replace")
        kind = right[0].decode(errors="replace")
        ident = int(left[0]) if left[0].isdigit() else -1
        found.append(Mount(_unescape(left[4]), kind, options, ident))
    return tuple(found)


_GENERATIONS = itertools.count(1)
"""Generations of the table, never reused, not even by a forked child's new table."""


class _Table:
    """The parsed mount table, parsed again only when the kernel flags a change."""

    # A forked child starts with a table of its own (`_forget_after_fork`): the
    # descriptor's poll state is shared with the parent's.
    def __init__(self) -> None:
        self.lock = allocate_lock()
        self.fd = -1
        self.poller: select.poll | None = None
        self.mounts: tuple[Mount, ...] | None = None
        self.generation = 0
        self.also: dict[int, Callable[[], None]] = {}
        """Other descriptors the same `poll` looks at, each with what reads it."""

    def _reload(self) -> None:
        if self.fd < 0:
            self.fd = os.open("/proc/self/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
            self.poller = select.poll()
            self.poller.register(self.fd, select.POLLPRI)
            for fd in self.also:
                self.poller.register(fd, select.POLLIN)
        os.lseek(self.fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(self.fd, 65536):
            chunks.append(chunk)
        self.mounts = parse_mountinfo(b"".join(chunks))
        self.generation = next(_GENERATIONS)

    def current(self) -> tuple[tuple[Mount, ...] | None, int]:
        """The table now and its generation; (None, -1) when it cannot be read."""
        with self.lock:
            try:
                stale = self.mounts is None or self.poller is None
                if not stale:
                    assert self.poller is not None
                    for fd, _ in self.poller.poll(0):
                        if fd == self.fd:
                            stale = True
                        else:
                            self.also[fd]()
                if stale:
                    self._reload()
            except OSError:
                self.mounts, self.fd, self.poller = None, -1, None
                return None, -1
            return self.mounts, self.generation


_TABLE = _Table()
_PLANS: dict[tuple[str, str], tuple[int, MountPlan]] = {}


def _at_or_under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _make_plan(
    mounts: tuple[Mount, ...], folder: str, uid_dir: str, generation: int
) -> MountPlan:
    crossed: list[Mount] = []
    skip: set[str] = set()
    for mount in mounts:
        if _at_or_under(folder, mount.point) or _at_or_under(mount.point, uid_dir):
            crossed.append(mount)
        elif _at_or_under(mount.point, folder) and mount.point != folder:
            skip.add(mount.point[len(folder.rstrip("/")) + 1 :].split("/", 1)[0])
    local = all(mount.kind in LOCAL_TYPES for mount in crossed)
    untrusted = next(
        (
            (mount, why)
            for mount in crossed
            if (why := untrusted_fs_why(mount.kind, mount.options))
        ),
        None,
    )
    return MountPlan(tuple(crossed), frozenset(skip), local, untrusted, generation)


Table = tuple[tuple[Mount, ...] | None, int]
"""The parsed mount table and its generation; `(None, -1)`: it cannot be read."""


def table() -> Table:
    """The mount table now: one `poll` when nothing was mounted since the last look.

    A caller that reads several places at once (a watch) looks once and hands the
    table to each `plan`.
    """
    return _TABLE.current()


def also_poll(fd: int, ready: Callable[[], None]) -> None:
    """Have each look at the table also poll `fd`, calling `ready` when it is readable.

    One `poll` then tells both (`_notify`), instead of one system call each.
    """
    current = _TABLE
    with current.lock:
        current.also[fd] = ready
        if current.poller is not None:
            current.poller.register(fd, select.POLLIN)


def plan(folder: str, uid_dir: str, now: Table | None = None) -> MountPlan | None:
    """The mounts a reading of `uid_dir` in `folder` crosses; None: the table is unreadable.

    `now`: the table a caller just looked at (`table`); None: look now.
    """
    mounts, generation = _TABLE.current() if now is None else now
    if mounts is None:
        return None
    key = (folder, uid_dir)
    cached = _PLANS.get(key)
    if cached is not None and cached[0] == generation:
        return cached[1]
    made = _make_plan(mounts, folder, uid_dir, generation)
    if len(_PLANS) > 64:
        _PLANS.clear()
    _PLANS[key] = (generation, made)
    return made


def _forget_after_fork() -> None:
    global _TABLE
    _TABLE = _Table()
    _PLANS.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
