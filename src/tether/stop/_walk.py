"""The folder rule on every read, with the names fixed once per place (`Route`).

A read repeats the walk of `_folder.open_folder_with_stat` from `/` to the folder on
every call; what it repeats is fixed for the place, so a `Route` holds it: each
component as bytes (the first one absolute), each prefix as text for a bounded
reading's progress and for messages. Nothing about the folder's state is kept: every
directory is opened (`O_DIRECTORY|O_NOFOLLOW`, `O_PATH`) relative to the one above it
and judged by its own descriptor, on every read.

Two system calls of the board's walk are not repeated here, because one call already
answers them: where the mount of `/` is pinned, the root is judged by one `statx` of
`/` (which also tells its mount) and the first component is opened by its absolute
name, which resolves from that same root; the folder is judged by one `statx`
(`_statx.look`), which also gives the id of its mount, so its file system is read from
the mount table instead of a `fstatfs`. A failure is described by `_folder`'s own
judgement, so the board and a read say the same.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, final

from ._folder import (
    _READ_DIR_FLAGS,
    DIR_FLAGS,
    RuleBroken,
    _judge_dir,
    _open_failed,
    open_uid_dir_with_stat,
)
from ._judge import chain_fails, uid_dir_fails
from ._statx import Look, judge_root, look

if TYPE_CHECKING:
    from ._bounded import Progress

__all__ = ("NAMESPACE_CHANGED", "Look", "Route", "open_uid", "walk")

NAMESPACE_CHANGED = (
    "the setting changed: this reader now runs in another mount namespace "
    "(or under another root) than the one its run started in; restart the run"
)
"""Why a read holds when `/` is no longer on the mount pinned at its run's start."""


@final
class Route:
    """What every read of one place repeats, made once.

    Its names, its paths and the place's choices.
    """

    __slots__ = (
        "first",
        "folder",
        "judge_fs",
        "max_size",
        "names",
        "person",
        "scan",
        "store_text",
        "texts",
        "uid_name",
        "uid_text",
    )

    def __init__(
        self,
        folder: Path,
        person_uid: int,
        *,
        max_size: int = 0,
        scan: bool = False,
        judge_fs: bool = False,
    ) -> None:
        self.person = person_uid
        """The person honoured."""
        self.max_size = max_size
        """The size bound of a stop."""
        self.scan = scan
        """The place reports other accounts' stops in the folder."""
        self.judge_fs = judge_fs
        """The folder's file system is judged (a shared folder, not opted in)."""
        parts = folder.parts[1:]
        self.names = tuple(os.fsencode(part) for part in parts)
        """The folder's components below `/`, as bytes."""
        self.first = b"/" + self.names[0] if parts else b"/"
        """The first component by its absolute name (opened from the root judged)."""
        self.texts = tuple("/" + "/".join(parts[: at + 1]) for at in range(len(parts)))
        """The path of each component, for progress and messages."""
        self.store_text = str(folder)
        """The folder as text (the mount plan's key)."""
        self.uid_text = str(folder / str(person_uid))
        """The uid directory as text (the mount plan's key)."""
        self.uid_name = os.fsencode(str(person_uid))
        """The uid directory's name, as bytes."""
        self.folder = folder
        """The folder (for messages)."""


def _open_root(person_uid: int, flags: int = DIR_FLAGS) -> int:
    fd = os.open(b"/", flags)
    st = os.fstat(fd)
    if chain_fails(st.st_uid, st.st_mode, person_uid):
        os.close(fd)
        raise RuleBroken(_judge_dir(st, Path("/"), person_uid))
    return fd


def _open_level(route: Route, index: int, fd: int, flags: int) -> int:
    """Open component `index` below `fd` (-1: by its absolute name); judge nothing."""
    name, at = (route.names[index], fd) if fd >= 0 else (route.first, None)
    try:
        try:
            return os.open(name, flags, dir_fd=at)
        except PermissionError:
            if flags == DIR_FLAGS:
                raise
            return os.open(name, DIR_FLAGS, dir_fd=at)  # listed no further
    except OSError as exc:
        raise _open_failed(exc, Path(route.texts[index]), "the folder") from None


def _look_at(fd: int) -> Look:
    """The folder's `look`, made from `os.fstat` where there is no `statx`.

    Its mount id is then -1.
    """
    found = look(fd)
    if found is not None:
        return found
    st = os.fstat(fd)
    ctime, mtime = divmod(st.st_ctime_ns, 10**9), divmod(st.st_mtime_ns, 10**9)
    head = (0, st.st_nlink, st.st_uid, st.st_mode, st.st_ino, st.st_size)
    return (*head, *ctime, *mtime, os.major(st.st_dev), os.minor(st.st_dev), -1)


def walk(
    route: Route,
    person_uid: int,
    *,
    readable: bool,
    progress: Progress | None = None,
    root_mount: int | None = None,
) -> tuple[int, Look]:
    """Walk from `/` to the folder of `route`; return its descriptor and its look.

    Args:
        route: the folder's names.
        person_uid: the person; directories must be owned by root or this uid.
        readable: open the folder itself for reading (to list it) when permitted.
        progress: told the path about to be opened (a bounded reading names it).
        root_mount: the unique mount id of `/` pinned at a run's start; None: the
            root is opened and judged by `fstat`.

    Raises:
        RuleBroken: as `_folder.open_folder_with_stat`.
    """
    names = route.names
    last = len(names) - 1
    fd = -1
    if root_mount is not None:
        seen = judge_root()
        if seen is None or seen[2] != root_mount:
            raise RuleBroken(NAMESPACE_CHANGED)  # row D9
        if chain_fails(seen[0], seen[1], 0):
            fd = _open_root(person_uid)  # the person's root: judged as any directory
    if fd < 0 and (root_mount is None or last < 0):
        fd = _open_root(
            person_uid, _READ_DIR_FLAGS if readable and last < 0 else DIR_FLAGS
        )
    try:
        for index in range(last + 1):
            # The common case inline: each call here costs as much as a system call.
            flags = _READ_DIR_FLAGS if readable and index == last else DIR_FLAGS
            if progress is not None:
                progress.where = route.texts[index]
            try:
                if fd >= 0:
                    nfd = os.open(names[index], flags, dir_fd=fd)
                else:
                    nfd = os.open(route.first, flags)
            except OSError:
                nfd = _open_level(route, index, fd, flags)  # tries again, or says why
            if fd >= 0:
                os.close(fd)
            fd = nfd
            if index < last:
                st = os.fstat(fd)
                if chain_fails(st.st_uid, st.st_mode, person_uid):
                    where = Path(route.texts[index])
                    raise RuleBroken(_judge_dir(st, where, person_uid))
        seen_folder = _look_at(fd)
        if chain_fails(seen_folder[2], seen_folder[3], person_uid):
            where = Path(route.texts[-1]) if names else Path("/")
            why = _judge_dir(os.fstat(fd), where, person_uid)
            raise RuleBroken(why or f"{where} changed while it was judged")
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    return fd, seen_folder


def open_uid(
    route: Route, folder_fd: int, person_uid: int, progress: Progress | None
) -> tuple[int, tuple[int, int]]:
    """Open the uid directory below the checked folder; return it and its identity.

    Raises:
        RuleBroken: as `_folder.open_uid_dir_with_stat`, which says what is wrong.
    """
    if progress is not None:
        progress.where = route.uid_text
    try:
        fd = os.open(route.uid_name, DIR_FLAGS, dir_fd=folder_fd)
    except OSError:
        fd = -1
    else:
        try:
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        if not uid_dir_fails(st.st_uid, st.st_mode, person_uid):
            return fd, (st.st_dev, st.st_ino)
        os.close(fd)
    # Something is wrong: the board's judgement looks again and says what.
    fd, st = open_uid_dir_with_stat(folder_fd, route.folder, person_uid, progress)
    return fd, (st.st_dev, st.st_ino)
