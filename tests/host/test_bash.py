"""The Bash tool driven directly, as the host drives a PROCESS tool (spec 01, S13)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import anyio
import attrs
import psutil
import pytest

from tether._config import Config
from tether.errors import ErrorCode, InvalidInput, ToolFailed
from tether.host._tool import StopClass, Tool, ToolContext
from tether.host.tools.bash import Bash, tools
from tether.testing import (
    TREES,
    Tree,
    alive,
    announce,
    event_log,
    runtime_for,
    stop_once_started,
    tree_pids,
    tree_procs,
)
from tether.testing._trees import flood

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

GRACE = 0.3
MARGIN = 2.0
"""Generous upper margin for a loaded 2-core machine."""


@pytest.fixture(params=["namespace", "subreaper"], autouse=True)
def containment(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The S13 suite runs under both containments."""
    kind = str(request.param)
    monkeypatch.setenv("TETHER_CONTAINMENT", kind)
    return kind


@attrs.define
class Driven:
    """What happened to one call driven with a stop."""

    result: str | None = None
    error: ToolFailed | None = None
    cancelled: bool = False
    procs: list[psutil.Process] = attrs.Factory(list)
    output: str = ""
    settle: float = 0.0


def _ctx(workspace: Path, chunks: list[str], on_chunk: Any = None) -> ToolContext:
    def progress(text: str) -> None:
        chunks.append(text)
        if on_chunk is not None:
            on_chunk()

    return ToolContext(
        call_id="call-1", session_id="s-1", workspace=workspace, on_progress=progress
    )


async def _call(tool: Tool, workspace: Path, args: Mapping[str, Any]) -> str:
    chunks: list[str] = []
    with anyio.fail_after(10):
        return await tool.run(_ctx(workspace, chunks), tool.validate(args))


async def _drive_stop(
    tool: Tool,
    workspace: Path,
    args: Mapping[str, Any],
    *,
    pids: int,
    grace: float,
    min_output: int = 0,
) -> Driven:
    """Run a call until its tree announced `pids` pids, stop it, cancel after `grace`.

    With `min_output`, the stop also waits until that many characters were streamed.
    """
    chunks: list[str] = []
    up = anyio.Event()
    seen = [0]
    head: list[str] = []

    def on_chunk() -> None:
        # Trees announce their pids first: the first 64 KiB hold every announcement.
        if seen[0] < 65536:
            head.append(chunks[-1])
        seen[0] += len(chunks[-1])
        if seen[0] >= min_output and len(tree_pids("".join(head))) >= pids:
            up.set()

    ctx = _ctx(workspace, chunks, on_chunk)
    driven = Driven()
    done = anyio.Event()
    scope = anyio.CancelScope()

    async def call() -> None:
        with scope:
            try:
                driven.result = await tool.run(ctx, tool.validate(args))
            except ToolFailed as exc:
                driven.error = exc
        driven.cancelled = scope.cancelled_caught
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(10):
            await up.wait()
        driven.procs = tree_procs("".join(head))
        started = anyio.current_time()
        ctx.cancelled.set()
        with anyio.move_on_after(grace):
            await done.wait()
        # The host cancels the tool's task when the grace window closes.
        scope.cancel()
        with anyio.fail_after(10):
            await done.wait()
        driven.settle = anyio.current_time() - started
    driven.output = "".join(chunks)
    return driven


@pytest.mark.rule("S13")
@pytest.mark.anyio
@pytest.mark.parametrize("tree", TREES, ids=[t.name for t in TREES])
async def test_s13_stop_reclaims_every_process_of_an_adversarial_tree(
    tree: Tree, workspace: Path
) -> None:
    """S13: after a stop, no process of the tree is alive when the call has finished."""
    driven = await _drive_stop(
        Bash(), workspace, {"command": tree.command}, pids=tree.pids, grace=GRACE
    )
    assert len(driven.procs) == tree.pids
    assert alive(driven.procs) == []
    # A tree whose main command obeys SIGTERM returns within the window; one that
    # ignores it is cancelled when the window closes.
    assert driven.cancelled is not tree.obeys_term


@pytest.mark.rule("S13")
@pytest.mark.anyio
async def test_s13_processes_left_running_are_killed_when_the_command_exits(
    workspace: Path,
) -> None:
    """S13 (tether choice): background, setsid, nohup and double-forked processes die with the call."""
    say = announce()
    bg = f"sh -c '{say}; exec sleep 300'"
    # The command waits on a fifo until the test has found its processes.
    os.mkfifo(workspace / "go")
    command = (
        f"setsid {bg} & nohup {bg} & ( {bg} & ) ; ( trap '' TERM; {bg} ) & "
        "read line < go; echo finished"
    )
    chunks: list[str] = []
    procs: list[psutil.Process] = []
    up = anyio.Event()

    def on_chunk() -> None:
        if len(tree_pids("".join(chunks))) >= 4:
            up.set()

    async def release() -> None:
        with anyio.fail_after(10):
            await up.wait()
        procs.extend(tree_procs("".join(chunks)))
        async with await anyio.open_file(workspace / "go", "w") as go:
            await go.write("go\n")

    async with anyio.create_task_group() as tg:
        tg.start_soon(release)
        with anyio.fail_after(20):
            output = await Bash().run(
                _ctx(workspace, chunks, on_chunk), {"command": command}
            )
    assert len(procs) == 4
    assert "finished" in output
    assert alive(procs) == []


@pytest.mark.rule("S13")
@pytest.mark.anyio
async def test_s13_a_command_obeying_sigterm_returns_what_its_term_trap_printed(
    workspace: Path,
) -> None:
    """S13: a stopped command that obeys SIGTERM returns its partial output, trap text included."""
    command = (
        "trap 'echo caught-term; exit 3' TERM; echo before-stop; "
        f"{announce()}; sleep 300 & wait"
    )
    driven = await _drive_stop(
        Bash(), workspace, {"command": command}, pids=1, grace=5.0
    )
    assert not driven.cancelled
    assert driven.result is not None
    assert "before-stop" in driven.result
    assert "caught-term" in driven.result
    assert driven.result.endswith("[exit code 3]")
    assert alive(driven.procs) == []


@pytest.mark.rule("S13")
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.parametrize(
    "obeys_term", [True, False], ids=["obeys-term", "ignores-term"]
)
async def test_s13_a_stop_while_output_floods_settles_within_the_window(
    obeys_term: bool, workspace: Path
) -> None:
    """S13: a command flooding output still settles within the grace window (plus margin)."""
    driven = await _drive_stop(
        Bash(),
        workspace,
        {"command": flood(obeys_term=obeys_term)},
        pids=1,
        grace=GRACE,
        min_output=900_000,
    )
    assert alive(driven.procs) == []
    assert driven.cancelled is not obeys_term
    assert driven.settle < GRACE + MARGIN
    assert "flood-flood" in driven.output
    if obeys_term:
        assert driven.result is not None
        assert driven.result.endswith("[killed by signal SIGTERM]")


@pytest.mark.anyio
async def test_bash_timeout_kills_the_tree_and_fails_with_tool_timeout(
    workspace: Path,
) -> None:
    """A command past its timeout is killed with its tree and fails with TOOL_TIMEOUT."""
    say = announce()
    command = f"setsid sh -c '{say}; exec sleep 300' & {say}; exec sleep 300"
    chunks: list[str] = []
    procs: list[psutil.Process] = []

    def on_chunk() -> None:
        if len(tree_pids("".join(chunks))) == 2 and not procs:
            procs.extend(tree_procs("".join(chunks)))

    with pytest.raises(ToolFailed) as caught:
        with anyio.fail_after(10):
            await Bash().run(
                _ctx(workspace, chunks, on_chunk), {"command": command, "timeout": 1.0}
            )
    assert caught.value.code is ErrorCode.TOOL_TIMEOUT
    assert "timed out after 1 s" in caught.value.message
    assert len(procs) == 2
    assert alive(procs) == []


@pytest.mark.anyio
async def test_bash_output_keeps_head_and_tail_with_a_dropped_bytes_marker(
    workspace: Path,
) -> None:
    """Output over the limit keeps its head and tail and says how many bytes were dropped."""
    command = "printf START; head -c 100000 /dev/zero | tr '\\0' a; printf END"
    output = await _call(Bash(output_limit=1000), workspace, {"command": command})
    assert output.startswith("START")
    assert output.endswith("END")
    assert "\n[... 99008 bytes of output dropped ...]\n" in output
    assert len(output) < 1100


@pytest.mark.anyio
async def test_bash_streams_output_as_progress(workspace: Path) -> None:
    """Every byte of output is streamed as progress, in order."""
    chunks: list[str] = []
    ctx = _ctx(workspace, chunks)
    with anyio.fail_after(10):
        output = await Bash().run(ctx, {"command": "seq 1 2000; echo done >&2"})
    assert "".join(chunks) == output
    assert output.endswith("2000\ndone\n")


@pytest.mark.anyio
async def test_bash_runs_in_the_workspace_with_tether_agent_set(
    workspace: Path,
) -> None:
    """The command runs in the workspace, with TETHER_AGENT=1 and stdin from /dev/null."""
    command = 'echo "agent=$TETHER_AGENT"; pwd; cat; echo stdin-was-empty'
    output = await _call(Bash(), workspace, {"command": command})
    assert output == f"agent=1\n{workspace}\nstdin-was-empty\n"


@pytest.mark.anyio
async def test_bash_nonzero_exit_is_a_result_with_an_exit_code_line(
    workspace: Path,
) -> None:
    """A nonzero exit is a normal result whose last line names the exit code."""
    output = await _call(Bash(), workspace, {"command": "echo out; exit 7"})
    assert output == "out\n[exit code 7]"
    assert await _call(Bash(), workspace, {"command": "true"}) == "(no output)"


@pytest.mark.anyio
async def test_bash_that_cannot_start_fails_with_the_reason(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command that cannot start fails with TOOL_FAILED and says why."""
    with pytest.raises(ToolFailed) as caught:
        await _call(Bash(), workspace / "missing", {"command": "true"})
    assert caught.value.code is ErrorCode.TOOL_FAILED
    assert "not a directory" in caught.value.message
    monkeypatch.setenv("PATH", str(workspace))
    with pytest.raises(ToolFailed) as caught:
        await _call(Bash(), workspace, {"command": "true"})
    assert "command not found: bash" in caught.value.message


def test_bash_validation_names_the_bad_field() -> None:
    """Bad input is refused with the field's path; a timeout above the maximum too."""
    bash = Bash(max_timeout=60)
    assert bash.validate({"command": "ls"}) == {
        "command": "ls",
        "timeout": None,
        "description": None,
    }
    for raw, path in [
        ({}, "command"),
        ({"command": "ls", "timeout": 0}, "timeout"),
        ({"command": "ls", "timeout": 61}, "timeout"),
        ({"command": "ls", "extra": 1}, "extra"),
    ]:
        with pytest.raises(InvalidInput) as caught:
            bash.validate(raw)
        assert caught.value.path == path


def test_tools_gives_a_process_tool_matched_on_its_command() -> None:
    """`tools(config)` returns Bash as a PROCESS tool whose permission subject is the command."""
    (bash,) = tools(Config())
    assert bash.name == "Bash"
    assert bash.stop_class is StopClass.PROCESS
    assert bash.subject({"command": "git status"}) == "git status"
    assert "command" in bash.input_schema()["properties"]
    assert os.environ.get("TETHER_AGENT") is None


async def _run_turn_and_abort(
    workspace: Path, tree: Tree, host: str
) -> tuple[list[psutil.Process], str, list[int]]:
    """Run `tree` through the runtime, abort once it is up; pids alive at settled()."""
    from tether import ToolAborted

    runtime = runtime_for(
        workspace, [Bash()], grace=GRACE, abort_bound=1.0, guard=False, host=host
    )
    async with runtime, event_log(runtime) as events:
        stopped = await stop_once_started(
            runtime.session(),
            events,
            "Bash",
            {"command": tree.command},
            processes=tree.pids,
        )
        # S13: settled never coexists with a live process of the turn.
        left = alive(stopped.procs)
    assert isinstance(stopped.outcome, ToolAborted)
    return list(stopped.procs), stopped.outcome.partial_output, left


@pytest.mark.rule("S13")
@pytest.mark.anyio
@pytest.mark.parametrize(
    "tree",
    [t for t in TREES if t.name in ("trap-term", "double-fork-setsid-trap", "setsid")],
    ids=lambda t: t.name,
)
@pytest.mark.parametrize("host", ["inprocess", "stdio"])
async def test_s13_session_settles_only_once_every_process_is_reaped(
    tree: Tree, host: str, workspace: Path
) -> None:
    """S13 end to end: after abort() and settled(), no pid of the Bash tree is alive.

    The stop guard of spec 02 is switched off: it is not what this test is about.
    """
    procs, partial, alive_at_settled = await _run_turn_and_abort(workspace, tree, host)
    assert len(procs) == tree.pids
    assert alive_at_settled == []
    assert "tree-pid" in partial
