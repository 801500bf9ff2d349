"""The run and its take-overs SIGKILLed at random moments, round after round: whatever
the moment, every item ends done exactly once, no claim is left, and the first work each
lane held reaches the item's branch.

`TETHER_TEST_KILL_ROUNDS` sets the rounds (default 6, the suite's short form; 200 for
the long one: `TETHER_TEST_KILL_ROUNDS=200 ./scripts/test tests/runs/test_random_kills.py`).
The moment is counted from the process's start; on a loaded machine most rounds then
kill it before it recorded anything. `TETHER_TEST_KILL_FROM=line` counts it from the
run's first line (`run <id>`) instead: every round kills a run or take-over at work.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tether.runs import RunState, Store
from tether.runs._lane_git import lossless_save
from tether.runs._liveness import found_dead, process_alive
from tether.runs._open import default_store_path
from tether.runs._takeover import effective_state

from .support import git, make_repo, open_default_store, start, tether, write_plan
from .test_crash import _wait_tree_gone

ROUNDS = int(os.environ.get("TETHER_TEST_KILL_ROUNDS", "6"))

FROM_LINE = os.environ.get("TETHER_TEST_KILL_FROM") == "line"

# The long form outlasts the suite's bound of 120 s per test: ten seconds a round.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(max(120, 10 * ROUNDS))]


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


def _dump(store: Store, out: Path) -> str:
    """The store as the restart path sees it, written to `out` in full; returned: the
    items, claims and runs, and the ledger of the runs that touched an unfinished item.
    """
    db = sqlite3.connect(f"file:{default_store_path()}?mode=ro", uri=True)
    try:
        items = db.execute(
            "SELECT id, state, epoch, holder FROM items ORDER BY seq"
        ).fetchall()
        claims = db.execute(
            "SELECT item, run, lane, epoch, expires FROM claims"
        ).fetchall()
    finally:
        db.close()
    now = store.now()
    lines = ["items (id, state, epoch, holder):", *(f"  {i}" for i in items)]
    lines.append("claims (item, run, lane, epoch, expires in s):")
    lines += [f"  {c[:4]} {c[4] - now:+.1f}" for c in claims]
    open_items = {i[0] for i in items if i[1] != "done"}
    touched = {c[1] for c in claims} | {i[3] for i in items if i[3]}
    lines.append("runs (id, state, found dead, pid alive, lease in s, takeover of):")
    ledger: list[str] = []
    for run in store.runs():
        alive = process_alive(run.host, run.pid, run.pid_start)
        lease = "-" if run.expires is None else f"{run.expires - now:+.1f}"
        lines.append(
            f"  {run.id} {run.state.value} dead={found_dead(store, run)} "
            f"pid {run.pid} alive={alive} lease {lease} of {run.takeover_of}"
        )
        lanes = store.lanes(run.id)
        lines += [
            f"    {lane.id} {lane.item} {lane.state.value} stage {lane.stage} "
            f"saved {lane.saved_commit} note {lane.note}"
            for lane in lanes
        ]
        if run.id in touched or any(lane.item in open_items for lane in lanes):
            ledger.append(f"  {run.id}:")
            ledger += [
                f"    {e.kind} {e.lane or ''} {e.detail}".rstrip()
                for e in store.events(run.id)
            ]
    full = "\n".join([*lines, "ledger of the runs that touched an open item:", *ledger])
    out.write_text(full + "\n", encoding="utf-8")
    return f"store dumped in {out}\n{full}"


@pytest.mark.rule("no-crash-strands")
def test_random_kills_of_runs_and_takeovers_lose_nothing(tmp_path: Path) -> None:
    """Each round starts `tether run` on the queue (three new items once it is empty)
    or takes over the run that died last, and SIGKILLs it at a random moment."""
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
    for n in range(ROUNDS):
        if all(i.state == "done" for i in store.items()):
            for k in range(3):
                items.append(f"r{n}-{k}")
                store.add_item(items[-1], "work")
        last = _unfinished(store)
        args = ["run", str(plan)] if last is None else ["takeover", last]
        proc = start(*args)
        assert proc.stdout is not None
        out = proc.stdout.readline() if FROM_LINE else ""
        try:
            proc.wait(timeout=rng.uniform(0.05, 1.5))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        out += proc.stdout.read()
        new = out.split()[1] if out.startswith("run ") else None
        for run in (new, last):
            if run is not None:
                _wait_tree_gone(run)
                _seen_notes(store, run, seen)
    # Whatever is left: take over (or run) until nothing is, a bounded number of times.
    recovery: list[str] = []
    for _ in range(10):
        if all(i.state == "done" for i in store.items()) and not store.claims():
            break
        last = _unfinished(store)
        result = tether("takeover", last) if last else tether("run", str(plan))
        assert result.returncode in (0, 1), result.stdout + result.stderr
        err = result.stderr.strip().splitlines()[-3:]
        recovery.append(
            f"{last or 'run'}: exit {result.returncode}\n{result.stdout}{err}"
        )
    dump = ""
    if not all(i.state == "done" for i in store.items()) or store.claims():
        dump = _dump(store, tmp_path / "store-dump.txt")
        dump += "\nthe recovery runs:\n" + "\n".join(recovery)
    assert [(i.id, i.state) for i in store.items()] == [(i, "done") for i in items], (
        dump
    )
    assert store.claims() == [], dump
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
