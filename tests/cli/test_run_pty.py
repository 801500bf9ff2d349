"""Ctrl-C through a real pseudo-terminal: one press halts cleanly (exit 3) saying what it
waits for; two presses kill every agent tree at once (exit 130), worktrees still saved."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import select
import subprocess
import termios
import time
from pathlib import Path

import pytest
from tests.cli._run import TETHER
from tests.runs.support import (
    WAIT_FOR_GO,
    make_repo,
    open_default_store,
    write_plan,
)
from tests.waiting import wait_until

from tether.runs import LaneState
from tether.runs._lane_git import lossless_save

pytestmark = pytest.mark.slow


_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _make_controlling() -> None:
    # The child leads a new session whose controlling terminal is the pty, so Ctrl-C
    # typed on it becomes SIGINT to the child's (foreground) process group.
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """`tether ARGS` on a pseudo-terminal: what it printed, and keys typed at it."""

    def __init__(self, *args: str, env: dict[str, str], term: str = "dumb") -> None:
        self.master, slave = os.openpty()
        self.proc = subprocess.Popen(
            [*TETHER, *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            # The agents write their marks outside their lanes: declared (S15).
            env={
                **os.environ,
                **env,
                "TETHER_WRITABLE": env.get("MARKS", ""),
                "COLUMNS": "200",
                "TERM": term,
            },
            preexec_fn=_make_controlling,
        )
        os.close(slave)
        self.seen = b""

    def read_until(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while text.encode() not in self.seen:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no {text!r} in {self.seen.decode(errors='replace')}"
                )
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if ready:
                try:
                    self.seen += os.read(self.master, 65536)
                except OSError as exc:
                    if exc.errno != errno.EIO:
                        raise
        return self.seen.decode(errors="replace")

    def read_until_shown(self, pattern: str, timeout: float = 30) -> str:
        """Read until the screen, its escapes dropped, matches `pattern`; return it."""
        deadline = time.monotonic() + timeout
        while True:
            shown = _ESCAPES.sub("", self.seen.decode(errors="replace"))
            if re.search(pattern, shown):
                return shown
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} in {shown}")
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if ready:
                with contextlib.suppress(OSError):
                    self.seen += os.read(self.master, 65536)

    def press_ctrl_c(self) -> None:
        os.write(self.master, b"\x03")

    def wait(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError("the run did not exit")
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                with contextlib.suppress(OSError):
                    self.seen += os.read(self.master, 65536)
        return self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


def _busy(tmp_path: Path) -> tuple[Path, Path]:
    repo = make_repo(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    plan = write_plan(
        tmp_path,
        repo,
        items=["one", "two"],
        stages=[
            (
                "implement",
                'echo "wip $TETHER_ITEM" > wip.txt; '
                + WAIT_FOR_GO.format(stage="impl"),
            ),
            ("review", "true"),
        ],
    )
    return plan, marks


def _tree_pids(marks: Path) -> list[int]:
    needle = f"MARKS={marks}\0".encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{pid}/stat", "rb") as s:
                state = s.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in env and b"TETHER_AGENT=1\0" in env and state != b"Z":
            found.append(int(pid))
    return found


@pytest.mark.rule("ctrl-c")
def test_one_ctrl_c_halts_cleanly_and_says_what_it_waits_for(tmp_path: Path) -> None:
    """The first Ctrl-C is a stop for this run: the line names the agents it waits
    for; their calls finish; lanes saved and released; exit 3."""
    plan, marks = _busy(tmp_path)
    term = Terminal("run", str(plan), env={"MARKS": str(marks)})
    try:
        term.read_until("run run_")
        wait_until(lambda: len(list(marks.glob("*.impl"))) == 2, what="agents busy")
        term.press_ctrl_c()
        shown = term.read_until("press Ctrl-C again to kill now")
        assert "stopping: waiting for 2 agents to finish their calls" in shown
        (marks / "go").touch()
        assert term.wait() == 3
    finally:
        term.close()
    store = open_default_store()
    (run,) = store.runs()
    assert run.state.value == "halted"
    assert {lane.state for lane in store.lanes(run.id)} == {LaneState.HALTED}
    assert store.claims() == []


@pytest.mark.rule("ctrl-c")
def test_two_ctrl_c_kill_every_agent_tree_and_still_save_the_worktrees(
    tmp_path: Path,
) -> None:
    """The second Ctrl-C kills both busy agents' trees at once (no survivors), the
    worktrees are saved aside, the claims are left for the restart path; exit 130."""
    plan, marks = _busy(tmp_path)
    term = Terminal("run", str(plan), env={"MARKS": str(marks)})
    try:
        term.read_until("run run_")
        wait_until(lambda: len(list(marks.glob("*.impl"))) == 2, what="agents busy")
        assert _tree_pids(marks)
        term.press_ctrl_c()
        term.read_until("press Ctrl-C again")
        started = time.monotonic()
        term.press_ctrl_c()
        said = term.read_until_shown(r"go on with: tether takeover run_\S+\r?\n")
        assert term.wait() == 130
        assert time.monotonic() - started < 10
        assert _tree_pids(marks) == []
    finally:
        term.close()
    store = open_default_store()
    (run,) = store.runs()
    # The run, each lane's save and the take-over are said before the exit.
    assert f"run {run.id} killed by a second Ctrl-C" in said
    assert f"tether takeover {run.id}" in said
    for item in ("one", "two"):
        assert f"{item}: its worktree is saved aside in " in said
    lanes = store.lanes(run.id)
    assert {lane.state for lane in lanes} == {LaneState.SAVED}
    for lane in lanes:
        # Saved aside by a rename (bounded whatever the lane holds); its view is
        # derived by the take-over, the run being killed.
        saved = lossless_save(lane)
        assert saved is not None
        assert (saved / "wip.txt").read_text(encoding="utf-8") == f"wip {lane.item}\n"
        assert not Path(lane.worktree).exists()
    assert len(store.claims(run.id)) == 2
    assert "kill" in {e.kind for e in store.events(run.id)}


def test_the_live_view_shows_each_lanes_stage_time_and_last_output_line(
    tmp_path: Path,
) -> None:
    """On a terminal the run draws a live table: per working lane its item, stage,
    time in the stage and the line of its agent's last event (a command agent's
    plain line; for Claude Code's JSON stream, the refusal rendered)."""
    repo = make_repo(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    stream = Path(__file__).parents[1] / "runs" / "streams" / "claude.log"
    plan = write_plan(
        tmp_path,
        repo,
        items=["one", "two"],
        stages=[
            (
                "implement",
                'echo "first"; if [ "$TETHER_ITEM" = two ]; then '
                f"head -n 12 {stream}; else echo editing one.txt; fi; "
                + WAIT_FOR_GO.format(stage="impl"),
            )
        ],
    )
    term = Terminal("run", str(plan), env={"MARKS": str(marks)}, term="xterm-256color")
    try:
        term.read_until_shown(r"one\s+implement\s+\d+s\s+editing one\.txt")
        term.read_until_shown(
            r"two\s+implement\s+\d+s\s+refused Bash call: the person stopped"
        )
        (marks / "go").touch()
        assert term.wait() == 0
    finally:
        term.close()
    assert "one: done" in _ESCAPES.sub("", term.seen.decode(errors="replace"))
