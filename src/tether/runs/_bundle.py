"""A lane's branch and saved view as a git bundle in the published directory.

The bundle is made by tether's own git dir of the lane (`_own_git.own_git`: bare, its
config tether's, hooks and fsmonitor off, no system or global config), which holds
the lane's branch as tether brought it back and the save's view; the lane's own `.git`
and the account's repository are never run. A bundle is one file the person's git
reads as data (`git fetch FILE`): no repository of the other account is opened, so no
`safe.directory` exception is needed and none of its config is honoured.

The bundle holds the objects its refs reach past the lane's base, the merge base of its
branch with the account's repository's `HEAD` (the history both seats share, as the
account cloned it from the person's repository or their common upstream): the base is
its one prerequisite, which `tether fetch` names if the person's repository lacks it.
Measured on tether's own repository (591 commits, a 3.4 MiB pack): a bundle of the
whole history is 1.9 MB and takes 1.4 s to make, per lane and run; one past the base,
1.5 KB and 0.01 s. Without a `HEAD` to share, the whole history goes. Its refs:
`refs/heads/<branch>` (the lane's branch, `tether/<item>`) and
`refs/tether/saved/<run>/<lane>` (the save's view), when the lane has them.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import TYPE_CHECKING, Any, Final

from .._config import paths
from .._threads import in_thread
from ._lane_git import git
from ._own_git import GitFailed, own_git, tgit
from ._pubdir import BUNDLE_BOUND, open_own_dir, sub_dir

if TYPE_CHECKING:
    from pathlib import Path

    from ._values import LaneRow

__all__ = ("bundle_name", "make_bundle", "saved_view_ref")

_SHA: Final = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


def bundle_name(run: str, lane: str) -> str:
    """A lane's bundle, relative to the account's published directory."""
    return f"runs/{run}/bundles/{lane}.bundle"


def saved_view_ref(run: str, lane: str) -> str:
    """The ref of a lane's save view inside its bundle."""
    return f"refs/tether/saved/{run}/{lane}"


async def _commit(own: Path, ref: str) -> str | None:
    try:
        found = await tgit(own, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except GitFailed:
        return None
    return found if _SHA.match(found) else None


async def _base(repo: Path, own: Path, tip: str | None) -> str | None:
    """The merge base of `tip` with the account's repository's HEAD; None: no base."""
    if tip is None:
        return None
    try:
        head = await git("rev-parse", "--verify", "--quiet", "HEAD^{commit}", cwd=repo)
        found = await tgit(own, "merge-base", tip, head)
    except GitFailed:
        return None
    return found if _SHA.match(found) else None


async def make_bundle(
    root: Path, person_uid: int, *, run: str, lane: LaneRow, repo: Path
) -> dict[str, Any] | None:
    """Publish `lane`'s bundle under `root`; what it holds, or None when it has nothing.

    The shape: `{"file", "branch", "branch_ref", "branch_commit", "view_ref",
    "view_commit", "base", "size"}` (a ref and its commit null when the lane has none;
    `base` the prerequisite, null for a bundle of the whole history).

    Raises:
        GitFailed: tether's own git could not make it.
        OSError: it cannot be written, or is larger than `BUNDLE_BOUND`.
    """
    own = own_git(run, lane.id)
    if not await in_thread(own.is_dir):
        return None
    branch_ref = f"refs/heads/{lane.branch}"
    tip = await _commit(own, branch_ref)
    view = (
        lane.saved_commit
        if lane.saved_commit and _SHA.match(lane.saved_commit)
        else None
    )
    view_ref = saved_view_ref(run, lane.id)
    if view is not None:
        try:
            await tgit(own, "update-ref", view_ref, view)
        except GitFailed:
            view = None  # its objects are not in tether's git dir
    refs = [r for r, c in ((branch_ref, tip), (view_ref, view)) if c is not None]
    if not refs:
        return None
    base = await _base(repo, own, tip or view)
    if base is not None and base == tip:
        refs = [r for r in refs if r != branch_ref]  # the branch holds no work
        if not refs:
            return None
    tmp_dir = paths().state_dir / "tmp"
    await in_thread(lambda: tmp_dir.mkdir(mode=0o700, parents=True, exist_ok=True))
    tmp = tmp_dir / f"bundle-{os.urandom(6).hex()}.bundle"
    try:
        await tgit(
            own,
            "bundle",
            "create",
            "--quiet",
            str(tmp),
            *refs,
            *(() if base is None else (f"^{base}",)),
        )
        size = await in_thread(_publish_file, root, person_uid, run, lane.id, tmp)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    return {
        "file": bundle_name(run, lane.id),
        "branch": lane.branch,
        "branch_ref": branch_ref if branch_ref in refs else None,
        "branch_commit": tip if branch_ref in refs else None,
        "view_ref": view_ref if view else None,
        "view_commit": view if view_ref in refs else None,
        "base": base,
        "size": size,
    }


def _publish_file(root: Path, person_uid: int, run: str, lane: str, made: Path) -> int:
    """Copy `made` into `runs/<run>/bundles/<lane>.bundle` atomically; its size."""
    size = made.stat().st_size
    if size > BUNDLE_BOUND:
        raise OSError(f"its bundle is {size} bytes, more than {BUNDLE_BOUND}")
    fds: list[int] = []
    try:
        fds.append(open_own_dir(root, person_uid))
        fds.append(sub_dir(fds[-1], "runs", root / "runs"))
        fds.append(sub_dir(fds[-1], run, root / "runs" / run))
        where = fds[-1]
        fds.append(sub_dir(where, "bundles", root / "runs" / run / "bundles"))
        _copy_at(fds[-1], f"{lane}.bundle", made)
    finally:
        for fd in reversed(fds):
            os.close(fd)
    return size


def _copy_at(dir_fd: int, name: str, source: Path) -> None:
    """`write_atomic_at` for a file too large to hold in memory: streamed, mode 0644."""
    tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o644, dir_fd=dir_fd)
    try:
        try:
            os.fchmod(fd, 0o644)
            with open(source, "rb") as src:
                while chunk := src.read(1 << 20):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    sync = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.fsync(sync)
    finally:
        os.close(sync)
