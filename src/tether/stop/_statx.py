"""The unique id of the mount a descriptor is on (`statx`, Linux 6.8 and later).

Row D9: a reader moved into another mount namespace may see a folder that someone
mounted over there, so a run holds when its reader no longer reads in the namespace it
started in. Each namespace has mounts of its own, and the kernel never gives a mount's
unique id (`STATX_MNT_ID_UNIQUE`) to another; so the mount of the root a walk starts
from, compared with the one pinned at the run's start, tells a namespace (or a root)
that changed, within the `statx` that judges the root anyway. That replaces a
`readlink` of `/proc/self/ns/mnt` per read, which costs more than the rest of the
root's look.

Written by hand on `ctypes`: Python 3.11 has no `os.statx`. Where the call or the
unique id is missing, `root_mount` is None and the watch reads the namespace link.
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
from collections.abc import Callable

__all__ = ("judge_with_mount", "root_mount")

_AT_EMPTY_PATH = 0x1000
_STATX_BASIC_STATS = 0x7FF
_STATX_MNT_ID_UNIQUE = 0x4000
# stx_mask (0), stx_uid (20), stx_mode (28) and stx_mnt_id (0x90) of `struct statx`.
_FIELDS = struct.Struct("<I16xI4xH114xQ")
_SIZE = 256  # sizeof(struct statx)


class _Buffers(threading.local):
    def __init__(self) -> None:
        self.buf = ctypes.create_string_buffer(_SIZE)


_buffers = _Buffers()
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
