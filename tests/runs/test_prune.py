"""A done lane's leftovers are kept until `tether lanes prune`, which lists them first;
a save a take-over still needs is never listed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .support import (
    git,
    halted_run,
    make_repo,
    open_default_store,
    tether,
    write_plan,
)

pytestmark = pytest.mark.slow


BUILD = "echo 'build/' > .gitignore; mkdir -p build; echo object > build/out.o; "


@pytest.mark.slow
@pytest.mark.rule("lanes-prune")
def test_a_done_lane_keeps_its_ignored_files_until_prune_lists_and_deletes_them(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path)
    plan = write_plan(tmp_path, repo, items=["a"], stages=[("build", BUILD)])
    done = tether("run", str(plan))
    assert done.returncode == 0, done.stdout + done.stderr
    store = open_default_store()
    (lane,) = store.lanes(done.stdout.split()[1])
    kept = Path(lane.worktree) / "build" / "out.o"
    assert kept.read_text(encoding="utf-8") == "object\n"  # git leaves it out; kept
    assert tether("lanes", "prune", "--older-than", "7d", "--json").stdout == "[]\n"
    listed = tether("lanes", "prune")  # not a terminal: lists, deletes nothing
    assert listed.returncode == 0, listed.stderr
    assert "done-lane a" in listed.stdout
    assert "rerun with --yes" in listed.stdout
    assert kept.exists()
    shown = json.loads(tether("lanes", "prune", "--json").stdout)
    assert [(row["kind"], row["item"]) for row in shown] == [("done-lane", "a")]
    assert shown[0]["bytes"] > 0
    own_git = Path(lane.worktree).with_name(f"{Path(lane.worktree).name}.git")
    assert own_git.is_dir()
    gone = tether("lanes", "prune", "--yes")
    assert "deleted 1 folder(s)" in gone.stdout
    assert not Path(lane.worktree).exists()
    assert not own_git.exists()  # tether's git dir of it: the branch is in the repo
    assert not Path(lane.worktree).parent.exists()  # the run's folder, emptied
    assert tether("lanes", "prune").stdout == "nothing to prune\n"


@pytest.mark.rule("lanes-prune")
def test_prune_never_lists_a_save_a_takeover_still_needs(tmp_path: Path) -> None:
    halted_run(tmp_path, make_repo(tmp_path), item="h", work="echo w > w.txt; ")
    assert tether("lanes", "prune", "--json").stdout == "[]\n"


def test_prune_refuses_an_age_it_cannot_read() -> None:
    bad = tether("lanes", "prune", "--older-than", "soon")
    assert bad.returncode == 2
    assert "e.g. 30m, 12h, 7d or 2w" in bad.stderr


@pytest.mark.rule("lanes-prune")
def test_prune_keeps_a_done_lane_whose_branch_never_reached_the_repository(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path)
    # The person has the item's branch checked out: bringing it back is refused.
    git(repo, "checkout", "-q", "-b", "tether/a")
    plan = write_plan(tmp_path, repo, items=["a"], stages=[("work", BUILD)])
    done = tether("run", str(plan))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "could not be brought" in done.stdout + done.stderr
    store = open_default_store()
    (lane,) = store.lanes(done.stdout.split()[1])
    here = Path(lane.worktree)
    made = git(here, "rev-parse", "HEAD")
    assert git(repo, "rev-parse", "refs/heads/tether/a") != made

    listed = tether("lanes", "prune", "--json")
    assert listed.stdout == "[]\n"
    (kept,) = listed.stderr.splitlines()
    assert kept.startswith(f"kept: a: {here}: its branch tether/a")
    assert "is not in" in kept
    gone = tether("lanes", "prune", "--yes")
    assert gone.stdout == "nothing to prune\n"
    assert (here / "build" / "out.o").exists()
    assert git(here, "rev-parse", "HEAD") == made

    # The how-to it printed brings the work back; then the lane may go.
    git(repo, "checkout", "-q", "main")
    how = kept.split("`")[1].split()
    assert how[:3] == ["git", "-C", str(repo)]
    git(repo, *how[3:])
    assert git(repo, "rev-parse", "refs/heads/tether/a") == made
    shown = json.loads(tether("lanes", "prune", "--json").stdout)
    assert [(row["kind"], row["item"]) for row in shown] == [("done-lane", "a")]


@pytest.mark.slow
@pytest.mark.rule("lanes-prune")
def test_prune_deletes_a_done_lanes_agent_folder_and_nothing_it_links_to(
    tmp_path: Path,
) -> None:
    """A preset stage's lane leaves `<lane>.agent/` (its copy of the person's CLI
    folder, credentials included, and what the CLI wrote: a read-only folder, a link
    to a file of the person's). Prune lists it beside the done lane and deletes it;
    the person's folder and the linked file are untouched."""
    from tether.host import containment

    from .test_preset_attacks import _plan, _snapshot, _stand_in

    if containment().kind != "namespace":
        pytest.skip(f"a preset stage needs the wall: {containment().reason}")
    home = tmp_path / "person"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text('{"claudeAiOauth":"tok"}')
    victim = tmp_path / "victim"
    victim.write_text("precious\n", encoding="utf-8")
    before = _snapshot(home), victim.read_text(encoding="utf-8")
    repo = make_repo(tmp_path)
    cli = _stand_in(
        tmp_path,
        "claude",
        f"""\
        mkdir -p "$CLAUDE_CONFIG_DIR/projects/p"
        echo session > "$CLAUDE_CONFIG_DIR/projects/p/s.jsonl"
        chmod 555 "$CLAUDE_CONFIG_DIR/projects/p"
        ln -s {victim} "$CLAUDE_CONFIG_DIR/link"
        echo done > work.txt
        """,
    )
    plan = _plan(tmp_path, repo, "claude", cli)
    env = {"MARKS": str(tmp_path / "marks"), "HOME": str(home)}
    done = tether("run", str(plan), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    store = open_default_store()
    (lane,) = store.lanes(done.stdout.split()[1])
    here = Path(lane.worktree)
    agent = here.with_name(f"{here.name}.agent")
    assert (agent / "claude" / ".credentials.json").exists()
    shown = json.loads(tether("lanes", "prune", "--json").stdout)
    assert sorted((row["kind"], row["item"], row["path"]) for row in shown) == [
        ("agent-folder", "one", str(agent)),
        ("done-lane", "one", str(here)),
    ]
    gone = tether("lanes", "prune", "--yes")
    assert "deleted 2 folder(s)" in gone.stdout, gone.stdout + gone.stderr
    assert not agent.exists()
    assert not here.exists()
    assert not here.with_name(f"{here.name}.log").exists()  # goes with a done lane
    assert (_snapshot(home), victim.read_text(encoding="utf-8")) == before
    assert tether("lanes", "prune").stdout == "nothing to prune\n"


@pytest.mark.rule("lanes-prune")
def test_prune_keeps_a_done_lane_whose_work_tether_could_not_commit(
    tmp_path: Path,
) -> None:
    """The stage leaves work beside a sparse file: its stage end cannot commit (S16:
    tether hashes no sparse file) and the lane is held, done as failed, its work in its
    folder only. Prune keeps it and says why."""
    repo = make_repo(tmp_path)
    work = "echo w > w.txt; truncate -s 1G sparse.bin; "
    plan = write_plan(tmp_path, repo, items=["s"], stages=[("work", work)])
    done = tether("run", str(plan))
    assert "sparse" in done.stdout + done.stderr
    store = open_default_store()
    (lane,) = store.lanes(done.stdout.split()[1])
    here = Path(lane.worktree)
    listed = tether("lanes", "prune", "--yes", "--json")
    assert listed.stdout == "[]\n"
    (kept,) = listed.stderr.splitlines()
    assert kept.startswith(
        f"kept: s: {here}: its work was neither committed nor viewed"
    )
    assert (here / "w.txt").read_text(encoding="utf-8") == "w\n"
