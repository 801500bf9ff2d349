"""`tether run` end to end: real git, real agent processes, the real stop path."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tests.waiting import wait_until

from tether.runs import LaneState, RunState
from tether.runs._lane_git import find_saves, lossless_save
from tether.stop import lift_stop, set_stop

from .support import (
    WAIT_FOR_GO,
    git,
    kinds,
    make_repo,
    open_default_store,
    run_id_of,
    start,
    tether,
    write_plan,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.slow


COMMIT = (
    "echo {brief} > work.txt; git add work.txt; "
    'git -c user.email=a@b -c user.name=agent commit -qm "work on {item}"'
)


def test_a_run_takes_every_item_through_its_stages_and_leaves_the_branches(
    tmp_path: Path,
) -> None:
    """Exit 0; `run <id>` first; each agent sees TETHER_AGENT/RUN/LANE and the expanded
    brief; receipts name the commits; branches stay; the person's checkout is untouched."""
    repo = make_repo(tmp_path)
    plan = write_plan(
        tmp_path,
        repo,
        items=["one", "two", "three"],
        stages=[
            ("implement", COMMIT),
            ("review", 'echo "agent=$TETHER_AGENT run=$TETHER_RUN lane=$TETHER_LANE"'),
        ],
    )
    result = tether("run", str(plan))
    assert result.returncode == 0, result.stderr
    first, *_rest = result.stdout.splitlines()
    assert first.startswith("run run_")
    run = first.split()[1]
    store = open_default_store()
    receipts = store.receipts(run)
    assert sorted((r.item, r.stage, r.exit_status) for r in receipts) == sorted(
        (item, stage, 0)
        for item in ("one", "two", "three")
        for stage in ("implement", "review")
    )
    for r in receipts:
        if r.stage == "implement":
            assert len(r.commits) == 1
            assert git(repo, "show", f"tether/{r.item}:work.txt") == f"Work on {r.item}"
        else:
            assert f"agent=1 run={run} lane={r.lane}" in r.log_tail
    assert [i.state for i in store.items()] == ["done"] * 3
    assert store.claims() == []
    assert store.run(run).state is RunState.DONE  # type: ignore[union-attr]
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


@pytest.mark.rule("status-runs")
def test_status_lists_the_runs_of_this_account_with_their_state(tmp_path: Path) -> None:
    """`tether status --json` names each run and its state; the plain view too."""
    repo = make_repo(tmp_path)
    plan = write_plan(tmp_path, repo, items=["one"], stages=[("only", "true")])
    before = json.loads(tether("status", "--json").stdout)
    assert before["runs"] == []
    result = tether("run", str(plan))
    assert result.returncode == 0, result.stderr
    run = result.stdout.split()[1]
    status = tether("status", "--json")
    assert status.returncode == 0
    me = pwd.getpwuid(os.geteuid()).pw_name
    mine = {"id": run, "state": "done", "account": me}
    assert json.loads(status.stdout)["runs"] == [mine]
    # The runs line lists only runs not finished, with a count of the rest.
    assert "runs: none working; 1 finished" in tether("status").stdout
    listed = tether("runs", "--json")
    assert json.loads(listed.stdout) == [mine]


def _busy_plan(tmp_path: Path, repo: Path, marks: Path) -> Path:
    marks.mkdir()
    work = (
        'echo changed >> README.md; echo "untracked $TETHER_ITEM" > notes.txt; '
        "mkdir -p sub; echo deep > sub/deep.txt; "
    )
    return write_plan(
        tmp_path,
        repo,
        items=["one", "two"],
        stages=[
            ("implement", work + WAIT_FOR_GO.format(stage="implement")),
            ("review", COMMIT),
        ],
    )


@pytest.mark.rule("halt-order")
def test_the_halt_goes_in_the_spec_order_for_every_lane(tmp_path: Path) -> None:
    """A stop while two agents are in calls: no move after it; each call finishes and
    its receipt is recorded; then that lane is saved aside; only then released and
    halted; the run halts last and exits 3. Read from the ledger."""
    repo = make_repo(tmp_path)
    marks = tmp_path / "marks"
    plan = _busy_plan(tmp_path, repo, marks)
    proc = start("run", str(plan), env={"MARKS": str(marks)})
    run = run_id_of(proc)
    wait_until(
        lambda: len(list(marks.glob("*.implement"))) == 2, what="both agents busy"
    )
    set_stop("test")
    store = open_default_store()
    wait_until(lambda: ("stop-observed", None) in kinds(store, run), what="stop seen")
    (marks / "go").touch()
    assert proc.wait(timeout=60) == 3, proc.communicate()
    events = store.events(run)
    order = [(e.kind, e.lane) for e in events]
    stop_at = order.index(("stop-observed", None))
    assert not [k for k, _ in order[stop_at:] if k in ("move", "stage-start", "claim")]
    lanes = store.lanes(run)
    assert len(lanes) == 2
    for lane in lanes:
        mine = [k for k, lane_id in order if lane_id == lane.id]
        # The save is the rename; its view is derived once the run is halted
        # (spec 05: stop seen -> halted whatever the lane holds).
        steps = ["receipt", "saved-aside", "released", "lane-halted", "saved"]
        at = [order.index((k, lane.id)) for k in steps]
        assert at == sorted(at), mine
        assert at[0] > stop_at
        assert at[-1] > order.index(("halted", None)), order
        assert lane.state is LaneState.HALTED
        assert lane.saved_ref == f"refs/tether/saved/{run}/{lane.id}"
        assert lane.stage == 1
    assert [k for k, lane_id in order if lane_id is None][-1] == "halted"
    assert store.claims() == []
    assert store.run(run).state is RunState.HALTED  # type: ignore[union-attr]
    stage_starts = [e.detail for e in events if e.kind == "stage-start"]
    assert stage_starts == ["implement", "implement"]


@pytest.mark.rule("save-aside")
def test_saving_aside_keeps_tracked_and_untracked_work_and_touches_nothing(
    tmp_path: Path,
) -> None:
    """The saved commit holds the changed tracked file and the untracked files; the
    lane's directory is moved aside whole, its branch, index and files untouched, and
    so is the person's checkout."""
    repo = make_repo(tmp_path)
    marks = tmp_path / "marks"
    plan = _busy_plan(tmp_path, repo, marks)
    proc = start("run", str(plan), env={"MARKS": str(marks)})
    run = run_id_of(proc)
    wait_until(
        lambda: len(list(marks.glob("*.implement"))) == 2, what="both agents busy"
    )
    set_stop()
    (marks / "go").touch()
    assert proc.wait(timeout=60) == 3
    store = open_default_store()
    for lane in store.lanes(run):
        ref = lane.saved_ref
        assert ref is not None
        assert git(repo, "show", f"{ref}:README.md") == "hello\nchanged"
        assert git(repo, "show", f"{ref}:notes.txt") == f"untracked {lane.item}"
        assert git(repo, "show", f"{ref}:sub/deep.txt") == "deep"
        assert lane.saved_commit is not None
        assert not Path(lane.worktree).exists()  # moved aside whole, by one rename
        # The save is renamed aside before its view exists (spec 05: the halt is a
        # rename whatever the lane holds), so its folder is not named by the view.
        (wt,) = find_saves(run, lane.id)
        assert git(wt, "status", "--porcelain").splitlines() == [
            "M README.md",  # the first line lost its leading space to strip()
            "?? notes.txt",
            "?? sub/",
        ]
        assert git(repo, "rev-parse", f"tether/{lane.item}") == git(
            repo, "rev-parse", "main"
        )
        assert "refs/stash" not in git(repo, "for-each-ref")
    assert git(repo, "status", "--porcelain") == ""


@pytest.mark.rule("halted-stays")
def test_a_lift_alone_resumes_nothing_and_a_takeover_restores_and_finishes(
    tmp_path: Path,
) -> None:
    """After a halt and a lift the run stays halted with nothing claimed; a take-over is
    refused while the stop stands, and once lifted restores the saved work into fresh
    worktrees (untracked files too) and finishes the remaining stage."""
    repo = make_repo(tmp_path)
    marks = tmp_path / "marks"
    plan = _busy_plan(tmp_path, repo, marks)
    proc = start("run", str(plan), env={"MARKS": str(marks)})
    run = run_id_of(proc)
    wait_until(
        lambda: len(list(marks.glob("*.implement"))) == 2, what="both agents busy"
    )
    set_stop()
    (marks / "go").touch()
    assert proc.wait(timeout=60) == 3
    refused = tether("takeover", run)
    assert refused.returncode == 2
    assert "a stop set by" in refused.stderr
    assert "lift it with `tether lift` from your own terminal" in refused.stderr
    lift_stop()
    shown = json.loads(tether("runs", "show", run, "--json").stdout)
    assert shown["state"] == "halted"
    assert {(lane["state"], lane["claimed"]) for lane in shown["lanes"]} == {
        ("halted", False)
    }
    assert set(shown) == {"id", "state", "lanes"}
    assert set(shown["lanes"][0]) == {
        "item",
        "state",
        "saved_ref",
        "claimed",
        "stage",
        "started_at",
        "log",
        "saved_refs",
    }
    assert shown["lanes"][0]["stage"] == "implement"
    assert Path(shown["lanes"][0]["log"]).is_file()
    assert shown["lanes"][0]["saved_refs"] == [shown["lanes"][0]["saved_ref"]]
    taken = tether("takeover", run, env={"MARKS": str(marks)})
    assert taken.returncode == 0, taken.stdout + taken.stderr
    new_run = taken.stdout.splitlines()[0].split()[1]
    assert new_run != run
    store = open_default_store()
    assert store.run(run).state is RunState.TAKEN_OVER  # type: ignore[union-attr]
    stages = [(r.item, r.stage) for r in store.receipts(new_run)]
    assert sorted(stages) == [("one", "review"), ("two", "review")]
    for item in ("one", "two"):
        # The review stage committed work.txt only; what it left (the restored files)
        # tether committed onto the branch when the stage ended, in a commit naming it.
        assert git(repo, "show", f"tether/{item}:work.txt")
        assert git(repo, "show", f"tether/{item}:notes.txt") == f"untracked {item}"
        assert git(repo, "show", f"tether/{item}:README.md") == "hello\nchanged"
        tip = git(repo, "log", "-1", "--format=%an %s", f"tether/{item}")
        assert tip == "tether review: work the stage left uncommitted"
    for lane in store.lanes(new_run):
        assert lane.saved_ref is None  # nothing left uncommitted to view
    assert [i.state for i in store.items()] == ["done", "done"]


@pytest.mark.rule("hold")
def test_hold_lets_nothing_go_and_moves_nothing_until_the_read_is_clear(
    tmp_path: Path,
) -> None:
    """A stop folder that breaks the rule (uid dir group-writable) holds: the state is
    held, the claims and worktrees stay, no stage starts; once fixed the run goes on."""
    repo = make_repo(tmp_path)
    marks = tmp_path / "marks"
    plan = _busy_plan(tmp_path, repo, marks)
    proc = start("run", str(plan), env={"MARKS": str(marks)})
    run = run_id_of(proc)
    wait_until(
        lambda: len(list(marks.glob("*.implement"))) == 2, what="both agents busy"
    )
    from tether.stop import StopStore

    uid_dir = StopStore.from_setup().place.uid_dir
    uid_dir.chmod(0o770)
    store = open_default_store()

    def ledger() -> object:
        return [(e.kind, e.detail) for e in store.events(run)]

    wait_until(
        lambda: store.run(run).state is RunState.HELD,  # type: ignore[union-attr]
        what="held",
        explain=ledger,
    )
    (marks / "go").touch()
    wait_until(
        lambda: sum(1 for k, _ in kinds(store, run) if k == "receipt") == 2,
        what="both receipts",
        explain=ledger,
    )
    # Held: both claims kept, no review stage started, lanes still there.
    assert len(store.claims(run)) == 2
    assert [e.detail for e in store.events(run) if e.kind == "stage-start"] == [
        "implement",
        "implement",
    ]
    assert all(Path(lane.worktree).is_dir() for lane in store.lanes(run))
    hold = next(e for e in store.events(run) if e.kind == "hold")
    assert "writ" in hold.detail
    uid_dir.chmod(0o700)
    assert proc.wait(timeout=60) == 0, ledger()
    assert [i.state for i in store.items()] == ["done", "done"]
    assert ("hold-ended", None) in kinds(store, run)


@pytest.mark.rule("halt-order")
def test_a_save_that_fails_holds_its_lane_and_claim_and_says_why(
    tmp_path: Path,
) -> None:
    """A lane that cannot be moved aside (its save folder's place is taken by a file):
    its save fails, the lane and its claim are held, the run exits 4 as halt-held. A
    lane whose git an agent broke is still saved (the save is a rename of its folder)
    and halts; only its view fails, said in its note."""
    from tether._config import paths

    repo = make_repo(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    breaks = 'if [ "$TETHER_ITEM" = two ]; then rm -rf .git; fi; '
    plan = write_plan(
        tmp_path,
        repo,
        items=["one", "two"],
        stages=[
            (
                "implement",
                "echo x > x.txt; " + breaks + WAIT_FOR_GO.format(stage="impl"),
            ),
            ("review", "true"),
        ],
    )
    proc = start("run", str(plan), "--save-retry", "0.3", env={"MARKS": str(marks)})
    run = run_id_of(proc)
    wait_until(lambda: len(list(marks.glob("*.impl"))) == 2, what="both agents busy")
    store = open_default_store()
    (one,) = [lane for lane in store.lanes(run) if lane.item == "one"]
    blocked = paths().state_dir / "saves" / run / one.id
    blocked.parent.mkdir(parents=True, exist_ok=True)
    blocked.write_text("not a folder\n", encoding="utf-8")
    set_stop()
    (marks / "go").touch()
    assert proc.wait(timeout=60) == 4
    lanes = {lane.item: lane for lane in store.lanes(run)}
    assert lanes["one"].state is LaneState.HELD
    assert "cannot save" in (lanes["one"].note or "")
    assert lanes["one"].held_reason == lanes["one"].note
    assert Path(lanes["one"].worktree).is_dir()  # whole, where it was
    assert lanes["two"].state is LaneState.HALTED
    assert "saved at" in (lanes["two"].note or "")
    assert lanes["two"].saved_commit is None
    assert [c.item for c in store.claims(run)] == ["one"]
    assert store.run(run).state is RunState.HALT_HELD  # type: ignore[union-attr]
    assert ("released", lanes["one"].id) not in kinds(store, run)


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs, unmounted afterwards (needs the right to mount)."""
    import subprocess

    where = tmp_path / "small"
    where.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(
            f"cannot mount a small tmpfs (needs CAP_SYS_ADMIN): {made.stderr!r}"
        )
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.rule("halt-order")
def test_a_full_disk_under_the_repository_fails_only_the_view_after_the_halt(
    tmp_path: Path, small_tmpfs: Path
) -> None:
    """The repository sits on a small tmpfs that is full when the stop comes. The save
    is the rename of the lane's folder (spec 05: stop seen -> halted whatever the lane
    holds), so the lane is saved, released and halted and the run exits 3; the view
    derived afterwards cannot be written into the repository, which the lane's note
    says, and the save holds the work whole."""
    repo = make_repo(small_tmpfs)
    marks = tmp_path / "marks"
    marks.mkdir()
    plan = write_plan(
        tmp_path,
        repo,
        items=["one"],
        stages=[
            (
                "implement",
                "head -c 200000 /dev/urandom > big.bin; "
                + WAIT_FOR_GO.format(stage="impl"),
            ),
            ("review", "true"),
        ],
    )
    proc = start("run", str(plan), "--save-retry", "0.3", env={"MARKS": str(marks)})
    run = run_id_of(proc)
    wait_until(lambda: len(list(marks.glob("*.impl"))) == 1, what="the agent busy")
    with (small_tmpfs / "filler").open("wb") as filler:
        try:
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()
        except OSError:
            pass
    set_stop()
    (marks / "go").touch()
    assert proc.wait(timeout=60) == 3, proc.communicate()
    store = open_default_store()
    (lane,) = store.lanes(run)
    assert lane.state is LaneState.HALTED
    assert lane.saved_commit is None
    assert (lane.note or "").startswith("saved at ")
    assert store.claims(run) == []
    saved = lossless_save(lane)
    assert saved is not None
    assert (saved / "big.bin").stat().st_size == 200000
    assert ("view-failed", lane.id) in kinds(store, run)
    assert store.run(run).state is RunState.HALTED  # type: ignore[union-attr]


def test_a_following_run_takes_new_queue_items_and_halts_on_a_stop(
    tmp_path: Path,
) -> None:
    """`--follow` on an empty queue waits; an item queued meanwhile is done; a stop
    then halts the idle run (exit 3) within a few poll intervals."""
    import time

    repo = make_repo(tmp_path)
    plan = write_plan(tmp_path, repo, items=[], stages=[("only", COMMIT)])
    proc = start("run", str(plan), "--follow")
    run = run_id_of(proc)
    assert tether("queue", "add", "late", "--brief", "Came late").returncode == 0
    store = open_default_store()
    wait_until(lambda: [i.state for i in store.items()] == ["done"], what="late done")
    assert git(repo, "show", "tether/late:work.txt") == "Came late"
    set_stop()
    stopped = time.monotonic()
    assert proc.wait(timeout=60) == 3
    assert time.monotonic() - stopped < 10  # poll 0.1 s; a wide margin for load
    assert store.run(run).state is RunState.HALTED  # type: ignore[union-attr]


@pytest.mark.rule("halt-order")
def test_a_full_tether_home_ends_the_run_with_one_line_and_loses_nothing(
    tmp_path: Path, small_tmpfs: Path
) -> None:
    """TETHER_HOME on a small tmpfs that fills while the agent works: the run ends with
    one line naming the full folder and what to do, no traceback; once space is freed a
    take-over finishes the item with its work."""
    repo = make_repo(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    plan = write_plan(
        tmp_path,
        repo,
        items=["one"],
        stages=[
            ("implement", "echo kept > kept.txt; " + WAIT_FOR_GO.format(stage="impl")),
            ("review", "true"),
        ],
    )
    env = {"MARKS": str(marks), "TETHER_HOME": str(small_tmpfs / "home")}
    proc = start("run", str(plan), "--save-retry", "0.3", env=env)
    run = run_id_of(proc)
    wait_until(lambda: len(list(marks.glob("*.impl"))) == 1, what="the agent busy")
    filler = small_tmpfs / "filler"
    # Unbuffered: a short last write leaves nothing for the close to fail on.
    with filler.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 65536)
        except OSError:
            pass
    (marks / "go").touch()
    code = proc.wait(timeout=60)
    out_text, err_text = proc.communicate()
    assert "Traceback" not in err_text + out_text, err_text
    assert code in (1, 4), (code, out_text, err_text)
    assert "no space left on the file system of" in err_text
    filler.unlink()
    taken = tether("takeover", run, env=env)
    assert taken.returncode == 0, taken.stdout + taken.stderr
    assert git(repo, "show", "tether/one:kept.txt") == "kept"
