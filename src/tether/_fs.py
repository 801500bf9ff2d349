"""Durable, owner-only files: atomic writes and the owner-only check.

This module owns how tether writes and trusts its own files. It does not know what the
files mean (stops, setup records, ledgers are their modules' business).
"""

from __future__ import annotations

import contextlib
import os
import stat

from .errors import StoreError

TYPE_CHECKING = False
if TYPE_CHECKING:  # the per-call hook reads its setup record without pathlib
    from pathlib import Path

__all__ = (
    "check_owner_only",
    "fsync_dir",
    "judge_owner_only",
    "write_atomic",
    "write_atomic_at",
)


def fsync_dir(path: Path) -> None:
    """Flush a directory's entries to disk, so a rename in it survives a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(
    path: Path, data: bytes, *, mode: int = 0o600, owner: tuple[int, int] | None = None
) -> None:
    """Replace `path` with `data`: temp file in the same directory, fsync, rename, fsync.

    The temp file is created with `O_CREAT|O_EXCL|O_NOFOLLOW`, so nothing placed at its name
    beforehand is followed or reused. Readers see the old content or the new, never a part.

    Raises:
        OSError: the directory is missing, the disk is full or the filesystem read-only;
            the temp file is removed and `path` is left as it was.
    """
    directory = path.parent
    tmp = directory / f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, mode & 0o777)
    try:
        try:
            if owner is not None:
                with contextlib.suppress(PermissionError):
                    os.fchown(fd, *owner)
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def write_atomic_at(
    dir_fd: int,
    name: str,
    data: bytes,
    *,
    mode: int = 0o600,
    owner: tuple[int, int] | None = None,
    sync: bool = True,
) -> None:
    """Replace `name` in the directory `dir_fd` with `data`, as `write_atomic` does.

    Every step is relative to the descriptor (`openat`, `renameat` within it, `fsync`
    of it): nothing resolves a path again, so a directory swapped for a link meanwhile
    is never followed. `dir_fd` may be an `O_PATH` descriptor. Without `sync`, nothing
    is flushed to disk (for a file whose loss at a power cut costs nothing, as git's
    own refs and index by default).

    Raises:
        OSError: as `write_atomic`; the temp file is removed and `name` left as it was.
    """
    tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, mode & 0o777, dir_fd=dir_fd)
    try:
        try:
            if owner is not None:
                with contextlib.suppress(PermissionError):
                    os.fchown(fd, *owner)
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    if not sync:
        return
    # "." opens the directory the descriptor already holds: no path is resolved.
    with contextlib.suppress(PermissionError):
        sync_fd = os.open(
            ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd
        )
        try:
            os.fsync(sync_fd)
        finally:
            os.close(sync_fd)


def check_owner_only(path: Path | str) -> os.stat_result:
    """Return the stat of a file of tether's own, after checking it is owner-only.

    The file must be a regular file (not a symlink) owned by the calling account and
    writable by no one else.

    Raises:
        StoreError: the file breaks the rule; the message says how to repair it.
    """
    return judge_owner_only(os.stat(path, follow_symlinks=False), path)


def judge_owner_only(st: os.stat_result, path: Path | str) -> os.stat_result:
    """Apply the owner-only rule to a stat (from `fstat` of an open descriptor, ideally).

    Raises:
        StoreError: the file breaks the rule; the message says how to repair it.
    """
    if not stat.S_ISREG(st.st_mode):
        raise StoreError(f"{path} is not a regular file; remove it and try again")
    if st.st_uid != os.geteuid():
        raise StoreError(
            f"{path} is owned by uid {st.st_uid}, not by this account "
            f"(uid {os.geteuid()}); move it away and try again"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StoreError(f"{path} is writable by others; run: chmod go-w {path}")
    return st
