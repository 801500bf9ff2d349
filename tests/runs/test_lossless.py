"""The save is lossless: what a lane's directory holds comes back at the take-over
exactly, whatever git does not keep, on both stores; no save replaces another."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import anyio
import pytest
from tests.waiting import wait_until

from tether.runs._lane_git import (
    find_saves,
    lane_dir,
    open_lane,
    restore_copy,
    save_lane,
)
from tether.stop import lift_stop, set_stop

from .snapshot import assert_same, snapshot
from .support import (
    WAIT_FOR_GO,
    git,
    halted_run,
    make_repo,
    run_id_of,
    start,
    tether,
    write_plan,
)

pytestmark = pytest.mark.slow


CONTENT = Path(__file__).with_name("lane_content.sh")


@pytest.fixture(params=["sqlite", "postgres"])
def store_args(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "postgres":
        return ["--store", str(request.getfixturevalue("pg_url"))]
    return []


@pytest.mark.rule("save-lossless")
def test_the_save_is_lossless_from_the_halt_to_the_takeover(
    tmp_path: Path, store_args: list[str]
) -> None:
    """The lane holds ignored files, empty folders, 0600/0444/0700 modes, links, a
    nested repository with history and a dirty file, an intent-to-add entry, a staged
    deletion, staged and unstaged edits of one file, bytes under a line-ending rule, a
    commit kept only by the reflog and its own `info/exclude` of `*`. After the halt
    and the take-over, the new lane is the same, path by path and byte by byte."""
    repo = make_repo(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    plan = write_plan(
        tmp_path,
        repo,
        items=["rich"],
        stages=[
            ("make", f"sh {CONTENT}; " + WAIT_FOR_GO.format(stage="make")),
            ("look", WAIT_FOR_GO.format(stage="look").replace("go", "go2")),
        ],
        lanes=1,
    )
    env = {"MARKS": str(marks)}
    proc = start("run", str(plan), *store_args, env=env)
    run = run_id_of(proc)
    wait_until(lambda: (marks / "rich.make").exists(), what="the lane made")
    (lane,) = _lanes(store_args, run)
    before = snapshot(Path(lane.worktree))
    set_stop()
    (marks / "go").touch()
    assert proc.wait(timeout=60) == 3
    lift_stop()
    taken = start("takeover", run, *store_args, env=env)
    new_run = run_id_of(taken)
    wait_until(lambda: (marks / "rich.look").exists(), what="the stage after the halt")
    (restored,) = _lanes(store_args, new_run)
    assert restored.worktree != lane.worktree
    after = snapshot(Path(restored.worktree))
    (marks / "go2").touch()
    assert taken.wait(timeout=60) == 0, taken.stdout.read() if taken.stdout else ""
    assert_same(before, after)
    # The reviewable view is in the person's repository; their checkout is untouched.
    (saved,) = [x for x in _lanes(store_args, run) if x.saved_ref]
    # (Its own `info/exclude` of `*` leaves untracked files out of the view: only the
    # lossless copy has them.)
    assert git(repo, "show", f"{saved.saved_ref}:staged.txt") == "staged\nunstaged"
    assert git(repo, "status", "--porcelain") == ""


def _lanes(store_args: list[str], run: str) -> list[_Lane]:
    import json

    shown = tether("runs", "show", run, "--json", *store_args)
    assert shown.returncode == 0, shown.stderr
    lanes = json.loads(shown.stdout)["lanes"]
    from tether.runs._open import open_store, store_url

    store = open_store(store_url(store_args[1] if store_args else None))
    try:
        rows = {row.item: row for row in store.lanes(run)}
    finally:
        store.close()
    return [_Lane(rows[x["item"]].worktree, x["saved_ref"]) for x in lanes]


class _Lane:
    def __init__(self, worktree: str, saved_ref: str | None) -> None:
        self.worktree = worktree
        self.saved_ref = saved_ref


def _run(cwd: Path, script: str) -> None:
    subprocess.run(["sh", "-c", script], cwd=cwd, check=True, capture_output=True)


@pytest.mark.anyio
@pytest.mark.rule("save-lossless")
async def test_a_rebase_in_progress_comes_back_as_it_was(tmp_path: Path) -> None:
    """A lane stopped in the middle of a conflicted rebase: its state, the conflict
    markers and the commits not yet replayed come back; `git rebase --continue` works."""
    repo = make_repo(tmp_path)
    lane = lane_dir("run_r", "lane_r")
    await open_lane(repo, lane, "tether/r")
    _run(
        lane,
        "set -e; c='git -c user.email=a@b -c user.name=a commit -qm'; "
        "git checkout -q -b side; echo side > README.md; $c side -a; echo two > "
        "other.txt; git add other.txt; $c side2; git checkout -q tether/r; "
        "echo main > README.md; $c main -a; git checkout -q side; "
        "git rebase -q tether/r >/dev/null 2>&1 || true",
    )
    assert (lane / ".git" / "rebase-merge").is_dir()
    before = snapshot(lane)
    save = await save_lane(repo, lane, run="run_r", lane_id="lane_r", message="r")
    back = lane_dir("run_s", "lane_s")
    await restore_copy(save.path, back)
    assert_same(before, snapshot(back))
    _run(back, "echo resolved > README.md; git add README.md")
    done = await anyio.run_process(
        ["git", "-c", "user.email=a@b", "-c", "user.name=a", "rebase", "--continue"],
        cwd=back,
        check=False,
        env={**os.environ, "GIT_EDITOR": "true"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (back / ".git" / "rebase-merge").exists()
    assert git(back, "log", "--format=%s", "-3") == "side2\nside\nmain"
    assert git(back, "show", "HEAD:other.txt") == "two"


@pytest.mark.anyio
@pytest.mark.rule("save-never-replaces")
async def test_a_save_never_replaces_another_and_a_restore_is_a_copy(
    tmp_path: Path,
) -> None:
    """Two saves of the same lane get two refs; the restore copies the save, so a file
    removed from the restored lane is still in the save it came from."""
    repo = make_repo(tmp_path)
    lane = lane_dir("run_n", "lane_n")
    await open_lane(repo, lane, "tether/n")
    (lane / "one.txt").write_text("one\n", encoding="utf-8")
    first = await save_lane(repo, lane, run="run_n", lane_id="lane_n", message="n")
    await restore_copy(first.path, lane)  # the same lane again, from its save
    (lane / "one.txt").unlink()
    (lane / "two.txt").write_text("two\n", encoding="utf-8")
    second = await save_lane(repo, lane, run="run_n", lane_id="lane_n", message="n")
    assert first.ref != second.ref
    assert first.path != second.path
    assert (first.path / "one.txt").read_text(encoding="utf-8") == "one\n"
    assert git(repo, "show", f"{first.ref}:one.txt") == "one"
    assert git(repo, "show", f"{second.ref}:two.txt") == "two"
    assert sorted(p.name for p in first.path.parent.iterdir()) == sorted(
        [first.path.name, second.path.name]
    )


@pytest.mark.anyio
async def test_a_restore_cut_halfway_leaves_only_a_partial_copy(
    tmp_path: Path,
) -> None:
    """A restore cancelled while it copies leaves no lane and the save as it was; the
    copy it left is under tmp/ as `*.partial`, which nothing reads as a save."""
    repo = make_repo(tmp_path)
    lane = lane_dir("run_c", "lane_c")
    await open_lane(repo, lane, "tether/c")
    for n in range(2000):
        (lane / f"f{n}.txt").write_text("x" * 1000, encoding="utf-8")
    save = await save_lane(repo, lane, run="run_c", lane_id="lane_c", message="c")
    before = snapshot(save.path)
    back = lane_dir("run_d", "lane_d")
    with anyio.move_on_after(0.01):
        await restore_copy(save.path, back)
    assert snapshot(save.path) == before
    if back.exists():  # the copy won the race: it is whole
        assert_same(before, snapshot(back))
    # Nothing half made where lanes live: the lane is whole, or not there at all.
    if back.parent.exists():
        assert list(back.parent.iterdir()) in ([], [back])


@pytest.mark.anyio
async def test_an_object_a_lane_planted_never_reaches_the_persons_repository(
    tmp_path: Path,
) -> None:
    """A lane writes a corrupt object under the name of a file's blob, hoping the view
    skips hashing it: the view hashes every file itself, so the corrupt object never
    crosses and the person's repository has the true blob."""
    import zlib

    repo = make_repo(tmp_path)
    lane = lane_dir("run_p", "lane_p")
    await open_lane(repo, lane, "tether/p")
    (lane / "file.txt").write_text("content\n", encoding="utf-8")
    blob = git(lane, "hash-object", "file.txt")
    planted = lane / ".git" / "objects" / blob[:2] / blob[2:]
    planted.parent.mkdir(exist_ok=True)
    planted.write_bytes(zlib.compress(b"blob 7\0garbage"))
    save = await save_lane(repo, lane, run="run_p", lane_id="lane_p", message="p")
    # The view hashes the file itself: the planted object is never read, and the
    # person's repository has the file's true blob under its name.
    assert (save.path / "file.txt").exists()
    found = await anyio.run_process(["git", "cat-file", "-p", blob], cwd=repo)
    assert found.stdout == b"content\n"


def test_the_docs_way_to_get_a_save_back_by_hand_works(tmp_path: Path) -> None:
    """docs/runs.md "What a save keeps": its console lines, run on a real halted run
    (RUN, LANE and COMMIT filled in, the state directory where this test keeps it)."""
    import shlex

    from tests.docs._blocks import ROOT, blocks

    from tether._config import paths

    doc = ROOT / "docs" / "runs.md"
    (block,) = [b for b in blocks(doc) if "saves/RUN/LANE/SAVE" in b.text]
    repo = make_repo(tmp_path)
    run = halted_run(tmp_path, repo, item="x", work="echo kept > kept.txt; ")
    (lane,) = _lanes([], run)
    assert lane.saved_ref is not None
    lane_id = lane.saved_ref.rsplit("/", 1)[1]
    assert git(repo, "rev-parse", lane.saved_ref)  # the view is there
    home = tmp_path / "rescue-home"
    for line in block.text.splitlines():
        command = line[2:].split("  #")[0].strip()
        command = (
            command.replace("~/.local/state/tether", str(paths().state_dir))
            .replace("~/rescued", str(home))
            .replace("RUN", run)
            .replace("LANE", lane_id)
            .replace("SAVE", find_saves(run, lane_id)[0].name)
        )
        words = shlex.split(command)
        if words[0] == "tether":
            result = tether(*words[1:])
        else:
            result = subprocess.run(
                words, cwd=repo, capture_output=True, text=True, check=False
            )
        assert result.returncode == 0, (command, result.stdout, result.stderr)
    assert (home / "kept.txt").read_text(encoding="utf-8") == "kept\n"
    assert "kept.txt" in git(home, "status", "--porcelain")


@pytest.mark.anyio
async def test_a_view_of_an_empty_tree_restores_to_an_empty_lane(
    tmp_path: Path,
) -> None:
    """A lane whose tree is empty, restored from its view alone (saved elsewhere):
    nothing to bring back is not a failure."""
    from tether.runs._lane_git import make_view, restore

    repo = make_repo(tmp_path)
    git(repo, "rm", "-q", "README.md")
    git(repo, "commit", "-qm", "empty")
    lane = lane_dir("run_e", "lane_e")
    await open_lane(repo, lane, "tether/e")
    view = await make_view(repo, lane, message="e")
    fresh = lane_dir("run_f", "lane_f")
    await open_lane(repo, fresh, "tether/e")
    await restore(fresh, view)
    assert sorted(p.name for p in fresh.iterdir()) == [".git"]
