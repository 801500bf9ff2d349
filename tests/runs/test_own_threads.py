"""A run's own work (git, the lanes' lock, saving aside, removing a worktree) never
waits for a place in anyio's default thread limiter, which the built-in agent's user
tools share: with every place held by workers that ignore the stop, a lane still opens,
is saved aside and is removed, on asyncio and trio."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from tests.runs.support import make_repo
from tests.threads import default_threads_held

from tether.runs._lanes import git, open_worktree, remove_worktree, save_aside

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_a_lane_opens_saves_and_closes_while_the_default_threads_are_held(
    tmp_path: Path,
) -> None:
    """Regression: git ran through `anyio.run_process` (trio: a thread of the default
    limiter to start it) and the lock, copies and removal through default threads, so
    a run whose agent's tools had leaked 40 workers could not save or remove a lane."""
    repo = make_repo(tmp_path)
    async with default_threads_held():
        with anyio.fail_after(30):
            worktree = await open_worktree(repo, tmp_path / "lanes" / "one", "lane-one")
            (worktree / "work.txt").write_text("unsaved work\n", encoding="utf-8")
            commit = await save_aside(worktree, "refs/tether/test/one", message="aside")
            await remove_worktree(repo, worktree)
            shown = await git("show", f"{commit}:work.txt", cwd=repo)
    assert shown == "unsaved work"
    assert not worktree.exists()
