"""`tether lanes prune --refs`: the saved refs a finished item went on from are listed
(by age) and deleted after asking; the view of what a done lane left uncommitted, the
only copy of that work, never is."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from tests.cli._run import invoke

from tether.cli.lanes import lanes
from tether.stop import lift_stop

from .support import git, halted_run, make_repo, tether

if TYPE_CHECKING:
    from pathlib import Path


pytestmark = pytest.mark.slow


@pytest.mark.rule("lanes-prune")
def test_prune_refs_lists_and_deletes_the_saves_a_finished_item_went_on_from(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path)
    run = halted_run(tmp_path, repo, item="h", work="echo w > w.txt; ")
    saved = git(repo, "for-each-ref", "--format=%(refname)", "refs/tether/saved")
    assert saved.startswith(f"refs/tether/saved/{run}/")
    # The item is not finished: its save is the only copy; nothing is listed.
    assert invoke(lanes, "prune", "--refs", "--json").output == "[]\n"
    lift_stop()
    # Taken over: the save restored, the item done (its work on the branch).
    (tmp_path / "marks" / "go").touch()
    done = tether("takeover", run, env={"MARKS": str(tmp_path / "marks")})
    assert done.returncode == 0, done.stdout + done.stderr
    assert git(repo, "show", "tether/h:w.txt") == "w"
    refs = git(repo, "for-each-ref", "--format=%(refname)", "refs/tether/saved")
    assert saved in refs.split()

    assert invoke(lanes, "prune", "--refs", "--older-than", "1d", "--json").output == (
        "[]\n"
    )
    listed = json.loads(invoke(lanes, "prune", "--refs", "--json").output)
    assert [
        (r["kind"], r["path"], r["item"]) for r in listed if r["kind"] == "saved-ref"
    ] == [("saved-ref", saved, "h")]
    without = invoke(lanes, "prune")  # not a terminal: lists, deletes nothing
    assert saved not in without.output
    gone = invoke(lanes, "prune", "--refs", "--yes").output
    assert "deleted 1 saved ref(s)" in gone
    left = git(repo, "for-each-ref", "--format=%(refname)", "refs/tether/saved")
    assert saved not in left.split()
