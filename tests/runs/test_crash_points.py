"""No crash strands an item: the run, or a take-over, SIGKILLed at each point between two
of its durable writes (docs/runs.md, "Crash points"), then taken over. Every item ends
done exactly once, no claim is left, and the work the dead lanes held reaches the
item's branch."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest
from tests.waiting import wait_until

from tether.runs._own_git import own_git_of
from tether.stop import lift_stop, set_stop

from .support import WAIT_FOR_GO, open_default_store, run_id_of, start, tether
from .test_crash import (
    _assert_nothing_lost,
    _killed_while_busy,
    _notes_now,
    _plan,
    _takeover,
    _wait_tree_gone,
)

pytestmark = pytest.mark.slow


RUN_POINTS = {
    # point: (a stop is set while the agents are busy, the agents are let go at once)
    "claimed": (False, True),
    "lane": (False, True),
    "stage": (False, False),
    "receipt": (False, True),
    "finished": (False, True),
    "save-view": (True, False),
    "save-moved": (True, False),
    "save-release": (True, False),
    "released": (True, False),
}
"""The points of a run, in the order a lane meets them."""

TAKEOVER_POINTS = ("save-view", "save-moved", "takeover", "claimed", "lane", "restore")
"""The points of a take-over, in the order it meets them."""


@pytest.mark.rule("no-crash-strands")
@pytest.mark.parametrize("point", list(RUN_POINTS))
def test_a_run_killed_at_each_point_is_taken_over_with_nothing_lost(
    tmp_path: Path, point: str
) -> None:
    stop, go_at_once = RUN_POINTS[point]
    marks = tmp_path / "marks"
    plan, repo = _plan(tmp_path, marks)
    if go_at_once:
        (marks / "go").touch()
    env = {"MARKS": str(marks), "TETHER_TEST_CRASH_AT": point}
    proc = start("run", str(plan), env=env)
    run = run_id_of(proc)
    store = open_default_store()
    notes: dict[str, str] = {}
    if not go_at_once:
        wait_until(
            lambda: (
                len(list(marks.glob("*.implement"))) == 2 or proc.poll() is not None
            ),
            what="agents busy",
        )
        notes = _notes_now(store, run)
        if stop:
            set_stop()
        (marks / "go").touch()
    assert proc.wait(timeout=60) == -signal.SIGKILL
    _wait_tree_gone(run)
    if not notes:
        notes = _notes_now(store, run)  # what the dead lanes hold now
    lift_stop()
    _takeover(run, marks)
    _assert_nothing_lost(store, repo, notes)


@pytest.mark.rule("no-crash-strands")
@pytest.mark.parametrize("point", TAKEOVER_POINTS)
def test_a_takeover_killed_at_each_point_is_taken_over_again(
    tmp_path: Path, point: str
) -> None:
    store, marks, repo, run, notes = _killed_while_busy(tmp_path)
    first = tether(
        "takeover", run, env={"MARKS": str(marks), "TETHER_TEST_CRASH_AT": point}
    )
    assert first.returncode == -signal.SIGKILL, first.stdout + first.stderr
    again = first.stdout.split()[1] if first.stdout.startswith("run ") else run
    if again != run:
        _wait_tree_gone(again)
    (marks / "go").touch()
    _takeover(again, marks)
    _assert_nothing_lost(store, repo, notes)


@pytest.mark.rule("no-crash-strands")
def test_a_dead_lane_without_its_own_git_dir_is_taken_over(tmp_path: Path) -> None:
    """A lane directory whose tether git dir (`<lane>.git`) was never made: what a
    take-over killed between copying a save into place and making that git dir left
    (the lane restored, its own git dir not). The restart path makes it and saves the
    lane; it never fails on it, take-over after take-over, the items held."""
    store, marks, repo, run, notes = _killed_while_busy(tmp_path)
    for lane in store.lanes(run):
        shutil.rmtree(own_git_of(Path(lane.worktree)))
    (marks / "go").touch()
    _takeover(run, marks)
    _assert_nothing_lost(store, repo, notes)


@pytest.mark.rule("no-crash-strands")
def test_a_later_run_names_a_claim_a_dead_run_still_holds(tmp_path: Path) -> None:
    """A run killed after its claim and before its lane: a later `tether run` of the
    plan does not say "done" with the item stranded; it names the take-over, exit 1."""
    marks = tmp_path / "marks"
    plan, _repo = _plan(tmp_path, marks)
    (marks / "go").touch()
    env = {"MARKS": str(marks), "TETHER_TEST_CRASH_AT": "claimed"}
    proc = start("run", str(plan), env=env)
    run = run_id_of(proc)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    later = tether("run", str(plan), env={"MARKS": str(marks)})
    assert later.returncode == 1, later.stdout + later.stderr
    assert f"`tether takeover {run}`" in later.stdout


@pytest.mark.rule("no-crash-strands")
def test_a_takeover_restores_more_lanes_than_threads_with_no_deadlock(
    tmp_path: Path,
) -> None:
    """18 lanes killed in their calls (more than the built-in threads): the take-over
    saves and restores every one and finishes, none left waiting on another."""
    from .support import git, make_repo, write_plan

    marks = tmp_path / "marks"
    marks.mkdir()
    repo = make_repo(tmp_path)
    items = [f"n{k:02}" for k in range(18)]
    plan = write_plan(
        tmp_path,
        repo,
        items=items,
        stages=[("implement", "echo w > w.txt; " + WAIT_FOR_GO.format(stage="i"))],
        lanes=18,
    )
    proc = start("run", str(plan), env={"MARKS": str(marks)})
    run = run_id_of(proc)
    wait_until(
        lambda: len(list(marks.glob("*.i"))) == 18, what="every agent busy", bound=120
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    _wait_tree_gone(run)
    (marks / "go").touch()
    taken = tether("takeover", run, env={"MARKS": str(marks)})
    assert taken.returncode == 0, taken.stdout + taken.stderr
    assert taken.stdout.count("restored") == 18
    store = open_default_store()
    assert [i.state for i in store.items()] == ["done"] * 18
    for item in items:
        assert git(repo, "show", f"tether/{item}:w.txt") == "w"
