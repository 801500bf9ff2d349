"""What a `tether run` whose output is not a terminal shows of its working lanes:
a line per lane with its stage, time in it and last output line, only when
that line is new. Real `tether run` processes on a real git repository."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest
from tests.runs.support import make_repo, run_id_of, start, write_plan
from tests.waiting import wait_until

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path

pytestmark = pytest.mark.slow


_CHATTY = (
    'echo step one; sleep 0.5; touch "$MARKS/one"; '
    'while [ ! -e "$MARKS/go" ]; do sleep 0.05; done; echo step two; '
    'while [ ! -e "$MARKS/end" ]; do sleep 0.05; done'
)
"""An agent that prints a line, stays quiet (several looks fall meanwhile) until the
test's go file, then prints another and waits for the end file."""


def _lines_until(proc: subprocess.Popen[str], text: str) -> list[str]:
    """Read the run's output a line at a time until one holds `text` (the suite's
    timeout bounds the wait)."""
    assert proc.stdout is not None
    seen: list[str] = []
    while not seen or text not in seen[-1]:
        line = proc.stdout.readline()
        assert line, f"the run ended without {text!r}: {seen}"
        seen.append(line.rstrip("\n"))
    return seen


def test_progress_lines_name_stage_time_and_last_output_once_each(
    tmp_path: Path,
) -> None:
    """With `--progress 0.1`, the chatty lane gets one line per new output line, however
    many looks fall while it is quiet; the quiet lane gets none."""
    repo = make_repo(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    plan = write_plan(
        tmp_path,
        repo,
        items=["chatty", "quiet"],
        stages=[
            (
                "work",
                f'if [ "$TETHER_ITEM" = chatty ]; then {_CHATTY}; '
                'else while [ ! -e "$MARKS/end" ]; do sleep 0.05; done; fi',
            )
        ],
    )
    proc = start("run", str(plan), "--progress", "0.1", env={"MARKS": str(marks)})
    run_id_of(proc)
    before = _lines_until(proc, "last output: step one")
    assert re.fullmatch(r"chatty: work for \ds, last output: step one", before[-1])
    wait_until(lambda: (marks / "one").exists(), what="the agent quiet a while")
    (marks / "go").touch()
    after = _lines_until(proc, "last output: step two")
    assert re.fullmatch(r"chatty: work for \ds, last output: step two", after[-1])
    (marks / "end").touch()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + err
    every = [*before, *after, *out.splitlines()]
    assert [line for line in every if "last output:" in line] == [
        before[-1],
        after[-1],
    ]
    assert "chatty: work started" in before
    assert any(line.startswith("chatty: work ended") for line in out.splitlines())


def test_progress_zero_prints_the_run_lines_only(tmp_path: Path) -> None:
    """`--progress 0` turns the progress lines off; the run's own lines stay."""
    repo = make_repo(tmp_path)
    plan = write_plan(
        tmp_path, repo, items=["q1"], stages=[("work", "echo step one; sleep 0.3")]
    )
    proc = start("run", str(plan), "--progress", "0")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + err
    assert "last output:" not in out
    assert "q1: work started" in out
    assert "q1: work ended, exit 0" in out
