"""The `builtin` stage agent: the agent loop in the lane's worktree, walled."""

from __future__ import annotations

import json
import os
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest
from tests.waiting import wait_until

from tether.models import (
    ModelRequest,
    Move,
    ScriptedModel,
    StepDone,
    StreamEvent,
    ToolCall,
)
from tether.runs._builtin import STOPPED_EXIT, TAKEOVER_PROMPT, run_builtin_agent
from tether.runs._lane_git import lossless_save
from tether.stop import lift_stop, set_stop

from .support import git, make_repo, open_default_store, run_id_of, start, tether

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tether.runs._agents import AgentOutcome

pytestmark = pytest.mark.slow


COMMIT_ALL = (
    "git add -A && { git diff --cached --quiet || "
    "git -c user.email=a@b -c user.name=agent commit -qm 'review {item}'; }"
)


def _script(path: Path, moves: list[dict[str, object]]) -> None:
    lines = [json.dumps({"tether_script": 1}), *(json.dumps(m) for m in moves)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _plan(tmp_path: Path, repo: Path, script: str, stage: str = "implement") -> Path:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        f'repo = "{repo}"\npoll = 0.1\n\n'
        f'[[stage]]\nname = "{stage}"\nagent = "builtin"\nmodel = "scripted:{script}"\n\n'
        f"[[stage]]\nname = \"review\"\nagent = ['sh', '-c', '''{COMMIT_ALL}''']\n\n"
        '[[item]]\nid = "greet"\nbrief = "Write a greeting"\n',
        encoding="utf-8",
    )
    return plan


def test_a_builtin_stage_runs_the_agent_loop_in_the_lane_with_file_and_shell_tools(
    tmp_path: Path,
) -> None:
    """The scripted model writes a file and runs Bash in the lane's worktree (whose
    processes carry TETHER_AGENT=1); a tool outside the wall does not exist for it."""
    repo = make_repo(tmp_path)
    _script(
        tmp_path / "moves.jsonl",
        [
            {
                "text": "Writing.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "name": "Write",
                        "input": {"file_path": "hello.txt", "content": "hello\n"},
                    },
                    {
                        "id": "c2",
                        "name": "Bash",
                        "input": {"command": "echo $TETHER_AGENT > agent.txt"},
                    },
                    {
                        "id": "c3",
                        "name": "WebFetch",
                        "input": {"url": "http://127.0.0.1:9/"},
                    },
                ],
            },
            {"text": "Done."},
        ],
    )
    plan = _plan(tmp_path, repo, "moves.jsonl")  # relative: found beside the plan
    result = tether("run", str(plan))
    assert result.returncode == 0, result.stdout + result.stderr
    assert git(repo, "show", "tether/greet:hello.txt") == "hello"
    assert git(repo, "show", "tether/greet:agent.txt") == "1"
    store = open_default_store()
    (implement, _review) = store.receipts(result.stdout.split()[1])
    assert implement.exit_status == 0
    assert "[Write: succeeded]" in implement.log_tail
    assert "[WebFetch: " in implement.log_tail
    assert "[WebFetch: succeeded]" not in implement.log_tail


@pytest.mark.rule("plan-file")
def test_a_builtin_stage_whose_model_cannot_be_used_is_refused_at_the_start(
    tmp_path: Path,
) -> None:
    """A missing script is refused before anything is claimed, exit 2, one line."""
    repo = make_repo(tmp_path)
    plan = _plan(tmp_path, repo, "missing.jsonl")
    result = tether("run", str(plan))
    assert result.returncode == 2
    assert "stage 'implement': the model cannot be used" in result.stderr
    assert result.stdout == ""


# -- the stop inside the stage ----------------------------------------------------------

LATER = 8
"""Calls the stage's model asks for after the first one, one per model step."""


def _stage_script(path: Path, first: str) -> None:
    """A stage whose first Bash call runs `first`, then eight quick calls, then done.

    Call `n` writes `a<n>.txt` when it starts and appends `end` when it ends, so the
    files say which calls ran and whether each ran to its end.
    """
    later: list[dict[str, object]] = [
        {
            "text": f"Call {n}.",
            "tool_calls": [
                {
                    "id": f"c{n}",
                    "name": "Bash",
                    "input": {
                        "command": f"echo start > a{n}.txt; echo end >> a{n}.txt"
                    },
                }
            ],
        }
        for n in range(2, LATER + 2)
    ]
    first_call = {"id": "c1", "name": "Bash", "input": {"command": first}}
    _script(
        path,
        [{"text": "Call 1.", "tool_calls": [first_call]}, *later, {"text": "Done."}],
    )


def _ran(cwd: Path) -> dict[int, str]:
    return {
        n: (cwd / f"a{n}.txt").read_text(encoding="utf-8")
        for n in range(1, LATER + 2)
        if (cwd / f"a{n}.txt").exists()
    }


async def _wait_ready(fifo: Path) -> None:
    """Return once the Bash call has written to `fifo` (it is running)."""
    await anyio.to_thread.run_sync(fifo.read_text, abandon_on_cancel=True)


@pytest.mark.anyio
@pytest.mark.rule("agent-stop")
@pytest.mark.parametrize("seconds", [0.5, 1.5])
async def test_a_stop_during_a_long_bash_call_lets_it_finish_and_runs_no_later_call(
    tmp_path: Path, seconds: float
) -> None:
    """Spec 03/05: the stop is set while the first Bash call runs `seconds` more; that
    call ends with its real result, none of the eight later calls runs, the stage
    ends promptly after the call and says it stopped after 1 tool call."""
    cwd = tmp_path / "lane"
    cwd.mkdir()
    os.mkfifo(cwd / "ready")
    _stage_script(
        tmp_path / "moves.jsonl",
        f"echo start > a1.txt; echo go > ready; sleep {seconds}; echo end >> a1.txt",
    )
    halt = anyio.Event()
    got: list[AgentOutcome] = []
    ended_at: list[float] = []

    async def stage() -> None:
        got.append(
            await run_builtin_agent(
                f"scripted:{tmp_path / 'moves.jsonl'}",
                "work",
                cwd=cwd,
                log=tmp_path / "lane.log",
                on_call=lambda _scope: None,
                halt=halt,
            )
        )
        ended_at.append(time.monotonic())

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(stage)
            await _wait_ready(cwd / "ready")
            halt.set()
            halted_at = time.monotonic()
    (outcome,) = got
    assert _ran(cwd) == {1: "start\nend\n"}
    assert outcome.stopped
    assert outcome.calls == 1
    assert outcome.exit_status == STOPPED_EXIT
    assert outcome.note == "stopped at the person's stop after 1 tool call"
    log = (tmp_path / "lane.log").read_text(encoding="utf-8")
    assert log.count("[Bash: succeeded]") == 1
    assert "Call 2." not in log  # no model request after the stop
    assert log.endswith(f"[turn ended: halted]\ntether: {outcome.note}\n")
    assert outcome.log_tail.endswith(f"tether: {outcome.note}\n")
    # The rest of the call, then the turn's end: a generous margin for a loaded machine.
    assert ended_at[0] - halted_at < seconds + 5


@pytest.mark.anyio
@pytest.mark.rule("agent-stop")
async def test_a_stop_before_the_stage_asks_the_model_nothing(tmp_path: Path) -> None:
    """A stop already set when the stage starts: no model request (a script with no
    moves would fail the stage if one were made), no call, stopped after 0 calls."""
    cwd = tmp_path / "lane"
    cwd.mkdir()
    _script(tmp_path / "moves.jsonl", [])
    halt = anyio.Event()
    halt.set()
    with anyio.fail_after(10):
        outcome = await run_builtin_agent(
            f"scripted:{tmp_path / 'moves.jsonl'}",
            "work",
            cwd=cwd,
            log=tmp_path / "lane.log",
            on_call=lambda _scope: None,
            halt=halt,
        )
    assert (outcome.stopped, outcome.calls, outcome.exit_status) == (True, 0, 3)
    assert outcome.note == "stopped at the person's stop after 0 tool calls"
    assert "has 0 moves" not in outcome.log_tail


class _HaltInStep:
    """The stage's scripted model, which sets the halt as step `step` answers."""

    def __init__(self, script: Path, halt: anyio.Event, step: int) -> None:
        self.inner = ScriptedModel.from_file(script)
        self.halt = halt
        self.step = step
        self.asked_after_halt = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @asynccontextmanager
    async def stream(
        self, request: ModelRequest
    ) -> AsyncIterator[AsyncIterator[StreamEvent]]:
        self.asked_after_halt += self.halt.is_set()
        step = len(self.inner.requests) + 1
        async with self.inner.stream(request) as events:

            async def play() -> AsyncIterator[StreamEvent]:
                async for event in events:
                    if isinstance(event, StepDone) and step == self.step:
                        self.halt.set()
                    yield event

            yield play()


@pytest.mark.anyio
@pytest.mark.rule("agent-stop")
@pytest.mark.parametrize("step", [2, 5, LATER + 1])
async def test_a_stop_during_a_model_step_starts_no_call(
    tmp_path: Path, step: int
) -> None:
    """The stop is set while the model answers step `step` asking for a Bash call:
    that call never starts (the transcript says it did not run), no model request
    follows, the calls before it ran to their end."""
    cwd = tmp_path / "lane"
    cwd.mkdir()
    _stage_script(tmp_path / "moves.jsonl", "echo start > a1.txt; echo end >> a1.txt")
    halt = anyio.Event()
    model = _HaltInStep(tmp_path / "moves.jsonl", halt, step)
    with anyio.fail_after(30):
        outcome = await run_builtin_agent(
            model,
            "work",
            cwd=cwd,
            log=tmp_path / "lane.log",
            on_call=lambda _: None,
            halt=halt,
        )
    assert _ran(cwd) == dict.fromkeys(range(1, step), "start\nend\n")
    assert model.asked_after_halt == 0
    assert len(model.inner.requests) == step
    assert (outcome.stopped, outcome.calls) == (True, step - 1)
    log = (tmp_path / "lane.log").read_text(encoding="utf-8")
    assert log.count("[Bash: succeeded]") == step - 1
    assert log.count("[Bash: aborted]") == 1


async def _one_stop(tmp_path: Path, turns: int) -> None:
    cwd = tmp_path / "lane"
    cwd.mkdir()
    os.mkfifo(cwd / "ready")
    # The first call signals and ends at once: the stop lands `turns` scheduler turns
    # later, as the call ends or, with more turns, between the calls that follow.
    _stage_script(
        tmp_path / "moves.jsonl",
        "echo start > a1.txt; echo go > ready; echo end >> a1.txt",
    )
    halt = anyio.Event()
    got: list[AgentOutcome] = []

    async def stage() -> None:
        got.append(
            await run_builtin_agent(
                f"scripted:{tmp_path / 'moves.jsonl'}",
                "work",
                cwd=cwd,
                log=tmp_path / "lane.log",
                on_call=lambda _scope: None,
                halt=halt,
            )
        )

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(stage)
            await _wait_ready(cwd / "ready")
            for _ in range(turns):
                await anyio.lowlevel.checkpoint()
            halt.set()
    (outcome,) = got
    ran = _ran(cwd)
    # Whatever ran, ran to its end; calls ran in order; the count is theirs.
    assert set(ran.values()) == {"start\nend\n"}
    assert sorted(ran) == list(range(1, len(ran) + 1))
    assert outcome.calls == len(ran)
    assert outcome.stopped or len(ran) == LATER + 1


@pytest.mark.rule("agent-stop")
@pytest.mark.parametrize("turns", [0, 10, 100])
def test_a_stop_at_a_calls_end_cuts_nothing_and_counts_the_calls_that_ran(
    tmp_path: Path, turns: int
) -> None:
    """Races on purpose: the stop lands a chosen number of scheduler turns after the
    first call signalled; each call that started ran to its end, and the outcome
    counts exactly the calls that ran."""
    anyio.run(_one_stop, tmp_path, turns)


@pytest.mark.anyio
@pytest.mark.rule("agent-stop")
async def test_a_take_over_continues_the_stopped_stage_s_session(
    tmp_path: Path,
) -> None:
    """A stage stopped with a transcript file is continued on a take-over: the model
    is sent the whole stopped session (the call that ran, the call that did not) and
    the take-over prompt, and goes on from there instead of starting the stage over."""
    cwd = tmp_path / "lane"
    cwd.mkdir()
    transcript = tmp_path / "lane.transcript"
    _stage_script(tmp_path / "moves.jsonl", "echo start > a1.txt; echo end >> a1.txt")
    halt = anyio.Event()
    first = _HaltInStep(tmp_path / "moves.jsonl", halt, 2)
    log = tmp_path / "lane.log"
    with anyio.fail_after(30):
        stopped = await run_builtin_agent(
            first,
            "work",
            cwd=cwd,
            log=log,
            on_call=lambda _: None,
            halt=halt,
            transcript=transcript,
        )
        assert stopped.stopped
        assert stopped.session_id is not None
        model = ScriptedModel(
            [
                Move(
                    text="Carrying on.",
                    tool_calls=(
                        ToolCall(
                            id="r1",
                            name="Bash",
                            arguments=json.dumps({"command": "echo again > r.txt"}),
                        ),
                    ),
                ),
                Move(text="Done."),
            ]
        )
        resumed = await run_builtin_agent(
            model,
            "work",
            cwd=cwd,
            log=log,
            on_call=lambda _: None,
            transcript=transcript,
            resume=stopped.session_id,
        )
    assert (resumed.exit_status, resumed.stopped, resumed.calls) == (0, False, 1)
    assert resumed.session_id == stopped.session_id
    assert (cwd / "r.txt").read_text(encoding="utf-8") == "again\n"
    sent = [m.to_json() for m in model.requests[0].messages]
    assert [(m["role"], m.get("tool_call_id")) for m in sent] == [
        ("user", None),
        ("assistant", None),
        ("tool", "c1"),
        ("assistant", None),
        ("tool", "c2"),
        ("user", None),
    ]
    assert "it did not run (the person stopped the run)" in sent[4]["content"]
    assert sent[5]["content"] == TAKEOVER_PROMPT.format(brief="work")
    assert f"[session {stopped.session_id} continued after a take-over]" in (
        log.read_text(encoding="utf-8")
    )


@pytest.mark.anyio
async def test_a_take_over_of_a_session_the_transcript_lacks_fails_the_stage(
    tmp_path: Path,
) -> None:
    """A session id the transcript file does not hold fails the stage (exit 1) with a
    line saying so; nothing is asked of the model."""
    model = ScriptedModel([])
    outcome = await run_builtin_agent(
        model,
        "work",
        cwd=tmp_path,
        log=tmp_path / "lane.log",
        on_call=lambda _: None,
        transcript=tmp_path / "lane.transcript",
        resume="session_missing",
    )
    assert outcome.exit_status == 1
    assert "tether: the stage cannot be continued: no session session_missing" in (
        outcome.log_tail
    )
    assert model.requests == []


@pytest.mark.anyio
async def test_a_transcript_file_that_cannot_be_used_fails_the_stage(
    tmp_path: Path,
) -> None:
    """A transcript path tether may not use (here a directory) fails the stage (exit
    1) with a line naming it, before the agent starts."""
    outcome = await run_builtin_agent(
        ScriptedModel([]),
        "work",
        cwd=tmp_path,
        log=tmp_path / "lane.log",
        on_call=lambda _: None,
        transcript=tmp_path,
    )
    assert outcome.exit_status == 1
    assert "tether: the agent could not start:" in outcome.log_tail
    assert "is not a regular file" in outcome.log_tail


@pytest.mark.rule("agent-stop")
def test_a_run_halts_at_the_builtin_agents_next_call_and_the_takeover_resumes_it(
    tmp_path: Path,
) -> None:
    """Through `tether run`: a stop while the builtin agent's first Bash call sleeps
    lets that call end, starts none of the eight later calls, halts the run (exit 3)
    within the call's rest and a margin; the take-over continues the agent's session
    instead of starting the stage over, its stage's name of two words included."""
    repo = make_repo(tmp_path)
    _stage_script(
        tmp_path / "moves.jsonl",
        "echo start > a1.txt; touch started; sleep 1.5; echo end >> a1.txt",
    )
    plan = _plan(tmp_path, repo, "moves.jsonl", stage="write tests")
    proc = start("run", str(plan))
    run = run_id_of(proc)
    store = open_default_store()

    def lane_dir_now() -> Path | None:
        lanes = store.lanes(run)
        return Path(lanes[0].worktree) if lanes else None

    wait_until(
        lambda: (lane_dir_now() or tmp_path / "none").joinpath("started").exists(),
        what="the first call running",
    )
    set_stop()
    stopped = time.monotonic()
    assert proc.wait(timeout=60) == 3
    assert time.monotonic() - stopped < 1.5 + 10
    (lane,) = store.lanes(run)
    assert lane.saved_commit is not None
    # The save is renamed aside before its view is made: found by the lane, not the view.
    saved = lossless_save(lane)
    assert saved is not None
    assert _ran(saved) == {1: "start\nend\n"}
    (receipt,) = store.receipts(run)
    assert "stopped at the person's stop after 1 tool call" in receipt.log_tail
    assert lane.session is not None
    assert lane.session.stage == "write tests"
    lift_stop()
    taken = tether("takeover", run)
    assert taken.returncode == 0, taken.stdout + taken.stderr
    new_run = taken.stdout.split()[1]
    (new_lane,) = store.lanes(new_run)
    log = (Path(new_lane.worktree).parent / f"{new_lane.id}.log").read_text(
        encoding="utf-8"
    )
    assert "continued after a take-over]" in log


def test_a_run_says_tether_writable_does_not_reach_its_builtin_stages(
    tmp_path: Path,
) -> None:
    """A setting that cannot be honoured where it is used is said, not dropped."""
    repo = make_repo(tmp_path)
    _script(tmp_path / "moves.jsonl", [{"text": "Done."}])
    plan = _plan(tmp_path, repo, "moves.jsonl")
    result = tether("run", str(plan), env={"TETHER_WRITABLE": str(tmp_path)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "TETHER_WRITABLE is not honoured by builtin stages" in result.stdout


def test_a_transcript_that_is_not_a_regular_file_is_not_carried_over(
    tmp_path: Path,
) -> None:
    """Spec 01 S16: the take-over copies the earlier transcript as data. One replaced
    by a FIFO, a link to `/dev/zero` or a link to another file is not copied (nothing
    blocks, nothing is read through the link): the take-over completes, says why, and
    the stage starts over from its brief. One run of three lanes, a plant in each."""
    plants = {"fifo": "fifo", "zero": "dev-zero", "link": "link"}
    repo = make_repo(tmp_path)
    _stage_script(
        tmp_path / "moves.jsonl",
        "echo start > a1.txt; touch started; sleep 1; echo end >> a1.txt",
    )
    plan = _plan(tmp_path, repo, "moves.jsonl")
    text = plan.read_text(encoding="utf-8").replace(
        "poll = 0.1", "poll = 0.1\nlanes = 3"
    )
    items = "".join(
        f'[[item]]\nid = "{i}"\nbrief = "Write a greeting"\n' for i in plants
    )
    plan.write_text(text.split("[[item]]")[0] + items, encoding="utf-8")
    proc = start("run", str(plan))
    run = run_id_of(proc)
    store = open_default_store()

    def started() -> bool:
        lanes = store.lanes(run)
        return len(lanes) == 3 and all(
            Path(lane.worktree, "started").exists() for lane in lanes
        )

    wait_until(started, what="the first call running in each lane")
    set_stop()
    assert proc.wait(timeout=60) == 3
    for lane in store.lanes(run):
        assert lane.session is not None
        transcript = lane.session.transcript
        assert transcript is not None
        plant = plants[lane.item]
        victim = tmp_path / f"victim-{plant}"
        victim.write_bytes(transcript.read_bytes())
        transcript.unlink()
        if plant == "fifo":
            os.mkfifo(transcript)
        else:
            transcript.symlink_to("/dev/zero" if plant == "dev-zero" else victim)
    lift_stop()
    begun = time.monotonic()
    taken = tether("takeover", run)
    assert taken.returncode == 0, taken.stdout + taken.stderr
    assert time.monotonic() - begun < 60
    assert taken.stdout.count("not carried over (not a regular file") == 3
    new_run = taken.stdout.split()[1]
    new_lanes = store.lanes(new_run)
    assert sorted(lane.item for lane in new_lanes) == sorted(plants)
    for new_lane in new_lanes:
        log = (Path(new_lane.worktree).parent / f"{new_lane.id}.log").read_text(
            encoding="utf-8"
        )
        assert "continued after a take-over]" not in log
