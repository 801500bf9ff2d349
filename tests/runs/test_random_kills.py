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
from tether.runs._lanes import save_dir

from .support import git, make_repo, open_default_store, start, tether, write_plan
from .test_crash import _wait_tree_gone

ITEMS = ["k1", "k2", "k3"]
WORK = (
    "grep -q changed README.md || echo changed >> README.md; "
    '[ -e notes.txt ] || echo "first $$ $TETHER_ITEM" > notes.txt; sleep 0.2'
)
REVIEW = "sleep 0.1"


def _seen_notes(store: Store, run: str, seen: dict[str, str]) -> None:
    """Remember the first notes.txt each item's lanes held (in a lane or a save)."""
    for lane in store.lanes(run):
        places = [Path(lane.worktree)]
        if lane.saved_commit is not None:
            places.append(save_dir(lane.run, lane.id, lane.saved_commit))
        for place in places:
            notes = place / "notes.txt"
            if lane.item not in seen and notes.is_file():
                seen[lane.item] = notes.read_text(encoding="utf-8").strip()


@pytest.mark.rule("no-crash-strands")
def test_random_kills_of_runs_and_takeovers_lose_nothing(tmp_path: Path) -> None:
    rounds = int(os.environ.get("TETHER_TEST_KILL_ROUNDS", "6"))
    rng = random.Random(int(os.environ.get("TETHER_TEST_KILL_SEED", "1717")))
    repo = make_repo(tmp_path)
    plan = write_plan(
        tmp_path,
        repo,
        items=ITEMS,
        stages=[("implement", WORK), ("review", REVIEW)],
        lanes=2,
        extra="heartbeat = 0.5\nlease = 30",
    )
    store = open_default_store()
    seen: dict[str, str] = {}
    last: str | None = None
    for _ in range(rounds):
        args = ["run", str(plan)] if last is None else ["takeover", last]
        proc = start(*args)
        try:
            proc.wait(timeout=rng.uniform(0.05, 2.5))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        out = proc.stdout.read() if proc.stdout else ""
        new = out.split()[1] if out.startswith("run ") else None
        for run in (new, last):
            if run is not None:
                _wait_tree_gone(run)
                _seen_notes(store, run, seen)
        if proc.returncode == 0 and new is not None:
            break  # that run finished everything
        if new is not None:
            last = new
        elif last is None:
            break  # killed before it recorded a run: nothing to take over
    # Whatever is left: take over until nothing is (a bounded number of times).
    for _ in range(5):
        if [i.state for i in store.items()] == ["done"] * len(
            ITEMS
        ) and not store.claims():
            break
        runs = [r for r in store.runs() if r.state is not RunState.TAKEN_OVER]
        dead = [r for r in runs if r.state.value in ("running", "halting", "held")]
        target = (dead or runs)[-1] if runs else None
        if target is None:
            result = tether("run", str(plan))
        else:
            result = tether("takeover", target.id)
            if result.returncode == 2:  # it was done: a plain run picks up the rest
                result = tether("run", str(plan))
        assert result.returncode in (0, 1), result.stdout + result.stderr
    assert [(i.id, i.state) for i in store.items()] == [(i, "done") for i in ITEMS]
    assert store.claims() == []
    done = Counter(
        lane.item
        for run in store.runs()
        for lane in store.lanes(run.id)
        if lane.state.value == "done"
    )
    assert done == Counter(ITEMS), done
    for item in ITEMS:
        assert git(repo, "show", f"tether/{item}:README.md") == "hello\nchanged"
        notes = git(repo, "show", f"tether/{item}:notes.txt")
        assert notes == seen.get(item, notes), (item, notes, seen)
