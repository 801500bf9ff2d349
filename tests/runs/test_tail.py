"""The last output line of a lane log, as the live view reads it: only what the log
gained since the last look, never the whole log again (a tether choice)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from tether.runs._tail import LINE_BOUND, TAIL_BOUND, LogTail, clean_line

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the reads `LogTail` makes of its logs."""
    sizes: list[int] = []
    real = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        sizes.append(n)
        return real(fd, n, offset)

    monkeypatch.setattr(os, "pread", pread)
    return sizes


def _append(log: Path, data: bytes) -> None:
    with log.open("ab") as f:
        f.write(data)


def test_a_look_reads_only_what_the_log_gained(
    tmp_path: Path, reads: list[int]
) -> None:
    """The second look reads the new bytes only; a look at a log that did not grow
    reads nothing."""
    log = tmp_path / "lane.log"
    _append(log, b"one\ntwo\n")
    tail = LogTail()
    assert tail.last_line(log) == "two"
    _append(log, b"three\n")
    assert tail.last_line(log) == "three"
    assert tail.last_line(log) == "three"
    assert reads == [8, 6]


def test_a_big_log_is_read_from_near_its_end(tmp_path: Path, reads: list[int]) -> None:
    """A first look at a long log, and a burst longer than the bound, read at most
    `TAIL_BOUND` bytes."""
    log = tmp_path / "lane.log"
    _append(log, b"x" * 100 + b"\n" + b"filler line\n" * 50_000 + b"the end\n")
    tail = LogTail()
    assert tail.last_line(log) == "the end"
    _append(log, b"burst\n" * 20_000 + b"after the burst\n")
    assert tail.last_line(log) == "after the burst"
    assert len(reads) == 2
    assert max(reads) <= TAIL_BOUND


def test_a_line_still_being_written_counts_and_carriage_returns_end_lines(
    tmp_path: Path,
) -> None:
    """Progress printed with `\\r`, and a line with no newline yet, show as the last
    line; blank lines do not replace the last one."""
    log = tmp_path / "lane.log"
    tail = LogTail()
    assert tail.last_line(log) is None
    _append(log, b"compiling 10%\rcompiling 50%")
    assert tail.last_line(log) == "compiling 50%"
    _append(log, b"\rcompiling 100%\n\n  \n")
    assert tail.last_line(log) == "compiling 100%"


def test_a_replaced_or_cut_log_is_read_again(tmp_path: Path) -> None:
    """A log truncated or replaced by another file is looked at afresh."""
    log = tmp_path / "lane.log"
    _append(log, b"first run of the stage, a long line\n")
    tail = LogTail()
    assert tail.last_line(log) == "first run of the stage, a long line"
    log.write_bytes(b"short\n")
    assert tail.last_line(log) == "short"
    other = tmp_path / "other.log"
    other.write_bytes(b"another file\n")
    other.replace(log)
    assert tail.last_line(log) == "another file"
    tail.keep([])
    assert len(tail) == 0


def test_a_line_is_cleaned_for_a_screen() -> None:
    """Terminal escapes and control characters never reach the screen; a long line is
    cut."""
    assert (
        clean_line("\x1b[31mred\x1b[0m\tand\x07 bell\x1b]0;title\x07") == "red and bell"
    )
    cut = clean_line("y" * 1000)
    assert len(cut) == LINE_BOUND
    assert cut.endswith("…")
