"""A watch's read when nothing is out of place: every check, in one flat pass.

Most reads of a run find what the one before found: the same folder chain, the same
uid directory, no stop or the same stop. `read_plain` makes every system call of a full
read (`_read._read_now`) and every judgement on what they return, with nothing between
them: no function of the walk, no message built. What it may take from the watch's memo
is only what the memo keeps for a full read too: the reading value, and the listing of
the folder while its look is unchanged.

It answers only when every check passed and the answer is one the memo already holds;
at the first thing that is not so (a directory that fails the rule, an error, a pin
that differs, another account's entry in the folder, a stop it has not seen) it answers
None and closes what it opened, and the caller reads again in full, which judges and
says why. So a finding of this pass never reaches a run unless a full read made the
same finding from the same kernel answers before.
"""

from __future__ import annotations

import os
from errno import ENOENT
from stat import S_ISDIR, S_ISREG, S_ISVTX
from typing import TYPE_CHECKING

from ._folder import _OTHERS_WRITE, DIR_FLAGS
from ._reading import Identity, RawRead
from ._setup import STOP_NAME
from ._statx import judge_root, look, open_path

if TYPE_CHECKING:
    from ._memo import ReadMemo
    from ._mounts import MountPlan
    from ._walk import Route

__all__ = ("read_plain",)

_STOP = os.fsencode(STOP_NAME)


def read_plain(
    route: Route,
    pins: tuple[Identity | None, Identity | None],
    mounts: MountPlan,
    memo: ReadMemo,
) -> RawRead | None:
    """The read of a place whose every check passes as a full read left it; else None.

    Args:
        route: the place: its names, the person, the stop's size bound, whether other
            accounts' stops are reported (the listing must show none) and whether the
            file system is judged (the table must trust the folder's mount).
        pins: the identities a run pinned; None: not pinned.
        mounts: the mount plan of this read (local mounts only: every call returns).
        memo: the watch's memo of the place.
    """
    root_mount = memo.root_mount
    if root_mount is None or not route.names:
        return None
    seen = judge_root()
    if seen is None or seen[2] != root_mount or seen[0] != 0:
        return None
    mode = seen[1]
    if not S_ISDIR(mode) or (mode & _OTHERS_WRITE and not mode & S_ISVTX):
        return None
    held = [-1, -1, -1]  # the folder chain's, the uid directory's, the stop's
    answer: RawRead | None = None
    try:
        answer = _through(route, pins, mounts, memo, held)
    except OSError:
        answer = None
    finally:
        for fd in held:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    answer = None  # the full read then holds on its own close
    return answer


def _through(
    route: Route,
    pins: tuple[Identity | None, Identity | None],
    mounts: MountPlan,
    memo: ReadMemo,
    held: list[int],
) -> RawRead | None:
    """The pass below a root that passed; `held` gets every descriptor it opens."""
    person = route.person
    names = route.names
    last = len(names) - 1
    # Every directory `O_PATH`, the folder too: the pass lists nothing (it answers
    # only while the kept listing stands), and an `O_PATH` open and close are the
    # lighter calls.
    for index in range(last + 1):
        above = held[0]
        if above >= 0:
            held[0] = os.open(names[index], DIR_FLAGS, dir_fd=above)
            os.close(above)
        else:
            held[0] = os.open(route.first, DIR_FLAGS)
        if index < last:
            st = os.fstat(held[0])
            mode = st.st_mode
            if (
                (st.st_uid != 0 and st.st_uid != person)
                or not S_ISDIR(mode)
                or (mode & _OTHERS_WRITE and not mode & S_ISVTX)
            ):
                return None
    seen = look(held[0])  # fields by index: `_statx.Look`
    if seen is None:
        return None
    uid = seen[2]
    mode = seen[3]
    if (
        (uid != 0 and uid != person)
        or not S_ISDIR(mode)
        or (mode & _OTHERS_WRITE and not mode & S_ISVTX)
    ):
        return None
    folder_id = (os.makedev(seen[10], seen[11]), seen[4])
    if pins[0] is not None and folder_id != pins[0]:
        return None
    if route.judge_fs and mounts.whys.get(seen[12]) != "":
        return None  # untrusted, or a mount the table does not list
    alone = memo.alone
    if route.scan and (
        alone is None or alone[0] != seen or alone[1] != mounts.generation
    ):
        return None
    held[1] = os.open(route.uid_name, DIR_FLAGS, dir_fd=held[0])
    st = os.fstat(held[1])
    if st.st_uid != person or st.st_mode & _OTHERS_WRITE:
        return None
    uid_id = (st.st_dev, st.st_ino)
    if pins[1] is not None and uid_id != pins[1]:
        return None
    # One descriptor, opened with `O_PATH`: the stop's type gate and its open at once
    # (spec 02: on Linux prefer `O_PATH`, which opens nothing).
    fd = open_path(held[1], _STOP)
    if fd < 0:
        clear = memo.clear
        if fd != -ENOENT or clear is None:
            return None
        return RawRead(clear, folder_id, uid_id, None)
    held[2] = fd
    st = os.fstat(fd)
    if not S_ISREG(st.st_mode) or st.st_uid != person or st.st_size > route.max_size:
        return None
    stopped = memo.stopped
    stop_id = (st.st_dev, st.st_ino, st.st_mtime_ns)
    key = (*stop_id, st.st_ctime_ns, st.st_nlink, st.st_mode, st.st_uid)
    if stopped is None or stopped[0] != key:
        return None
    return RawRead(stopped[1], folder_id, uid_id, stop_id)
