"""Read: numbered lines, windows, bad files, and a worker that a stop ends (S14)."""

from __future__ import annotations

import os
import statistics
from typing import TYPE_CHECKING

import anyio
import pytest
from tests.host.support import make_ctx, stop_tool_once_started

from tether._config import Config
from tether.errors import ToolAborted, ToolFailed
from tether.host import StopClass
from tether.host.tools import read as read_module
from tether.host.tools.read import DEFAULT_LIMIT, MAX_LINE_CHARS, Read

if TYPE_CHECKING:
    from pathlib import Path

HUGE = 50 * 1024**3
"""Size of the sparse test file: far more than any test reads before its stop."""


@pytest.fixture
def huge_file(tmp_path: Path) -> Path:
    """A 50 GiB sparse file: a few text lines, then a hole Read must scan through."""
    path = tmp_path / "huge.log"
    with path.open("wb") as f:
        f.write(b"".join(b"line %d\n" % n for n in range(1, 2001)))
        f.truncate(HUGE)
    return path


def test_tools_returns_read_as_a_read_only_tool() -> None:
    """`tools(config)` gives Read, class READ_ONLY, matched by `file_path`."""
    (tool,) = read_module.tools(Config())
    assert (tool.name, tool.stop_class, tool.subject_field) == (
        "Read",
        StopClass.READ_ONLY,
        "file_path",
    )
    assert set(tool.input_schema()["properties"]) == {"file_path", "offset", "limit"}


@pytest.mark.anyio
async def test_read_numbers_lines_like_cat_n(workspace: Path) -> None:
    """Lines come back numbered from 1, right-aligned, tab-separated."""
    (workspace / "a.txt").write_text("one\ntwo\r\nthree", encoding="utf-8")
    out = await Read().run(make_ctx(workspace), {"file_path": "a.txt"})
    assert out == "     1\tone\n     2\ttwo\n     3\tthree"


@pytest.mark.anyio
async def test_read_window_says_where_to_read_on(workspace: Path) -> None:
    """`offset`/`limit` show a window and tell the offset to read on from."""
    (workspace / "a.txt").write_text("".join(f"l{n}\n" for n in range(1, 11)))
    out = await Read().run(
        make_ctx(workspace), {"file_path": "a.txt", "offset": 4, "limit": 2}
    )
    assert out.splitlines() == [
        "     4\tl4",
        "     5\tl5",
        "[more lines follow line 5; read on with offset=6]",
    ]


@pytest.mark.anyio
async def test_read_last_window_has_no_read_on_note(workspace: Path) -> None:
    """A window that reaches the end of the file says nothing more follows."""
    (workspace / "a.txt").write_text("a\nb\nc\n")
    out = await Read().run(
        make_ctx(workspace), {"file_path": "a.txt", "offset": 2, "limit": 2}
    )
    assert out == "     2\tb\n     3\tc"


@pytest.mark.anyio
async def test_read_offset_past_the_end_gives_the_line_count(workspace: Path) -> None:
    """An offset past the last line says how many lines the file has."""
    (workspace / "a.txt").write_text("a\nb\nc")
    out = await Read().run(make_ctx(workspace), {"file_path": "a.txt", "offset": 9})
    assert out.endswith("has 3 lines; offset 9 is past the end.")


@pytest.mark.anyio
async def test_read_empty_file_says_so(workspace: Path) -> None:
    """An empty file is reported as empty, not as an error."""
    (workspace / "e.txt").write_bytes(b"")
    out = await Read().run(make_ctx(workspace), {"file_path": "e.txt"})
    assert out.endswith("is empty.")


@pytest.mark.anyio
async def test_read_default_limit_is_2000_lines(workspace: Path) -> None:
    """Without `limit` Read shows 2000 lines and points at the rest."""
    (workspace / "big.txt").write_text("".join(f"{n}\n" for n in range(1, 3001)))
    out = await Read().run(make_ctx(workspace), {"file_path": "big.txt"})
    lines = out.splitlines()
    assert len(lines) == DEFAULT_LIMIT + 1
    assert lines[-1] == "[more lines follow line 2000; read on with offset=2001]"


@pytest.mark.anyio
async def test_read_cuts_long_lines_with_a_marker(workspace: Path) -> None:
    """A line longer than the bound is cut and marked with its full size."""
    (workspace / "long.txt").write_text("x" * 100_000 + "\nshort\n")
    out = await Read(chunk_size=4096).run(
        make_ctx(workspace), {"file_path": "long.txt"}
    )
    first, second = out.splitlines()
    assert first == f"     1\t{'x' * MAX_LINE_CHARS} [… line cut: 100000 bytes in all]"
    assert second == "     2\tshort"


@pytest.mark.anyio
async def test_read_cut_inside_a_character_shows_no_replacement(
    workspace: Path,
) -> None:
    """Cutting a long line of multi-byte characters does not invent a bad byte."""
    (workspace / "u.txt").write_text("é" * 10_000, encoding="utf-8")
    out = await Read().run(make_ctx(workspace), {"file_path": "u.txt"})
    assert "\ufffd" not in out
    assert "not valid UTF-8" not in out


@pytest.mark.anyio
async def test_read_non_utf8_file_is_read_with_replacement_and_says_so(
    workspace: Path,
) -> None:
    """Bytes that are not UTF-8 show as U+FFFD and a note says the file is not UTF-8."""
    (workspace / "latin1.txt").write_bytes("café\nnaïve\n".encode("latin-1"))
    out = await Read().run(make_ctx(workspace), {"file_path": "latin1.txt"})
    assert out.splitlines()[:2] == ["     1\tcaf\ufffd", "     2\tna\ufffdve"]
    assert "not valid UTF-8" in out


@pytest.mark.anyio
async def test_read_binary_file_is_refused_with_a_clear_message(
    workspace: Path,
) -> None:
    """A file with NUL bytes near its start is refused as binary."""
    (workspace / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(ToolFailed, match="is a binary file"):
        await Read().run(make_ctx(workspace), {"file_path": "img.png"})


@pytest.mark.anyio
async def test_read_missing_file_fails_clearly(workspace: Path) -> None:
    """A missing file fails with a message naming it."""
    with pytest.raises(ToolFailed, match="does not exist"):
        await Read().run(make_ctx(workspace), {"file_path": "nope.txt"})


@pytest.mark.anyio
async def test_read_directory_is_refused(workspace: Path) -> None:
    """A directory is refused with a pointer to Glob."""
    with pytest.raises(ToolFailed, match="directory"):
        await Read().run(make_ctx(workspace), {"file_path": "."})


@pytest.mark.anyio
async def test_read_absolute_path_outside_workspace_is_read(
    workspace: Path, tmp_path: Path
) -> None:
    """Read itself does not refuse paths outside the workspace (the broker decides)."""
    outside = tmp_path / "outside.txt"
    outside.write_text("hi\n")
    out = await Read().run(make_ctx(workspace), {"file_path": str(outside)})
    assert out == "     1\thi"


def test_read_validate_reports_the_bad_field() -> None:
    """A bad `limit` fails validation with the field's path."""
    with pytest.raises(Exception, match="limit") as info:
        Read().validate({"file_path": "a", "limit": 0})
    assert getattr(info.value, "path", None) == "limit"


@pytest.mark.rule("S14")
@pytest.mark.anyio
async def test_s14_read_never_hangs_on_a_fifo(workspace: Path) -> None:
    """A FIFO with no writer is refused at once instead of blocking the call."""
    os.mkfifo(workspace / "pipe")
    with anyio.fail_after(5), pytest.raises(ToolFailed, match="FIFO"):
        await Read().run(make_ctx(workspace), {"file_path": "pipe"})


@pytest.mark.rule("S14")
@pytest.mark.anyio
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
async def test_s14_read_refuses_devices_without_reading(
    workspace: Path, device: str
) -> None:
    """Endless or special devices are refused by their type, never read."""
    with anyio.fail_after(5), pytest.raises(ToolFailed, match="character device"):
        await Read().run(make_ctx(workspace), {"file_path": device})


@pytest.mark.anyio
async def test_read_of_a_huge_file_reads_only_the_window(
    workspace: Path, huge_file: Path
) -> None:
    """The first lines of a 50 GiB file come back at once: Read stops at `limit`."""
    with anyio.fail_after(5):
        out = await Read().run(
            make_ctx(workspace), {"file_path": str(huge_file), "offset": 10, "limit": 2}
        )
    assert out.splitlines()[:2] == ["    10\tline 10", "    11\tline 11"]


@pytest.mark.rule("S14")
@pytest.mark.anyio
async def test_s14_read_worker_ends_within_100ms_of_a_stop(
    workspace: Path, huge_file: Path
) -> None:
    """A Read scanning a 50 GiB file ends within 100 ms of the stop (median of 5)."""
    tool = Read(progress_every=1024 * 1024)
    args = {"file_path": str(huge_file), "offset": 3000}
    times = [(await stop_tool_once_started(tool, workspace, args))[0] for _ in range(5)]
    assert statistics.median(times) <= 0.1, times
    assert max(times) <= 1.0, times


@pytest.mark.rule("S14")
@pytest.mark.anyio
async def test_s14_read_worker_ends_on_its_cancel_flag_alone(
    workspace: Path, huge_file: Path
) -> None:
    """Setting only `ctx.cancelled` ends the worker too, and the call ends ToolAborted."""
    tool = Read(progress_every=1024 * 1024)
    args = {"file_path": str(huge_file), "offset": 3000}
    elapsed, error = await stop_tool_once_started(tool, workspace, args, flag_only=True)
    assert isinstance(error, ToolAborted)
    assert elapsed <= 1.0
