"""Git for lanes: a repository per lane, saving aside losslessly, restoring, the branch.

Layout, in the account's state dir:

- `lanes/<run>/<lane>/`: the lane's directory, the agent's workspace. It is a git
  repository of its own (its `.git` a real directory) that borrows the person's objects
  read-only through `objects/info/alternates`, on its own branch `tether/<item>`. Nothing
  an agent does there (refs, hooks, config, `gc`, `worktree` commands) reaches the
  person's repository or another lane; tether, outside the wall, brings the lane's branch
  and saved work back into the person's repository with `git fetch`.
- `lanes/<run>/<lane>.log`: the lane's log.
- `saves/<run>/<lane>/<commit>/`: a lossless save: the lane's directory itself, moved
  aside by one `rename` (nothing is copied, whatever the lane's size). Every file is
  there as it was: ignored ones, empty directories, modes, symlinks, nested
  repositories, the lane's own `.git` with its index (intent-to-add entries and
  deletions), reflog and any rebase, merge or cherry-pick in progress.
- `tmp/`: temporary index files and restores being copied (`*.partial`), never a source.

The save's reviewable view is a git commit made as spec 03 says (the lane's index copied
to a temporary index, `git add -A` into it, `write-tree`, `commit-tree`: no hooks, no
signing), fetched into the person's repository under `refs/tether/saved/<run>/<lane>`; a
later save of the same lane gets a ref of its own (`…/<lane>.2`), never replacing one.
The view's parents are the lane's HEAD and a commit of its index, like a stash.

A restore copies a save (`cp -a`, a reflink where the file system has them) into
`tmp/` and renames the copy into place: a restore that fails or is killed leaves only a
`*.partial` copy, which no later save reads. The save itself is never deleted but by
`tether lanes prune`.

Every git command tether runs here has the person's hooks and fsmonitor turned off
(`core.hooksPath`, `core.fsmonitor`): a person's failing hook never holds tether's own
operations, and nothing a lane plants in a config runs as the person.

The git commands run through `tether.host._spawn.run_process`, a private name kept
private: it runs a short command to its end without a thread (as the process trees do)
but outside any process tree, stop or containment, which suits tether's own git work
outside the wall and nothing a tool does. Made public beside `ToolContext.run_process`
(same name, a stop-tied process tree), it would invite tools past the stop.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal, final, overload

import attrs

from .._config import paths
from .._fs import fsync_dir
from .._threads import in_thread
from .._untrusted import write_beneath
from ..errors import TetherError
from ..host._spawn import run_process
from ._lane_files import commit_files, load_last, seed_cache
from ._lane_paths import lane_dir, lane_log, save_dir
from ._own_git import (
    IDENTITY,
    OWN_OPTIONS,
    GitFailed,
    LaneHead,
    LaneUnreadable,
    bounded,
    clean_env,
    judge_lane,
    make_own_git,
    own_git,
    own_git_of,
    read_lane_ref,
    take_in,
    tgit,
)
from ._store import crash_point

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ._values import LaneRow

__all__ = (
    "GitFailed",
    "LaneUnreadable",
    "Save",
    "SaveFailed",
    "adopt_lane",
    "branch_name",
    "bring_back",
    "commit_leftovers",
    "commits_since",
    "find_saves",
    "git",
    "has_commit",
    "head",
    "keep_view",
    "lane_dir",
    "lane_log",
    "lossless_save",
    "make_view",
    "move_aside",
    "open_lane",
    "restore",
    "restore_copy",
    "save_dir",
    "save_lane",
    "saved_ref",
    "view_of_save",
)


class SaveFailed(TetherError):
    """A lane could not be saved aside; the message says why."""


@final
@attrs.frozen
class Save:
    """One lossless save of a lane."""

    ref: str
    """Its reviewable view in the person's repository: `refs/tether/saved/<run>/<lane>`."""
    commit: str
    """The view's commit."""
    path: Path
    """The lossless copy: the lane's directory as it was."""


def branch_name(item: str) -> str:
    """The lane branch of a work item."""
    return f"tether/{item}"


def saved_ref(run: str, lane: str) -> str:
    """Where a lane's first save is viewed in the person's repository."""
    return f"refs/tether/saved/{run}/{lane}"


def _tmp_dir() -> Path:
    where = paths().state_dir / "tmp"
    where.mkdir(mode=0o700, parents=True, exist_ok=True)
    return where


async def git(
    *args: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
) -> str:
    """Run `git args` in the person's repository `cwd`, hooks off; its stdout (stripped).

    Only for the person's own repository (whose config is theirs): a lane's git goes
    through tether's own git dir (`_own_git.py`).

    Raises:
        GitFailed: git exited non-zero, could not start or passed its time bound.
    """
    full_env = {
        **os.environ,
        **IDENTITY,
        "GIT_TERMINAL_PROMPT": "0",
        # A lane whose `.git` is gone is not read as a repository above it.
        "GIT_CEILING_DIRECTORIES": str(paths().state_dir.absolute()),
        **(env or {}),
    }
    out = await bounded(
        ["git", *OWN_OPTIONS[:10], *args],
        cwd=cwd,
        env=full_env,
        what=f"git {args[0]} in {cwd}",
    )
    return out.decode("utf-8", "replace").strip()


async def has_commit(repo: Path, commit: str) -> bool:
    """Whether the repository has `commit` (saved work may be on another machine)."""
    try:
        await git("cat-file", "-e", f"{commit}^{{commit}}", cwd=repo)
    except GitFailed:
        return False
    return True


async def _alternates(own: Path) -> bytes:
    """What tether wrote into a lane's `objects/info/alternates`: its own git dir's.

    Raises:
        GitFailed: tether's git dir of the lane cannot be read.
    """
    try:
        return await in_thread((own / "objects" / "info" / "alternates").read_bytes)
    except OSError as exc:
        raise GitFailed(
            f"tether's git dir of the lane {own} cannot be read: {exc.strerror or exc}"
        ) from None


async def lane_head(lane: Path, own: Path | None = None) -> LaneHead:
    """A lane's HEAD read as data, its commit brought into tether's git dir.

    Raises:
        LaneUnreadable: the lane's `.git` is not one tether reads (the reason says why).
        GitFailed: its objects cannot be fetched.
    """
    own = own or own_git_of(lane)
    found = await in_thread(judge_lane, lane, await _alternates(own))
    if found.commit not in (await in_thread(load_last, own)).commits:
        await take_in(own, lane, found.commit)
    return found


async def head(lane: Path) -> str:
    """The commit a lane's HEAD names (read as data)."""
    return (await lane_head(lane)).commit


async def commits_since(lane: Path, base: str) -> tuple[str, ...]:
    """Commits on HEAD that `base` lacks, oldest first."""
    own = own_git_of(lane)
    now = (await lane_head(lane, own)).commit
    out = await tgit(own, "rev-list", "--reverse", f"{base}..{now}")
    return tuple(out.split())


async def _objects_of(repo: Path) -> Path:
    return Path(
        await git(
            "rev-parse", "--path-format=absolute", "--git-path", "objects", cwd=repo
        )
    )


async def _fresh(making: Path, *args: str) -> str:
    """Git on a lane tether has just made (nothing but tether has written it yet)."""
    env = {
        **clean_env(),
        "GIT_DIR": str(making / ".git"),
        "GIT_WORK_TREE": str(making),
    }
    out = await bounded(
        ["git", *OWN_OPTIONS, *args], cwd=making, env=env, what=f"git {args[0]}"
    )
    return out.decode("utf-8", "replace").strip()


async def open_lane(repo: Path, path: Path, branch: str) -> str:
    """Make the lane's repository at `path`, on `branch`, and return its base commit.

    The base is the person's `branch` if it exists, else their HEAD; the branch is made
    in the person's repository at the base if it is new, which also keeps the objects
    the lane borrows reachable there. The lane is made beside its place and renamed into
    it, so a lane directory is never half made. tether's own git dir of the lane is made
    beside it (`<lane>.git`).

    Raises:
        GitFailed: the repository or the branch cannot be used.
    """
    objects = await _objects_of(repo)
    try:
        base = await git(
            "rev-parse",
            "--verify",
            "--quiet",
            f"refs/heads/{branch}^{{commit}}",
            cwd=repo,
        )
    except GitFailed:
        base = await git("rev-parse", "--verify", "HEAD^{commit}", cwd=repo)
        # Create only (the empty old value): a branch made meanwhile is not moved.
        with contextlib.suppress(GitFailed):
            await git("update-ref", f"refs/heads/{branch}", base, "", cwd=repo)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    await make_own_git(own_git_of(path), objects)
    making = path.with_name(f".{path.name}.opening")
    if await in_thread(making.exists):
        await _remove(making)  # a lane never opened: nothing of it was ever used
    await in_thread(making.mkdir, 0o700)
    await _fresh(making, "init", "-q", "--template=", "-b", branch)
    alternates = making / ".git" / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(f"{objects}\n", encoding="utf-8")
    for key in ("user.name", "user.email"):
        with contextlib.suppress(GitFailed):
            value = await git("config", "--local", "--get", key, cwd=repo)
            if value:
                await _fresh(making, "config", key, value)
    await _fresh(making, "update-ref", f"refs/heads/{branch}", base)
    await _fresh(making, "reset", "-q", "--hard", base)
    # What tether checked out itself is known: the first walk re-reads none of it.
    listing = await bounded(
        ["git", *OWN_OPTIONS, "ls-files", "-s", "--debug", "-z"],
        cwd=making,
        env={
            **clean_env(),
            "GIT_DIR": str(making / ".git"),
            "GIT_WORK_TREE": str(making),
        },
    )
    tree = await tgit(own_git_of(path), "rev-parse", f"{base}^{{tree}}")
    checkout_index = await in_thread((making / ".git" / "index").read_bytes)
    await in_thread(
        functools.partial(
            seed_cache,
            own_git_of(path),
            listing,
            making,
            tree,
            base=base,
            index=checkout_index,
        )
    )
    await in_thread(os.rename, making, path)
    return base


async def adopt_lane(repo: Path, path: Path) -> None:
    """Make tether's own git dir for a lane restored from a save (`restore_copy`)."""
    await make_own_git(own_git_of(path), await _objects_of(repo))


async def _send_from_own(
    repo: Path, own: Path, what: str, *, into: str | None = None
) -> None:
    """Fetch `what` (a commit id or a ref) from tether's git dir of a lane.

    Into the person's repository, never from the lane itself.

    No ref is stored unless `into`: git checks every object it receives.
    """
    upload = "git -c uploadpack.allowAnySHA1InWant=true upload-pack"
    await git(
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        "--no-auto-gc",
        "--no-recurse-submodules",
        f"--upload-pack={upload}",
        str(own),
        what if into is None else f"+{what}:{into}",
        cwd=repo,
    )


async def bring_back(
    repo: Path, lane: Path, branch: str, *, own: Path | None = None
) -> None:
    """Bring the lane's branch into the person's repository (tether, outside the wall).

    The branch's ref is read from the lane as data, its commits fetched into tether's
    git dir, and from there into the person's repository.

    Raises:
        GitFailed: the lane's branch cannot be read, or the person's repository refused
            it (the branch checked out there, say).
    """
    own = own or own_git_of(lane)
    ref = f"refs/heads/{branch}"
    commit = await in_thread(read_lane_ref, lane, ref, await _alternates(own))
    if commit is None:
        raise LaneUnreadable(f"its branch {branch} has no commit")
    await take_in(own, lane, commit)
    await tgit(own, "update-ref", ref, commit)
    await _send_from_own(repo, own, ref, into=ref)


async def commit_leftovers(lane: Path, stage: str) -> str | None:
    """Commit what a stage left uncommitted onto the lane's branch; the commit or None.

    The commit is made from tether's walk of the lane's files (`_lane_files.py`) in
    tether's git dir; the lane's branch ref and index are then written as data. What
    `.gitignore` leaves out stays out (it is in the lossless save). Nothing is
    committed while a rebase, merge or cherry-pick is in progress, or on a detached
    HEAD: that state is the agent's, and the save keeps it as it is.

    Raises:
        LaneUnreadable: the lane's git state or a file is not one tether reads.
        GitFailed: tether's own git failed or passed its bound.
    """
    own = own_git_of(lane)
    found = await lane_head(lane, own)
    if found.busy or found.branch is None:
        return None
    made = await commit_files(
        own,
        lane,
        parents=[found.commit],
        message=f"{stage}: work the stage left uncommitted\n\nCommitted by tether "
        f"when the stage {stage!r} ended.\n",
        index=True,
    )
    if made.tree == made.base_tree:
        return None
    branch = found.branch

    def point() -> None:
        # The next stage's agent sees the commit on its branch, its index clean (with
        # the files' stat data: its git does not read them all again). Neither is
        # flushed to disk, as git's own `commit` flushes neither by default (nor the
        # commit's objects, written unflushed too).
        ref = f"{made.commit}\n".encode()
        write_beneath(lane, f".git/{branch}", ref, mode=0o644, sync=False)
        write_beneath(lane, ".git/index", made.index, mode=0o644, sync=False)

    try:
        await in_thread(point)
    except OSError as exc:
        raise LaneUnreadable(f"its branch cannot be moved: {exc}") from None
    return made.commit


@overload
async def make_view(
    repo: Path,
    lane: Path,
    *,
    message: str,
    own: Path | None = None,
    only_changed: Literal[False] = False,
) -> str: ...
@overload
async def make_view(
    repo: Path,
    lane: Path,
    *,
    message: str,
    own: Path | None = None,
    only_changed: bool,
) -> str | None: ...
async def make_view(
    repo: Path,
    lane: Path,
    *,
    message: str,
    own: Path | None = None,
    only_changed: bool = False,
) -> str | None:
    """Make the reviewable view of a lane in the person's repository; its commit.

    The view is a commit of the lane's files as tether's walk finds them (what
    `.gitignore` leaves out stays out), whose parent is the lane's HEAD. It is made in
    tether's git dir of the lane (`own`: beside the lane, by default) and fetched from
    there, so git checks every object that crosses. Touches no branch, no index and no
    file of the lane, nor any ref of the person's. With `only_changed`, a lane whose
    files are its HEAD's has no view (None).

    Raises:
        LaneUnreadable: the lane's git state or a file is not one tether reads.
        GitFailed: the person's repository cannot be written.
    """
    own = own or own_git_of(lane)
    found = await lane_head(lane, own)
    made = await commit_files(own, lane, parents=[found.commit], message=message)
    if only_changed and made.tree == made.base_tree:
        return None
    await _send_from_own(repo, own, made.commit)
    return made.commit


async def keep_view(repo: Path, commit: str, ref: str) -> str:
    """Point `ref` at the view `commit` in the person's repository.

    When `ref` is taken, the first free `ref.N` instead: a save never replaces another.
    Returns the ref used.
    """
    n = 1
    while True:
        name = ref if n == 1 else f"{ref}.{n}"
        try:
            existing = await git("rev-parse", "--verify", "--quiet", name, cwd=repo)
        except GitFailed:
            existing = ""
        if existing == commit:
            return name
        if not existing:
            try:
                await git("update-ref", "--create-reflog", name, commit, "", cwd=repo)
            except GitFailed:
                n += 1  # made meanwhile: take the next
                continue
            return name
        n += 1


async def move_aside(lane: Path, *, run: str, lane_id: str) -> Path:
    """Save a lane aside losslessly: one rename of its directory into `saves/`.

    Constant time whatever the lane holds; its view is derived afterwards
    (`view_of_save`).

    Raises:
        SaveFailed: the lane cannot be moved (it is then left where it was, whole).
    """
    target = save_dir(run, lane_id, f"s{time.time_ns():x}")
    try:
        moved = await in_thread(_move_aside, lane, target)
    except OSError as exc:
        raise SaveFailed(f"cannot save {lane} aside: {_why(exc)}") from None
    crash_point("save-moved")
    return moved


async def view_of_save(
    repo: Path, saved: Path, *, run: str, lane_id: str, message: str
) -> Save:
    """Make the reviewable view of a lossless save and keep it under its saved ref.

    Raises:
        SaveFailed: the save's files or git state cannot be read, or the person's
            repository written (the save itself stays as it is).
    """
    own = own_git(run, lane_id)
    try:
        if not await in_thread(own.is_dir):
            # The lane was restored into place, then its run died before this git
            # dir was made (an earlier version's order): made now, as a restore does.
            await make_own_git(own, await _objects_of(repo))
        commit = await make_view(repo, saved, message=message, own=own)
        ref = await keep_view(repo, commit, saved_ref(run, lane_id))
    except GitFailed as exc:
        raise SaveFailed(f"its view cannot be made: {exc}") from None
    crash_point("save-view")
    return Save(ref=ref, commit=commit, path=saved)


async def save_lane(
    repo: Path, lane: Path, *, run: str, lane_id: str, message: str
) -> Save:
    """Save a lane aside losslessly (`move_aside`), then make its view.

    Raises:
        SaveFailed: the lane cannot be moved (left where it was, whole), or its view
            cannot be made (the save stays, found by `find_saves`).
    """
    moved = await move_aside(lane, run=run, lane_id=lane_id)
    return await view_of_save(repo, moved, run=run, lane_id=lane_id, message=message)


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return f"{exc.filename or 'a folder'} is full: free some space there"
    return str(exc)


def _move_aside(lane: Path, target: Path) -> Path:
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if target.exists():
        # Never over an earlier save.
        n = 2
        while target.with_name(f"{target.name}.{n}").exists():
            n += 1
        target = target.with_name(f"{target.name}.{n}")
    os.rename(lane, target)
    fsync_dir(target.parent)
    fsync_dir(lane.parent)
    return target


def find_saves(run: str, lane_id: str) -> list[Path]:
    """The lossless saves of a lane on this machine, newest first."""
    where = paths().state_dir / "saves" / run / lane_id
    try:
        found = [p for p in where.iterdir() if p.is_dir()]
    except OSError:
        return []
    return sorted(found, key=lambda p: p.stat().st_mtime_ns, reverse=True)


def lossless_save(lane: LaneRow) -> Path | None:
    """The lossless copy of a lane's save on this machine; None when saved elsewhere.

    The copy is the one its view names, else its newest. A save made elsewhere has
    only its git view here.
    """
    if lane.saved_commit is not None:
        exact = save_dir(lane.run, lane.id, lane.saved_commit)
        if exact.is_dir():
            return exact
    found = find_saves(lane.run, lane.id)
    return found[0] if found else None


async def restore_copy(save: Path, lane: Path) -> None:
    """Copy a lossless save into place as a fresh lane (the save stays as it is).

    Raises:
        GitFailed: the copy failed (the lane is then not there; the save is untouched).
    """
    partial = _tmp_dir() / f"{lane.name}-{os.urandom(4).hex()}.partial"
    try:
        result = await run_process(
            ["cp", "-a", "--reflink=auto", str(save), str(partial)]
        )
    except OSError as exc:
        raise GitFailed(f"cannot copy {save}: {exc}") from None
    if result.returncode != 0:
        await _remove(partial)
        err = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GitFailed(f"cannot copy {save}: {err[-1] if err else 'cp failed'}")
    crash_point("restore")
    lane.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    await in_thread(os.rename, partial, lane)


async def _remove(path: Path) -> None:
    """Remove a directory that is a copy (never the only one)."""
    await in_thread(shutil.rmtree, path, True)


async def restore(lane: Path, commit: str) -> None:
    """Bring a save's view back into a fresh lane (`open_lane` made it just now).

    Only for a save made on another machine, whose lossless copy is not here: what git
    does not hold (ignored files, modes beyond the executable bit, empty directories,
    nested repositories) is not in a view.

    Raises:
        GitFailed: the commit is missing or the lane cannot be written.
    """
    parents: Sequence[str] = (
        await _fresh(lane, "rev-list", "--parents", "-n", "1", commit)
    ).split()[1:]
    if len(parents) > 1:
        await _fresh(lane, "read-tree", parents[1])
    if not await _fresh(lane, "ls-tree", "--name-only", commit):
        return  # an empty tree: nothing to bring back ("pathspec '.' did not match")
    await _fresh(lane, "restore", f"--source={commit}", "--worktree", "--", ".")
