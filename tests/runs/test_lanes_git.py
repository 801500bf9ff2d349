"""Lanes' git: a repository per lane, borrowing the person's objects, its branch brought
back by tether; many lanes opened at once with no lock and no race."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

from tether.runs._lane_git import bring_back, git, lane_dir, open_lane

from .support import git as sh_git
from .support import make_repo

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_many_lanes_open_at_once_each_a_repository_of_its_own(
    tmp_path: Path,
) -> None:
    """24 lanes open at once (no shared worktree list, so no lock to deadlock on); each
    has its own git dir, and the person's repository gains only the lanes' branches."""
    repo = make_repo(tmp_path)

    async def lane(n: int) -> None:
        path = lane_dir("run_many", f"lane_{n}")
        await open_lane(repo, path, f"tether/item-{n}")
        assert (path / ".git").is_dir()
        assert (path / "README.md").read_text(encoding="utf-8") == "hello\n"

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for n in range(24):
                tg.start_soon(lane, n)
    assert sh_git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    branches = sh_git(repo, "branch", "--list", "tether/*").split()
    assert len(branches) == 24


@pytest.mark.rule("lanes-git")
async def test_a_lane_borrows_the_persons_objects_and_writes_none_of_them(
    tmp_path: Path,
) -> None:
    """The lane reads the person's history through alternates; its own commits, refs
    and config stay in its git dir until tether brings the branch back."""
    repo = make_repo(tmp_path)
    before = sh_git(repo, "count-objects", "-v")
    path = lane_dir("run_b", "lane_b")
    base = await open_lane(repo, path, "tether/b")
    assert base == sh_git(repo, "rev-parse", "HEAD")
    (path / "new.txt").write_text("new\n", encoding="utf-8")
    await git("add", "new.txt", cwd=path)
    await git("commit", "-qm", "lane work", cwd=path)
    await git("update-ref", "refs/heads/evil", "HEAD", cwd=path)
    await git("config", "core.fsmonitor", "touch /tmp/never", cwd=path)
    assert sh_git(repo, "count-objects", "-v") == before
    assert sh_git(repo, "rev-parse", "refs/heads/tether/b") == base
    assert "evil" not in sh_git(repo, "branch", "--list")
    await bring_back(repo, path, "tether/b")
    assert sh_git(repo, "rev-parse", "refs/heads/tether/b") == await git(
        "rev-parse", "HEAD", cwd=path
    )
    assert sh_git(repo, "show", "tether/b:new.txt") == "new"
    assert "evil" not in sh_git(repo, "branch", "--list")
    assert "fsmonitor" not in sh_git(repo, "config", "--list", "--local")


@pytest.mark.rule("lanes-git")
async def test_the_persons_hooks_never_run_for_tethers_own_git(tmp_path: Path) -> None:
    """A person's `reference-transaction` hook that refuses `refs/tether/*` and a
    failing `post-checkout` do not hold a lane's opening or its branch's return."""
    repo = make_repo(tmp_path)
    hooks = repo / ".git" / "hooks"
    for name in ("reference-transaction", "post-checkout", "pre-commit"):
        hook = hooks / name
        hook.write_text("#!/bin/sh\necho refused >&2\nexit 1\n", encoding="utf-8")
        hook.chmod(0o755)
    path = lane_dir("run_h", "lane_h")
    await open_lane(repo, path, "tether/h")
    (path / "x").write_text("x\n", encoding="utf-8")
    await git("add", "x", cwd=path)
    await git("commit", "-qm", "x", cwd=path)
    await bring_back(repo, path, "tether/h")
    assert sh_git(repo, "show", "tether/h:x") == "x"
