"""Files a walled tree could have written, handled as data (spec 01 S16).

tether works outside the wall, as the person, on what agents wrote: a lane and its `.git`,
the declared writable folders, a hook's call record, an agent CLI's session files. Any
name there may be a link, a FIFO, a device or a file that never ends. Every read and
write of such a place goes through this module:

- a file is judged by `fstatat` before it is opened (a device is never opened: opening
  some runs their driver), opened `O_NOFOLLOW | O_NONBLOCK`, judged again by `fstat`, and
  read up to a bound (`read_regular_at`, `read_beneath`);
- a folder is reached one component at a time below a descriptor tether holds, each
  opened `O_PATH | O_NOFOLLOW | O_DIRECTORY` (`open_dir_beneath`), so a link planted on
  the way is refused, never followed; what tether writes there is made with `mkdirat`
  and a temp file renamed within that descriptor (`write_beneath`, `copy_beneath`);
- a folder whose name is tether's own (a lane's `.tether/`) is used when it is a
  folder, and whatever else stands at its name is removed, never followed
  (`own_dir_at`); a folder is listed from its descriptor, bounded (`list_beneath`).

A refusal is an `OSError` whose message says what was found (`a FIFO`, `a symlink`,
`larger than N bytes`); callers turn it into a one-line reason (a lane held, a stage
failed), never a hang or a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path, PurePath
from typing import TYPE_CHECKING

from ._fs import write_atomic_at

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = (
    "READ_FLAGS",
    "copy_beneath",
    "dir_beneath",
    "kind_words",
    "list_beneath",
    "open_dir_beneath",
    "open_regular_at",
    "own_dir_at",
    "read_beneath",
    "read_regular_at",
    "write_beneath",
)

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
"""How a file a tree could have written is opened for reading."""
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

_KIND_WORDS = {
    stat.S_IFREG: "a regular file",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symlink",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def kind_words(mode: int) -> str:
    """What a file of `mode` is, in words ("a FIFO", "a symlink", ...)."""
    return _KIND_WORDS.get(stat.S_IFMT(mode), "a special file")


def open_regular_at(dir_fd: int, name: str) -> int:
    """Open a regular file for reading without ever blocking on, or opening, anything else.

    `name` is judged with `fstatat` first, so a device is never opened; then it is opened
    `O_NOFOLLOW | O_NONBLOCK`, so a link or FIFO swapped in between is not followed or
    cannot hang it, and judged again by `fstat`.

    Raises:
        OSError: the file is missing, unreadable, or not a regular file (`EINVAL`, with
            the kind in the message).
    """
    mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    if not stat.S_ISREG(mode):
        raise OSError(errno.EINVAL, f"not a regular file ({kind_words(mode)})")
    fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise OSError(errno.EINVAL, f"not a regular file ({kind_words(mode)})")
    return fd


def read_regular_at(dir_fd: int, name: str, limit: int) -> bytes:
    """Read a whole regular file of at most `limit` bytes (see `open_regular_at`).

    Raises:
        OSError: as `open_regular_at`, or `EFBIG` when the file is larger than `limit`.
    """
    fd = open_regular_at(dir_fd, name)
    try:
        if os.fstat(fd).st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes")
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes")
        return data
    finally:
        os.close(fd)


def _parts(relative: str | PurePath) -> list[str]:
    parts = [p for p in PurePath(relative).parts if p not in ("", ".")]
    if PurePath(relative).is_absolute() or ".." in parts:
        raise OSError(errno.EINVAL, f"{relative}: not a plain relative path")
    return parts


def open_dir_beneath(
    root: Path | int, relative: str | PurePath = ".", *, create: bool = False
) -> int:
    """Open the folder `relative` below `root` as an `O_PATH` descriptor, following no link.

    `root` is a path tether chose (opened as it is) or a descriptor it holds. Each
    component below it is opened `O_NOFOLLOW | O_DIRECTORY`; with `create`, a missing one
    is made (`mkdirat`, mode 0700). The caller closes the descriptor.

    Raises:
        OSError: a component is a link or not a folder (the message says which and what
            it is), is missing (without `create`), or `relative` leaves `root`.
    """
    parts = _parts(relative)
    fd = (
        os.open(root, _DIR_FLAGS & ~os.O_NOFOLLOW)
        if isinstance(root, Path)
        else os.open(".", _DIR_FLAGS, dir_fd=root)
    )
    try:
        for part in parts:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                mode = os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode
                raise OSError(
                    errno.ENOTDIR, f"{part} is {kind_words(mode)}, not a folder"
                ) from None
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def dir_beneath(
    root: Path | int, relative: str | PurePath = ".", *, create: bool = False
) -> Iterator[int]:
    """`open_dir_beneath` as a context manager that closes the descriptor."""
    fd = open_dir_beneath(root, relative, create=create)
    try:
        yield fd
    finally:
        os.close(fd)


def read_beneath(root: Path | int, relative: str | PurePath, limit: int) -> bytes:
    """Read the regular file `relative` below `root`, following no link on the way.

    Raises:
        OSError: as `open_dir_beneath` and `read_regular_at`.
    """
    *folder, name = _parts(relative) or ["."]
    with dir_beneath(root, PurePath(*folder) if folder else ".") as fd:
        return read_regular_at(fd, name, limit)


def write_beneath(
    root: Path | int,
    relative: str | PurePath,
    data: bytes,
    *,
    mode: int = 0o600,
    sync: bool = True,
) -> None:
    """Replace the file `relative` below `root` with `data`, following no link on the way.

    Missing folders are made (0700); the file is a temp file renamed into place within
    the folder's descriptor (`write_atomic_at`), so a link or FIFO planted at its name is
    replaced, never followed or written through. `sync`: as `write_atomic_at`.

    Raises:
        OSError: as `open_dir_beneath`, or the write failed (`relative` left as it was).
    """
    *folder, name = _parts(relative)
    with dir_beneath(root, PurePath(*folder) if folder else ".", create=True) as fd:
        write_atomic_at(fd, name, data, mode=mode, sync=sync)


def own_dir_at(dir_fd: int, name: str) -> tuple[int, str | None]:
    """Open tether's own folder `name` in `dir_fd` (`O_PATH`), made if missing (0700).

    For a folder whose name is tether's (a lane's `.tether/`): a folder there is used;
    anything else at its name (a link, a file, a FIFO) is removed, never followed, and
    the folder made in its place. The caller closes the descriptor.

    Returns:
        The descriptor, and what stood at the name instead of a folder (None if nothing
        did), for the caller's log.

    Raises:
        OSError: the folder could not be made (a second try lost a race again).
    """
    replaced: str | None = None
    for _ in range(2):
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=dir_fd), replaced
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
            replaced = kind_words(mode)
            os.unlink(name, dir_fd=dir_fd)
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=dir_fd)
    return os.open(name, _DIR_FLAGS, dir_fd=dir_fd), replaced


def list_beneath(
    root: Path | int, relative: str | PurePath = ".", *, limit: int
) -> list[tuple[str, int]]:
    """The entries of the folder `relative` below `root`: (name, kind), no link followed.

    The kind is `stat.S_IFMT` of the entry itself (a link is `S_IFLNK`). At most `limit`
    entries are read.

    Raises:
        OSError: as `open_dir_beneath`, or `E2BIG` when the folder holds more than
            `limit` entries.
    """
    with dir_beneath(root, relative) as where:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=where)
        try:
            found: list[tuple[str, int]] = []
            with os.scandir(fd) as entries:
                for entry in entries:
                    if len(found) >= limit:
                        raise OSError(errno.E2BIG, f"more than {limit} entries")
                    kind = stat.S_IFMT(entry.stat(follow_symlinks=False).st_mode)
                    found.append((entry.name, kind))
            return found
        finally:
            os.close(fd)


def copy_beneath(
    src_root: Path | int,
    src: str | PurePath,
    dst_root: Path | int,
    dst: str | PurePath,
    *,
    limit: int,
    mode: int = 0o600,
) -> int:
    """Copy the regular file `src` below `src_root` to `dst` below `dst_root`, bounded.

    Both folders are reached following no link (`open_dir_beneath`; missing folders
    of `dst` are made 0700); the source is judged as `open_regular_at` judges it and
    copied only if it holds at most `limit` bytes (its size is checked first, and the
    copy stops past `limit` if it grows meanwhile); the copy is a temp file renamed
    into place within the destination's descriptor, so a link or FIFO planted at `dst`
    is replaced, never followed or written through.

    Returns:
        The bytes copied.

    Raises:
        OSError: as `open_dir_beneath` and `open_regular_at`, `EFBIG` past `limit`, or
            the copy failed (`dst` left as it was).
    """
    *src_folder, src_name = _parts(src) or ["."]
    *dst_folder, dst_name = _parts(dst)
    with dir_beneath(src_root, PurePath(*src_folder) if src_folder else ".") as sfd:
        source = open_regular_at(sfd, src_name)
    try:
        if os.fstat(source).st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes")
        with dir_beneath(
            dst_root, PurePath(*dst_folder) if dst_folder else ".", create=True
        ) as dfd:
            tmp = f".{dst_name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            out = os.open(tmp, flags, mode & 0o777, dir_fd=dfd)
            try:
                try:
                    copied = 0
                    while True:
                        sent = os.sendfile(
                            out, source, None, min(limit + 1 - copied, 1 << 24)
                        )
                        if not sent:
                            break
                        copied += sent
                        if copied > limit:
                            raise OSError(errno.EFBIG, f"larger than {limit} bytes")
                    os.fsync(out)
                finally:
                    os.close(out)
                os.rename(tmp, dst_name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                raise
            return copied
    finally:
        os.close(source)
