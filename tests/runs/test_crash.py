"""Crash tests: the run process SIGKILLed at chosen points, then a take-over.

Whatever the point, nothing is lost: every item is finished exactly once, the
uncommitted work of the dead run (untracked files included) reaches the item's branch
with the same contents, and no item is ever claimed by two runs. Points inside the run
are reached through the test-only hook `TETHER_TEST_CRASH_AT=<point>`.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from functools import partial
from pathlib import Path

import anyio
import psutil
import pytest
from tests.waiting import wait_until

from tether.runs import RunState, Store
from tether.stop import lift_stop, set_stop
from tether.testing import alive, wait_exited

from .support import (
    WAIT_FOR_GO,
    git,
    make_repo,
    open_default_store,
    run_id_of,
    start,
    tether,
    write_plan,
)

pytestmark = pytest.mark.slow


ITEMS = ["one", "two"]

WORK = (
    "grep -q changed README.md || echo changed >> README.md; "
    '[ -e notes.txt ] || echo "first $$ $TETHER_ITEM" > notes.txt; '
)
COMMIT_ALL = (
    "git add -A && { git diff --cached --quiet || "
    "git -c user.email=a@b -c user.name=agent commit -qm 'review {item}'; }"
)


def _plan(tmp_path: Path, marks: Path, *, heartbeat: float = 10.0) -> tuple[Path, Path]:
    repo = make_repo(tmp_path)
    marks.mkdir()
    plan = write_plan(
        tmp_path,
        repo,
        items=ITEMS,
        stages=[
            ("implement", WORK + WAIT_FOR_GO.format(stage="implement")),
            ("review", COMMIT_ALL),
        ],
        extra=f"heartbeat = {heartbeat}\nlease = 30",
    )
    return plan, repo


def _notes_now(store: Store, run: str) -> dict[str, str]:
    """The untracked file of each lane of `run`, as it is in its worktree now."""
    found = {}
    for lane in store.lanes(run):
        notes = Path(lane.worktree) / "notes.txt"
        if notes.exists():
            found[lane.item] = notes.read_text(encoding="utf-8").strip()
    return found


def _assert_nothing_lost(store: Store, repo: Path, notes: dict[str, str]) -> None:
    assert [(i.id, i.state) for i in store.items()] == [(i, "done") for i in ITEMS]
    done = Counter(
        lane.item
        for run in store.runs()
        for lane in store.lanes(run.id)
        if lane.state.value == "done"
    )
    assert done == Counter(ITEMS), done  # each item finished exactly once
    assert store.claims() == []
    for item, text in notes.items():
        assert git(repo, "show", f"tether/{item}:notes.txt") == text
        assert git(repo, "show", f"tether/{item}:README.md") == "hello\nchanged"


def _tree_of(run: str) -> list[psutil.Process]:
    """The processes of `run`'s agents still running (they carry TETHER_RUN)."""
    needle = f"TETHER_RUN={run}\0".encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read():
                    found.append(psutil.Process(int(pid)))
        except (OSError, psutil.Error):
            continue
    return [p for p in found if alive([p])]


def _wait_tree_gone(run: str) -> None:
    """Wait for the exit of every agent process of `run` (a shell may start one more
    before it dies: look again until none is left)."""
    for _ in range(20):
        procs = _tree_of(run)
        if not procs:
            return
        anyio.run(partial(wait_exited, procs, timeout=30))
    raise AssertionError(f"agent processes of {run} keep starting: {procs}")


def _killed_while_busy(tmp_path: Path) -> tuple[Store, Path, Path, str, dict[str, str]]:
    """A run of `_plan` SIGKILLed while both agents are in their calls, its agents
    gone: (store, marks, repo, the run's id, what its lanes held)."""
    marks = tmp_path / "marks"
    plan, repo = _plan(tmp_path, marks)
    proc = start("run", str(plan), env={"MARKS": str(marks)})
    run = run_id_of(proc)
    wait_until(lambda: len(list(marks.glob("*.implement"))) == 2, what="agents busy")
    store = open_default_store()
    notes = _notes_now(store, run)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    _wait_tree_gone(run)
    return store, marks, repo, run, notes


def _takeover(run: str, marks: Path, *, expect: int = 0, **env: str) -> str:
    """Take `run` over; check the exit code (with the output in the message)."""
    result = tether("takeover", run, env={"MARKS": str(marks), **env})
    assert result.returncode == expect, result.stdout + result.stderr
    return result.stdout.split()[1] if result.stdout.startswith("run ") else ""


@pytest.mark.rule("restart-path")
def test_killed_during_a_stage_then_taken_over(tmp_path: Path) -> None:
    """SIGKILL while both agents are in their calls: the agents die with the run; the
    take-over saves their worktrees first, restores them, reruns the stage, finishes."""
    store, marks, repo, run, notes = _killed_while_busy(tmp_path)
    assert set(notes) == set(ITEMS)
    assert len(store.claims(run)) == 2  # still held by the dead run
    (marks / "go").touch()
    _takeover(run, marks)
    assert store.run(run).state is RunState.TAKEN_OVER  # type: ignore[union-attr]
    assert {e.kind for e in store.events(run)} >= {"dead", "saved", "taken-over"}
    _assert_nothing_lost(store, repo, notes)


@pytest.mark.rule("restart-path")
def test_killed_while_taking_a_claim_then_taken_over(tmp_path: Path) -> None:
    """SIGKILL inside the claim's transaction: nothing is claimed, and a take-over
    claims and finishes every item."""
    marks = tmp_path / "marks"
    plan, repo = _plan(tmp_path, marks)
    (marks / "go").touch()
    proc = start(
        "run", str(plan), env={"MARKS": str(marks), "TETHER_TEST_CRASH_AT": "claim"}
    )
    run = run_id_of(proc)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    store = open_default_store()
    assert store.claims() == []
    _takeover(run, marks)
    _assert_nothing_lost(store, repo, {})


@pytest.mark.rule("restart-path")
def test_killed_while_renewing_then_taken_over(tmp_path: Path) -> None:
    """SIGKILL inside a heartbeat's renewal while agents work: the take-over saves the
    dead run's worktrees, takes its claims at a new epoch, restores, finishes."""
    marks = tmp_path / "marks"
    plan, repo = _plan(tmp_path, marks, heartbeat=0.3)
    proc = start(
        "run", str(plan), env={"MARKS": str(marks), "TETHER_TEST_CRASH_AT": "renew"}
    )
    run = run_id_of(proc)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    store = open_default_store()
    notes = _notes_now(store, run)
    epochs = {c.item: c.epoch for c in store.claims(run)}
    (marks / "go").touch()
    new = _takeover(run, marks)
    took = [e.detail for e in store.events(new) if e.kind == "claim"]
    for item, epoch in epochs.items():
        assert f"{item} epoch {epoch + 1}" in took
    _assert_nothing_lost(store, repo, notes)


@pytest.mark.rule("restart-path")
def test_killed_between_a_save_and_its_release_then_taken_over(tmp_path: Path) -> None:
    """SIGKILL after a lane was saved aside, before its claim was released: the claim
    stays with the dead run until the take-over, which restores the saved work."""
    marks = tmp_path / "marks"
    plan, repo = _plan(tmp_path, marks)
    proc = start(
        "run",
        str(plan),
        env={"MARKS": str(marks), "TETHER_TEST_CRASH_AT": "save-release"},
    )
    run = run_id_of(proc)
    wait_until(lambda: len(list(marks.glob("*.implement"))) == 2, what="agents busy")
    store = open_default_store()
    notes = _notes_now(store, run)
    set_stop()
    (marks / "go").touch()
    assert proc.wait(timeout=30) == -signal.SIGKILL
    # The save is the rename ("saved-aside"); its view comes after the halt, which
    # the kill cut short (spec 05: what is derived comes after the release).
    saved = [e for e in store.events(run) if e.kind == "saved-aside"]
    assert len(saved) == 1
    assert len(store.claims(run)) == 2
    _takeover(run, marks, expect=2)  # refused while the stop stands
    lift_stop()
    _takeover(run, marks)
    _assert_nothing_lost(store, repo, notes)


@pytest.mark.rule("restart-path")
def test_killed_during_the_takeover_itself_then_taken_over_again(
    tmp_path: Path,
) -> None:
    """The take-over process is SIGKILLed after it saved the dead run's worktrees and
    before it claimed anything; a second take-over finishes with nothing lost."""
    store, marks, repo, run, notes = _killed_while_busy(tmp_path)
    _takeover(run, marks, expect=-signal.SIGKILL, TETHER_TEST_CRASH_AT="takeover")
    assert store.run(run).state is RunState.DEAD  # type: ignore[union-attr]
    (marks / "go").touch()
    _takeover(run, marks)
    _assert_nothing_lost(store, repo, notes)


@pytest.mark.rule("restart-path")
def test_a_live_run_cannot_be_taken_over(tmp_path: Path) -> None:
    """The restart path checks the owner is alive (pid and start time): refused, exit 2."""
    marks = tmp_path / "marks"
    plan, _ = _plan(tmp_path, marks)
    proc = start("run", str(plan), env={"MARKS": str(marks)})
    run = run_id_of(proc)
    wait_until(lambda: len(list(marks.glob("*.implement"))) == 2, what="agents busy")
    result = tether("takeover", run)
    assert result.returncode == 2
    assert "is alive" in result.stderr
    (marks / "go").touch()
    assert proc.wait(timeout=60) == 0


@pytest.mark.rule("claims")
def test_two_runs_on_one_store_never_hold_one_item(tmp_path: Path) -> None:
    """Two `tether run` processes on one plan of six items: each item is finished by
    exactly one of them."""
    repo = make_repo(tmp_path)
    items = [f"i{n}" for n in range(6)]
    plan = write_plan(
        tmp_path, repo, items=items, stages=[("only", "echo $TETHER_RUN > who.txt")]
    )
    procs = [start("run", str(plan)) for _ in range(2)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    store = open_default_store()
    finished = Counter(
        lane.item
        for run in store.runs()
        for lane in store.lanes(run.id)
        if lane.state.value == "done"
    )
    assert finished == Counter(items)
