"""The lift log: one JSON object a line in `<folder>/<uid>/lifts.jsonl`, appended by lift.

A lift record names who lifted, when, and which stop (device, inode, mtime), so a run
that saw a stop and then finds none can tell a lift from a stop that vanished (an age
cleaner, a hand `rm`). The log is only ever a report: no outcome depends on it.
"""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import attrs

from ._setup import LIFT_LOG_NAME

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ("LiftRecord", "append_lift", "find_lift")

_TAIL_BYTES = 64 * 1024


@attrs.frozen(kw_only=True)
class LiftRecord:
    """One lift: who, when, and the stop it removed."""

    lifted_by_uid: int
    """The account that ran `tether lift`."""
    lifted_at: datetime
    """When."""
    stop_id: tuple[int, int, int] | None
    """`(st_dev, st_ino, st_mtime_ns)` of the stop removed."""

    def to_line(self) -> bytes:
        """The record as one line of the log."""
        data = {
            "lifted_by_uid": self.lifted_by_uid,
            "lifted_at": self.lifted_at.isoformat(),
            "stop": None if self.stop_id is None else list(self.stop_id),
        }
        return (json.dumps(data, sort_keys=True) + "\n").encode()


def append_lift(uid_fd: int, record: LiftRecord) -> None:
    """Append `record` to the lift log in the uid directory and flush it to disk.

    Raises:
        OSError: the log cannot be opened or written (the disk is full, read-only).
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(LIFT_LOG_NAME, flags | os.O_NONBLOCK, 0o644, dir_fd=uid_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise PermissionError(f"{LIFT_LOG_NAME} is not this account's regular file")
        view = memoryview(record.to_line())
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def find_lift(
    uid_dir: Path, person_uid: int, stop_id: tuple[int, int, int]
) -> LiftRecord | None:
    """Return the lift record of the stop `stop_id`, or None; never raises."""
    try:
        fd = os.open(
            uid_dir / LIFT_LOG_NAME,
            os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
        )
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != person_uid:
            return None
        start = max(0, st.st_size - _TAIL_BYTES)
        data = os.pread(fd, _TAIL_BYTES, start)
    except OSError:
        return None
    finally:
        os.close(fd)
    for line in reversed(data.splitlines()):
        try:
            item = json.loads(line)
            if item.get("stop") == list(stop_id):
                return LiftRecord(
                    lifted_by_uid=int(item["lifted_by_uid"]),
                    lifted_at=datetime.fromisoformat(item["lifted_at"]),
                    stop_id=stop_id,
                )
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
    return None


def now_utc() -> datetime:
    """The current time, UTC."""
    return datetime.now(UTC)
