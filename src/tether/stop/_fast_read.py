"""A watch's read when nothing is out of place: every check, in one flat pass.

Most reads of a run find what the one before found: the same folder chain, the same
uid directory, no stop or the same stop. `read_plain` makes every judgement of a full
read (`_reader._read_now`) on what the kernel answers now, with nothing between them: no
function of the walk, no message built. What it may take from the watch's memo
is only what the memo keeps for a full read too: the reading value, and the listing of
the folder while its look is unchanged.

The pass has two forms. The first read of a run's plain passes opens every level (the
opening pass) and, when it answers, keeps the chain's descriptors open in the memo as
anchors (`_read_memo.Anchors`). Each later read looks each name up below the anchor above it
(the anchored pass): one `statx` per level instead of an `open`, an `fstat` and a
`close`, with the same judgement of what it finds; a name that no longer leads to its
anchor lets the anchors go, and the opening pass runs instead (`_read_memo` says why this
keeps the walk's guarantee).

It answers only when every check passed and the answer is one the memo already holds;
at the first thing that is not so (a directory that fails the rule, an error, a pin
that differs, another account's entry in the folder, a stop it has not seen) it answers
None and closes what it opened, and the caller reads again in full, which judges and
says why. So a finding of this pass never reaches a run unless a full read made the
same finding from the same kernel answers before.
"""

from __future__ import annotations

import os
from ctypes import get_errno
from enum import Enum
from errno import ENOENT
from threading import get_ident
from typing import TYPE_CHECKING, Literal

from ._folder import DIR_FLAGS
from ._judge import chain_fails, stop_fault, stop_key, uid_dir_fails
from ._read_memo import Anchors
from ._setup import STOP_NAME
from ._statx import (
    AT_FDCWD,
    AT_SYMLINK_NOFOLLOW,
    LEVEL,
    LOOK,
    LOOK_MASK,
    MNT_ID,
    MNT_ID_UNIQUE,
    ROOT,
    ROOT_MASK,
    call,
    judge_root,
    level,
    look,
    open_path,
)
from ._stop_reading import Identity, RawRead

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._mounts import MountPlan
    from ._read_memo import ReadMemo
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
    anchors = memo.anchors
    if anchors is not None and anchors.thread == get_ident():
        try:
            through = _anchored(route, pins, mounts, memo, anchors)
        except OSError:
            through = _MOVED
        if through is not _MOVED:  # no call: the read's hot path
            return through
        memo.let_go()  # a level is not the one held: walk again, opening each
    root_mount = memo.root_mount
    if root_mount is None or not route.names:
        return None
    seen = judge_root()
    if seen is None or seen[2] != root_mount or chain_fails(seen[0], seen[1], 0):
        return None  # `/` is root's, as each directory of the chain is root's or ours
    held: list[int] = []  # the chain's, the uid directory's, then the stop's
    ids: list[tuple[int, int, int]] = []
    answer = None
    try:
        answer = _through(route, pins, mounts, memo, held, ids)
    except OSError:
        answer = None
    kept = len(route.names) + 1
    if answer is not None and memo.anchors is None and len(ids) == kept:
        # The chain and the uid directory stay open for the next read: its anchors.
        names = (route.first, *route.names[1:], route.uid_name)
        fn = call()
        if fn is not None:
            memo.anchors = Anchors(tuple(held[:kept]), tuple(ids), names, fn, pins)
        del held[:kept]
    for fd in held:
        try:
            os.close(fd)
        except OSError:
            answer = None  # the full read then holds on its own close
    return answer


def _folder_passes(
    route: Route, mounts: MountPlan, memo: ReadMemo, seen: tuple[int, ...]
) -> bool:
    """Whether the folder's look `seen` passes as the full read left it.

    The rule of the chain, a file system the table trusts, and a listing kept that
    names no other account (when they are reported).
    """
    if chain_fails(seen[2], seen[3], route.person):
        return False
    if route.judge_fs and mounts.whys.get(seen[12]) != "":
        return False  # untrusted, or a mount the table does not list
    alone = memo.alone
    # A table changed by a mount elsewhere plans the same names to skip: the listing
    # is then judged as a full read would judge it again.
    return not route.scan or (
        alone is not None
        and alone[0] == seen
        and (alone[1] is mounts.skip or alone[1] == mounts.skip)
    )


class _Moved(Enum):
    """The anchored pass's answer when a level is not the directory held."""

    MOVED = 0


_MOVED = _Moved.MOVED


def _anchored(
    route: Route,
    pins: tuple[Identity | None, Identity | None],
    mounts: MountPlan,
    memo: ReadMemo,
    anchors: Anchors,
) -> RawRead | Literal[_Moved.MOVED] | None:
    """The pass through the anchors: `_MOVED` when a name leads elsewhere now.

    Each level is looked up by name below the anchor above it and judged on what the
    look shows, as `_through` judges the descriptor it opens.

    Raises:
        OSError: the look at the stop failed.
    """
    fn = anchors.call
    buf = anchors.buf
    steps = anchors.steps
    if len(steps) != len(route.names) + 1:
        return _MOVED
    # The root first, as `judge_root` judges it: by the path `/`, with its mount.
    if fn(AT_FDCWD, b"/", 0, ROOT_MASK, buf):
        return None
    mask, uid, mode, mount = ROOT.unpack_from(buf)
    if (
        not mask & MNT_ID_UNIQUE
        or mount != memo.root_mount
        or chain_fails(uid, mode, 0)
    ):
        return None
    person = route.person
    (above, name, ident), (uid_above, uid_name, uid_ident) = anchors.ends
    for up, below, want in anchors.chain:
        if fn(up, below, AT_SYMLINK_NOFOLLOW, LOOK_MASK, buf):
            return _MOVED
        uid, mode, ino, major, minor = LEVEL.unpack_from(buf)
        if (ino, major, minor) != want:
            return _MOVED
        if chain_fails(uid, mode, person):
            return None  # the full read says why
    if fn(above, name, AT_SYMLINK_NOFOLLOW, LOOK_MASK, buf):
        return _MOVED
    seen = LOOK.unpack_from(buf)  # fields by index: `_statx.Look`
    if (seen[4], seen[10], seen[11]) != ident:
        return _MOVED
    if not seen[0] & MNT_ID:
        seen = (*seen[:12], -1)  # as `look` gives it on an older kernel
    if (
        pins is not anchors.pins
        and pins[0] is not None
        and anchors.folder_id != pins[0]
    ):
        return _MOVED
    if not _folder_passes(route, mounts, memo, seen):
        return None
    if fn(uid_above, uid_name, AT_SYMLINK_NOFOLLOW, LOOK_MASK, buf):
        return _MOVED
    uid, mode, ino, major, minor = LEVEL.unpack_from(buf)
    if (ino, major, minor) != uid_ident:
        return _MOVED
    if uid_dir_fails(uid, mode, person):
        return None
    if pins is not anchors.pins and pins[1] is not None and anchors.uid_id != pins[1]:
        return _MOVED
    uid_fd = anchors.fds[-1]
    if fn(uid_fd, _STOP, AT_SYMLINK_NOFOLLOW, LOOK_MASK, buf):
        if get_errno() != ENOENT:
            return None  # only "not there" is no stop: the full read says the rest
        if anchors.stop is not None:
            anchors.let_stop_go()
        clear = anchors.clear
        if clear is None:
            if memo.clear is None:
                return None
            clear = anchors.clear = RawRead(
                memo.clear, anchors.folder_id, anchors.uid_id, None
            )
        return clear
    seen = LOOK.unpack_from(buf)
    stop = anchors.stop
    if stop is None or (seen[4], seen[10], seen[11]) != stop[1]:
        return _open_stop(
            route, memo, uid_fd, anchors.folder_id, anchors.uid_id, anchors
        )
    stopped = anchors.stopped
    if stopped is not None and stopped[0] == seen:
        return stopped[1]  # the look the answer was made from, field for field
    found = _stopped(route, memo, seen, anchors.folder_id, anchors.uid_id)
    if found is not None:
        anchors.stopped = (seen, found)
    return found


def _open_stop(
    route: Route,
    memo: ReadMemo,
    uid_fd: int,
    folder_id: Identity,
    uid_id: Identity,
    keep: Anchors | None = None,
) -> RawRead | None:
    """The stop below the uid directory `uid_fd` that passed, as the memo knows it.

    Judged on one descriptor, opened with `O_PATH`: the stop's type gate and its open
    at once (spec 02: on Linux prefer `O_PATH`, which opens nothing). With `keep`, the
    anchors a read went through: a stop they do not hold yet, which answers, is held
    by them from then on; a stop that is not there is then not this pass's to say.

    Raises:
        OSError: the look at the descriptor failed.
    """
    if keep is not None:
        keep.let_stop_go()
    fd = open_path(uid_fd, _STOP)
    if fd < 0:
        clear = memo.clear
        if fd != -ENOENT or clear is None or keep is not None:
            return None
        return RawRead(clear, folder_id, uid_id, None)
    try:
        seen = look(fd)
    except OSError:
        os.close(fd)
        raise
    found = None if seen is None else _stopped(route, memo, seen, folder_id, uid_id)
    if seen is None or found is None or keep is None:
        os.close(fd)
    else:
        keep.stop = (fd, (seen[4], seen[10], seen[11]))
        keep.stopped = (seen, found)
    return found


def _stopped(
    route: Route,
    memo: ReadMemo,
    seen: tuple[int, ...],
    folder_id: Identity,
    uid_id: Identity,
) -> RawRead | None:
    """The STOPPED answer for the stop's look `seen`, when the memo's reading is it."""
    mode = seen[3]
    uid = seen[2]
    if stop_fault(mode, uid, seen[5], route.person, route.max_size):
        return None
    stopped = memo.stopped
    key = stop_key(
        os.makedev(seen[10], seen[11]),
        seen[4],
        seen[8] * _NS + seen[9],
        seen[6] * _NS + seen[7],
        seen[1],
        mode,
        uid,
    )
    if stopped is None or stopped[0] != key:
        return None
    return RawRead(stopped[1], folder_id, uid_id, key[:3])


_NS = 1_000_000_000


def _through(
    route: Route,
    pins: tuple[Identity | None, Identity | None],
    mounts: MountPlan,
    memo: ReadMemo,
    held: list[int],
    ids: list[tuple[int, int, int]],
) -> RawRead | None:
    """The opening pass below a root that passed.

    `held` gets every descriptor it opens, level by level, and `ids` the identity of
    each directory judged.

    Raises:
        OSError: an open or a look failed.
    """
    person = route.person
    names = route.names
    last = len(names) - 1
    # Every directory `O_PATH`, the folder too: the pass lists nothing (it answers
    # only while the kept listing stands), and an `O_PATH` open and close are the
    # lighter calls.
    fd = os.open(route.first, DIR_FLAGS)
    held.append(fd)
    for index in range(last):
        if not _passes(fd, chain_fails, person, ids):
            return None
        fd = os.open(names[index + 1], DIR_FLAGS, dir_fd=fd)
        held.append(fd)
    seen = look(fd)  # fields by index: `_statx.Look`
    if seen is None:
        return None
    ids.append((seen[4], seen[10], seen[11]))
    folder_id = (os.makedev(seen[10], seen[11]), seen[4])
    if pins[0] is not None and folder_id != pins[0]:
        return None
    if not _folder_passes(route, mounts, memo, seen):
        return None
    fd = os.open(route.uid_name, DIR_FLAGS, dir_fd=fd)
    held.append(fd)
    if not _passes(fd, uid_dir_fails, person, ids):
        return None
    ino, major, minor = ids[-1]
    uid_id = (os.makedev(major, minor), ino)
    if pins[1] is not None and uid_id != pins[1]:
        return None
    return _open_stop(route, memo, fd, folder_id, uid_id)


def _passes(
    fd: int,
    fails: Callable[[int, int, int], bool],
    person: int,
    ids: list[tuple[int, int, int]],
) -> bool:
    """Whether the directory `fd` passes the rule `fails`; `ids` then gets its identity.

    Raises:
        OSError: the look failed.
    """
    judged = level(fd)
    if judged is None:
        return False
    uid, mode, ino, major, minor = judged
    if fails(uid, mode, person):
        return False
    ids.append((ino, major, minor))
    return True
