"""Paths resolved beneath a directory descriptor, so that no link swap races a check.

The file tools never hand a path string to the kernel twice. A path inside the
workspace is resolved beneath a descriptor of the workspace: with `openat2` and
`RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS` where the kernel has it (Linux 5.6 and
later), otherwise by a walk of one component at a time, each opened `O_NOFOLLOW`
relative to the descriptor of the one before, with symlinks read and interpreted
here (`..` goes back to a descriptor already held; an absolute link must name a place
inside the workspace). Either way the result is a descriptor of the directory that
holds the file and the file's own name, and every later operation (`fstatat`,
`openat`, `mkdirat`, `renameat`) is relative to that descriptor: a directory swapped
for a symlink meanwhile is never followed (S15).

A symlink inside the workspace that points inside stays usable; one that leads out is
refused (`PathEscapes`). A path given outside the workspace (an absolute path that an
allow rule named, or that the person approved) is resolved the same way from `/`, with
the usual meaning of links. This module decides nothing about permission.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import struct
from typing import TYPE_CHECKING, Final, Literal

import attrs

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

__all__ = (
    "Anchor",
    "PathEscapes",
    "ResolverKind",
    "anchor_for",
    "located",
    "path_resolution",
    "resolver_kind",
)

ResolverKind = Literal["openat2", "walk"]
"""How paths are resolved beneath the workspace: the kernel's `openat2`, or the walk."""

_SYS_OPENAT2: Final = 437
"""The same number on every Linux architecture (the unified syscall table)."""
_RESOLVE_NO_MAGICLINKS: Final = 0x02
_RESOLVE_BENEATH: Final = 0x08
_RESOLVE_IN_ROOT: Final = 0x10
_MAX_LINKS: Final = 40
"""Symlinks followed in one resolution at most (the kernel's own bound)."""
_DIR_FLAGS: Final = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


class PathEscapes(OSError):
    """The path leads out of the directory it must stay beneath (a `..` or a link)."""

    def __init__(self) -> None:
        super().__init__(errno.EXDEV, "leads outside the workspace")


_OPEN_HOW: Final = struct.Struct("=QQQ")
"""`struct open_how { u64 flags; u64 mode; u64 resolve; }`."""


@functools.cache
def _syscall() -> ctypes._FuncPointer | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    fn.argtypes = (
        ctypes.c_long,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
    )
    return fn


def _openat2(dir_fd: int, path: str, flags: int, resolve: int) -> int:
    """Call `openat2(2)`; raise `OSError` as `os.open` would."""
    fn = _syscall()
    if fn is None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    how = _OPEN_HOW.pack(flags, 0, resolve)
    fd = int(fn(_SYS_OPENAT2, dir_fd, os.fsencode(path), how, len(how)))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return fd


@functools.cache
def resolver_kind() -> ResolverKind:
    """Tell which resolution is in force here: `openat2`, or the `O_NOFOLLOW` walk.

    Both resolve beneath a descriptor and never follow a link the kernel picks; the
    walk is the fallback where `openat2` is missing (older kernels, other systems, a
    sandbox that filters it).
    """
    if not hasattr(os, "O_PATH"):
        return "walk"  # pragma: no cover - Linux has O_PATH; this is other systems
    root = os.open("/", _DIR_FLAGS)
    try:
        os.close(_openat2(root, ".", _DIR_FLAGS, _RESOLVE_BENEATH))
    except OSError:
        return "walk"
    finally:
        os.close(root)
    return "openat2"


path_resolution = resolver_kind
"""`tether.host.path_resolution`: the public name of `resolver_kind`."""


def _readlink(name: str, dir_fd: int) -> str | None:
    """The target of the symlink `name` in `dir_fd`, or None if it is not one."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOENT):
            return None
        raise


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


@attrs.frozen
class Anchor:
    """A directory paths are resolved beneath: the workspace, or `/` for outside paths."""

    names: tuple[str, ...]
    """Absolute paths naming the directory: an absolute link must start with one."""
    contained: bool
    """True for the workspace: `..` above it or a link out is refused. False for `/`,
    where `..` stays at `/` as usual."""

    def open(self) -> int:
        """Return a descriptor of the directory (`O_PATH`)."""
        return os.open(self.names[0], _DIR_FLAGS)

    def _tail(self, target: str) -> str | None:
        """The part of absolute `target` below this directory, or None if not below."""
        for name in self.names:
            base = name.rstrip("/")
            if target in (base, name):
                return "."
            if target.startswith(base + "/"):
                return target[len(base) + 1 :]
        return None

    def _flags(self) -> int:
        kind = _RESOLVE_BENEATH if self.contained else _RESOLVE_IN_ROOT
        return kind | _RESOLVE_NO_MAGICLINKS

    def locate(self, root_fd: int, rel: str, *, create: bool) -> tuple[int, str]:
        """Resolve `rel` beneath `root_fd`: the holding directory's descriptor and name.

        Symlinks are followed, the last one included (its target is what is returned),
        but only within the directory. With `create`, missing parent directories are
        made with `mkdirat`. The name is `.` when `rel` names a directory itself. The
        caller closes the descriptor.

        Raises:
            PathEscapes: the path leads out of a contained directory.
            OSError: a parent is missing (without `create`) or not a directory, or too
                many links.
        """
        if resolver_kind() == "walk":
            return self._walk(root_fd, rel, create=create)
        for _ in range(_MAX_LINKS):
            parts = _parts(rel)
            if not parts or parts[-1] == "..":
                return self._walk(root_fd, rel, create=create)
            parent = "/".join(parts[:-1]) or "."
            try:
                dir_fd = _openat2(root_fd, parent, _DIR_FLAGS, self._flags())
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    continue  # a rename raced a `..`: the kernel asks to try again
                if exc.errno in (errno.EXDEV, errno.ELOOP) or (
                    create and exc.errno == errno.ENOENT
                ):
                    # An absolute link (which the kernel refuses beneath a directory
                    # even when it points inside), an escape, or parents to make: the
                    # walk judges each link itself and makes what is missing.
                    return self._walk(root_fd, rel, create=create)
                raise
            try:
                target = _readlink(parts[-1], dir_fd)
            except BaseException:
                os.close(dir_fd)
                raise
            if target is None:
                return dir_fd, parts[-1]
            os.close(dir_fd)
            rel = self._follow(parent, target)
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))

    def _follow(self, parent: str, target: str) -> str:
        if not target.startswith("/"):
            return f"{parent}/{target}"
        tail = self._tail(target)
        if tail is None:
            if self.contained:
                raise PathEscapes
            tail = target  # beneath `/`, every absolute path is below
        return tail

    def _walk(self, root_fd: int, rel: str, *, create: bool) -> tuple[int, str]:
        """Resolve one component at a time, each `O_NOFOLLOW` beneath the last."""
        held = [os.dup(root_fd)]
        todo = _parts(rel)[::-1]  # a stack: the next component is last
        links = 0
        try:
            while todo:
                part = todo.pop()
                if part == "..":
                    if len(held) == 1:
                        if self.contained:
                            raise PathEscapes
                        continue  # `/..` is `/`
                    os.close(held.pop())
                    continue
                target = _readlink(part, held[-1])
                if target is not None:
                    links += 1
                    if links > _MAX_LINKS:
                        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), part)
                    if target.startswith("/"):
                        tail = self._tail(target)
                        if tail is None and self.contained:
                            raise PathEscapes
                        while len(held) > 1:
                            os.close(held.pop())
                        target = target if tail is None else tail
                    todo.extend(_parts(target)[::-1])
                    continue
                if not todo:
                    return os.dup(held[-1]), part
                try:
                    fd = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=held[-1])
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o777, dir_fd=held[-1])
                    links += 1  # bounds a loop against a racer deleting it again
                    if links > _MAX_LINKS:
                        raise
                    todo.append(part)
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    if _readlink(part, held[-1]) is None:
                        raise
                    links += 1  # swapped for a link since it was read: read it again
                    if links > _MAX_LINKS:
                        raise
                    todo.append(part)
                    continue
                held.append(fd)
            return os.dup(held[-1]), "."
        finally:
            for fd in held:
                os.close(fd)


def anchor_for(workspace: Path, path: Path) -> tuple[Anchor, str]:
    """Return where `path` is resolved from and the path relative to it.

    A path written inside the workspace (relative, or absolute under the workspace as
    given or as resolved) is resolved beneath the workspace; any other absolute path
    from `/`. Nothing is resolved here but the workspace itself.
    """
    real = os.path.realpath(workspace)
    given = os.path.abspath(workspace)
    names = tuple(dict.fromkeys((real, given)))
    text = os.fspath(path)
    if not os.path.isabs(text):
        return Anchor(names, contained=True), text
    ws = Anchor(names, contained=True)
    tail = ws._tail(text)
    if tail is not None:
        return ws, tail
    return Anchor(("/",), contained=False), text.lstrip("/") or "."


@contextlib.contextmanager
def located(
    workspace: Path, path: Path, *, create: bool = False
) -> Iterator[tuple[int, str]]:
    """Resolve `path` (see `anchor_for`, `Anchor.locate`); yield the directory and name.

    The directory's descriptor is closed when the block ends.

    Raises:
        PathEscapes: a path inside the workspace leads out of it.
        OSError: as `Anchor.locate`.
    """
    anchor, rel = anchor_for(workspace, path)
    root_fd = anchor.open()
    try:
        dir_fd, name = anchor.locate(root_fd, rel, create=create)
    finally:
        os.close(root_fd)
    try:
        yield dir_fd, name
    finally:
        os.close(dir_fd)
