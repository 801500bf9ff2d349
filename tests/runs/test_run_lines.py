"""What a run shows of its agents, through real `tether` processes whose command
agents print the real CLIs' recorded streams (`streams/`): each event one line in the
progress lines, the live table and `tether logs` (`--raw` the stream, `--json` the
events); a failed stage's reason on the run's line and in `tether runs`; the end's
summary; and a retry that goes on at the failed stage without redoing the others."""

from __future__ import annotations

import io
import json
import os
import pwd
import shutil
from pathlib import Path

import pytest
from rich.console import Console
from tests.cli._run import invoke

from tether.cli._runview import RunView
from tether.cli.lanes import lanes
from tether.cli.logs import logs
from tether.cli.queue import queue
from tether.cli.runs import runs
from tether.runs._values import LaneStatistics, RunStatistics

from .support import git, make_repo, open_default_store, tether, write_plan

pytestmark = pytest.mark.slow


STREAMS = Path(__file__).parent / "streams"
NO_KEY = "Not logged in · Please run /login"


def _stats(log: Path, item: str = "fix-the-typo-in-readme") -> RunStatistics:
    lane = LaneStatistics(
        item=item, lane="lane_1", stage="implement", elapsed=65, log=log, note=None
    )
    return RunStatistics(lanes=(lane,), stop_hold=None, halting=False)


def test_the_live_table_keeps_item_and_stage_and_shows_the_last_events_line(
    tmp_path: Path,
) -> None:
    log = tmp_path / "lane.log"
    lines = (STREAMS / "claude.log").read_text(encoding="utf-8").splitlines(True)
    # The log as it stood after the first refusal, and a line still being written.
    upto = next(i for i, x in enumerate(lines) if "PreToolUse:Bash hook error" in x)
    log.write_text("".join(lines[: upto + 1]) + '{"type":"assistant","mess')
    for width in (60, 200):
        out = io.StringIO()
        table = RunView(every=1)._table(_stats(log))
        Console(file=out, width=width, color_system=None).print(table)
        (row,) = [x for x in out.getvalue().splitlines() if "fix-the" in x]
        assert row.startswith("fix-the-typo-in-readme  implement   1m05s  refused Bash")
        assert "{" not in row
        assert len(row.rstrip()) <= width
    assert "refused Bash call: the person stopped this run (run " in row


def test_the_live_head_is_one_line_at_any_width(tmp_path: Path) -> None:
    # A head that wrapped would be cleared at the wrong height after a resize.
    view = RunView(every=1)
    view._last_said = "branch tether/add-changelog: " + "a long summary " * 20
    for stats in (None, _stats(tmp_path / "lane.log")):
        for width in (40, 80, 200):
            out = io.StringIO()
            Console(file=out, width=width, color_system=None).print(view._table(stats))
            head = out.getvalue().splitlines()[0]
            assert "branch tether/add-changelog: a long" in head
            assert head.rstrip().endswith("…")
            assert len(out.getvalue().splitlines()) == (1 if stats is None else 2)


def test_progress_lines_show_the_last_events_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "lane.log"
    shutil.copyfile(STREAMS / "codex.log", log)
    view = RunView(every=1)
    view.look(_stats(log, "q1"))
    view.look(_stats(log, "q1"))  # no new line: nothing more
    assert capsys.readouterr().out == (
        "q1: implement for 1m05s, last output: tether: stopped at the person's stop "
        "after 3 tool calls (ended by tether: 3 s between calls after the stop)\n"
    )


def test_logs_reasons_summary_and_a_retry_at_the_failed_stage(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    implement = (
        f'echo ran >> "$MARKS/implement"; cat {STREAMS}/claude.log; echo a > a.txt'
    )
    stages = [
        ("implement", implement),
        ("check", f"cat {STREAMS}/claude-no-key.log; exit 1"),
    ]
    plan = write_plan(tmp_path, repo, items=["one"], stages=stages, lanes=1)
    env = {"MARKS": str(marks)}
    first = tether("run", str(plan), env=env)
    assert first.returncode == 1, first.stdout + first.stderr
    run = first.stdout.split()[1]
    out = first.stdout
    assert "one: implement ended, exit 0, 1 commit\n" in out
    assert f"one: check failed, exit 1, 0 commits: {NO_KEY}\n" in out
    assert "  one: check failed, exit 1: " in out  # the summary
    assert "branch tether/one: 1 commit (implement: work the stage left" in out, out
    listed = invoke(runs).output
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert f"{run}  done  {me}\n  one: check failed, exit 1: {NO_KEY}\n" in listed

    shown = invoke(logs, run, "one").output
    assert (
        "Bash failed (exit 1): cat: no-such-file: No such file or directory\n" in shown
    )
    refusal = next(x for x in shown.splitlines() if x.startswith("refused"))
    assert refusal.startswith(
        "refused Bash call (echo later-1): the person stopped this run (run "
    )
    assert f"failed: {NO_KEY}" in shown
    assert not [x for x in shown.splitlines() if x.startswith("{")]
    raw = invoke(logs, run, "one", "--raw").output
    assert '{"type":"system","subtype":"init"' in raw
    events = [json.loads(x) for x in invoke(logs, run, "--json").output.splitlines()]
    assert {e["item"] for e in events} == {"one"}
    refused = [e for e in events if e["kind"] == "refused"]
    assert len(refused) == 2
    assert refused[0]["by_stop"] is True
    assert refused[0]["tool"] == "Bash"
    both = tether("logs", run, "--raw", "--json")
    assert both.returncode == 2
    assert "give --raw or --json, not both" in both.stderr

    # Fixed, retried: the check runs on the branch; implement does not run again.
    fixed = [("implement", implement), ("check", "echo fixed >> check.txt")]
    write_plan(tmp_path, repo, items=["one"], stages=fixed, lanes=1)
    assert invoke(queue, "retry", "one").output == "queued again: one\n"
    second = tether("run", str(plan), env=env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "one: retried at check; its branch tether/one holds what implement did" in (
        second.stdout
    )
    assert "one: implement started" not in second.stdout
    assert (marks / "implement").read_text() == "ran\n"  # its marker written once
    assert git(repo, "show", "tether/one:a.txt") == "a"
    assert git(repo, "show", "tether/one:check.txt") == "fixed"
    assert "  one: done; branch tether/one: 2 commits (" in second.stdout


def test_retry_from_start_runs_every_stage_again_and_prune_takes_the_log(
    tmp_path: Path,
) -> None:
    from tether.runs._lane_life import retry_stage

    repo = make_repo(tmp_path)
    stages = [
        ("implement", 'if [ "$TETHER_ITEM" = three ]; then exit 4; fi; echo a > a.txt'),
        ("check", "echo no >&2; exit 3"),
    ]
    plan = write_plan(tmp_path, repo, items=["two", "three"], stages=stages)
    ran = tether("run", str(plan))
    assert ran.returncode == 1
    assert "two: check failed, exit 3, 0 commits: no\n" in ran.stdout
    # A first stage that committed nothing leaves no branch behind.
    assert "three: failed; it committed nothing: no branch tether/three is left" in (
        ran.stdout
    )
    assert "  three: implement failed, exit 4; no branch (nothing committed)" in (
        ran.stdout
    )
    assert git(repo, "branch", "--list", "tether/*").split() == ["tether/two"]
    store = open_default_store()
    (lane,) = [x for x in store.lanes(ran.stdout.split()[1]) if x.item == "two"]
    log = Path(lane.worktree).with_name(f"{lane.id}.log")
    assert log.stat().st_size > 0
    pruned = invoke(lanes, "prune", "--yes").output
    assert "deleted 2 folder(s)" in pruned
    assert not Path(lane.worktree).exists()
    assert not log.exists()  # the log went with its lane
    assert retry_stage(store, "two", None, 2) == 1
    again = invoke(queue, "retry", "two", "--from-start")
    assert again.output == "queued again: two (every stage)\n"
    assert retry_stage(store, "two", None, 2) == 0
    assert "--from-start" in invoke(queue, "retry", "--help").output
