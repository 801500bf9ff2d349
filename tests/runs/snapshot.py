"""A snapshot of a lane's directory: what a lossless save must bring back exactly.

Every path below the directory (its `.git` included) with its type, mode, sha256 and
link target, then `git status --porcelain=v2` and what a rebase in progress holds. `git
status` runs with `GIT_OPTIONAL_LOCKS=0`, so taking a snapshot refreshes no index.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

Entry = tuple[str, str, int, str]
"""(relative path, type, mode, sha256 of a file or a link's target)."""


def entries(root: Path) -> dict[str, Entry]:
    found: dict[str, Entry] = {}
    for top, dirs, files in os.walk(root, followlinks=False):
        for name in [*dirs, *files]:
            path = Path(top) / name
            rel = str(path.relative_to(root))
            st = path.lstat()
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                found[rel] = (rel, "link", mode, os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = (rel, "dir", mode, "")
            elif stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                found[rel] = (rel, "file", mode, digest)
            else:
                found[rel] = (rel, "other", mode, "")
    return found


def git_state(root: Path) -> dict[str, str]:
    def run(*args: str) -> str:
        done = subprocess.run(
            ["git", "-c", "core.hooksPath=/dev/null", *args],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
        return done.stdout + done.stderr

    rebase = root / ".git" / "rebase-merge"
    return {
        "status": run("status", "--porcelain=v2", "--branch", "--untracked-files=all"),
        "head": run("rev-parse", "HEAD"),
        "reflog": run("reflog", "--format=%H %gs"),
        "rebase": "\n".join(sorted(p.name for p in rebase.iterdir()))
        if rebase.is_dir()
        else "",
    }


def snapshot(root: Path) -> tuple[dict[str, Entry], dict[str, str]]:
    """(entries, git state) of `root`."""
    walked = entries(root)
    return walked, git_state(root)


def assert_same(
    before: tuple[dict[str, Entry], dict[str, str]],
    after: tuple[dict[str, Entry], dict[str, str]],
) -> None:
    """Every path as it was; the git dir's objects may have gained the save's view."""
    was, now = before[0], after[0]
    for rel, entry in was.items():
        assert now.get(rel) == entry, f"{rel}: {entry} became {now.get(rel)}"
    extra = [
        rel for rel in now if rel not in was and not rel.startswith(".git/objects/")
    ]
    assert extra == [], f"paths that were not there: {extra}"
    assert before[1] == after[1]
