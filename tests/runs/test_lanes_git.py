"""Lanes' worktrees on one repository, added and removed at once by many lanes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import pytest

from tether.runs._lanes import git, open_worktree, remove_worktree


def _repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    for args in (
        ["init", "-q", "-b", "main"],
        ["commit", "-q", "--allow-empty", "-m", "start"],
    ):
        subprocess.run(["git", *args], cwd=repo, check=True)
    return repo


@pytest.mark.anyio
async def test_many_lanes_add_and_remove_worktrees_at_once_without_a_git_race(
    tmp_path: Path,
) -> None:
    """git has no lock around `worktree add/remove/prune`: lanes take one, so 12 lanes
    adding while others remove never see a half made entry."""
    repo = _repo(tmp_path)
    lanes = tmp_path / "lanes"

    async def lane(n: int) -> None:
        for round_ in range(3):
            path = lanes / f"l{n}-{round_}"
            await open_worktree(repo, path, f"lane/{n}-{round_}")
            assert (path / ".git").exists()
            await remove_worktree(repo, path)
            assert not path.exists()

    async with anyio.create_task_group() as tg:
        for n in range(12):
            tg.start_soon(lane, n)
    listed = await git("worktree", "list", "--porcelain", cwd=repo)
    assert listed.count("worktree ") == 1  # only the repository's own checkout
    branches = (await git("branch", "--list", "lane/*", cwd=repo)).split()
    assert len(branches) == 36  # every lane's branch stays for the person
