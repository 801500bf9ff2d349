"""The judgements of a stop read, each written once, on the fields the kernel gave.

A read judges the same things in three passes: the full read (`_reader`, `_walk`) on
`fstat` of descriptors, and the plain pass (`_fast_read`) on `statx` of descriptors (its
opening pass) or of names below the directories it holds (its anchored pass). Each
judgement here takes the fields themselves, so the passes differ only in how they get
them and in what they do when one fails: the full read says why (`_folder._judge_dir`,
`_reader`), the plain pass answers None and leaves the saying to a full read. The key a
watch's memo keeps a STOPPED reading under is made here too, from the same fields
whichever pass looked.

This module makes no system call and builds no message.
"""

from __future__ import annotations

from stat import S_ISDIR, S_ISREG, S_ISVTX, S_IWGRP, S_IWOTH
from typing import Literal

__all__ = (
    "OTHERS_WRITE",
    "OVERFLOW_UIDS",
    "StopFault",
    "StopKey",
    "chain_fails",
    "stop_fault",
    "stop_key",
    "uid_dir_fails",
)

OTHERS_WRITE = S_IWGRP | S_IWOTH
"""The write bits of group and others."""

OVERFLOW_UIDS = frozenset({65534, 4294967294})
"""The overflow uid (`/proc/sys/kernel/overflowuid`, 65534 by default) and `(uid_t)-2`."""


def chain_fails(uid: int, mode: int, person: int) -> bool:
    """Whether a directory from `/` to the folder fails the folder rule (spec 02).

    It fails when it is not a directory, is owned by neither root nor `person`, or is
    writable by group or others without the sticky bit.
    """
    return (
        (uid != 0 and uid != person)
        or not S_ISDIR(mode)
        or bool(mode & OTHERS_WRITE and not mode & S_ISVTX)
    )


def uid_dir_fails(uid: int, mode: int, person: int) -> bool:
    """Whether the uid directory fails the folder rule (spec 02).

    It fails when it is not a directory, is not owned by `person`, or is writable by
    group or others (sticky or not).
    """
    return uid != person or bool(mode & OTHERS_WRITE) or not S_ISDIR(mode)


StopFault = Literal["", "type", "unmapped", "foreign", "size"]
"""What keeps an entry at the stop's name from being a stop to honour: '' nothing;
`type` not a regular file (holds); `unmapped` owned by the kernel's overflow uid, an
owner it cannot map (holds); `foreign` owned by another account (not honoured);
`size` larger than a stop (holds)."""


def stop_fault(mode: int, uid: int, size: int, person: int, max_size: int) -> StopFault:
    """What keeps the stop's descriptor from being a stop of `person`; '' when nothing.

    Judged in the order a full read says it: the type, the owner, the size.
    """
    if not S_ISREG(mode):
        return "type"
    if uid != person:
        # The kernel shows an owner it cannot map (user namespaces, idmapped or
        # network mounts) as the overflow uid: the real owner is unknown, so neither
        # honoured nor ignored.
        if uid in OVERFLOW_UIDS and person not in OVERFLOW_UIDS:
            return "unmapped"
        return "foreign"
    if size > max_size:
        return "size"
    return ""


StopKey = tuple[int, int, int, int, int, int, int]
"""`(st_dev, st_ino, st_mtime_ns, st_ctime_ns, st_nlink, st_mode, st_uid)` of a stop:
every field a STOPPED reading is made from. Its first three are the stop's identity
(`RawRead.stop_id`)."""


def stop_key(
    dev: int, ino: int, mtime_ns: int, ctime_ns: int, nlink: int, mode: int, uid: int
) -> StopKey:
    """The key a watch's memo keeps a STOPPED reading under (`ReadMemo.stopped`).

    Two looks at a stop give equal keys exactly when the reading made from one is the
    reading made from the other.
    """
    return (dev, ino, mtime_ns, ctime_ns, nlink, mode, uid)
