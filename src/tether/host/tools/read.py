"""The Read tool: numbered lines of a text file, stoppable while it reads (S14).

Read resolves the path once, beneath the workspace when it is inside it (S15), opens
with `O_NOFOLLOW | O_NONBLOCK` relative to the directory found, and judges the opened descriptor with `fstat`, so a FIFO,
socket or device is refused instead of hanging the call. It reads in chunks only as far
as `offset` and `limit` need, in a worker thread that checks for a stop between chunks.
It does not decide whether a path may be read: the permission broker does.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import pydantic

from ...errors import ToolFailed
from .._tool import StopClass, Tool, ToolContext, TypedTool
from ._paths import (
    PathEscapes,
    check_stop,
    escape_message,
    located,
    progress_from_thread,
    resolve,
    run_worker,
)

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from ..._config import Config

__all__ = ("Read", "tools")

DEFAULT_LIMIT: Final = 2000
"""Lines shown when the call gives no `limit`."""
MAX_LINE_CHARS: Final = 2000
"""Longer lines are cut here and marked."""
BINARY_PROBE: Final = 8192
"""A NUL byte in this many first bytes makes a file binary (as git and grep judge)."""

_KINDS: Final = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory (use Glob to list files)",
}


class ReadInput(pydantic.BaseModel):
    """Input of Read."""

    model_config = pydantic.ConfigDict(extra="forbid")

    file_path: str = pydantic.Field(
        description="The file to read; a relative path is taken from the workspace."
    )
    offset: int | None = pydantic.Field(
        default=None,
        ge=0,
        description="The line number to start at (1-based; 0 and 1 both mean the first).",
    )
    limit: int | None = pydantic.Field(
        default=None,
        ge=1,
        description=f"How many lines to show (default {DEFAULT_LIMIT}).",
    )


@attrs.frozen
class _Lines:
    """What the worker read: the lines asked for and what it noticed on the way."""

    lines: tuple[tuple[int, str], ...]
    more: bool
    """Whether the file goes on past the last line shown."""
    replaced: bool
    """Whether some bytes were not valid UTF-8 and were shown as U+FFFD."""
    total_lines: int
    """Lines seen; the file's line count when `more` is false."""
    truncated_output: bool = False
    """Whether the output bound cut the listing short."""


def _decode(raw: bytes, *, cut: bool) -> tuple[str, bool]:
    """Decode a line; a line cut short may end inside a character, which is dropped."""
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError as exc:
        if cut and exc.reason == "unexpected end of data" and exc.start >= len(raw) - 3:
            return _decode(raw[: exc.start], cut=False)
        return raw.decode("utf-8", errors="replace"), True


@final
class Read(TypedTool):
    """Read a text file and return its lines numbered like `cat -n`."""

    input_model: type[pydantic.BaseModel] = ReadInput

    name = "Read"
    stop_class = StopClass.READ_ONLY
    subject_field: str | None = "file_path"
    description = (
        "Read a text file from the local filesystem. Lines are numbered from 1 like "
        "`cat -n`. Use `offset` and `limit` to read part of a long file; lines longer "
        f"than {MAX_LINE_CHARS} characters are cut. Binary files, FIFOs and devices are "
        "refused with a message."
    )

    def __init__(
        self,
        *,
        chunk_size: int = 64 * 1024,
        max_output_chars: int = 256_000,
        progress_every: int = 64 * 1024 * 1024,
    ) -> None:
        """Make the tool.

        Args:
            chunk_size: bytes read between two checks for a stop.
            max_output_chars: bound on the text returned; the listing is cut there.
            progress_every: bytes scanned between two progress reports.
        """
        self.chunk_size = chunk_size
        self.max_output_chars = max_output_chars
        self.progress_every = progress_every

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        """Read the file in a worker thread that a stop ends between two chunks.

        Raises:
            ToolFailed: the file is missing, unreadable, binary, or not a regular file.
        """
        inp = ReadInput.model_validate(dict(args))
        path = resolve(ctx.workspace, inp.file_path)
        first = max(inp.offset or 1, 1)
        limit = inp.limit or DEFAULT_LIMIT
        got = await run_worker(ctx, lambda: self._read(ctx, path, first, limit))
        return self._render(path, first, got)

    def _open(self, workspace: Path, path: Path) -> int:
        try:
            with located(workspace, path) as (dir_fd, name):
                return self._open_at(dir_fd, name, path)
        except PathEscapes:
            raise ToolFailed(escape_message(path)) from None
        except FileNotFoundError:
            raise ToolFailed(f"{path} does not exist") from None
        except PermissionError:
            raise ToolFailed(f"{path} cannot be read: permission denied") from None
        except OSError as exc:
            raise ToolFailed(f"{path} cannot be opened: {exc.strerror}") from None

    def _open_at(self, dir_fd: int, name: str, path: Path) -> int:
        # O_NOFOLLOW: the name was resolved beneath the workspace (S15); a link swapped
        # in since is not followed.
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            # Judge the name first: a device is never opened (opening runs its driver).
            kind = stat.S_IFMT(
                os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
            )
            if kind not in (stat.S_IFREG, stat.S_IFDIR):
                what = _KINDS.get(kind, "not a regular file")
                raise ToolFailed(f"{path} is {what}; Read reads regular files only")
            fd = os.open(name, flags, dir_fd=dir_fd)
        except FileNotFoundError:
            raise ToolFailed(f"{path} does not exist") from None
        except PermissionError:
            raise ToolFailed(f"{path} cannot be read: permission denied") from None
        except OSError as exc:
            if (
                exc.errno == errno.ENXIO
            ):  # a socket, or a FIFO without a writer on some OSes
                raise ToolFailed(
                    f"{path} is not a regular file; Read refuses it"
                ) from None
            raise ToolFailed(f"{path} cannot be opened: {exc.strerror}") from None
        # Judge what was opened, not what the name pointed at a moment before.
        kind = stat.S_IFMT(os.fstat(fd).st_mode)
        if kind != stat.S_IFREG:
            os.close(fd)
            what = _KINDS.get(kind, "not a regular file")
            raise ToolFailed(f"{path} is {what}; Read reads regular files only")
        return fd

    def _read(self, ctx: ToolContext, path: Path, first: int, limit: int) -> _Lines:
        fd = self._open(ctx.workspace, path)
        try:
            return self._scan(ctx, fd, path, first, limit)
        except OSError as exc:
            raise ToolFailed(f"{path} could not be read: {exc.strerror}") from None
        finally:
            os.close(fd)

    def _scan(
        self, ctx: ToolContext, fd: int, path: Path, first: int, limit: int
    ) -> _Lines:
        keep = MAX_LINE_CHARS * 4  # bytes enough for MAX_LINE_CHARS characters
        lines: list[tuple[int, str]] = []
        line_no = 1
        current = bytearray()
        current_len = 0
        replaced = False
        chars = 0
        scanned = 0
        next_report = self.progress_every
        ends_open = False  # whether the last line read has no newline yet

        def emit() -> bool:
            """Add the current line; tell whether the listing is full."""
            nonlocal replaced, chars
            raw = bytes(current).removesuffix(b"\r")
            cut = current_len > len(current)
            text, bad = _decode(raw, cut=cut)
            replaced |= bad
            if len(text) > MAX_LINE_CHARS:
                text, cut = text[:MAX_LINE_CHARS], True
            if cut:
                text += f" [… line cut: {current_len} bytes in all]"
            lines.append((line_no, text))
            chars += len(text) + 8
            return len(lines) >= limit or chars >= self.max_output_chars

        while True:
            check_stop()  # S14: a stop ends the worker between two chunks
            chunk = os.read(fd, self.chunk_size)
            if not chunk:
                break
            if scanned < BINARY_PROBE and b"\0" in chunk[: BINARY_PROBE - scanned]:
                size = os.fstat(fd).st_size
                raise ToolFailed(
                    f"{path} is a binary file ({size} bytes); Read shows text only"
                )
            scanned += len(chunk)
            ends_open = not chunk.endswith(b"\n")
            if scanned >= next_report:
                next_report = scanned + self.progress_every
                progress_from_thread(
                    ctx, f"Read: {scanned >> 20} MiB scanned in {path}"
                )
            pos = 0
            end = len(chunk)
            if line_no < first:
                # Skip whole lines before `offset` without looking at their bytes.
                count = chunk.count(b"\n")
                if line_no + count < first:
                    line_no += count
                    continue
                while line_no < first:
                    pos = chunk.index(b"\n", pos) + 1
                    line_no += 1
            while pos < end:
                nl = chunk.find(b"\n", pos)
                stop = end if nl == -1 else nl
                room = keep - len(current)
                if room > 0:
                    current += chunk[pos : min(stop, pos + room)]
                current_len += stop - pos
                if nl == -1:
                    break
                pos = nl + 1
                if emit():
                    more = pos < end or bool(os.read(fd, 1))
                    return _Lines(
                        tuple(lines),
                        more=more,
                        replaced=replaced,
                        total_lines=line_no,
                        truncated_output=more and len(lines) < limit,
                    )
                line_no += 1
                current.clear()
                current_len = 0
        total = line_no if ends_open else line_no - 1
        if current_len and line_no >= first:
            emit()
        return _Lines(tuple(lines), more=False, replaced=replaced, total_lines=total)

    def _render(self, path: Path, first: int, got: _Lines) -> str:
        if not got.lines:
            if got.total_lines == 0:
                return f"{path} is empty."
            return (
                f"{path} has {got.total_lines} lines; offset {first} is past the end."
            )
        out = [f"{n:>6}\t{text}" for n, text in got.lines]
        last = got.lines[-1][0]
        if got.truncated_output:
            out.append(
                f"[output bound of {self.max_output_chars} characters reached after "
                f"line {last}; read on with offset={last + 1}]"
            )
        elif got.more:
            out.append(
                f"[more lines follow line {last}; read on with offset={last + 1}]"
            )
        if got.replaced:
            out.append(
                "[note: the file is not valid UTF-8; undecodable bytes are shown as U+FFFD]"
            )
        return "\n".join(out)


def tools(config: Config) -> list[Tool]:
    """Return the Read tool."""
    del config
    return [Read()]
