"""Shared parts of the built-in file tools: paths, ignore rules, stoppable work, writes.

This module owns how the file tools resolve paths against the workspace, read
`.gitignore` files, run their blocking work so that a stop ends it (S14), and replace
files atomically. Every open goes through `_beneath.located`: a path inside the
workspace is resolved once beneath a descriptor of it (S15). It deliberately decides
nothing about permission: a path given outside the workspace is not refused here;
`is_inside()` is the test the permission broker uses.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import attrs
import pathspec

from ..._fs import write_atomic_at
from ..._threads import builtin_threads
from ..._untrusted import open_regular_at, read_regular_at
from ...errors import ToolAborted
from ._beneath import PathEscapes, located

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from .._tool import ToolContext

__all__ = (
    "IgnoreRules",
    "PathEscapes",
    "check_stop",
    "escape_message",
    "is_inside",
    "located",
    "open_regular_at",
    "progress_from_thread",
    "read_regular",
    "read_regular_at",
    "replace_at",
    "replace_file",
    "resolve",
    "run_stoppable",
    "run_worker",
)

_T = TypeVar("_T")

GITIGNORE = ".gitignore"
"""The ignore files honoured by Glob (and by ripgrep for Grep)."""


def resolve(workspace: Path, path: str | None) -> Path:
    """Return `path` made absolute against `workspace` (`None`: the workspace itself).

    Symlinks and `..` are kept as written; nothing is checked.
    """
    if path is None or path == "":
        return workspace
    p = Path(path).expanduser()
    return p if p.is_absolute() else workspace / p


def is_inside(workspace: Path | str, path: Path | str) -> bool:
    """Tell whether `path` lies inside `workspace` once symlinks and `..` are resolved.

    A relative `path` is taken against `workspace`. Parts that do not exist yet are
    resolved as far as they exist, so a file about to be created is judged by its real
    parent directory.
    """
    root = os.path.realpath(workspace)
    target = os.path.realpath(os.path.join(root, os.fspath(path)))
    return target == root or os.path.commonpath((root, target)) == root


def escape_message(path: Path) -> str:
    """The failure of a path inside the workspace that leads out of it (S15)."""
    return (
        f"{path} leads outside the workspace (through a symlink or `..`); the file "
        "tools stay beneath it: give an absolute path to reach a file outside"
    )


def check_stop() -> None:
    """Raise the cancellation exception if the call running this worker was stopped.

    Call it from a worker thread started by `run_worker()`, between two chunks of work.
    """
    anyio.from_thread.check_cancelled()


def progress_from_thread(ctx: ToolContext, text: str) -> None:
    """Report progress of a call from its worker thread (runs `ctx.progress` in the loop)."""
    anyio.from_thread.run_sync(ctx.progress, text)


async def _cancel_when_set(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def run_stoppable(ctx: ToolContext, fn: Callable[[], Awaitable[_T]]) -> _T:
    """Await `fn()` so that either a stop signal ends it: `ctx.cancelled` or cancellation.

    Cancellation of the calling task propagates untouched. When only `ctx.cancelled` is
    set, the work is cancelled the same way and `ToolAborted` is raised once it has
    ended (S14: the work itself stops, not only the wait for it).

    Raises:
        ToolAborted: `ctx.cancelled` was set before the work finished.
    """
    outcome: list[_T] = []
    failure: list[Exception] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_cancel_when_set, ctx.cancelled, tg.cancel_scope)
        try:
            outcome.append(await fn())
        except Exception as exc:  # re-raised below, outside the task group's wrapping
            failure.append(exc)
        tg.cancel_scope.cancel()
    if failure:
        raise failure[0]
    if not outcome:
        raise ToolAborted(call_id=ctx.call_id)
    return outcome[0]


async def run_worker(ctx: ToolContext, fn: Callable[[], _T]) -> _T:
    """Run the blocking `fn` in a worker thread that ends when the call is stopped.

    `fn` must call `check_stop()` between chunks of its work. The thread is never
    abandoned (`abandon_on_cancel=False`): the call returns only once the worker has
    ended, so a stopped call leaves no thread behind and its end time is the worker's.

    Raises:
        ToolAborted: `ctx.cancelled` was set before the worker finished.
    """

    async def in_thread() -> _T:
        # S14: cooperative worker; waiting for it is what makes "ended" true.
        result = await anyio.to_thread.run_sync(
            fn, abandon_on_cancel=False, limiter=builtin_threads()
        )
        # A worker that finished just as the stop came still counts as stopped.
        await anyio.lowlevel.checkpoint_if_cancelled()
        return result

    return await run_stoppable(ctx, in_thread)


@attrs.frozen
class _IgnoreFile:
    base: tuple[str, ...]
    """Parts of the directory holding the file, relative to the walk's root."""
    prefix: tuple[str, ...]
    """Parts that lead from an ancestor's file down to the walk's root."""
    spec: pathspec.GitIgnoreSpec

    def relative(self, parts: Sequence[str]) -> str | None:
        """Return `parts` as the file's patterns see them, or None if out of its reach."""
        if tuple(parts[: len(self.base)]) != self.base:
            return None
        return "/".join((*self.prefix, *parts[len(self.base) :]))


@attrs.frozen
class IgnoreRules:
    """The `.gitignore` files that apply inside one directory of a walk.

    Deeper files win over shallower ones, and within a file the last matching pattern
    wins (git's order), so `!keep.log` in a subdirectory re-includes a file.
    """

    files: tuple[_IgnoreFile, ...] = ()

    @classmethod
    def for_root(cls, root: Path) -> IgnoreRules:
        """Return the rules of `root`'s ancestors up to the enclosing git work tree.

        Without a `.git` above `root`, only the files at `root` and below count.
        """
        ancestors: list[Path] = []
        for directory in root.parents:
            ancestors.append(directory)
            if (directory / ".git").exists():
                break
        else:
            ancestors = []
        files: list[_IgnoreFile] = []
        for directory in reversed(ancestors):
            spec = _load(directory / GITIGNORE)
            if spec is not None:
                prefix = root.relative_to(directory).parts
                files.append(_IgnoreFile(base=(), prefix=prefix, spec=spec))
        return cls(tuple(files))

    def enter(self, directory: Path, parts: tuple[str, ...]) -> IgnoreRules:
        """Return the rules inside `directory` (whose parts from the root are `parts`)."""
        spec = _load(directory / GITIGNORE)
        if spec is None:
            return self
        return IgnoreRules((*self.files, _IgnoreFile(base=parts, prefix=(), spec=spec)))

    def ignored(self, parts: Sequence[str], *, is_dir: bool) -> bool:
        """Tell whether the entry at `parts` (relative to the walk's root) is ignored."""
        for ignore in reversed(self.files):
            rel = ignore.relative(parts)
            if rel is None:
                continue
            result = ignore.spec.check_file(rel + "/" if is_dir else rel)
            if result.include is not None:
                return bool(result.include)
        return False


def read_regular(workspace: Path, path: Path, limit: int) -> bytes:
    """Read the regular file at `path`, resolved beneath `workspace` when inside it.

    Raises:
        PathEscapes: a path inside the workspace leads out of it.
        OSError: as `read_regular_at`.
    """
    with located(workspace, path) as (dir_fd, name):
        return read_regular_at(dir_fd, name, limit)


IGNORE_FILE_LIMIT = 1 << 20
"""Largest `.gitignore` read, in bytes."""
_ROOT = Path("/")
"""Ignore files are read wherever they are (a walk's ancestors too): from `/`."""


def _load(path: Path) -> pathspec.GitIgnoreSpec | None:
    try:
        text = read_regular(_ROOT, path, IGNORE_FILE_LIMIT).decode(
            "utf-8", errors="replace"
        )
    except OSError:
        return None
    return pathspec.GitIgnoreSpec.from_lines(text.splitlines())


def _umask() -> int:
    with (
        contextlib.suppress(OSError),
        open("/proc/self/status", encoding="ascii") as status,
    ):
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def replace_file(workspace: Path, path: Path, data: bytes) -> bool:
    """Replace (or create) the file at `path` with `data`, atomically and durably.

    `path` is resolved once, beneath `workspace` when it is inside it (S15:
    `_beneath.located`), and missing parent directories are made on the way with
    `mkdirat`. A temp file in the same directory is written, fsynced and renamed over
    the file, all relative to that directory's descriptor, so readers see the old
    content or the new, never a part. An existing file keeps its mode, less
    set-user-ID and set-group-ID (and its owner, when the caller may set it); a new
    file gets the usual `0o666 & ~umask`. A symlink is followed (within the workspace
    for a path inside it): its target is replaced. A file with other hard links is
    replaced, not rewritten in place: the other names keep the old content.

    Returns:
        Whether the file existed before.

    Raises:
        IsADirectoryError: something other than a regular file is in the way.
        PathEscapes: a path inside the workspace leads out of it.
        OSError: the directory cannot be written; the file is left as it was.
    """
    with located(workspace, path, create=True) as (dir_fd, name):
        return replace_at(dir_fd, name, data, shown=path)


def replace_at(dir_fd: int, name: str, data: bytes, *, shown: Path) -> bool:
    """Replace `name` in the directory `dir_fd` (see `replace_file`); `shown` names it.

    Raises:
        IsADirectoryError: something other than a regular file is in the way.
        OSError: the directory cannot be written; the file is left as it was.
    """
    try:
        old = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        old = None
    if name == "." or (old is not None and not stat.S_ISREG(old.st_mode)):
        raise IsADirectoryError(f"{shown} is not a regular file")
    # New content never inherits set-user-ID or set-group-ID: an agent's write must not
    # produce a privileged program.
    kept = stat.S_IMODE(old.st_mode) & ~(stat.S_ISUID | stat.S_ISGID) if old else 0
    mode = kept if old is not None else 0o666 & ~_umask()
    owner = None
    if old is not None and (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
        owner = (old.st_uid, old.st_gid)
    write_atomic_at(dir_fd, name, data, mode=mode, owner=owner)
    return old is not None
