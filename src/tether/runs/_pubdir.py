"""This account's directory of the shared folder, where it publishes for the person.

`<folder>/<account uid>/` and the directories below it are this account's own (mode
0755: the person reads them, no one else writes them); they are reached through the
folder rule's walk and opened `O_NOFOLLOW`, each judged by `fstat`. `_publish` and
`_bundle` write there; the person's side reads with `_publish`'s reader.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import TYPE_CHECKING, Final

from .._untrusted import kind_words
from ..stop._folder import RuleBroken, open_folder

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ("BUNDLE_BOUND", "OWN_DIR_FLAGS", "open_own_dir", "sub_dir")

BUNDLE_BOUND: Final = 1 << 30
"""Bytes a lane's bundle may hold; a larger one is not published (the record says so)."""
OWN_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""How a directory of this account's is opened (to list it, to change its mode)."""


def _judge_mine(st: os.stat_result, where: Path) -> None:
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(errno.ENOTDIR, f"{where} is {kind_words(st.st_mode)}")
    if st.st_uid != os.geteuid():
        raise OSError(
            errno.EPERM,
            f"{where} is owned by uid {st.st_uid}, not this account: root must remove "
            "it (tether setup --system makes it again)",
        )


def sub_dir(parent: int, name: str, where: Path) -> int:
    """Open (making it, mode 0755) the directory `name` of this account's in `parent`."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=parent)
    fd = os.open(name, OWN_DIR_FLAGS, dir_fd=parent)
    try:
        st = os.fstat(fd)
        _judge_mine(st, where)
        if stat.S_IMODE(st.st_mode) != 0o755:
            os.fchmod(fd, 0o755)  # the person reads it; no one else writes it
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_own_dir(root: Path, person_uid: int) -> int:
    """A descriptor of this account's directory `root` (made when the folder allows).

    The folder above it is walked with the folder rule. The caller closes it.

    Raises:
        OSError: the folder breaks its rule, or the directory cannot be made or is not
            this account's.
    """
    try:
        folder = open_folder(root.parent, person_uid)
    except RuleBroken as exc:
        raise OSError(errno.EPERM, str(exc)) from None
    try:
        try:
            return sub_dir(folder, root.name, root)
        except PermissionError as exc:
            raise OSError(
                errno.EACCES,
                f"cannot make {root}: {exc.strerror}; as root, tether setup --system "
                "makes it",
            ) from None
    finally:
        os.close(folder)
