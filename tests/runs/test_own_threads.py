"""A run's own work (git, saving aside, restoring) never waits for a place in anyio's
default thread limiter, which the built-in agent's user tools share: with every place
held by workers that ignore the stop, a lane still opens, is saved aside and restored,
on asyncio and trio."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
import pytest
from tests.runs.support import make_repo
from tests.threads import default_threads_held

from tether.runs._lane_git import git, lane_dir, open_lane, restore_copy, save_lane

if TYPE_CHECKING:
    from pathlib import Path

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
    lane = lane_dir("run_t", "lane_one")
    async with default_threads_held():
        with anyio.fail_after(30):
            await open_lane(repo, lane, "lane-one")
            (lane / "work.txt").write_text("unsaved work\n", encoding="utf-8")
            save = await save_lane(
                repo, lane, run="run_t", lane_id="lane_one", message="aside"
            )
            back = lane_dir("run_u", "lane_two")
            await restore_copy(save.path, back)
            shown = await git("show", f"{save.commit}:work.txt", cwd=repo)
    assert shown == "unsaved work"
    assert not lane.exists()
    assert (back / "work.txt").read_text(encoding="utf-8") == "unsaved work\n"
