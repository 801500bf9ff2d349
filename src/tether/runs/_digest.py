"""The dated digest: items done, receipts, halts, holds and lifts of the day's runs.

One Markdown file a day, `digest-YYYY-MM-DD.md`, in the person's directory of the stop
folder when this account may write there (the own store, or the person's own account);
for an account that honours another person's stop in a shared folder, in its own
directory there (`_publish`: mode 0644, the person reads it); else in the account's
state dir. Each run appends its section; the file is rewritten
atomically (spec 02: owner-only, temp file, fsync, rename).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from .._config import paths
from .._fs import write_atomic, write_atomic_at
from .._term import visible
from .._untrusted import read_regular_at
from ._publish import DIGEST_BOUND, open_own_dir, publish_dir

if TYPE_CHECKING:
    from pathlib import Path

    from ..stop import StopWatch
    from ._store import Store

__all__ = ("digest_dir", "write_digest")

_SHOWN = {
    "stop-observed": "stop observed",
    "hold": "hold",
    "hold-ended": "hold ended",
    "lift-seen": "lift seen",
    "saved": "saved aside",
    "released": "released",
    "held": "lane held",
    "kill": "agents killed",
}


def _ended(status: int, tail: str) -> str:
    """`exit N`, or what the receipt's log says ended the agent."""
    for mark in ("tether: timed out after ", "tether: stopped at the person's stop"):
        if mark in tail:
            # Agent output follows the mark: no escape of it reaches a terminal.
            return visible(tail[tail.rindex(mark) + len("tether: ") :].splitlines()[0])
    return f"exit {status}"


def digest_dir(watch: StopWatch) -> Path:
    """Where this account's digest goes (see the module docstring)."""
    published = publish_dir(watch)
    if published is not None:
        return published
    place = watch.store.place
    if place.person_uid == os.geteuid() and os.access(place.uid_dir, os.W_OK):
        return place.uid_dir
    return paths().state_dir


def write_digest(store: Store, run: str, watch: StopWatch) -> Path:
    """Append `run`'s section to today's digest and return the file's path."""
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    path = digest_dir(watch) / f"digest-{day}.md"
    row = store.run(run)
    lines = [f"## run {run} — {row.state.value if row else 'unknown'}", ""]
    done = [lane for lane in store.lanes(run) if lane.state.value == "done"]
    lines.append(
        "Items done: " + (", ".join(lane.item for lane in done) if done else "none")
    )
    lines.append("")
    lines.extend(
        f"- receipt {r.item} / {r.stage}: {_ended(r.exit_status, r.log_tail)}, "
        f"{len(r.commits)} commit(s)"
        for r in store.receipts(run)
    )
    for event in store.events(run):
        if event.kind in _SHOWN:
            when = datetime.fromtimestamp(event.at, UTC).strftime("%H:%M:%S")
            what = _SHOWN[event.kind]
            lines.append(f"- {when} {what} {visible(event.detail)}".rstrip())
    head = f"# tether digest {day}\n"
    section = "\n".join(lines) + "\n"
    if publish_dir(watch) is not None:
        _publish_digest(watch, path, head, section)
        return path
    try:
        old = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        old = head
    text = old.rstrip("\n") + "\n\n" + section
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomic(path, text.encode())
    return path


def _publish_digest(watch: StopWatch, path: Path, head: str, section: str) -> None:
    """Append `section` to the digest in this account's published directory (0644)."""
    fd = open_own_dir(path.parent, watch.store.place.person_uid)
    try:
        try:
            old = read_regular_at(fd, path.name, DIGEST_BOUND).decode(
                "utf-8", "replace"
            )
        except FileNotFoundError:
            old = head
        text = old.rstrip("\n") + "\n\n" + section
        write_atomic_at(fd, path.name, text.encode()[-DIGEST_BOUND:], mode=0o644)
    finally:
        os.close(fd)
