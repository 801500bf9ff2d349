"""`tether._channel`: the agent channel's call record, halting mark and stage environment."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tether._channel import (
    halting_mark,
    record_call,
    run_halting,
    stage_env,
    tally_calls,
)
from tether._env import TetherEnv


def test_the_record_the_hook_writes_is_the_record_the_run_reads(tmp_path: Path) -> None:
    """One format: what `record_call` appends, `tally_calls` reads back: a started call
    without its end is in flight, a refusal starts nothing, and an end without its
    start counts for nothing."""
    record = str(tmp_path / "calls")
    record_call(record, "pre", "a", "Bash")
    record_call(record, "pre", "b")
    record_call(record, "deny", "c")
    record_call(record, "post", "a")
    record_call(record, "post", "z")
    text = Path(record).read_text(encoding="utf-8")
    assert text.splitlines() == ["pre a Bash", "pre b -", "deny c", "post a", "post z"]
    assert tally_calls(text) == (2, 1, frozenset({"b"}))
    record_call(record, "post", "b")
    assert tally_calls(Path(record).read_text(encoding="utf-8")) == (2, 1, frozenset())


def test_a_call_id_with_a_newline_stays_on_its_own_line(tmp_path: Path) -> None:
    """Ids come from the agent's host, so a newline in one cannot forge a second line:
    the start and the end of that call still pair up."""
    record = str(tmp_path / "calls")
    record_call(record, "pre", "x\npost y", "Bash")
    record_call(record, "pre", "y")
    record_call(record, "post", "x\npost y")
    assert tally_calls(Path(record).read_text(encoding="utf-8"))[2] == {"y"}


def test_concurrent_hooks_append_whole_lines(tmp_path: Path) -> None:
    """Hooks of parallel calls append at once: every line arrives whole (O_APPEND,
    one write each), so no start or end is lost to an interleaving."""
    record = str(tmp_path / "calls")

    def hook(n: int) -> None:
        for i in range(50):
            record_call(record, "pre", f"{n}-{i}", "Read")
            record_call(record, "post", f"{n}-{i}")

    workers = [threading.Thread(target=hook, args=(n,)) for n in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert tally_calls(Path(record).read_text(encoding="utf-8")) == (
        200,
        0,
        frozenset(),
    )


def test_a_link_at_the_record_is_not_followed(tmp_path: Path) -> None:
    """S16: the record lives where the agent can write, so a link planted at its name
    is refused, never written through (the hook then blocks the call)."""
    target = tmp_path / "elsewhere"
    (tmp_path / "calls").symlink_to(target)
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        record_call(str(tmp_path / "calls"), "pre", "a", "Bash")
    assert not target.exists()


def test_a_run_is_halting_once_its_mark_exists() -> None:
    """The mark is the run's lane folder's `.halting` in the state dir; a run id that
    could name another folder never reads as halting."""
    mark = Path(halting_mark("run_1"))
    assert mark.parent.parent == Path(os.environ[TetherEnv.HOME]) / "state" / "lanes"
    assert not run_halting("run_1")
    mark.parent.mkdir(parents=True)
    mark.touch()
    assert run_halting("run_1")
    assert not run_halting("")
    assert not run_halting("../run_1")
    assert not run_halting(".")


def test_a_stage_agent_is_told_its_run_lane_item_and_record() -> None:
    """The agent marker and its run, lane and item always; the call record only for a
    preset stage."""
    plain = stage_env(run="r", lane="l", item="i")
    assert plain == {
        TetherEnv.AGENT: "1",
        TetherEnv.RUN: "r",
        TetherEnv.LANE: "l",
        TetherEnv.ITEM: "i",
    }
    assert stage_env(run="r", lane="l", item="i", calls="/c")[TetherEnv.CALLS] == "/c"
