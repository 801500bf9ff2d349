"""The stage end's commit (S16's walk) is the one `git add -A` made in the lane, and
the index tether writes into the lane carries the files' stat data.

The oracle is git itself on a copy of the lane: `git add -A` + `write-tree` there. The
index is judged as git reads it: after the stage end, the agent's `git status` finds
nothing to do and rewrites nothing (every entry's stat data matched, none was read).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import TYPE_CHECKING

import pytest

from tether.runs._lane_git import bring_back, commit_leftovers, lane_dir, open_lane

from .support import git, make_repo

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.rule("S16"), pytest.mark.slow]

_PAST = 1_500_000_000  # a time far before the index is written: no entry is racy


def _lane_git(lane: Path, *args: str) -> str:
    """Git as the agent runs it in its lane (hooks off, nothing of the account's)."""
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    return subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", *args],
        cwd=lane,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def _agent_work(lane: Path) -> None:
    """Changes of every kind a stage leaves: changed, new, deleted, executable, a
    link, an ignored file, an ignored file git tracks, a new folder, odd names."""
    (lane / "README.md").write_text("changed\n", encoding="utf-8")
    (lane / "kept.txt").write_text("tracked, then ignored\n", encoding="utf-8")
    (lane / "gone.txt").unlink()
    (lane / "src").mkdir()
    (lane / "src" / "run.sh").write_text("#!/bin/sh\necho hi\n", encoding="utf-8")
    (lane / "src" / "run.sh").chmod(0o755)
    (lane / "src" / "a.b").write_text("dot\n", encoding="utf-8")
    (lane / "src.txt").write_text("sorts between src and src/\n", encoding="utf-8")
    (lane / 'we"ird\\name').write_text("quoted\n", encoding="utf-8")
    (lane / "link").symlink_to("README.md")
    (lane / "build").mkdir()
    (lane / "build" / "out.o").write_bytes(b"\0" * 10)
    (lane / ".gitignore").write_text("build/\nkept.txt\n*.log\n", encoding="utf-8")
    (lane / "x.log").write_text("ignored\n", encoding="utf-8")


def _age(lane: Path) -> None:
    for folder, dirs, files in os.walk(lane):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            os.utime(os.path.join(folder, name), (_PAST, _PAST), follow_symlinks=False)


async def test_the_stage_end_commits_what_git_add_would_and_leaves_a_full_index(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path)
    (repo / "kept.txt").write_text("tracked\n", encoding="utf-8")
    (repo / "gone.txt").write_text("to delete\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "more")
    lane = lane_dir("run_idx", "lane_a")
    await open_lane(repo, lane, "tether/a")
    _agent_work(lane)
    _age(lane)
    oracle = tmp_path / "oracle"
    shutil.copytree(lane, oracle, symlinks=True)
    _lane_git(oracle, "add", "-A")
    want = _lane_git(oracle, "write-tree").strip()

    made = await commit_leftovers(lane, "work")
    await bring_back(repo, lane, "tether/a")  # its objects: the lane borrows them

    assert made is not None
    assert _lane_git(lane, "rev-parse", "HEAD").strip() == made
    assert _lane_git(lane, "rev-parse", "HEAD^{tree}").strip() == want
    # The index is the tree's, and git finds every entry clean by its stat data.
    index = (lane / ".git" / "index").read_bytes()
    assert _lane_git(lane, "status", "--porcelain") == ""
    assert (lane / ".git" / "index").read_bytes() == index  # nothing was refreshed
    assert _lane_git(lane, "write-tree").strip() == want
    listing = _lane_git(lane, "ls-files", "--debug", "README.md")
    st = os.stat(lane / "README.md")
    assert f"mtime: {_PAST}:0" in listing
    assert f"ino: {st.st_ino}" in listing
    assert f"size: {st.st_size}" in listing

    # A file changed behind the index's back (same size, same mtime, only its ctime
    # new, in nanoseconds: git built without them may not see it) is read again.
    (lane / "README.md").write_text("CHANGED\n", encoding="utf-8")
    os.utime(lane / "README.md", (_PAST, _PAST))
    again = await commit_leftovers(lane, "work2")
    await bring_back(repo, lane, "tether/a")
    assert again is not None
    assert _lane_git(lane, "show", f"{again}:README.md") == "CHANGED\n"
    assert _lane_git(lane, "status", "--porcelain") == ""
    # Nothing left: no commit.
    assert await commit_leftovers(lane, "work3") is None
    # The agent takes its branch back a commit, its files as they are: the stage end
    # commits them again, on the tree tether made last, with an index of it.
    _lane_git(lane, "reset", "-q", "--soft", "HEAD~1")
    redo = await commit_leftovers(lane, "work4")
    assert redo is not None
    await bring_back(repo, lane, "tether/a")
    assert _lane_git(lane, "rev-parse", "HEAD^{tree}") == _lane_git(
        lane, "rev-parse", f"{again}^{{tree}}"
    )
    assert _lane_git(lane, "status", "--porcelain") == ""
