"""The last line an agent printed, read from its lane log a little at a time.

A run's live view asks, every refresh, for the last output line of each working lane.
`LogTail` keeps, per log file, the offset it read up to and the line it found: a look
is one `fstat` when the log did not grow, and otherwise one read of what was added
(at most `TAIL_BOUND` bytes: the end of a burst, never the whole log again). A log that
shrank or was replaced is read again from its end. The line is shown through the
tail's `render` function: by default cleaned for a screen (terminal escapes and control
characters dropped, cut at `LINE_BOUND` characters); the run's view renders the agent's
events instead (`tether.runs._events.last_line`), skipping lines of no event.

This module reads files only; it does not know runs or screens.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, final

import attrs

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ("LINE_BOUND", "TAIL_BOUND", "LogTail", "clean_line")

TAIL_BOUND = 16 * 1024
"""Bytes read at most per look at one log: what grew beyond this is skipped."""
LINE_BOUND = 200
"""Characters of a line kept for the screen."""

_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|.)")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_BREAKS = re.compile(rb"\r\n|\r|\n")


def clean_line(text: str) -> str:
    """`text` made fit for one line of a screen.

    Escapes and control characters dropped, tabs made spaces, the ends stripped, cut
    at `LINE_BOUND` characters (with `…`).
    """
    text = _CONTROLS.sub("", _ESCAPES.sub("", text).replace("\t", " ")).strip()
    if len(text) > LINE_BOUND:
        text = text[: LINE_BOUND - 1] + "…"
    return text


@attrs.define
class _Seen:
    identity: tuple[int, int]
    offset: int
    partial: bytes = b""
    """What follows the last line break read (a line still being written)."""
    last: str | None = None
    """The last whole line read that was not blank."""


def _cleaned(text: str) -> str | None:
    return clean_line(text) or None


@final
@attrs.define(eq=False)
class LogTail:
    """Per log file: how far it was read and the last line found."""

    render: Callable[[str], str | None] = _cleaned
    """A log line as shown; None for a line not to show (a blank one)."""
    _seen: dict[Path, _Seen] = attrs.field(factory=dict)

    def last_line(self, log: Path) -> str | None:
        """The last line `log` holds that shows (not blank), as `render` shows it.

        A line still being written counts; None before the log has one or exists.
        """
        try:
            fd = os.open(
                log, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            )
        except OSError:
            seen = self._seen.get(log)
            return None if seen is None else self._shown(seen)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # judged by its type before a byte is read
                return None
            identity = (st.st_dev, st.st_ino)
            seen = self._seen.get(log)
            if seen is None or seen.identity != identity or st.st_size < seen.offset:
                # First look, or the log was replaced or cut: from near its end.
                seen = _Seen(identity=identity, offset=max(0, st.st_size - TAIL_BOUND))
                self._seen[log] = seen
            if st.st_size > seen.offset:
                start = max(seen.offset, st.st_size - TAIL_BOUND)
                if start > seen.offset:
                    seen.partial = b""  # a burst skipped: what was partial is gone
                data = os.pread(fd, st.st_size - start, start)
                seen.offset = start + len(data)
                self._take(seen, data)
        finally:
            os.close(fd)
        return self._shown(seen)

    def keep(self, logs: Iterable[Path]) -> None:
        """Drop what is kept for every log but `logs` (their lanes are gone)."""
        wanted = set(logs)
        for gone in [log for log in self._seen if log not in wanted]:
            del self._seen[gone]

    def __len__(self) -> int:
        """How many logs are followed."""
        return len(self._seen)

    def _take(self, seen: _Seen, data: bytes) -> None:
        parts = _BREAKS.split(seen.partial + data)
        seen.partial = parts.pop()[-TAIL_BOUND:]
        for raw in reversed(parts):
            line = self.render(raw.decode("utf-8", "replace"))
            if line:
                seen.last = line
                return

    def _shown(self, seen: _Seen) -> str | None:
        partial = self.render(seen.partial.decode("utf-8", "replace"))
        return partial or seen.last
