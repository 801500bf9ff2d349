"""Reading a stop on one descriptor, no bytes: CLEAR, STOPPED or HOLD.

The read walks the folder rule (`_walk`, on names fixed once per place), opens the uid directory, gates the stop's
name with `fstatat(follow_symlinks=False)` so a FIFO, socket, device or directory is
never opened, then opens the stop with `O_RDONLY|O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC`
relative to the checked uid directory and judges it by `fstat` of that descriptor.
Only `ENOENT` on the stop's own name, after every directory above it passed, is CLEAR;
every other errno and any unexpected exception is HOLD.

Stops of other accounts found in the folder are reported, never honoured. This module
has no memory between reads of its own: pinning identities across a run is
`StopWatch`'s job, and what a watch's reads may reuse is handed in as a `ReadMemo`.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Hashable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, assert_never

import attrs

from ._bounded import Hung, Progress, run_bounded
from ._fast_read import read_plain
from ._folder import DIR_FLAGS, RuleBroken, fs_type
from ._folder import untrusted_fs_why as _untrusted_fs_why
from ._judge import stop_fault, stop_key
from ._mounts import MountPlan, Table, plan
from ._setup import MAX_STOP_SIZE, STOP_NAME
from ._stop_reading import Identity, NotHonoured, RawRead, ReadOutcome, StopReading
from ._walk import Look, Route, open_uid, walk

if TYPE_CHECKING:
    from ._read_memo import ReadMemo

__all__ = (
    "FILE_FLAGS",
    "READ_BOUND",
    "Identity",
    "NotHonoured",
    "Place",
    "RawRead",
    "ReadOutcome",
    "StopReading",
    "read_place",
)

FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
"""How the stop is opened: no symlink, never blocks (a FIFO), never a terminal."""

T = TypeVar("T")

READ_BOUND = 2.0
"""Seconds a reading may take before it holds, naming what hung (spec 02)."""


@attrs.frozen(kw_only=True)
class Place:
    """Where to read: fixed for a store (and for a run)."""

    folder: Path | None
    """The shared folder, or None for the own store."""
    store_dir: Path
    """The directory holding the uid directories."""
    person_uid: int
    """The person honoured."""
    allow_untrusted_fs: bool = False
    """Opt-in (at setup) to a filesystem whose owners cannot be trusted."""
    max_size: int = MAX_STOP_SIZE
    """Size bound of a stop file."""
    scan_others: bool = True
    """Report stops of other accounts in the folder."""
    bound: float = READ_BOUND
    """Seconds a reading may take; one that does not finish holds (spec 02)."""

    uid_dir: Path = attrs.field(
        init=False,
        default=attrs.Factory(
            lambda self: self.store_dir / str(self.person_uid), takes_self=True
        ),
    )
    """`<store dir>/<uid>` (derived)."""
    stop_path: Path = attrs.field(
        init=False,
        default=attrs.Factory(lambda self: self.uid_dir / STOP_NAME, takes_self=True),
    )
    """`<store dir>/<uid>/stop` (derived)."""
    route: Route = attrs.field(
        init=False,
        eq=False,
        repr=False,
        default=attrs.Factory(
            lambda self: Route(
                self.store_dir,
                self.person_uid,
                max_size=self.max_size,
                scan=self.scan_others,
                judge_fs=self.folder is not None and not self.allow_untrusted_fs,
            ),
            takes_self=True,
        ),
    )
    """The walk's names, made once (derived)."""


def _reading(
    place: Place,
    outcome: ReadOutcome,
    *,
    reason: str | None = None,
    not_honoured: tuple[NotHonoured, ...] = (),
) -> StopReading:
    return StopReading(
        outcome=outcome,
        reason=reason,
        folder=place.folder,
        person_uid=place.person_uid,
        stop_path=place.stop_path,
        not_honoured=not_honoured,
    )


def _utc(seconds_ns: int) -> datetime:
    return datetime.fromtimestamp(seconds_ns / 1e9, UTC)


_TYPE_NAMES = (
    (stat.S_ISLNK, "a symlink"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
)


def _kind(mode: int) -> str:
    for test, name in _TYPE_NAMES:
        if test(mode):
            return name
    return "not a regular file"


class _Hold(Exception):
    """An internal early exit: the read holds for the reason given."""


Hook = Callable[[int], None] | None
"""Test seam: called with a descriptor at a chosen step of the read."""


def read_place(
    place: Place,
    *,
    pins: tuple[Identity | None, Identity | None] = (None, None),
    check_fs: bool = True,
    after_gate: Hook = None,
    after_open: Hook = None,
    memo: ReadMemo | None = None,
    table: Table | None = None,
    plain: bool = True,
) -> RawRead:
    """Read the stop at `place` once, within `place.bound` seconds; never raises.

    Before anything is touched the mount table says which mounts the reading crosses
    (`_mounts`): one whose owners cannot be trusted holds at once (unless setup opted
    in); only local kernel filesystems are read inline; anything else is read by a
    bounded worker, and a reading that does not finish in time holds, naming the path
    it hung at.

    Args:
        place: where to read and whose stop to honour.
        pins: identities of the folder and the uid directory fixed at a run's start;
            a different identity holds ("the setting changed"). None: not pinned.
        check_fs: look up the filesystem type (a watch may skip it once the folder's
            device is pinned).
        after_gate: test seam, called with the uid directory's descriptor between the
            type gate and the open of the stop.
        after_open: test seam, called with the stop's descriptor between its open and
            its `fstat`.
        memo: what earlier reads of `place` by the same watch found, reused while the
            sign it is keyed on is unchanged (`_read_memo`); None: derive everything.
        table: the mount table the caller looked at just before (`_mounts.table`);
            None: look now.
        plain: try the plain pass first (`_fast_read`) where there is a memo; False:
            the caller tried it on this read already.
    """
    try:
        route = place.route
        mounts = plan(route.store_text, route.uid_text, table)
        judged = check_fs and route.judge_fs
        if judged and mounts is not None and mounts.untrusted is not None:
            # Judged from the table, before any system call into the mount.
            mount, why = mounts.untrusted
            reason = (
                f"{why} (mounted at {mount.point}); choose another folder, "
                "or opt in at setup"
            )
            return RawRead(reading=_reading(place, ReadOutcome.HOLD, reason=reason))
        hooks = (after_gate, after_open)
        if mounts is not None and mounts.local:
            # Local kernel filesystems only: every call returns (`within_bound`).
            plainly = (
                plain and memo is not None and after_gate is None and after_open is None
            )
            if plainly and (check_fs or not route.judge_fs):
                assert memo is not None
                found = read_plain(route, pins, mounts, memo)
                if found is not None:
                    return found  # as a full read found it before: `_fast_read`
            return _read_now(place, pins, check_fs, hooks, mounts, memo, None)

        def read(progress: Progress | None) -> RawRead:
            return _read_now(place, pins, check_fs, hooks, mounts, memo, progress)

        key = (place.store_dir, place.person_uid)
        return within_bound(mounts, key, read, bound=place.bound)
    except Hung as exc:
        return RawRead(reading=_reading(place, ReadOutcome.HOLD, reason=str(exc)))
    except Exception as exc:  # spec 02: any unexpected exception holds
        reason = f"the stop reader failed ({exc!r}); holding until a clear read"
        return RawRead(reading=_reading(place, ReadOutcome.HOLD, reason=reason))


def within_bound(
    mounts: MountPlan | None,
    key: Hashable,
    fn: Callable[[Progress | None], T],
    *,
    bound: float,
) -> T:
    """Run `fn` inline where `mounts` are all local, else in the bounded worker of `key`.

    Raises:
        Hung: the worker did not finish within `bound` seconds (or is still blocked).
    """
    if mounts is not None and mounts.local:
        return fn(None)  # local kernel filesystems only: every call returns
    return run_bounded(key, fn, bound=bound)


def _errtext(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "?")
    return f"{os.strerror(exc.errno or 0)} ({name})"


def _read_now(
    place: Place,
    pins: tuple[Identity | None, Identity | None],
    check_fs: bool,
    hooks: tuple[Hook, Hook],
    mounts: MountPlan | None,
    memo: ReadMemo | None,
    progress: Progress | None,
) -> RawRead:
    fds: list[int] = []
    folder_id: Identity | None = None
    uid_id: Identity | None = None
    others: tuple[NotHonoured, ...] = ()
    try:
        folder_fd, seen = walk(
            place.route,
            place.person_uid,
            readable=place.scan_others,
            progress=progress,
            root_mount=None if memo is None else memo.root_mount,
        )
        fds.append(folder_fd)
        folder_id = (os.makedev(seen[10], seen[11]), seen[4])
        if pins[0] is not None and folder_id != pins[0]:
            raise _Hold(
                f"the setting changed: {place.store_dir} is not the folder this run "
                "started with; restart the run to read the new one"
            )
        # spec 02: the filesystem rule is the shared folder's; the own store is the
        # account's own files, read and written by the same account.
        judge_fs = (
            check_fs and place.folder is not None and not place.allow_untrusted_fs
        )
        if judge_fs:
            # Judged on every read by the mount the kernel names for the descriptor
            # (spec 02: the chain's checks are cache-free), so a file system mounted
            # or remounted meanwhile is seen.
            _judge_fs(folder_fd, place.store_dir, seen[12], mounts)
        if place.scan_others:
            names = _names(folder_fd, seen, memo)
            skip = frozenset() if mounts is None else mounts.skip
            if names:
                others = _scan_others(folder_fd, names, place, skip, progress)
            if memo is not None and mounts is not None:
                mine = str(place.person_uid)
                if all(name == mine or name in skip for name in names):
                    memo.mark_alone(seen, skip)
        uid_fd, uid_id = open_uid(place.route, folder_fd, place.person_uid, progress)
        fds.append(uid_fd)
        if pins[1] is not None and uid_id != pins[1]:
            raise _Hold(
                f"the setting changed: {place.uid_dir} was replaced since this run "
                "started; restart the run"
            )
        if judge_fs and mounts is None:
            # A mount on the uid dir too (spec 02); the table, when it can be read,
            # judged every mount at or under the uid dir already.
            _judge_fs(uid_fd, place.uid_dir, -1, None)
        reading, stop_id = _judge_stop(place, uid_fd, hooks, fds, memo, progress)
    except (RuleBroken, _Hold) as exc:
        reading, stop_id = _reading(place, ReadOutcome.HOLD, reason=str(exc)), None
    except OSError as exc:
        reading = _reading(
            place, ReadOutcome.HOLD, reason=f"cannot read the stop: {_errtext(exc)}"
        )
        stop_id = None
    except Exception as exc:  # spec 02: any unexpected exception holds
        reason = f"the stop reader failed ({exc!r}); holding until a clear read"
        reading = _reading(place, ReadOutcome.HOLD, reason=reason)
        stop_id = None
    for fd in reversed(fds):
        try:
            os.close(fd)
        except OSError as exc:
            # A close that fails (EIO from a FUSE daemon's flush) leaves the reading
            # unconfirmed: it holds, and never escapes (spec 02: HOLD).
            if reading.outcome is not ReadOutcome.HOLD:
                reading = _reading(
                    place,
                    ReadOutcome.HOLD,
                    reason=f"closing a descriptor of {place.uid_dir} failed: "
                    f"{_errtext(exc)}",
                )
                stop_id = None
    if others:
        reading = attrs.evolve(reading, not_honoured=reading.not_honoured + others)
    return RawRead(reading, folder_id, uid_id, stop_id)  # positional: the cheaper call


def _judge_fs(fd: int, where: Path, mount_id: int, mounts: MountPlan | None) -> None:
    if why := _fs_why(fd, mount_id, mounts):
        raise _Hold(f"{why} ({where}); choose another folder, or opt in at setup")


def _fs_why(fd: int, mount_id: int, mounts: MountPlan | None) -> str:
    """Why the file system of `fd` cannot be trusted, '' when it can.

    The mount the kernel named for `fd` (`mount_id`, from its `statx`) is judged by
    the mount table polled for this read; a mount the table does not list (or no
    table, or no id) is asked of the kernel again (`fs_type`).
    """
    if mounts is not None:
        why = mounts.whys.get(mount_id)
        if why is not None:
            return why
    found = fs_type(fd)
    return "" if found is None else _untrusted_fs_why(*found)


def _judge_stop(
    place: Place,
    uid_fd: int,
    hooks: tuple[Hook, Hook],
    fds: list[int],
    memo: ReadMemo | None,
    progress: Progress | None,
) -> tuple[StopReading, tuple[int, int, int] | None]:
    path = place.stop_path
    after_gate, after_open = hooks
    if progress is not None:
        progress.where = str(path)
    try:
        gate = os.stat(STOP_NAME, dir_fd=uid_fd, follow_symlinks=False)
    except FileNotFoundError:
        return _clear(place, memo), None
    if not stat.S_ISREG(gate.st_mode):
        # Never opened: a FIFO would block, a device would run its driver.
        raise _Hold(f"{path} is {_kind(gate.st_mode)}, not a stop file; remove it")
    if after_gate is not None:
        after_gate(uid_fd)
    try:
        fd = os.open(STOP_NAME, FILE_FLAGS, dir_fd=uid_fd)
    except FileNotFoundError:
        return _clear(place, memo), None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _Hold(f"{path} is a symlink, not a stop file; remove it") from None
        raise
    fds.append(fd)
    if after_open is not None:
        after_open(fd)
    st = os.fstat(fd)  # the only judgement: the descriptor, never the name
    uid = st.st_uid
    match stop_fault(st.st_mode, uid, st.st_size, place.person_uid, place.max_size):
        case "":
            pass
        case "type":
            raise _Hold(
                f"{path} became {_kind(st.st_mode)} while it was read; remove it"
            )
        case "unmapped":
            raise _Hold(
                f"{path} is owned by uid {uid}, the kernel's stand-in for an owner it "
                "cannot map: who set it cannot be told"
            )
        case "foreign":
            foreign = NotHonoured(
                path,
                uid,
                f"it is owned by uid {uid}; this account honours uid {place.person_uid}",
            )
            return _reading(place, ReadOutcome.CLEAR, not_honoured=(foreign,)), None
        case "size":
            raise _Hold(
                f"{path} is {st.st_size} bytes, more than a stop's {place.max_size}; "
                "a malformed stop holds: remove it and set the stop again"
            )
        case unexpected:
            assert_never(unexpected)
    key = stop_key(
        st.st_dev,
        st.st_ino,
        st.st_mtime_ns,
        st.st_ctime_ns,
        st.st_nlink,
        st.st_mode,
        uid,
    )
    stop_id = key[:3]
    if memo is not None and memo.stopped is not None and memo.stopped[0] == key:
        return memo.stopped[1], stop_id
    notes: list[str] = []
    if st.st_mode & stat.S_IWOTH:
        notes.append(f"{path} is writable by others: its time may have been changed")
    if st.st_nlink > 1:
        notes.append(f"{path} has {st.st_nlink} links")
    reading = StopReading(
        outcome=ReadOutcome.STOPPED,
        set_by_uid=st.st_uid,
        set_at=_utc(st.st_mtime_ns),
        ctime=_utc(st.st_ctime_ns),
        nlink=st.st_nlink,
        notes=tuple(notes),
        folder=place.folder,
        person_uid=place.person_uid,
        stop_path=place.stop_path,
    )
    if memo is not None:
        memo.stopped = (key, reading)
    return reading, stop_id


def _clear(place: Place, memo: ReadMemo | None) -> StopReading:
    if memo is None:
        return _reading(place, ReadOutcome.CLEAR)
    if memo.clear is None:
        memo.clear = _reading(place, ReadOutcome.CLEAR)
    return memo.clear


def _names(folder_fd: int, seen: Look, memo: ReadMemo | None) -> tuple[str, ...]:
    """The folder's names; `()` when it cannot be listed (an `O_PATH` descriptor)."""
    try:
        if memo is None:
            return tuple(os.listdir(folder_fd))
        return memo.names(folder_fd, seen, seen[6] * 1_000_000_000 + seen[7])
    except OSError:
        return ()


def _scan_others(
    folder_fd: int,
    names: tuple[str, ...],
    place: Place,
    skip: frozenset[str],
    progress: Progress | None,
) -> tuple[NotHonoured, ...]:
    """Report stops other accounts left in the folder; never honours one, never raises.

    Never follows a link (a link in the sticky folder may point into a mount that
    never answers) and never enters a mount point: each entry is looked at with
    `fstatat(AT_SYMLINK_NOFOLLOW)`, and only a real directory is opened (`O_PATH`,
    `O_NOFOLLOW`) to look for its `stop`.
    """
    mine = str(place.person_uid)
    found: list[NotHonoured] = []
    for name in names:
        if name == mine or name in skip:
            continue
        if progress is not None:
            progress.where = str(place.store_dir / name)
        try:
            entry = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
            if not stat.S_ISDIR(entry.st_mode):
                continue  # a link, a file, a FIFO: nothing is looked up through it
            sub = os.open(name, DIR_FLAGS, dir_fd=folder_fd)
        except OSError:
            continue
        try:
            st = os.stat(STOP_NAME, dir_fd=sub, follow_symlinks=False)
        except OSError:
            continue  # no stop in it
        finally:
            os.close(sub)
        if st.st_uid == place.person_uid:
            why = f"only {place.stop_path} is honoured"
        else:
            why = f"this account honours uid {place.person_uid}"
        found.append(NotHonoured(place.store_dir / name / STOP_NAME, st.st_uid, why))
    return tuple(found)
