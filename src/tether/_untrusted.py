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
  and a temp file renamed within that descriptor (`write_beneath`).

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
    "dir_beneath",
    "kind_words",
    "open_dir_beneath",
    "open_regular_at",
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
) -> None:
    """Replace the file `relative` below `root` with `data`, following no link on the way.

    Missing folders are made (0700); the file is a temp file renamed into place within
    the folder's descriptor (`write_atomic_at`), so a link or FIFO planted at its name is
    replaced, never followed or written through.

    Raises:
        OSError: as `open_dir_beneath`, or the write failed (`relative` left as it was).
    """
    *folder, name = _parts(relative)
    with dir_beneath(root, PurePath(*folder) if folder else ".", create=True) as fd:
        write_atomic_at(fd, name, data, mode=mode)
