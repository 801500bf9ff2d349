"""`tether lanes prune`: what of lanes may be deleted now, and deleting it.

Nothing of a lane is deleted unless a lossless copy exists or its work is finished:

- a **done lane's directory** (its branch was brought into the person's repository; what
  stays is what git leaves out, such as build outputs), and with it its log and
  transcript beside it (`<lane>.log`: `tether logs` has nothing left to show of it),
  tether's own git dir of it (`<lane>.git`: its commits are the branch's, now in the
  person's repository), and its run's folder once nothing but the run's `.halting`
  mark is left there;
- a **save** whose item is finished (done or failed): the item went on from it; the
  folders that held it, once empty;
- **partial copies** in `tmp/` (a restore or an opening cut short): copies, never the
  only one;
- a lane's **agent folder** (`<lane>.agent/`: a preset's per-lane copy of the CLI
  folder), once the lane is done and listed itself, or halted with its item finished.
  It holds nothing of the person's but copies: their credentials and CLI config (the
  originals stay in their own folder, never written back), the settings tether wrote
  for the stage, and what the CLI wrote there (sessions and caches; the transcript is
  in the lane's log). No session of a finished lane is resumed, so it
  is deleted without a copy, and the credentials copied for the lane go with it.

A lane that is open, in a call, held or halted, and any save of an item not finished,
is never listed: a take-over still needs it. Nor is a done lane whose committed work
is not in the person's repository (its branch could not be brought back, say, because
the person had `tether/<item>` checked out), or whose work tether could neither commit
nor view at its end (a lane held for a person): `unbrought` says which and how to
bring it back. Only what the store knows is listed; a
folder of a run recorded in another store is left alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal, final

import attrs

from .._channel import HALTING_MARK
from .._config import paths
from ..errors import UsageError
from ._values import LaneState

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._store import Store
    from ._values import Event

__all__ = (
    "OldRef",
    "Prunable",
    "Unbrought",
    "old_refs",
    "parse_age",
    "prunable",
    "remove",
    "remove_refs",
    "unbrought",
)

Kind = Literal["done-lane", "save", "partial", "agent-folder"]

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@final
@attrs.frozen
class Prunable:
    """One folder `tether lanes prune` would delete."""

    path: Path
    """The folder."""
    kind: Kind
    """`done-lane`, `save`, `partial` or `agent-folder`."""
    item: str
    """Its work item ("" for a partial copy)."""
    size: int
    """Bytes it holds."""
    age: float
    """Seconds since it last changed."""


@final
@attrs.frozen
class Unbrought:
    """A done lane kept because its committed work is not in the person's repository."""

    path: Path
    item: str
    why: str
    """What is missing and how to bring it back, in one line."""


def _brought(repo: Path, lane: Path, branch: str) -> str | None:
    """Why the lane's committed work is not in `repo`, or None when it is."""
    from ._own_git import GitFailed, own_git_of, read_lane_ref

    own = own_git_of(lane)
    try:
        # What tether wrote into its own git dir: the lane's must be the same.
        alternates = (own / "objects" / "info" / "alternates").read_bytes()
    except OSError:
        alternates = None
    try:
        commit = read_lane_ref(lane, f"refs/heads/{branch}", alternates)
    except GitFailed as exc:
        return f"its branch {branch} cannot be read ({exc}); look at {lane} yourself"
    if commit is None:
        return None
    try:
        found = subprocess.run(
            ["git", "for-each-ref", "--count=1", f"--contains={commit}"],
            cwd=repo,
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{repo} cannot be read ({exc})"
    if found.returncode == 0 and found.stdout.strip():
        return None
    source = own if (own / "refs" / "heads" / branch).is_file() else lane
    return (
        f"its branch {branch} ({commit[:12]}) is not in {repo}; switch {repo} off "
        f"{branch} if it is checked out, then `git -C {repo} fetch {source} "
        f"+refs/heads/{branch}:refs/heads/{branch}`"
    )


def _left_uncommitted(events: list[Event], lane: str, here: Path) -> str | None:
    """Why a done lane holds work that is nowhere else, or None.

    Its stage end could not commit (or its view could not be made) and nothing was
    committed or viewed since: what it left is only in its folder.
    """
    last_failed: Event | None = None
    for event in events:
        if event.lane != lane:
            continue
        if event.kind in ("commit-failed", "save-failed"):
            last_failed = event
        elif event.kind in ("committed", "saved"):
            last_failed = None
    if last_failed is None:
        return None
    return (
        f"its work was neither committed nor viewed ({last_failed.detail}); "
        f"look at {here} yourself"
    )


def unbrought(store: Store) -> list[Unbrought]:
    """Done lanes kept because their work is not in the person's repository.

    Their committed work, or what they left that tether could neither commit nor view.
    """
    kept: list[Unbrought] = []
    for run in store.runs():
        events: list[Event] | None = None
        for lane in store.lanes(run.id):
            here = Path(lane.worktree)
            if lane.state is LaneState.DONE and here.is_dir():
                why = _brought(Path(run.repo), here, lane.branch)
                if why is None:
                    events = store.events(run.id) if events is None else events
                    why = _left_uncommitted(events, lane.id, here)
                if why is not None:
                    kept.append(Unbrought(path=here, item=lane.item, why=why))
    return kept


def parse_age(text: str) -> float:
    """`30m`, `12h`, `7d`, `2w` -> seconds.

    Raises:
        UsageError: the text is no age.
    """
    found = _AGE.match(text)
    if found is None:
        raise UsageError(
            f"--older-than {text!r} is not an age: give a number and a unit, "
            "e.g. 30m, 12h, 7d or 2w"
        )
    return float(found.group(1)) * _UNIT[found.group(2)]


def _size(path: Path) -> int:
    total = 0
    for top, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(top, name)).st_blocks * 512
            except OSError:
                continue
    return total


def _age(path: Path, now: float) -> float:
    try:
        return max(0.0, now - path.lstat().st_mtime)
    except OSError:
        return 0.0


def _is_dir(path: Path) -> bool:
    """A real folder (a link at its name is not followed)."""
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def prunable(store: Store, *, older_than: float = 0.0) -> list[Prunable]:
    """What may be deleted now, oldest first."""
    from ._lane_git import lane_log
    from ._own_git import own_git_of
    from ._presets import agent_dir

    now = time.time()
    state = paths().state_dir
    finished = {i.id for i in store.items() if i.state in ("done", "failed")}
    found: list[tuple[Path, Kind, str]] = []
    kept = {k.path for k in unbrought(store)}
    for run in store.runs():
        for lane in store.lanes(run.id):
            here = Path(lane.worktree)
            if lane.state is LaneState.DONE and here.is_dir() and here not in kept:
                found.append((here, "done-lane", lane.item))
            agent = agent_dir(lane_log(run.id, lane.id), lane.id)
            if (
                (lane.state is LaneState.DONE and here not in kept)
                or (lane.state is LaneState.HALTED and lane.item in finished)
            ) and _is_dir(agent):
                found.append((agent, "agent-folder", lane.item))
            if lane.item in finished:
                saves = state / "saves" / run.id / lane.id
                if saves.is_dir():
                    found += [(p, "save", lane.item) for p in sorted(saves.iterdir())]
    tmp = state / "tmp"
    if tmp.is_dir():
        found += [(p, "partial", "") for p in sorted(tmp.glob("*.partial"))]
    lanes = state / "lanes"
    if lanes.is_dir():
        found += [(p, "partial", "") for p in sorted(lanes.glob("*/.*.opening"))]
    shown = [
        Prunable(
            path=p,
            kind=k,
            item=i,
            size=_size(p) + (_size(own_git_of(p)) if k == "done-lane" else 0),
            age=_age(p, now),
        )
        for p, k, i in found
    ]
    return sorted(
        (p for p in shown if p.age >= older_than), key=lambda p: p.age, reverse=True
    )


def remove(found: Iterable[Prunable]) -> int:
    """Delete each folder, and what goes with it; returns the bytes freed."""
    freed = 0
    for entry in found:
        _writable(entry.path)
        shutil.rmtree(entry.path, ignore_errors=True)
        if not entry.path.exists():
            freed += entry.size + _with_it(entry)
    return freed


_MARKS = frozenset({HALTING_MARK})
"""Files a run's lane folder keeps for its own run only (`halting_mark`)."""


def _with_it(entry: Prunable) -> int:
    """Delete what goes with a deleted folder (the lane's log, emptied folders).

    Returns the bytes freed.
    """
    freed = 0
    if entry.kind == "done-lane":
        from ._own_git import own_git_of

        shutil.rmtree(own_git_of(entry.path), ignore_errors=True)  # counted in its size
        for suffix in (".log", ".transcript"):
            beside = entry.path.with_name(entry.path.name + suffix)
            with contextlib.suppress(OSError):
                size = beside.lstat().st_blocks * 512
                beside.unlink()
                freed += size
        run = entry.path.parent
        with contextlib.suppress(OSError):
            if {p.name for p in run.iterdir()} <= _MARKS:
                for name in _MARKS:
                    with contextlib.suppress(FileNotFoundError):
                        (run / name).unlink()
                run.rmdir()
    elif entry.kind == "save":
        # saves/<run>/<lane>/<save>: the lane's and the run's folders, once empty.
        for folder in (entry.path.parent, entry.path.parent.parent):
            try:
                folder.rmdir()
            except OSError:
                break
    return freed


def _writable(path: Path) -> None:
    """Let folders a lane made read-only (0555, say) be emptied."""
    for top, dirs, _files in os.walk(path):
        for name in dirs:
            full = os.path.join(top, name)
            try:
                if not os.path.islink(full):
                    os.chmod(full, 0o700)
            except OSError:
                continue
    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)


@final
@attrs.frozen
class OldRef:
    """A saved ref (`refs/tether/saved/<run>/<lane>[.N]`) a finished item went on from."""

    repo: Path
    ref: str
    item: str
    age: float
    """Seconds since its commit was made."""


def old_refs(store: Store, *, older_than: float = 0.0) -> list[OldRef]:
    """Saved refs that are no lane's only copy of its work, oldest first.

    A save's ref is listed when its item is finished (done or failed) and its lane
    did not end done: the item went on from that save (a take-over restored it), so
    the branch holds the work, as for the save's folder. A done lane's ref (the view
    of what it left uncommitted) is never listed: nothing else holds that work.
    """
    now = time.time()
    finished = {i.id for i in store.items() if i.state in ("done", "failed")}
    found: list[OldRef] = []
    for run in store.runs():
        for lane in store.lanes(run.id):
            if lane.item not in finished or lane.state is LaneState.DONE:
                continue
            base = f"refs/tether/saved/{run.id}/{lane.id}"
            try:
                listed = subprocess.run(
                    [
                        "git",
                        "for-each-ref",
                        "--format=%(committerdate:unix) %(refname)",
                        base,
                        f"{base}.*",
                    ],
                    cwd=run.repo,
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired):
                continue
            for line in listed.stdout.splitlines():
                when, _, ref = line.partition(" ")
                age = max(0.0, now - float(when)) if when.isdigit() else 0.0
                if ref and age >= older_than:
                    found.append(OldRef(Path(run.repo), ref, lane.item, age))
    return sorted(found, key=lambda r: r.age, reverse=True)


def remove_refs(found: Iterable[OldRef]) -> int:
    """Delete each ref from its repository; returns how many went."""
    gone = 0
    for entry in found:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            done = subprocess.run(
                ["git", "update-ref", "-d", entry.ref],
                cwd=entry.repo,
                capture_output=True,
                timeout=60,
                check=False,
            )
            gone += done.returncode == 0
    return gone
