"""Git for lanes: worktrees in the state dir, branches, saving aside and restoring.

A lane's worktree lives under `<state dir>/lanes/<run>/<lane>`, never inside the
person's checkout, on its own branch `tether/<item>`. Saving aside follows spec 03's
recipe exactly: copy the lane's index to a temporary index file, `git add -A` into it,
`git write-tree`, `git commit-tree` (no hooks, no signing), `git update-ref
--create-reflog refs/tether/saved/<run>/<lane>` — the lane's index, files and branch are
never touched. The saved commit's parents are the lane's HEAD and a commit of its index,
like a stash, so restoring brings back what was staged as well as every file.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

from .._config import paths
from .._threads import in_thread
from ..errors import TetherError
from ..host._spawn import run_process

__all__ = (
    "GitFailed",
    "SaveFailed",
    "branch_name",
    "commits_since",
    "git",
    "has_commit",
    "head",
    "lane_dir",
    "open_worktree",
    "remove_worktree",
    "restore",
    "save_aside",
    "saved_ref",
)

_IDENTITY = {
    "GIT_AUTHOR_NAME": "tether",
    "GIT_AUTHOR_EMAIL": "tether@localhost",
    "GIT_COMMITTER_NAME": "tether",
    "GIT_COMMITTER_EMAIL": "tether@localhost",
}


class GitFailed(TetherError):
    """A git command failed; the message has its stderr."""


class SaveFailed(TetherError):
    """A lane's uncommitted work could not be saved aside; the message says why."""


def branch_name(item: str) -> str:
    """The lane branch of a work item."""
    return f"tether/{item}"


def saved_ref(run: str, lane: str) -> str:
    """Where a lane's saved-aside work is kept."""
    return f"refs/tether/saved/{run}/{lane}"


def lane_dir(run: str, lane: str) -> Path:
    """The worktree path of a lane, in the account's state dir."""
    return paths().state_dir / "lanes" / run / lane


async def git(
    *args: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
) -> str:
    """Run `git args` in `cwd` and return its stdout (stripped).

    Raises:
        GitFailed: git exited non-zero or could not start.
    """
    full_env = {**os.environ, **_IDENTITY, "GIT_TERMINAL_PROMPT": "0", **(env or {})}
    try:
        result = await run_process(["git", *args], cwd=cwd, env=full_env)
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


async def head(worktree: Path) -> str:
    """The commit a worktree's HEAD names."""
    return await git("rev-parse", "HEAD", cwd=worktree)


async def commits_since(worktree: Path, base: str) -> tuple[str, ...]:
    """Commits on HEAD that `base` lacks, oldest first."""
    out = await git("rev-list", "--reverse", f"{base}..HEAD", cwd=worktree)
    return tuple(out.split())


@contextlib.asynccontextmanager
async def _worktrees_locked(repo: Path) -> AsyncIterator[None]:
    """Hold the repository's worktree lock while worktrees are added or removed.

    git takes no lock of its own around `worktree add`, `remove` and `prune`: run at
    once (two lanes, or two runs on one repository), a prune can remove an add's half
    made entry, and an add can read another's entry before its `commondir` is written
    ("failed to read .git/worktrees/…/commondir"). So every lane takes this `flock` in
    the repository's common git dir first; it is held by an open descriptor, so a run
    that dies lets it go. Written by hand: no library locks git's worktree list.
    """
    try:
        common = Path(await git("rev-parse", "--git-common-dir", cwd=repo))
        if not common.is_absolute():
            common = repo / common
        fd = os.open(
            common / "tether-worktrees.lock",
            os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
            0o600,
        )
    except (GitFailed, OSError):
        yield  # no repository to lock: the git commands say what is wrong
        return
    try:
        # Blocking in a worker: the holder is a git command that ends on its own.
        await in_thread(fcntl.flock, fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


async def open_worktree(repo: Path, path: Path, branch: str) -> Path:
    """Add a worktree at `path` on `branch` (made from the repo's HEAD if new).

    Raises:
        GitFailed: the repository or the branch cannot be used.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    async with _worktrees_locked(repo):
        try:
            await git(
                "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", cwd=repo
            )
        except GitFailed:
            await git(
                "worktree", "add", "--quiet", "-b", branch, str(path), "HEAD", cwd=repo
            )
        else:
            await git("worktree", "add", "--quiet", str(path), branch, cwd=repo)
    return path


async def remove_worktree(repo: Path, path: Path) -> None:
    """Remove a worktree whose work is saved aside or committed; its branch stays."""
    async with _worktrees_locked(repo):
        with contextlib.suppress(GitFailed):
            await git("worktree", "remove", "--force", str(path), cwd=repo)
        if await in_thread(path.exists):
            await in_thread(shutil.rmtree, path, True)
        with contextlib.suppress(GitFailed):
            await git("worktree", "prune", cwd=repo)


async def _copy(src: Path, dst: Path) -> None:
    await in_thread(shutil.copyfile, src, dst)


async def save_aside(worktree: Path, ref: str, *, message: str) -> str:
    """Save a worktree's uncommitted work (tracked and untracked) under `ref`.

    Touches no branch, no index and no file of the worktree.

    Returns:
        The saved commit's id.

    Raises:
        SaveFailed: the worktree cannot be read or the repository cannot be written.
    """
    try:
        index = Path(
            await git(
                "rev-parse",
                "--path-format=absolute",
                "--git-path",
                "index",
                cwd=worktree,
            )
        )
        base = await head(worktree)
        tag = os.urandom(4).hex()
        tmp_all = index.with_name(f"tether-save-{tag}.index")
        tmp_staged = index.with_name(f"tether-save-{tag}.staged")
        try:
            if await in_thread(index.exists):
                await _copy(index, tmp_all)
                await _copy(index, tmp_staged)
            staged_tree = await git(
                "write-tree", cwd=worktree, env={"GIT_INDEX_FILE": str(tmp_staged)}
            )
            await git("add", "-A", cwd=worktree, env={"GIT_INDEX_FILE": str(tmp_all)})
            tree = await git(
                "write-tree", cwd=worktree, env={"GIT_INDEX_FILE": str(tmp_all)}
            )
        finally:
            for tmp in (tmp_all, tmp_staged):
                with contextlib.suppress(OSError):
                    tmp.unlink()
        staged = await git(
            "commit-tree",
            staged_tree,
            "-p",
            base,
            "-m",
            f"index of {message}",
            cwd=worktree,
        )
        commit = await git(
            "commit-tree", tree, "-p", base, "-p", staged, "-m", message, cwd=worktree
        )
        await git("update-ref", "--create-reflog", ref, commit, cwd=worktree)
    except (GitFailed, OSError) as exc:
        raise SaveFailed(f"cannot save {worktree} aside: {exc}") from None
    return commit


async def restore(worktree: Path, commit: str) -> None:
    """Bring saved-aside work back into a fresh worktree: its index and every file.

    The equivalent of `git stash apply --index` of the saved commit, also for files
    that were untracked (they come back untracked).

    Raises:
        GitFailed: the commit is missing or the worktree cannot be written.
    """
    parents: Sequence[str] = (
        await git("rev-list", "--parents", "-n", "1", commit, cwd=worktree)
    ).split()[1:]
    if len(parents) > 1:
        await git("read-tree", parents[1], cwd=worktree)
    await git("restore", f"--source={commit}", "--worktree", "--", ".", cwd=worktree)
