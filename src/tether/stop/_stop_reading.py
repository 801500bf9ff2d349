"""What one stop read says: its outcome, what it saw, the stops it does not honour.

Values only, made by the reader (`_reader`) and kept by a watch's memo (`_read_memo`); this
module reads nothing. It sits below both, so neither imports the other for its types.
"""

from __future__ import annotations

import enum
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

import attrs

from .._accounts import who

__all__ = ("Identity", "NotHonoured", "RawRead", "ReadOutcome", "StopReading")

Identity = tuple[int, int]
"""`(st_dev, st_ino)` of a directory."""


class ReadOutcome(enum.StrEnum):
    """The three outcomes of a read (spec 02); the value travels in `status --json`."""

    CLEAR = "CLEAR"
    """The rule held, the uid directory was looked at, and no stop is there."""
    STOPPED = "STOPPED"
    """A stop that passes every check: the run halts."""
    HOLD = "HOLD"
    """Something prevented a clear look: the run does nothing new and reads again."""


@attrs.frozen
class NotHonoured:
    """A stop that another account left: ignored, and reported."""

    path: Path
    """Where it is."""
    owner_uid: int
    """Who owns it."""
    why: str
    """Why it is not honoured."""

    def __str__(self) -> str:
        return f"stop in {self.path.parent} owned by uid {self.owner_uid} is not honoured: {self.why}"


@attrs.frozen(kw_only=True)
class StopReading:
    """What one read saw; the run acts on `outcome` and reports the rest."""

    outcome: ReadOutcome
    """CLEAR, STOPPED or HOLD."""
    reason: str | None = None
    """Why, for HOLD (what to repair); None otherwise."""
    set_by_uid: int | None = None
    """For STOPPED: `st_uid` of the stop's descriptor."""
    set_at: datetime | None = None
    """For STOPPED: `st_mtime` (the owner can set it to anything)."""
    ctime: datetime | None = None
    """For STOPPED: `st_ctime` (set by the kernel)."""
    nlink: int | None = None
    """For STOPPED: the link count (links elsewhere are reported, not refused)."""
    folder: Path | None = None
    """The shared folder read, or None for the account's own store."""
    person_uid: int
    """The account whose stop was looked for."""
    stop_path: Path
    """`<folder>/<uid>/stop`."""
    not_honoured: tuple[NotHonoured, ...] = ()
    """Stops of other accounts (or at the stop's name, of another owner)."""
    notes: tuple[str, ...] = ()
    """Further reports: a stop that vanished without a lift, a writable stop, ..."""

    def __str__(self) -> str:
        where = self.stop_path
        match self.outcome:
            case ReadOutcome.CLEAR:
                text = f"CLEAR: no stop at {where}"
            case ReadOutcome.STOPPED:
                assert self.set_at is not None
                setter = "?" if self.set_by_uid is None else who(self.set_by_uid)
                text = (
                    f"STOPPED: stop at {where} set by {setter} "
                    f"at {self.set_at.isoformat()}"
                )
            case ReadOutcome.HOLD:
                text = f"HOLD: {self.reason}"
        return text


class RawRead(NamedTuple):
    """A reading plus what a watch pins: the directories' and the stop's identities.

    A named tuple, not an attrs class: one is made on every read of a run.
    """

    reading: StopReading
    """What the read saw."""
    folder_id: Identity | None = None
    """`(st_dev, st_ino)` of the folder, when it was opened."""
    uid_dir_id: Identity | None = None
    """`(st_dev, st_ino)` of the uid directory, when it was opened."""
    stop_id: tuple[int, int, int] | None = None
    """`(st_dev, st_ino, st_mtime_ns)` of a STOPPED stop."""
