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
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, final

import attrs

from .._config import paths
from .._fs import fsync_dir
from .._threads import in_thread
from ..errors import TetherError
from ..host._spawn import run_process
from ._store import crash_point

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = (
    "GitFailed",
    "Save",
    "SaveFailed",
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
    "make_view",
    "open_lane",
    "restore",
    "restore_copy",
    "save_dir",
    "save_lane",
    "saved_ref",
)

_IDENTITY = {
    "GIT_AUTHOR_NAME": "tether",
    "GIT_AUTHOR_EMAIL": "tether@localhost",
    "GIT_COMMITTER_NAME": "tether",
    "GIT_COMMITTER_EMAIL": "tether@localhost",
}

_OWN = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
    "-c",
    "commit.gpgSign=false",
)
"""Options of every git command tether runs for itself: no hooks, no fsmonitor, no
automatic gc (which could prune what only a lane's reflog keeps)."""


class GitFailed(TetherError):
    """A git command failed; the message has its stderr."""


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


def lane_dir(run: str, lane: str) -> Path:
    """The directory of a lane, in the account's state dir."""
    return paths().state_dir / "lanes" / run / lane


def save_dir(run: str, lane: str, commit: str) -> Path:
    """Where the lossless copy of a lane's save with view `commit` lives."""
    return paths().state_dir / "saves" / run / lane / commit


def _tmp_dir() -> Path:
    where = paths().state_dir / "tmp"
    where.mkdir(mode=0o700, parents=True, exist_ok=True)
    return where


async def git(
    *args: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
) -> str:
    """Run `git args` in `cwd`, hooks off, and return its stdout (stripped).

    Raises:
        GitFailed: git exited non-zero or could not start.
    """
    full_env = {
        **os.environ,
        **_IDENTITY,
        "GIT_TERMINAL_PROMPT": "0",
        # A lane whose `.git` is gone is not read as a repository above it.
        "GIT_CEILING_DIRECTORIES": str(paths().state_dir.absolute()),
        **(env or {}),
    }
    try:
        result = await run_process(["git", *_OWN, *args], cwd=cwd, env=full_env)
    except OSError as exc:
        raise GitFailed(f"git {args[0]} could not run in {cwd}: {exc}") from None
    if result.returncode != 0:
        err = result.stderr.decode("utf-8", "replace").strip().splitlines()
        why = err[-1] if err else f"exit {result.returncode}"
        raise GitFailed(f"git {args[0]} failed in {cwd}: {why}")
    return result.stdout.decode("utf-8", "replace").strip()


async def has_commit(repo: Path, commit: str) -> bool:
    """Whether the repository has `commit` (saved work may be on another machine)."""
    try:
        await git("cat-file", "-e", f"{commit}^{{commit}}", cwd=repo)
    except GitFailed:
        return False
    return True


async def head(lane: Path) -> str:
    """The commit a lane's HEAD names."""
    return await git("rev-parse", "HEAD", cwd=lane)


async def commits_since(lane: Path, base: str) -> tuple[str, ...]:
    """Commits on HEAD that `base` lacks, oldest first."""
    out = await git("rev-list", "--reverse", f"{base}..HEAD", cwd=lane)
    return tuple(out.split())


async def _objects_of(repo: Path) -> Path:
    return Path(
        await git(
            "rev-parse", "--path-format=absolute", "--git-path", "objects", cwd=repo
        )
    )


async def open_lane(repo: Path, path: Path, branch: str) -> str:
    """Make the lane's repository at `path`, on `branch`, and return its base commit.

    The base is the person's `branch` if it exists, else their HEAD; the branch is made
    in the person's repository at the base if it is new, which also keeps the objects
    the lane borrows reachable there. The lane is made beside its place and renamed into
    it, so a lane directory is never half made.

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
    making = path.with_name(f".{path.name}.opening")
    if await in_thread(making.exists):
        await _remove(making)  # a lane never opened: nothing of it was ever used
    await git("init", "-q", "--template=", "-b", branch, str(making), cwd=path.parent)
    alternates = making / ".git" / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(f"{objects}\n", encoding="utf-8")
    for key in ("user.name", "user.email"):
        with contextlib.suppress(GitFailed):
            value = await git("config", "--local", "--get", key, cwd=repo)
            if value:
                await git("config", key, value, cwd=making)
    await git("update-ref", f"refs/heads/{branch}", base, cwd=making)
    await git("reset", "-q", "--hard", base, cwd=making)
    await in_thread(os.rename, making, path)
    return base


async def bring_back(repo: Path, lane: Path, branch: str) -> None:
    """Bring the lane's branch into the person's repository (tether, outside the wall).

    Raises:
        GitFailed: the person's repository refused it (the branch checked out there, say).
    """
    await git(
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        "--no-auto-gc",
        str(lane),
        f"+refs/heads/{branch}:refs/heads/{branch}",
        cwd=repo,
    )


async def commit_leftovers(lane: Path, stage: str) -> str | None:
    """Commit what a stage left uncommitted onto the lane's branch; the commit or None.

    What `.gitignore` leaves out stays out (it is in the lossless save). Nothing is
    committed while a rebase, merge or cherry-pick is in progress, or on a detached HEAD:
    that state is the agent's, and the save keeps it as it is.
    """
    if await _in_progress(lane):
        return None
    try:
        await git("symbolic-ref", "-q", "HEAD", cwd=lane)
    except GitFailed:
        return None
    if not await git("status", "--porcelain", cwd=lane):
        return None
    await git("add", "-A", cwd=lane)
    await git(
        "commit",
        "-q",
        "--no-verify",
        "-m",
        f"{stage}: work the stage left uncommitted\n\nCommitted by tether when the "
        f"stage {stage!r} ended.",
        cwd=lane,
    )
    return await head(lane)


async def _in_progress(lane: Path) -> bool:
    gitdir = lane / ".git"
    names = ("rebase-merge", "rebase-apply", "MERGE_HEAD", "CHERRY_PICK_HEAD")
    return any([await in_thread((gitdir / n).exists) for n in names])


async def make_view(repo: Path, lane: Path, *, message: str) -> str:
    """Make the reviewable view of a lane in the person's repository; its commit.

    The view is a commit of every file git would add (`git add -A` into a copy of the
    lane's index) whose parents are the lane's HEAD and a commit of its index, like a
    stash. What the lane made itself (its commits, the blobs its index holds) is
    fetched from it first, so git checks every object that crosses; the files' blobs
    are then hashed by git straight into the person's objects (as a save into a shared
    worktree did: no second copy, no packing). If an object is still missing there
    (a lane that planted one under the name of another), the whole view is fetched
    instead, checked object by object. Touches no branch, no index and no file of the
    lane, nor any ref of the person's.

    Raises:
        GitFailed: the lane cannot be read or the person's repository written.
    """
    base = await head(lane)
    tmp_staged = _tmp_dir() / f"save-{os.urandom(6).hex()}.staged"
    try:
        await _copy_index(lane, tmp_staged)
        try:
            staged_tree = await git(
                "write-tree", cwd=lane, env={"GIT_INDEX_FILE": str(tmp_staged)}
            )
        except GitFailed:
            # Unmerged entries (a conflicted merge or rebase) make no tree: the view's
            # index parent is then HEAD's; the index itself is in the lossless copy.
            staged_tree = await git("rev-parse", "HEAD^{tree}", cwd=lane)
    finally:
        with contextlib.suppress(OSError):
            tmp_staged.unlink()
    staged = await git(
        "commit-tree", staged_tree, "-p", base, "-m", f"index of {message}", cwd=lane
    )
    await _fetch(repo, lane, staged)
    into = {
        "GIT_OBJECT_DIRECTORY": str(await _objects_of(repo)),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(lane / ".git" / "objects"),
    }
    commit = await _view_of_files(lane, message, base, staged, into)
    missing = await git(
        "rev-list", "--objects", "--missing=print", commit, "--not", staged, cwd=repo
    )
    if any(line.startswith("?") for line in missing.splitlines()):
        # Made in the lane this time, and fetched whole: git checks every object.
        commit = await _view_of_files(lane, message, base, staged, {})
        await _fetch(repo, lane, commit)
    return commit


async def _copy_index(lane: Path, into: Path) -> None:
    index = lane / ".git" / "index"
    if await in_thread(index.exists):
        await in_thread(shutil.copyfile, index, into)


async def _view_of_files(
    lane: Path, message: str, base: str, staged: str, env: Mapping[str, str]
) -> str:
    """The view's commit, from `git add -A` into a copy of the lane's index.

    The commit has that index's tree and, as parents, HEAD and the index's commit;
    objects are written where `env` says.
    """
    tmp_all = _tmp_dir() / f"save-{os.urandom(6).hex()}.index"
    into = {**env, "GIT_INDEX_FILE": str(tmp_all)}
    try:
        await _copy_index(lane, tmp_all)
        await git("add", "-A", cwd=lane, env=into)
        tree = await git("write-tree", cwd=lane, env=into)
    finally:
        with contextlib.suppress(OSError):
            tmp_all.unlink()
    return await git(
        "commit-tree", tree, "-p", base, "-p", staged, "-m", message, cwd=lane, env=env
    )


async def _fetch(repo: Path, lane: Path, commit: str) -> None:
    """Fetch `commit` (and what it needs) from the lane into the person's repository.

    No ref is stored: git checks every object it receives.
    """
    upload = "git -c uploadpack.allowAnySHA1InWant=true upload-pack"
    await git(
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        "--no-auto-gc",
        f"--upload-pack={upload}",
        str(lane),
        commit,
        cwd=repo,
    )


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


async def save_lane(
    repo: Path, lane: Path, *, run: str, lane_id: str, message: str
) -> Save:
    """Save a lane aside losslessly.

    Its view goes into the person's repository, then its directory is moved into
    `saves/` by one rename.

    Returns:
        The save.

    Raises:
        SaveFailed: the lane cannot be read, the person's repository cannot be written,
            or the save cannot be moved (the lane is then left where it was, whole).
    """
    try:
        commit = await make_view(repo, lane, message=message)
        ref = await keep_view(repo, commit, saved_ref(run, lane_id))
        crash_point("save-view")
        target = save_dir(run, lane_id, commit)
        await in_thread(_move_aside, lane, target)
    except (GitFailed, OSError) as exc:
        raise SaveFailed(f"cannot save {lane} aside: {_why(exc)}") from None
    crash_point("save-moved")
    return Save(ref=ref, commit=commit, path=target)


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return f"{exc.filename or 'a folder'} is full: free some space there"
    return str(exc)


def _move_aside(lane: Path, target: Path) -> None:
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if target.exists():
        # The same view saved before (a save killed after its move, say): this one
        # is kept beside it, never over it.
        n = 2
        while target.with_name(f"{target.name}.{n}").exists():
            n += 1
        target = target.with_name(f"{target.name}.{n}")
    os.rename(lane, target)
    fsync_dir(target.parent)
    fsync_dir(lane.parent)


def find_saves(run: str, lane_id: str) -> list[Path]:
    """The lossless saves of a lane on this machine, newest first."""
    where = paths().state_dir / "saves" / run / lane_id
    try:
        found = [p for p in where.iterdir() if p.is_dir()]
    except OSError:
        return []
    return sorted(found, key=lambda p: p.stat().st_mtime_ns, reverse=True)


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
    """Bring a save's view back into a fresh lane: its index and every file git keeps.

    Only for a save made on another machine, whose lossless copy is not here: what git
    does not hold (ignored files, modes beyond the executable bit, empty directories,
    nested repositories) is not in a view.

    Raises:
        GitFailed: the commit is missing or the lane cannot be written.
    """
    parents: Sequence[str] = (
        await git("rev-list", "--parents", "-n", "1", commit, cwd=lane)
    ).split()[1:]
    if len(parents) > 1:
        await git("read-tree", parents[1], cwd=lane)
    if not await git("ls-tree", "--name-only", commit, cwd=lane):
        return  # an empty tree: nothing to bring back ("pathspec '.' did not match")
    await git("restore", f"--source={commit}", "--worktree", "--", ".", cwd=lane)
