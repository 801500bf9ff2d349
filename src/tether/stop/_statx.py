"""The read's system calls written by hand: `statx` and an `O_PATH` `openat`.

`statx` gives the unique id of a mount (Linux 6.8 and later) and a directory's look.

Row D9: a reader moved into another mount namespace may see a folder that someone
mounted over there, so a run holds when its reader no longer reads in the namespace it
started in. Each namespace has mounts of its own, and the kernel never gives a mount's
unique id (`STATX_MNT_ID_UNIQUE`) to another; so the mount of the root a walk starts
from, compared with the one pinned at the run's start, tells a namespace (or a root)
that changed, within the `statx` that judges the root anyway. That replaces a
`readlink` of `/proc/self/ns/mnt` per read, which costs more than the rest of the
root's look.

The same call gives a read what two system calls gave it: `look` returns a
directory's owner, mode, identity, times and the id of its mount (the one
`/proc/self/mountinfo` lists) at once, so the folder's file system is told from the
parsed table instead of a `fstatfs` of its own; `stamp` is the `lstat` of a file a watch
compares between reads, without an exception when the file is not there; `open_path`
opens the stop's name with `O_PATH|O_NOFOLLOW`, again without an exception for the
common answer, "not there".

Written by hand on `ctypes`: Python 3.11 has no `os.statx`. Where the call or the
unique id is missing, `root_mount` is None and the watch reads the namespace link;
where `statx` is missing, `look` is None (callers use `os.fstat`) and `stamp` uses
`os.stat`.
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = (
    "AT_FDCWD",
    "AT_SYMLINK_NOFOLLOW",
    "LEVEL",
    "LOOK",
    "LOOK_MASK",
    "MNT_ID",
    "MNT_ID_UNIQUE",
    "ROOT",
    "ROOT_MASK",
    "Look",
    "available",
    "call",
    "judge_root",
    "judge_with_mount",
    "level",
    "look",
    "open_path",
    "root_mount",
    "stamp",
)

_AT_FDCWD = -100
_AT_SYMLINK_NOFOLLOW = 0x100
_AT_EMPTY_PATH = 0x1000
_STATX_BASIC_STATS = 0x7FF
_STATX_MNT_ID = 0x1000
_STATX_MNT_ID_UNIQUE = 0x4000
# stx_mask (0), stx_uid (20), stx_mode (28) and stx_mnt_id (0x90) of `struct statx`.
_FIELDS = struct.Struct("<I16xI4xH114xQ")
# stx_mask, stx_nlink (16), stx_uid, stx_mode, stx_ino (32), stx_size (40), stx_ctime
# (96: seconds, nanoseconds), stx_mtime (112), stx_dev_major/minor (136), stx_mnt_id.
_LOOK = struct.Struct("<I12xII4xH2xQQ48xqI4xqI4x8xIIQ")
# stx_nlink .. stx_size, then stx_ctime .. stx_dev_minor: what `stamp` compares (the
# access time is left out: a look must not see a change in a read).
_STAMP = struct.Struct("<16x48s32x48s")
LEVEL = struct.Struct("<20xI4xH2xQ96xII")
"""stx_uid, stx_mode, stx_ino, stx_dev_major and stx_dev_minor: a directory's judgement
and identity (`level`)."""
LOOK = _LOOK
"""The struct of `Look`."""
AT_SYMLINK_NOFOLLOW = _AT_SYMLINK_NOFOLLOW
AT_FDCWD = _AT_FDCWD
LOOK_MASK = _STATX_BASIC_STATS | _STATX_MNT_ID
"""What `look` asks for (a by-name look must ask the same to compare alike)."""
MNT_ID = _STATX_MNT_ID
ROOT = _FIELDS
"""The struct of the root's look: stx_mask, stx_uid, stx_mode, stx_mnt_id."""
ROOT_MASK = _STATX_BASIC_STATS | _STATX_MNT_ID_UNIQUE
"""What the root's look asks for."""
MNT_ID_UNIQUE = _STATX_MNT_ID_UNIQUE
_SIZE = 256  # sizeof(struct statx)


class _Buffers(threading.local):
    def __init__(self) -> None:
        self.buf = ctypes.create_string_buffer(_SIZE)


_buffers = _Buffers()

Look = tuple[int, ...]
"""What `look` returns, by index: 0 the mask, 1 `st_nlink`, 2 `st_uid`, 3 `st_mode`,
4 `st_ino`, 5 `st_size`, 6 and 7 `st_ctime` (seconds, nanoseconds), 8 and 9
`st_mtime`, 10 and 11 the device (major, minor), 12 the mount id (-1: not known)."""
_statx: Callable[..., int] | None = None


def _call() -> Callable[..., int] | None:
    global _statx
    if _statx is None:
        try:
            fn = ctypes.CDLL(None, use_errno=True).statx
        except (OSError, AttributeError):
            return None
        # No `argtypes`: ctypes passes the ints, the bytes and the buffer as the C
        # call wants them, and checking each argument would cost more than the call.
        _statx = fn
    return _statx


def judge_with_mount(fd: int) -> tuple[int, int, int] | None:
    """`(st_uid, st_mode, unique mount id)` of `fd`, or None where `statx` cannot say."""
    fn = _call()
    if fn is None:
        return None
    buf = _buffers.buf
    if fn(fd, b"", _AT_EMPTY_PATH, _STATX_BASIC_STATS | _STATX_MNT_ID_UNIQUE, buf):
        return None
    mask, uid, mode, mount = _FIELDS.unpack_from(buf)
    if not mask & _STATX_MNT_ID_UNIQUE:
        return None
    return uid, mode, mount


def judge_root() -> tuple[int, int, int] | None:
    """`judge_with_mount` of this process's root, by the path `/`, without a descriptor.

    `/` names the process's root whatever is mounted or renamed anywhere: only the
    process itself (`chroot`, `setns`) changes what it is, and the mount id tells that.
    """
    fn = _statx or _call()
    if fn is None:
        return None
    buf = _buffers.buf
    if fn(_AT_FDCWD, b"/", 0, _STATX_BASIC_STATS | _STATX_MNT_ID_UNIQUE, buf):
        return None
    mask, uid, mode, mount = _FIELDS.unpack_from(buf)
    if not mask & _STATX_MNT_ID_UNIQUE:
        return None
    return uid, mode, mount


def _fill(fd: int, mask: int) -> ctypes.Array[ctypes.c_char] | None:
    """This thread's buffer, filled by `statx` of `fd` itself; None: no `statx`.

    Raises:
        OSError: the call failed on `fd`.
    """
    fn = _statx or _call()
    if fn is None:
        return None
    buf = _buffers.buf
    if fn(fd, b"", _AT_EMPTY_PATH, mask, buf):
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return buf


def look(fd: int) -> Look | None:
    """One `statx` of the directory `fd`, with the id of its mount; None: no `statx`.

    Returns the fields as `struct statx` holds them (`Look`): equal exactly when the
    identity, owner, mode, times, size, link count and mount are, so the tuple itself
    is the stamp a memo compares. The mount id is the one `/proc/self/mountinfo`
    lists, or -1 when the kernel gives none.

    Raises:
        OSError: the call failed on `fd`.
    """
    buf = _fill(fd, _STATX_BASIC_STATS | _STATX_MNT_ID)
    if buf is None:
        return None
    found: Look = _LOOK.unpack_from(buf)
    if not found[0] & _STATX_MNT_ID:
        return (*found[:12], -1)  # an older kernel: the field is not the mount's
    return found


def stamp(path: bytes) -> tuple[bytes, ...] | None:
    """What `lstat(path)` shows but the access time, as a value that compares alike.

    None when nothing is at `path`.

    Raises:
        OSError: any other failure of the look.
    """
    fn = _statx or _call()
    if fn is None:
        try:
            st = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            return None
        fields = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
        return (repr((*fields, st.st_mode, st.st_uid, st.st_nlink)).encode(),)
    buf = _buffers.buf
    if fn(_AT_FDCWD, path, _AT_SYMLINK_NOFOLLOW, _STATX_BASIC_STATS, buf):
        code = ctypes.get_errno()
        if code == 2:  # ENOENT
            return None
        raise OSError(code, os.strerror(code))
    found: tuple[bytes, ...] = _STAMP.unpack_from(buf)
    return found


_O_PATH_FLAGS = getattr(os, "O_PATH", 0) | os.O_NOFOLLOW | os.O_CLOEXEC
_openat: Callable[..., int] | None = None


def open_path(dir_fd: int, name: bytes) -> int:
    """`openat(dir_fd, name, O_PATH|O_NOFOLLOW|O_CLOEXEC)`: a descriptor, or -errno.

    `O_PATH` opens nothing (a FIFO does not block, a device's driver is not run) and
    `O_NOFOLLOW` with it gives a link itself, so `fstat` of the descriptor tells what
    is at `name`. No exception for a missing name, the common answer of a read.
    -ENOSYS where there is no `O_PATH` or no `openat` to call.
    """
    global _openat
    fn = _openat
    if fn is None:
        if not hasattr(os, "O_PATH"):
            return -38
        try:
            fn = _openat = ctypes.CDLL(None, use_errno=True).openat
        except (OSError, AttributeError):
            return -38
    fd = fn(dir_fd, name, _O_PATH_FLAGS)
    return fd if fd >= 0 else -ctypes.get_errno()


def call() -> Callable[..., int] | None:
    """The `statx` function itself, for a caller that makes many calls in a row."""
    return _statx or _call()


def level(fd: int) -> tuple[int, int, int, int, int] | None:
    """`(st_uid, st_mode, st_ino, dev major, dev minor)` of `fd`; None: no `statx`.

    Raises:
        OSError: the call failed on `fd`.
    """
    buf = _fill(fd, _STATX_BASIC_STATS)
    if buf is None:
        return None
    found: tuple[int, int, int, int, int] = LEVEL.unpack_from(buf)
    return found


def available() -> bool:
    """Whether this system has `statx`."""
    return _call() is not None


def root_mount() -> int | None:
    """The unique id of the mount this process's root is on now; None: cannot say."""
    try:
        fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except (OSError, AttributeError):
        return None
    try:
        found = judge_with_mount(fd)
    finally:
        os.close(fd)
    return None if found is None else found[2]
