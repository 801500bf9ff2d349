"""A run's own work (git, the lanes' lock, saving aside, removing a worktree) never
waits for a place in anyio's default thread limiter, which the built-in agent's user
tools share: with every place held by workers that ignore the stop, a lane still opens,
is saved aside and is removed, on asyncio and trio."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from tests.runs.support import make_repo

from tether.runs._lanes import git, open_worktree, remove_worktree, save_aside

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@asynccontextmanager
async def default_threads_held() -> AsyncIterator[None]:
    """Every place of the default limiter held by a worker that ignores the stop."""
    release = threading.Event()
    limiter = anyio.to_thread.current_default_thread_limiter()
    try:
        async with anyio.create_task_group() as tg:
            for _ in range(int(limiter.total_tokens)):
                tg.start_soon(
                    lambda: anyio.to_thread.run_sync(
                        release.wait, abandon_on_cancel=True
                    )
                )
            await anyio.wait_all_tasks_blocked()
            assert limiter.available_tokens == 0
            yield
            tg.cancel_scope.cancel()
    finally:
        release.set()


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
