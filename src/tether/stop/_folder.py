"""The folder rule: a walk from `/` on directory descriptors, judged by `fstat` alone.

Each component is opened with `O_DIRECTORY|O_NOFOLLOW` (and `O_PATH` on Linux, which
opens nothing and needs no read permission) relative to the one above it, and judged on
its descriptor: owned by root or the person, and sticky wherever group or others may
write. The uid directory must be owned by the person and writable by no one else. The
filesystem type comes from `/proc/self/mountinfo` through the descriptor's mount id.

Nothing here is cached: every call walks again. Failures raise `RuleBroken`, whose
message says what is wrong and how to repair it; callers turn that into `HOLD`. This
module does not look at the stop file itself (`_reader` does).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from .._accounts import who
from ._judge import OTHERS_WRITE, chain_fails
from ._mounts import untrusted_fs_why

if TYPE_CHECKING:
    from ._bounded import Progress

__all__ = (
    "DIR_FLAGS",
    "RuleBroken",
    "RuleCheck",
    "fs_type",
    "open_folder",
    "open_folder_with_stat",
    "open_uid_dir",
    "open_uid_dir_with_stat",
    "untrusted_fs_why",
)

DIR_FLAGS = (
    os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_PATH", os.O_RDONLY)
)
"""Flags for every directory of the walk: no symlink, no read permission needed."""

_READ_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class RuleBroken(Exception):
    """The folder rule failed; the message says where and how to repair it."""


@attrs.frozen
class RuleCheck:
    """One check of the folder rule, for the setup board."""

    path: Path
    """The directory checked."""
    ok: bool
    """Whether it passed."""
    detail: str
    """What was found (and, on failure, how to repair it)."""


Record = Callable[[RuleCheck], None] | None


def _judge_dir(st: os.stat_result, path: Path, person_uid: int) -> str:
    """Return '' when a chain directory passes, else why it fails."""
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid not in (0, person_uid):
        return (
            f"{path} is owned by uid {st.st_uid}, not by root or uid {person_uid}; "
            "choose a folder whose every parent is owned by root or the person"
        )
    if st.st_mode & OTHERS_WRITE and not st.st_mode & stat.S_ISVTX:
        return (
            f"{path} is writable by group or others without the sticky bit; "
            f"run: chmod +t {path} (or chmod go-w {path})"
        )
    return ""


def _open_failed(exc: OSError, path: Path, what: str) -> RuleBroken:
    if exc.errno in (errno.ENOTDIR, errno.ELOOP):
        why = f"{path} is a symlink or not a directory; setup stores the real path"
    elif exc.errno == errno.ENOENT:
        why = f"{path} cannot be found ({what} is gone)"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        why = f"permission denied on {path}; this account cannot look into {what}"
    else:
        why = f"cannot open {path}: {os.strerror(exc.errno or 0)} ({_errname(exc)})"
    return RuleBroken(why)


def _errname(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, str(exc.errno))


def open_folder(
    folder: Path,
    person_uid: int,
    *,
    record: Record = None,
    readable: bool = False,
    progress: Progress | None = None,
) -> int:
    """Walk from `/` to `folder` and return a descriptor of it; every step is judged.

    As `open_folder_with_stat`, without the folder's `fstat`.

    Raises:
        RuleBroken: as `open_folder_with_stat`.
    """
    fd, _ = open_folder_with_stat(
        folder, person_uid, record=record, readable=readable, progress=progress
    )
    return fd


def open_folder_with_stat(
    folder: Path,
    person_uid: int,
    *,
    record: Record = None,
    readable: bool = False,
    progress: Progress | None = None,
) -> tuple[int, os.stat_result]:
    """Walk from `/` to `folder`; return its descriptor and the `fstat` that judged it.

    A read walks the same way on names fixed once per place (`_walk.walk`).

    Args:
        folder: absolute, normal path of the folder holding the uid directories.
        person_uid: the person; directories must be owned by root or this uid.
        record: called with every check made (the setup board); None on reads.
        readable: open the folder itself for reading (to list it) when permitted;
            `O_DIRECTORY` fails on anything but a directory before opening it.
        progress: told the path about to be opened (a bounded reading names it).

    Raises:
        RuleBroken: a component is missing, a symlink, not a directory, foreign-owned,
            writable by others without the sticky bit, or cannot be opened.
    """
    names = folder.parts[1:]
    last = len(names) - 1
    fd = os.open("/", DIR_FLAGS)
    try:
        for index in range(-1, len(names)):
            if index >= 0:
                flags = _READ_DIR_FLAGS if readable and index == last else DIR_FLAGS
                if progress is not None:
                    progress.where = "/" + "/".join(names[: index + 1])
                try:
                    try:
                        nfd = os.open(names[index], flags, dir_fd=fd)
                    except PermissionError:
                        if flags == DIR_FLAGS:
                            raise
                        nfd = os.open(names[index], DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    path = Path("/", *names[: index + 1])
                    broken = _open_failed(exc, path, "the folder")
                    if record is not None:
                        record(RuleCheck(path, False, str(broken)))
                    raise broken from None
                os.close(fd)
                fd = nfd
            st = os.fstat(fd)
            if record is None and not chain_fails(st.st_uid, st.st_mode, person_uid):
                continue  # the fast path of every read: nothing to say
            path = Path("/", *names[: index + 1])
            why = _judge_dir(st, path, person_uid)
            if record is not None:
                record(RuleCheck(path, not why, why or "owner and mode pass"))
            if why:
                raise RuleBroken(why)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def open_uid_dir(
    folder_fd: int, folder: Path, person_uid: int, progress: Progress | None = None
) -> int:
    """Open `<folder>/<uid>/` relative to the checked folder and judge it.

    As `open_uid_dir_with_stat`, without the directory's `fstat`.

    Raises:
        RuleBroken: as `open_uid_dir_with_stat`.
    """
    fd, _ = open_uid_dir_with_stat(folder_fd, folder, person_uid, progress)
    return fd


def open_uid_dir_with_stat(
    folder_fd: int, folder: Path, person_uid: int, progress: Progress | None = None
) -> tuple[int, os.stat_result]:
    """Open `<folder>/<uid>/` relative to the checked folder; return it and its `fstat`.

    Raises:
        RuleBroken: the directory is missing ("not armed"), a symlink, not a directory,
            owned by another account, or writable by group or others.
    """
    name = str(person_uid)
    if progress is not None:
        progress.where = str(folder / name)
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=folder_fd)
    except FileNotFoundError:
        path = folder / name
        raise RuleBroken(
            f"not armed: {path} is missing; run tether setup as {who(person_uid)}"
        ) from None
    except OSError as exc:
        raise _open_failed(exc, folder / name, "the uid directory") from None
    try:
        st = os.fstat(fd)
        if st.st_uid != person_uid:
            raise RuleBroken(
                f"{folder / name} is owned by uid {st.st_uid}, not by uid {person_uid} "
                "(squatted); root must remove it, then run tether setup"
            )
        if st.st_mode & OTHERS_WRITE:
            raise RuleBroken(
                f"{folder / name} is writable by group or others; "
                f"run: chmod 0755 {folder / name}"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd, st


# statfs f_type -> name, for the common cases; FUSE (subtypes differ) and anything
# unknown are looked up in /proc/self/mountinfo instead.
_MAGIC_NAMES: dict[int, str] = {
    0xEF53: "ext4",
    0x58465342: "xfs",
    0x9123683E: "btrfs",
    0x01021994: "tmpfs",
    0x794C7630: "overlay",
    0x2FC12FC1: "zfs",
    0xF2F52010: "f2fs",
    0x858458F6: "ramfs",
    0xCA451A4E: "bcachefs",
    0x4D44: "vfat",
    0x2011BAB0: "exfat",
    0x5346544E: "ntfs",
    0x7366746E: "ntfs3",
    0x4244: "hfs",
    0x482B: "hfsplus",
    0x6969: "nfs",
    0x517B: "smbfs",
    0xFF534D42: "cifs",
    0xFE534D42: "smb3",
    0x01021997: "9p",
    0x5346414F: "afs",
    0x6B414653: "afs",
    0x00C36400: "ceph",
    0x01161970: "gfs2",
    0x7461636F: "ocfs2",
    0x0BD00BD0: "lustre",
    0x564C: "ncpfs",
}
_libc: ctypes.CDLL | None = None


def _statfs_magic(fd: int) -> int | None:
    """`fstatfs(fd).f_type` (one system call), or None when it cannot be had."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(512)  # larger than any struct statfs
        if _libc.fstatfs(fd, buf) != 0:
            return None
        return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF
    except (OSError, AttributeError):
        return None


def _slurp(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def fs_type(fd: int) -> tuple[str, str] | None:
    """Return (type, options) of the filesystem holding `fd`; None where not on Linux.

    The mount comes from the descriptor's `mnt_id` (`/proc/self/fdinfo`), so a bind
    mount or an overlay is judged by what is really mounted there.

    Raises:
        RuleBroken: on Linux, the mount table cannot be read or names no such mount.
    """
    if not sys.platform.startswith("linux"):
        return None
    magic = _statfs_magic(fd)
    if magic in _MAGIC_NAMES:
        return _MAGIC_NAMES[magic], ""
    try:
        info = _slurp(f"/proc/self/fdinfo/{fd}")
        at = info.find(b"mnt_id:")
        if at < 0:
            raise RuleBroken("cannot tell the filesystem of the folder (no mount id)")
        mnt = info[at + 7 : info.find(b"\n", at)].strip()
        table = b"\n" + _slurp("/proc/self/mountinfo")
    except OSError as exc:
        raise RuleBroken(f"cannot read the mount table: {exc.strerror}") from None
    at = table.find(b"\n" + mnt + b" ")
    if at < 0:
        raise RuleBroken("cannot tell the filesystem of the folder (mount not listed)")
    line = table[
        at + 1 : table.find(b"\n", at + 1) if b"\n" in table[at + 1 :] else None
    ]
    head, _, tail = line.partition(b" - ")
    fields = tail.split(b" ")
    head_fields = head.split(b" ")
    mount_opts = head_fields[5] if len(head_fields) > 5 else b""
    super_opts = fields[2] if len(fields) > 2 else b""
    return fields[0].decode(), (mount_opts + b"," + super_opts).decode()
