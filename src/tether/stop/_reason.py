"""The person's `--reason` of a standing stop, read for display only.

The judgment of a stop reads no byte of it (`_reader`): anyone who can write the file could
put anything there. What `tether status` shows as the reason is read afterwards, on its
own descriptor opened the same way, from a regular file of the owner the judgment saw,
within a size and a time bound, and cleaned of control characters. It never changes an
outcome; any doubt gives no reason rather than a wrong one.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat

from ._bounded import Hung, Progress, run_bounded
from ._reader import FILE_FLAGS, ReadOutcome, StopReading
from ._setup import MAX_STOP_SIZE

__all__ = ("REASON_LIMIT", "stop_reason")

REASON_LIMIT = 500
"""Characters of a reason shown; longer ones are cut with an ellipsis."""


def _clean(text: str) -> str | None:
    shown = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    if not shown:
        return None
    if len(shown) > REASON_LIMIT:
        shown = shown[: REASON_LIMIT - 1] + "…"
    return shown


def stop_reason(reading: StopReading, *, bound: float = 1.0) -> str | None:
    """The `--reason` kept in the stop of a STOPPED `reading`, or None.

    None for every other outcome, for a stop set without a reason, and whenever the
    file cannot be read plainly within `bound` seconds: a stop that changed owner or
    kind since the judgment, one over the size limit, one that is not the JSON
    `tether stop` writes. Never raises.
    """
    if reading.outcome is not ReadOutcome.STOPPED:
        return None
    path = reading.stop_path

    def read(progress: Progress) -> bytes | None:
        progress.where = str(path)
        fd = os.open(path, FILE_FLAGS)
        try:
            st = os.fstat(fd)
            if (
                not stat.S_ISREG(st.st_mode)
                or st.st_uid != reading.set_by_uid
                or st.st_size > MAX_STOP_SIZE
            ):
                return None
            return os.read(fd, MAX_STOP_SIZE + 1)
        finally:
            with contextlib.suppress(OSError):  # a read-only descriptor loses nothing
                os.close(fd)

    try:
        raw = run_bounded(("stop-reason", path), read, bound=bound)
    except (Hung, OSError):
        return None
    if raw is None or len(raw) > MAX_STOP_SIZE:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    text = data.get("reason") if isinstance(data, dict) else None
    return _clean(text) if isinstance(text, str) else None
