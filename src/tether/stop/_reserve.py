"""Room for the person's stop on a full file system (S15).

A tree may fill the file system the stop lives on (the workspace is often on it), but
not the uid directory, which is read-only inside its wall. So the person's verbs keep a
reserve there (`RESERVE_NAME`: `MAX_STOP_SIZE` bytes written out, made by
`keep_reserve` whenever a verb, `tether setup` or a run's start finds it missing and
there is room). Where writing a new file fails for want of space, `write_in_reserve`
renames the reserve to the stop's temp name and writes the stop into the blocks it
already holds; without a reserve, or where even that write finds no room (a
copy-on-write file system), the stop is made without its text. A stop is judged on its
descriptor, not its bytes (spec 02), so the reading is STOPPED either way; the note
returned says which happened.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from .._fs import write_atomic_at
from ._setup import MAX_STOP_SIZE

__all__ = (
    "NEW_FILE",
    "NO_ROOM",
    "RESERVE_NAME",
    "finish_stop",
    "keep_reserve",
    "temp_name",
    "write_all",
    "write_in_reserve",
)

RESERVE_NAME = ".stop-reserve"
"""The stop's room on a full file system, in the uid directory (see the module's
docstring)."""
NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT})
"""The errors of a file system with no room: the disk is full, or the quota is."""
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
"""How the verbs make a file: a new one, never through a link."""


def temp_name(name: str) -> str:
    """A temp name for `name` in the same folder, unique to this process."""
    return f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` (os.write may write less)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def finish_stop(fd: int) -> None:
    """Give a written stop its mode 01644 and flush it to disk."""
    try:
        os.fchmod(fd, 0o1644)
    except OSError:  # BSDs refuse the sticky bit on files for non-root (EFTYPE)
        os.fchmod(fd, 0o644)
    os.fsync(fd)


def write_in_reserve(uid_fd: int, tmp: str, data: bytes) -> str:
    """The stop as `tmp`, on a full file system: the reserve's blocks, or no text."""
    try:
        os.rename(RESERVE_NAME, tmp, src_dir_fd=uid_fd, dst_dir_fd=uid_fd)
        fd = os.open(tmp, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=uid_fd)
        reserved = True
    except FileNotFoundError:
        fd = os.open(tmp, NEW_FILE, 0o644, dir_fd=uid_fd)
        reserved = False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise PermissionError(
                errno.EPERM, f"{RESERVE_NAME} is not this account's regular file"
            )
        written = False
        if reserved:
            try:
                write_all(fd, data)
                written = True
            except OSError as exc:
                if exc.errno not in NO_ROOM:
                    raise
        os.ftruncate(fd, len(data) if written else 0)
        finish_stop(fd)
    finally:
        os.close(fd)
    if written:
        return "the file system is full: the stop was written into its reserve"
    return (
        "the file system is full: the stop was set without its reason "
        "(no room for its text); free some space, then lift and set it again "
        "to record one"
    )


def keep_reserve(uid_fd: int) -> None:
    """Make the reserve in the uid directory if it is missing, where there is room.

    Best effort: a full file system, or any other failure, leaves no reserve and no
    half-made file (the next verb tries again).
    """
    try:
        os.stat(RESERVE_NAME, dir_fd=uid_fd, follow_symlinks=False)
        return
    except FileNotFoundError:
        pass
    except OSError:
        return
    with contextlib.suppress(OSError):
        write_atomic_at(uid_fd, RESERVE_NAME, b"\0" * MAX_STOP_SIZE, mode=0o600)
