"""A lane's log, bounded on disk: its head and its tail kept, as a result's are.

Every writer of a lane log (a command agent, a preset stage, the built-in agent, tether's
own lines at a stage's end) goes through `LaneLog`. The file holds at most the bound
(`TETHER_LOG_BOUND` bytes, 8 MiB by default; for a moment, one write more, and half the
bound in the copy being made): once a write takes it past the bound, the file is
rewritten as its first quarter (the head, kept for good), a marker line saying how many
bytes were left out, and its last quarter (the tail, from a line's start when one is
near), then renamed over the log. A write is one `write(2)` on an `O_APPEND`
descriptor, so whatever was written is in the file when the process dies; a rewrite
copies half the bound once per half the bound written (a byte of a flood is written
twice at most, and only the kept bytes are read back) and is synced before the rename,
so a reader or a crash sees the old file or the new one, never a cut.

Readers find the marker by what it says: it names the offset it stands at (the head's
length), so a log written with another bound still reads right. `LogReader` follows one
log across rewrites (`tether logs --follow`): it goes on from the byte it had printed,
or, when that byte was left out meanwhile, says how many were.

One writer per log at a time (a lane runs one stage at a time).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from typing import TYPE_CHECKING, Self, final

import attrs

from .._env import TetherEnv
from ..errors import UsageError

if TYPE_CHECKING:
    from pathlib import Path
    from types import TracebackType

__all__ = (
    "DEFAULT_BOUND",
    "MIN_BOUND",
    "LaneLog",
    "Layout",
    "LogReader",
    "append_line",
    "layout",
    "log_bound",
)

DEFAULT_BOUND = 8 * 1024 * 1024
"""Bytes a lane log holds on disk at most: 2 MiB of head, 2 to 6 MiB of tail."""
MIN_BOUND = 64 * 1024
"""The smallest bound `TETHER_LOG_BOUND` may set."""

_MARKER = re.compile(
    rb"\n\[\.\.\. (\d+) bytes of output left out after byte (\d+) \.\.\.\]\n"
)
_LINE_SEARCH = 4096
"""How far into the tail a line's start is looked for."""
_WRITE_FLAGS = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def log_bound() -> int:
    """The bound `TETHER_LOG_BOUND` sets, in bytes (`DEFAULT_BOUND` when unset).

    Raises:
        UsageError: it is not a whole number of at least `MIN_BOUND`.
    """
    raw = os.environ.get(TetherEnv.LOG_BOUND, "").strip()
    if not raw:
        return DEFAULT_BOUND
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < MIN_BOUND:
        raise UsageError(
            f"{TetherEnv.LOG_BOUND} must be a number of bytes of at least {MIN_BOUND},"
            f" not {raw!r}; unset it for {DEFAULT_BOUND} (8 MiB)"
        )
    return value


def _marker(dropped: int, head: int) -> bytes:
    return (
        f"\n[... {dropped} bytes of output left out after byte {head} ...]\n".encode()
    )


@final
@attrs.frozen
class Layout:
    """Where a rewritten log's marker stands."""

    head: int
    """Bytes of the head (the marker's offset)."""
    dropped: int
    """Bytes of output left out."""
    marker: int
    """The marker's length."""

    def stream(self, offset: int) -> int:
        """The position in the output of the file's byte `offset` (the marker: its end)."""
        if offset <= self.head:
            return offset
        return max(offset - self.marker, self.head) + self.dropped

    def offset(self, position: int) -> int | None:
        """The file offset of output byte `position`; None when it was left out."""
        if position <= self.head:
            return position
        if position < self.head + self.dropped:
            return None
        return position - self.dropped + self.marker


def layout(data: bytes) -> Layout | None:
    """The marker of a log whose bytes (from its start) are `data`; None when whole."""
    for found in _MARKER.finditer(data):
        if int(found.group(2)) == found.start():
            return Layout(
                head=found.start(),
                dropped=int(found.group(1)),
                marker=found.end() - found.start(),
            )
    return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _open_log(path: Path) -> int:
    """Open `path` to append, made if missing; refuse what is not a regular file."""
    # Non-blocking: a FIFO found there cannot hang the open; cleared once judged.
    fd = os.open(path, _WRITE_FLAGS | os.O_CREAT | os.O_NONBLOCK, 0o600)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, f"{path} is not a regular file")
    os.set_blocking(fd, True)
    return fd


@final
class LaneLog:
    """The one writer of a lane log: append, bounded on disk. A context manager."""

    def __init__(self, path: Path, bound: int | None = None) -> None:
        """Open `path` for appending (its folder must exist); `bound`: `log_bound()`."""
        self.path = path
        self.bound = log_bound() if bound is None else bound
        self._fd = _open_log(path)
        self._size = os.fstat(self._fd).st_size
        self._layout: Layout | None = None
        if self._size > self.bound // 4:
            self._layout = self._read_layout()
        self.rewrites = 0
        """How many times the log was rewritten by this writer."""

    def _read_layout(self) -> Layout | None:
        with open(self.path, "rb", opener=lambda p, _: os.open(p, _READ_FLAGS)) as f:
            return layout(f.read(self.bound))

    def write(self, data: bytes | str) -> None:
        """Append `data` (text is written as UTF-8); rewrite the log once past the bound."""
        raw = data.encode("utf-8", "replace") if isinstance(data, str) else data
        if not raw:
            return
        _write_all(self._fd, raw)
        self._size += len(raw)
        if self._size > self.bound:
            self._rewrite()

    def _rewrite(self) -> None:
        """Keep the head, a marker and the tail; renamed over the log, synced first."""
        keep = self.bound // 4
        head_len = min(self._layout.head, keep) if self._layout else keep
        fd = self._fd
        head = os.pread(fd, head_len, 0)
        tail = os.pread(fd, keep, self._size - keep)
        cut = tail.find(b"\n", 0, _LINE_SEARCH)
        if cut >= 0:
            tail = tail[cut + 1 :]
        total = self._layout.stream(self._size) if self._layout else self._size
        dropped = total - len(head) - len(tail)
        marker = _marker(dropped, len(head))
        temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.new")
        temp.unlink(missing_ok=True)  # left by a writer that died mid-rewrite
        new = os.open(temp, _WRITE_FLAGS | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _write_all(new, head + marker + tail)
            os.fsync(new)
            os.rename(temp, self.path)
        except BaseException:
            os.close(new)
            temp.unlink(missing_ok=True)
            raise
        os.close(fd)
        self._fd = new
        self._size = len(head) + len(marker) + len(tail)
        self._layout = Layout(head=len(head), dropped=dropped, marker=len(marker))
        self.rewrites += 1

    def close(self) -> None:
        """Close the log (what was written is in the file already)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def append_line(path: Path, line: str) -> None:
    """Append one line of tether's own to a lane log, through its bound."""
    with LaneLog(path) as log:
        log.write(line)


@final
@attrs.define
class LogReader:
    """Follows one lane log across its rewrites: each `read` gives what is new."""

    _identity: tuple[int, int] | None = None
    _offset: int = 0
    _layout: Layout | None = None

    def read(self, path: Path) -> bytes:
        """What the log gained since the last read (b"" when missing or not grown).

        Raises:
            OSError: the log is not a regular file.
        """
        try:
            fd = os.open(path, _READ_FLAGS)
        except FileNotFoundError:
            return b""
        with open(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, f"{path} is not a regular file")
            identity = (st.st_dev, st.st_ino)
            if identity == self._identity:
                f.seek(self._offset)
                data = f.read(max(st.st_size - self._offset, 0))
                self._offset += len(data)
                return data
            whole = f.read(max(st.st_size, 0))
            now = layout(whole)
            note, offset = b"", 0
            if self._identity is not None:
                # Rewritten: go on from the output byte printed last.
                before = self._layout
                position = before.stream(self._offset) if before else self._offset
                found = now.offset(position) if now else min(position, len(whole))
                if found is None:
                    assert now is not None
                    note = _marker(now.head + now.dropped - position, position)
                    found = now.head + now.marker
                offset = found
            self._identity, self._layout, self._offset = identity, now, len(whole)
            return note + whole[offset:]
