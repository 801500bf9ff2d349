"""A lane log bounded on disk (spec 01 S16, S13b's rule on disk): its head, a marker
saying how much was left out, its tail; followed across rewrites; what an agent
printed reaches a terminal with no control sequence left in it."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tether._term import visible
from tether.errors import UsageError
from tether.runs._lane_log import LaneLog, LogReader, layout, log_bound
from tether.runs._tail import LogTail

from .support import make_repo, tether, write_plan

pytestmark = [pytest.mark.rule("S16"), pytest.mark.slow]

BOUND = 64 * 1024


def _stream(n: int) -> bytes:
    """`n` bytes of numbered lines: every byte's place can be checked."""
    out = bytearray()
    i = 0
    while len(out) < n:
        out += f"line {i:08d}\n".encode()
        i += 1
    return bytes(out[:n])


def test_S16_a_lane_log_keeps_its_head_a_marker_and_its_tail_within_the_bound(
    tmp_path: Path,
) -> None:
    path = tmp_path / "lane.log"
    data = _stream(1_000_000)
    with LaneLog(path, bound=BOUND) as log:
        for start in range(0, len(data), 4093):
            log.write(data[start : start + 4093])
            assert path.stat().st_size <= BOUND
        assert log.rewrites > 1
    kept = path.read_bytes()
    found = layout(kept)
    assert found is not None
    assert kept[: found.head] == data[: found.head] == data[: BOUND // 4]
    tail = kept[found.head + found.marker :]
    assert data.endswith(tail)
    assert tail.startswith(b"line ")  # from a line's start
    assert found.head + found.dropped + len(tail) == len(data)
    marker = kept[found.head : found.head + found.marker].decode()
    assert f"[... {found.dropped} bytes of output left out" in marker
    # A later stage appends to the same log with the same rule, its count carried on.
    with LaneLog(path, bound=BOUND) as log:
        log.write(data)
    again = layout(path.read_bytes())
    assert again is not None
    assert again.head == found.head
    kept_tail = path.stat().st_size - again.head - again.marker
    assert again.head + again.dropped + kept_tail == 2 * len(data)


def test_S16_a_follower_goes_on_across_rewrites_and_says_what_it_missed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "lane.log"
    data = _stream(400_000)
    reader = LogReader()
    seen = bytearray()
    with LaneLog(path, bound=BOUND) as log:
        for start in range(0, len(data), 1000):
            log.write(data[start : start + 1000])
            if start % 8000 == 0:  # the follower looks every eighth write
                seen += reader.read(path)
    seen += reader.read(path)
    assert b"left out" not in seen  # it kept up: every byte, in order, once
    assert bytes(seen) == data
    late = LogReader()
    got = late.read(path)  # a late reader: head, the marker, the tail
    assert b"bytes of output left out after byte" in got
    with LaneLog(path, bound=BOUND) as log:
        log.write(_stream(300_000))  # it falls behind a rewrite
    missed = late.read(path)
    assert re.match(rb"\n\[\.\.\. \d+ bytes of output left out after byte \d+", missed)


def test_the_live_view_reads_the_last_line_of_a_rewritten_log(tmp_path: Path) -> None:
    path = tmp_path / "lane.log"
    tail = LogTail()
    with LaneLog(path, bound=BOUND) as log:
        log.write(_stream(50_000))
        assert tail.last_line(path) is not None
        log.write(_stream(200_000) + b"\nthe very end\n")
    assert tail.last_line(path) == "the very end"


def test_a_bad_log_bound_is_refused_with_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TETHER_LOG_BOUND", "12")
    with pytest.raises(UsageError, match="TETHER_LOG_BOUND must be a number of bytes"):
        log_bound()
    monkeypatch.setenv("TETHER_LOG_BOUND", "1048576")
    assert log_bound() == 1048576
    monkeypatch.delenv("TETHER_LOG_BOUND")
    assert log_bound() == 8 * 1024 * 1024


def test_S16_a_lane_log_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.log")
    with pytest.raises(OSError, match="not a regular file"):  # at once, no hang
        LaneLog(tmp_path / "fifo.log", bound=BOUND)
    (tmp_path / "dir.log").mkdir()
    with pytest.raises(OSError, match="directory"):
        LaneLog(tmp_path / "dir.log", bound=BOUND)
    (tmp_path / "link.log").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError, match="symbolic links"):
        LaneLog(tmp_path / "link.log", bound=BOUND)
    assert not (tmp_path / "elsewhere").exists()


ESCAPES = (
    "\x1b]0;owned title\x07"  # OSC 0: window title
    "\x1b]2;other title\x1b\\"  # OSC 2, ended by ST
    "\x1b]52;c;aGFja2Vk\x07"  # OSC 52: clipboard write
    "\x1b[2J\x1b[H"  # CSI: clear, home
    "\x1b[31mred\x1b[0m"  # SGR: colour
    "\x9b6n"  # C1 CSI: report the cursor
    "bell\x07 back\x08 cr\rtab\tend\r\n"
)


def test_S16_visible_leaves_no_control_sequence_and_shows_each_as_text() -> None:
    shown = visible(ESCAPES)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", shown)
    assert "␛]0;owned title␇" in shown
    assert "␛]2;other title␛\\" in shown
    assert "␛]52;c;aGFja2Vk␇" in shown
    assert "␛[2J␛[H" in shown
    assert "red" in shown
    assert "␛[31m" not in shown  # colours dropped
    assert "␛[6n" in shown
    assert shown.endswith("bell␇ back␈ cr␍tab\tend\n")


def test_S16_tether_logs_shows_escapes_as_text_and_raw_gives_them_back(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path)
    printed = tmp_path / "escapes.bin"
    printed.write_bytes(ESCAPES.encode())
    plan = write_plan(
        tmp_path, repo, items=["esc"], stages=[("only", f"cat {printed}")]
    )
    run = tether("run", str(plan))
    assert run.returncode == 0, run.stdout + run.stderr
    run_id = run.stdout.split()[1]
    shown = tether("logs", run_id)
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout
    assert "\x9b" not in shown.stdout
    assert "\x07" not in shown.stdout
    assert "␛]52;c;aGFja2Vk␇" in shown.stdout
    assert "␛]0;owned title␇" in shown.stdout
    raw = tether("logs", run_id, "--raw")
    # (The helper reads text: universal newlines make every CR a line end.)
    sent = ESCAPES.replace("\r\n", "\n").replace("\r", "\n")
    assert sent in raw.stdout
    assert "--raw" in tether("logs", "--help").stdout


def test_S16_an_agent_printing_200_MB_leaves_a_bounded_log_and_the_other_lane_works(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path)
    bound = 1024 * 1024
    plan = write_plan(
        tmp_path,
        repo,
        items=["loud", "quiet"],
        stages=[
            (
                "only",
                'if [ "$TETHER_ITEM" = loud ]; then echo first-line; '
                "head -c 200000000 /dev/zero | tr '\\0' x | fold -w 100; "
                "echo last-line; else sleep 1; echo quiet-done; fi",
            )
        ],
    )
    run = tether("run", str(plan), env={"TETHER_LOG_BOUND": str(bound)})
    assert run.returncode == 0, run.stdout + run.stderr
    run_id = run.stdout.split()[1]
    shown = json.loads(tether("runs", "show", run_id, "--json").stdout)
    logs = {lane["item"]: Path(lane["log"]) for lane in shown["lanes"]}
    loud = logs["loud"].read_bytes()
    assert len(loud) <= bound
    assert loud.startswith(b"first-line\n")
    assert loud.rstrip().endswith(b"last-line")
    found = layout(loud)
    assert found is not None
    assert found.dropped > 190_000_000
    assert logs["quiet"].read_bytes() == b"quiet-done\n"
    quiet = tether("logs", run_id, "quiet")
    assert quiet.returncode == 0
    items = json.loads(tether("queue", "list", "--json").stdout)
    assert {(i["id"], i["state"]) for i in items} == {
        ("loud", "done"),
        ("quiet", "done"),
    }


def test_S16_the_live_view_reads_no_byte_of_a_log_that_is_not_a_file(
    tmp_path: Path,
) -> None:
    (tmp_path / "dir.log").mkdir()
    os.mkfifo(tmp_path / "fifo.log")
    (tmp_path / "link.log").symlink_to("/dev/zero")
    tail = LogTail()
    for name in ("dir.log", "fifo.log", "link.log"):
        assert tail.last_line(tmp_path / name) is None
