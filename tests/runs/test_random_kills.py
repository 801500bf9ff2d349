"""The run and its take-overs SIGKILLed at random moments, round after round: whatever
the moment, every item ends done exactly once, no claim is left, and the first work each
lane held reaches the item's branch.

`TETHER_TEST_KILL_ROUNDS` sets the rounds (default 6, the suite's short form; 200 for
the long one: `TETHER_TEST_KILL_ROUNDS=200 ./scripts/test tests/runs/test_random_kills.py`).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tether.runs import RunState, Store
from tether.runs._lanes import lossless_save
from tether.runs._takeover import effective_state

from .support import git, make_repo, open_default_store, start, tether, write_plan
from .test_crash import _wait_tree_gone

pytestmark = pytest.mark.slow


WORK = (
    "grep -q changed README.md || echo changed >> README.md; "
    '[ -e notes.txt ] || echo "first $$ $TETHER_ITEM" > notes.txt; sleep 0.2'
)
REVIEW = "sleep 0.1"


def _seen_notes(store: Store, run: str, seen: dict[str, str]) -> None:
    """Remember the first notes.txt each item's lanes held (in a lane or a save)."""
    for lane in store.lanes(run):
        places = [Path(lane.worktree)]
        saved = lossless_save(lane)  # a save's folder is not named by its view
        if saved is not None:
            places.append(saved)
        for place in places:
            notes = place / "notes.txt"
            if lane.item not in seen and notes.is_file():
                seen[lane.item] = notes.read_text(encoding="utf-8").strip()


def _unfinished(store: Store) -> str | None:
    """The newest run that died without a take-over, if any."""
    for run in reversed(store.runs()):
        if run.state in (RunState.DONE, RunState.TAKEN_OVER):
            continue
        if effective_state(store, run) in (RunState.DEAD, RunState.HALTED):
            return run.id
    return None


@pytest.mark.rule("no-crash-strands")
def test_random_kills_of_runs_and_takeovers_lose_nothing(tmp_path: Path) -> None:
    """Each round starts `tether run` on the queue (three new items once it is empty)
    or takes over the run that died last, and SIGKILLs it at a random moment."""
    rounds = int(os.environ.get("TETHER_TEST_KILL_ROUNDS", "6"))
    rng = random.Random(int(os.environ.get("TETHER_TEST_KILL_SEED", "1717")))
    repo = make_repo(tmp_path)
    plan = write_plan(
        tmp_path,
        repo,
        items=[],
        stages=[("implement", WORK), ("review", REVIEW)],
        lanes=2,
        extra="heartbeat = 0.5\nlease = 30",
    )
    store = open_default_store()
    seen: dict[str, str] = {}
    items: list[str] = []
    for n in range(rounds):
        if all(i.state == "done" for i in store.items()):
            for k in range(3):
                items.append(f"r{n}-{k}")
                store.add_item(items[-1], "work")
        last = _unfinished(store)
        args = ["run", str(plan)] if last is None else ["takeover", last]
        proc = start(*args)
        try:
            proc.wait(timeout=rng.uniform(0.05, 1.5))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        out = proc.stdout.read() if proc.stdout else ""
        new = out.split()[1] if out.startswith("run ") else None
        for run in (new, last):
            if run is not None:
                _wait_tree_gone(run)
                _seen_notes(store, run, seen)
    # Whatever is left: take over (or run) until nothing is, a bounded number of times.
    for _ in range(10):
        if all(i.state == "done" for i in store.items()) and not store.claims():
            break
        last = _unfinished(store)
        result = tether("takeover", last) if last else tether("run", str(plan))
        assert result.returncode in (0, 1), result.stdout + result.stderr
    assert [(i.id, i.state) for i in store.items()] == [(i, "done") for i in items]
    assert store.claims() == []
    done = Counter(
        lane.item
        for run in store.runs()
        for lane in store.lanes(run.id)
        if lane.state.value == "done"
    )
    assert done == Counter(items), done
    for item in items:
        assert git(repo, "show", f"tether/{item}:README.md") == "hello\nchanged"
        notes = git(repo, "show", f"tether/{item}:notes.txt")
        assert notes == seen.get(item, notes), (item, notes, seen)
