"""The agent presets with the real Claude Code and Codex CLIs against stub models.

Each CLI talks to a stub model server on 127.0.0.1 (Anthropic Messages for Claude
Code, OpenAI Responses for Codex) whose script plays a model that ignores tether's
refusals (or, not logged in, no server at all). Skipped with the reason where a CLI
is not installed, except in CI.
"""

from __future__ import annotations

import json
import signal
import time
from typing import TYPE_CHECKING

import pytest
from tests.waiting import wait_until

from tether._config import paths
from tether.runs._lane_git import lane_dir
from tether.stop import lift_stop, set_stop

from .presets_support import (
    STOP_SAYS,
    WIRE,
    Longrunner,
    Resumed,
    Stubborn,
    need_cli,
    preset_env,
    prompts,
    serving,
    write_preset_plan,
)
from .support import git, make_repo, open_default_store, run_id_of, start, tether

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow


SLEEP = 3.0
"""Seconds the long tool call in flight runs."""
STOP_WAIT = 6.0
"""The stage's `stop_wait`: stop -> halted <= the rest of the call in flight + it."""


def _call_ended(lanes: Path) -> bool:
    """Whether a lane's hook recorded the end (`post`) of a call it let start."""
    for record in lanes.glob("*/.tether/calls-*"):
        try:
            text = record.read_text(encoding="utf-8", errors="replace")
        except OSError:  # the lane is being saved aside
            continue
        if "\npost " in "\n" + text:
            return True
    return False


@pytest.mark.parametrize("preset", ["claude", "codex"])
def test_a_stop_lets_the_call_in_flight_finish_runs_no_later_call_and_halts_in_time(
    tmp_path: Path, preset: str
) -> None:
    """Spec 03 "The stop inside an agent" with the real CLI: a stop during a long Bash
    call, eight more calls queued by a model that ignores the refusals: the call in
    flight finishes, none of the eight runs (each is refused with the stop's message),
    the agent that keeps thinking is ended before `stop_wait` runs out, and the run
    halts within the rest of the call + `stop_wait`; the receipt counts the calls."""
    need_cli(preset)
    marks = tmp_path / "marks"
    marks.mkdir()
    repo = make_repo(tmp_path)
    # Long enough for the eight refusals to come back.
    plan = write_preset_plan(tmp_path, repo, preset, stop_wait=STOP_WAIT)
    model = Stubborn(marks, sleep=SLEEP)
    with serving(WIRE[preset], model) as server:
        env = preset_env(preset, server, tmp_path / "home")
        env["TETHER_WRITABLE"] = str(marks)  # the stub's commands mark their moments
        proc = start("run", str(plan), env=env)
        run = run_id_of(proc)
        wait_until(lambda: (marks / "started").exists(), what="the long call", bound=90)
        set_stop("test")
        stopped = time.time()
        # The call in flight ends when its hook records it (`post`), as the run reads
        # it (seen here within a recheck): on a loaded machine `sleep 3`, its shell and
        # the hook's start take well over 3 s.
        wait_until(
            lambda: _call_ended(paths().state_dir / "lanes" / run),
            what="the end of the call in flight",
            bound=90,
        )
        ended = time.time()
        proc.wait(timeout=120)
        halted = time.time()
        requests = list(server.requests)
    out = proc.stdout.read() if proc.stdout else ""
    assert proc.returncode == 3, out
    assert (marks / "finished").exists(), "the call in flight was cut"
    assert not (marks / "later").exists(), "a call after the stop ran"
    refused = [r for r in requests if STOP_SAYS in prompts(r)]
    assert len(refused) >= 8, [prompts(r)[-300:] for r in requests]
    rest = max(0.0, ended - stopped)
    store = open_default_store()
    # docs/runs.md: halted at most the rest of the call in flight plus `stop_wait`
    # after the stop (the run's own record of the moment); the process then writes
    # its summary, digest and publications and exits.
    (marked,) = [e.at for e in store.events(run) if e.kind == "halted"]
    assert marked - stopped <= rest + STOP_WAIT, (marked - stopped, rest)
    assert halted - marked < 10, halted - marked
    (receipt,) = store.receipts(run)
    assert "stopped at the person's stop after 1 tool call" in receipt.log_tail
    assert "ended by tether" in receipt.log_tail
    assert len([e for e in store.events(run) if e.kind == "agent-session"]) == 1
    (lane,) = store.lanes(run)
    assert lane.session is not None
    assert lane.session.stage == "implement"
    log = lane_dir(run, receipt.lane).parent / f"{receipt.lane}.log"
    transcript = log.read_text(encoding="utf-8")
    assert (
        lane.session.session in transcript
    )  # the CLI's own JSON events, in the lane log
    assert "sleep" in transcript
    assert "later" in transcript
    assert git(repo, "status", "--porcelain") == ""
    # What a person reads of it: each refusal one line; the stream as it was, one flag
    # away; the events as JSON lines.
    shown = tether("logs", run)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    refusals = [line for line in lines if line.startswith("refused ")]
    assert len(refusals) >= 8, shown.stdout[-2000:]
    assert all(STOP_SAYS in line for line in refusals), refusals
    assert not any(line.startswith("{") for line in lines), shown.stdout[-2000:]
    raw = tether("logs", run, "--raw")
    assert transcript in raw.stdout
    events = [
        json.loads(line) for line in tether("logs", run, "--json").stdout.splitlines()
    ]
    assert sum(e["kind"] == "refused" for e in events) == len(refusals)


def _mentions(home: Path, text: str) -> int:
    """How often `text` is in the CLI's session files below `home` (its JSON lines)."""
    found = 0
    for path in home.rglob("*.jsonl"):
        if path.is_symlink():
            continue
        try:
            found += path.read_text(encoding="utf-8", errors="replace").count(text)
        except OSError:
            continue
    return found


@pytest.mark.parametrize("preset", ["claude", "codex"])
def test_a_takeover_resumes_the_agents_own_session_and_the_branch_holds_the_work(
    tmp_path: Path, preset: str
) -> None:
    """Spec 03 "Presets": a run killed while its agent is in a call is taken over; the
    stage starts with the CLI's resume of the recorded session, so the first model
    request of the take-over carries the earlier conversation and says the run was
    taken over; the work of both reaches the item's branch."""
    need_cli(preset)
    marks = tmp_path / "marks"
    marks.mkdir()
    repo = make_repo(tmp_path)
    plan = write_preset_plan(tmp_path, repo, preset)
    home = tmp_path / "home"
    with serving(WIRE[preset], Longrunner(marks)) as first:
        env = preset_env(preset, first, home) | {"TETHER_WRITABLE": str(marks)}
        proc = start("run", str(plan), env=env)
        run = run_id_of(proc)
        wait_until(lambda: (marks / "started").exists(), what="the long call", bound=90)
        store = open_default_store()
        wait_until(
            lambda: any(lane.session is not None for lane in store.lanes(run)),
            what="the session recorded",
        )
        # The CLI writes its session file (in the lane's CLI folder, in the state
        # folder) a little after the fact: kill once the first call's result is in
        # it (the command and its output).
        lanes = paths().state_dir / "lanes" / run
        wait_until(
            lambda: _mentions(lanes, "first-step-ok") >= 2,
            what="the first call in the CLI's session file",
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    with serving(WIRE[preset], Resumed()) as second:
        set_stop("test")
        lift_stop()
        env = preset_env(preset, second, home) | {"TETHER_WRITABLE": str(marks)}
        result = tether("takeover", run, env=env)
        requests = list(second.requests)
    assert result.returncode == 0, result.stdout + result.stderr
    # The conversation's own requests carry the tools; a CLI's side requests (a
    # session title, a summary) may come first and carry none.
    asked = [r for r in requests if r.get("tools")]
    assert asked, result.stdout
    earliest = prompts(asked[0])
    assert "first-step-ok" in earliest  # the earlier conversation
    assert "taken over" in earliest
    assert git(repo, "show", "tether/one:more.txt") == "more"


def test_a_claude_code_stage_with_no_key_says_why_on_the_runs_line(
    tmp_path: Path,
) -> None:
    """The real CLI, not logged in: the reason is on the run's line, not only in the
    JSON event in its log; the first stage committed nothing, so no branch is left."""
    need_cli("claude")
    repo = make_repo(tmp_path)
    plan = write_preset_plan(tmp_path, repo, "claude")
    home = tmp_path / "home"
    home.mkdir()
    ran = tether("run", str(plan), env={"HOME": str(home)})
    assert ran.returncode == 1, ran.stdout + ran.stderr
    said = (
        "one: implement failed, exit 1, 0 commits: claude: Not logged in · Please run"
    )
    assert f"{said} /login\n" in ran.stdout
    assert "no branch tether/one is left" in ran.stdout
