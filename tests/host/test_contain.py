"""Containment (S13): which one is in force, and the escapes each holds or documents."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import anyio
import psutil
import pytest

from tether.errors import ErrorCode, ToolFailed, UsageError
from tether.host import ToolContext, containment
from tether.host._sweep import marked_pids
from tether.host.tools.bash import Bash
from tether.testing import (
    alive,
    announce,
    event_log,
    runtime_for,
    tree_pids,
    tree_procs,
)
from tether.testing._trees import ESCAPE_TREES, make_gate, open_gate

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow


GRACE = 0.3


@pytest.fixture(params=["namespace", "subreaper"])
def kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test under each containment."""
    chosen = str(request.param)
    monkeypatch.setenv("TETHER_CONTAINMENT", chosen)
    return chosen


def _ctx(workspace: Path, chunks: list[str], up: anyio.Event, pids: int) -> ToolContext:
    def progress(text: str) -> None:
        chunks.append(text)
        if len(tree_pids("".join(chunks))) >= pids:
            up.set()

    return ToolContext(
        call_id="c", session_id="s", workspace=workspace, on_progress=progress
    )


def test_containment_says_which_is_in_force_and_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """This kernel allows namespaces; the variable forces the fallback; a bad value is refused."""
    monkeypatch.delenv("TETHER_CONTAINMENT", raising=False)
    found = containment()
    assert found.kind == "namespace"
    assert found.walls_the_stop
    assert "PID namespace" in found.reason
    monkeypatch.setenv("TETHER_CONTAINMENT", "subreaper")
    fallback = containment()
    assert fallback.kind == "subreaper"
    assert not fallback.walls_the_stop
    assert "TETHER_CONTAINMENT=subreaper" in fallback.reason
    monkeypatch.setenv("TETHER_CONTAINMENT", "namespace")
    assert containment().kind == "namespace"
    monkeypatch.setenv("TETHER_CONTAINMENT", "chroot")
    with pytest.raises(UsageError, match="not a containment; use one of auto"):
        containment()


def _in_user_namespace_without_namespaces(code: str, **env: str) -> str:
    """Run `code` as root of a user namespace whose kernel limit allows no more of them."""
    script = (
        "echo 0 > /proc/sys/user/max_user_namespaces && "
        f"exec {sys.executable} -c {_sh_quote(code)}"
    )
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **env},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_where_the_kernel_refuses_namespaces_the_fallback_says_why() -> None:
    """With namespaces refused, `auto` falls back and says why; `namespace` is refused."""
    shown = _in_user_namespace_without_namespaces(
        "from tether.host import containment; c = containment(); print(c.kind, '|', c.reason)"
    )
    kind, _, reason = shown.partition(" | ")
    assert kind == "subreaper"
    assert "the kernel refuses namespaces here" in reason
    assert "No space left on device" in reason  # the kernel's own word for the limit
    refused = _in_user_namespace_without_namespaces(
        "from tether.host import containment\n"
        "try:\n    containment()\nexcept Exception as exc:\n    print(exc)",
        TETHER_CONTAINMENT="namespace",
    )
    assert refused.startswith("TETHER_CONTAINMENT=namespace, but the kernel refuses")


async def _stop_and_settle(
    ctx: ToolContext, call: Any, done: anyio.Event, scope: anyio.CancelScope
) -> None:
    ctx.cancelled.set()
    with anyio.move_on_after(GRACE):
        await done.wait()
    scope.cancel()
    with anyio.fail_after(10):
        await done.wait()


@pytest.mark.rule("S13")
@pytest.mark.anyio
async def test_s13_a_command_killing_its_supervisor_after_env_i_setsid(
    kind: str, workspace: Path
) -> None:
    """S13: under the namespace, `kill -9 $PPID` cannot end the supervisor and every
    process is reclaimed by the stop; under the fallback the call fails (never a quiet
    success) and only the process that cleared its environment escapes (its limit)."""
    (tree,) = ESCAPE_TREES
    gate = make_gate(workspace)
    chunks: list[str] = []
    up = anyio.Event()
    ctx = _ctx(workspace, chunks, up, tree.pids)
    outcome: dict[str, Any] = {}
    scope = anyio.CancelScope()
    done = anyio.Event()

    async def call() -> None:
        with scope:
            try:
                outcome["result"] = await Bash().run(ctx, {"command": tree.command})
            except ToolFailed as exc:
                outcome["error"] = exc
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(10):
            await up.wait()
        procs = tree_procs("".join(chunks))
        await open_gate(gate)
        if kind == "namespace":
            # The kill was ignored: the tree runs on until it is stopped.
            with anyio.move_on_after(0.5):
                await done.wait()
            assert not done.is_set()
            await _stop_and_settle(ctx, call, done, scope)
            assert alive(procs) == []
            return
        with anyio.fail_after(10):
            await done.wait()
    error = outcome.get("error")
    assert isinstance(error, ToolFailed)
    assert error.code is ErrorCode.TOOL_FAILED
    assert "supervisor was killed" in error.message
    assert "may have escaped (subreaper containment)" in error.message
    escaped = alive(procs)
    try:
        assert len(escaped) == 1  # the `env -i setsid` one, which no marker finds
        assert "TETHER_TREE" not in psutil.Process(escaped[0]).environ()
    finally:
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):  # one reaped meanwhile
                proc.kill()


async def _stop_during_start(workspace: Path, command: str, grace: float) -> None:
    """Stop a Bash call as it starts; cancel it when `grace` has passed."""
    ctx = ToolContext(call_id="c", session_id="s", workspace=workspace)
    scope = anyio.CancelScope()
    done = anyio.Event()

    async def call() -> None:
        with scope:
            await Bash().run(ctx, {"command": command})
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        ctx.cancelled.set()
        await anyio.sleep(grace)  # the grace window itself, not a wait for a state
        scope.cancel()
        with anyio.fail_after(10):
            await done.wait()


@pytest.mark.rule("S13")
@pytest.mark.anyio
@pytest.mark.parametrize("grace", [0.001, 0.01, 0.05])
async def test_s13_a_stop_while_the_supervisor_starts_leaves_nothing(
    kind: str, grace: float, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S13: a stop, then the grace window closing, during the tree's start leaves no
    process behind, every time."""
    mark = os.urandom(8).hex()
    monkeypatch.setenv("CONTAIN_TEST_MARK", mark)
    command = "setsid sleep 300 & ( trap '' TERM; sleep 300 ) & trap '' TERM; sleep 300"
    for _ in range(5):
        await _stop_during_start(workspace, command, grace)
        assert marked_pids(mark, name="CONTAIN_TEST_MARK") == []


@pytest.mark.rule("S13")
@pytest.mark.anyio
async def test_s13_a_killed_stdio_host_leaves_no_env_i_child(
    kind: str, workspace: Path
) -> None:
    """S13: the stdio host SIGKILLed while Bash runs `env -i` children: after
    `settled()` none is alive, under either containment."""
    from tether.host._stdio import StdioHostClient

    inner = "trap '' TERM HUP; " + announce() + "; exec sleep 300"
    child = f"env -i setsid sh -c {_sh_quote(inner)}"
    say = announce()
    command = f"for i in 1 2 3 4 5; do {child} & done; {say}; exec sleep 300"
    rt = runtime_for(workspace, [Bash()], host="stdio", guard=False, grace=GRACE)
    async with rt, event_log(rt) as events:
        assert isinstance(rt.host, StdioHostClient)
        session = rt.session()
        async with anyio.create_task_group() as tg, session.turn() as turn:

            async def call(n: int) -> None:
                await turn.call("Bash", {"command": command}, call_id=f"b{n}")

            for n in range(3):
                tg.start_soon(call, n)
            procs = await events.wait_announced(18, timeout=20)
            os.kill(rt.host.process.pid, signal.SIGKILL)
        with anyio.fail_after(20):
            await session.settled()
        left = alive(procs)
        for pid in left:
            psutil.Process(pid).kill()
    assert len(procs) == 18
    assert left == []


@pytest.mark.anyio
async def test_every_tree_runs_in_the_containment_in_force(
    kind: str, workspace: Path
) -> None:
    """Under the namespace a tree has its own PID namespace (the command is pid 2 in it,
    sees only its own processes); under the fallback it shares the host's."""
    command = "echo $$; ls /proc | grep -c '^[0-9]'; readlink /proc/self/ns/pid"
    chunks: list[str] = []
    ctx = ToolContext(
        call_id="c", session_id="s", workspace=workspace, on_progress=chunks.append
    )
    with anyio.fail_after(10):
        output = await Bash().run(ctx, {"command": command})
    pid, count, ns = output.split()
    mine = os.readlink("/proc/self/ns/pid")
    if kind == "namespace":
        assert pid == "2"
        assert int(count) <= 5  # the supervisor, bash, ls, grep, readlink's shell
        assert ns != mine
    else:
        assert ns == mine
        assert int(count) > 5


@pytest.mark.rule("S13")
@pytest.mark.anyio
async def test_s13_an_abandoned_read_only_call_ends_only_once_its_processes_are_reaped(
    kind: str, workspace: Path
) -> None:
    """S13: a READ_ONLY tool that starts a program through `ctx.run_process` (one that
    ignores SIGTERM, with a setsid child) and is abandoned as the host abandons such a
    call (flag set, task cancelled) returns only once every process is reaped."""
    from tests.host.contain_tools import slow_listing

    chunks: list[str] = []
    up = anyio.Event()
    ctx = _ctx(workspace, chunks, up, 2)
    scope = anyio.CancelScope()
    done = anyio.Event()
    at_end: list[int] = []

    async def call() -> None:
        with scope:
            await slow_listing.run(ctx, {})
        at_end.append(ctx.processes_running)
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(10):
            await up.wait()
        procs = tree_procs("".join(chunks))
        assert ctx.processes_running == 1
        ctx.cancelled.set()
        scope.cancel()
        with anyio.fail_after(10):
            await done.wait()
        left = alive(procs)
    assert len(procs) == 2
    assert left == []
    assert at_end == [0]


@pytest.mark.anyio
async def test_run_process_returns_output_and_code_and_refuses_what_cannot_start(
    workspace: Path,
) -> None:
    """`ctx.run_process` gives the output and exit code; a missing program fails the call."""
    ctx = ToolContext(call_id="c", session_id="s", workspace=workspace)
    with anyio.fail_after(10):
        done = await ctx.run_process(["sh", "-c", 'echo "agent=$TETHER_AGENT"; exit 3'])
    assert done.output == "agent=1\n"
    assert done.returncode == 3
    assert not done.stopped
    assert done.containment is not None
    with pytest.raises(ToolFailed, match="no-such-program could not start"):
        await ctx.run_process(["no-such-program"])


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_the_runtime_refuses_an_unsatisfiable_containment_and_names_the_fallback() -> (
    None
):
    """Where the kernel refuses namespaces, `Runtime(...)` with
    `TETHER_CONTAINMENT=namespace` is refused with one line; with `auto` the runtime
    starts and `problems` says the fallback is in force and why."""
    refused = _in_user_namespace_without_namespaces(
        "from tether import Runtime\n"
        "try:\n    Runtime(workspace='.', tools=[], guard=False)\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)",
        TETHER_CONTAINMENT="namespace",
    )
    assert refused.startswith(
        "UsageError TETHER_CONTAINMENT=namespace, but the kernel refuses"
    )
    assert "\n" not in refused
    problems = _in_user_namespace_without_namespaces(
        "import anyio\n"
        "from tether import Runtime\n"
        "async def main():\n"
        "    async with Runtime(workspace='.', tools=[], guard=False) as rt:\n"
        "        print(rt.containment.kind); print(*rt.problems, sep='\\n')\n"
        "anyio.run(main)"
    )
    kind, *lines = problems.splitlines()
    assert kind == "subreaper"
    [line] = [p for p in lines if "containment" in p]
    assert line.startswith("process trees get the fallback containment (subreaper): ")
    assert "the kernel refuses namespaces here" in line


@pytest.mark.anyio
async def test_the_runtime_refuses_a_bad_containment_at_start_and_shows_the_one_in_force(
    monkeypatch: pytest.MonkeyPatch, workspace: Path
) -> None:
    """A `TETHER_CONTAINMENT` that names no containment is refused by `Runtime(...)`, not
    by each Bash call later; the namespace adds no problem, the forced fallback does."""
    from tether import Runtime

    monkeypatch.setenv("TETHER_CONTAINMENT", "chroot")
    with pytest.raises(
        UsageError, match=r"TETHER_CONTAINMENT='chroot' is not a contain"
    ):
        Runtime(workspace=workspace, tools=[Bash()], guard=False)
    monkeypatch.setenv("TETHER_CONTAINMENT", "auto")
    async with Runtime(workspace=workspace, tools=[], guard=False) as rt:
        assert rt.containment is not None
        assert rt.containment.kind == "namespace"
        assert not [p for p in rt.problems if "containment" in p]
    monkeypatch.setenv("TETHER_CONTAINMENT", "subreaper")
    async with Runtime(workspace=workspace, tools=[], guard=False) as rt:
        assert rt.problems == [
            "process trees get the fallback containment (subreaper): "
            "TETHER_CONTAINMENT=subreaper asks for the fallback"
        ]


@pytest.mark.parametrize(
    ("chosen", "kind", "style"),
    [
        ("auto", "namespace", "ok"),
        ("subreaper", "subreaper", "warn"),
        ("x", "refused", "fail"),
    ],
)
def test_the_setup_board_shows_the_containment_in_force(
    monkeypatch: pytest.MonkeyPatch, chosen: str, kind: str, style: str
) -> None:
    """`tether setup` shows which containment process trees get, and why (or why the
    one asked for is refused), in its lines and its JSON."""
    from tether.cli._stopview import board_json, board_lines
    from tether.cli.setup import with_containment
    from tether.stop import SetupRecord, build_board

    monkeypatch.setenv("TETHER_CONTAINMENT", chosen)
    board = with_containment(
        build_board(SetupRecord(folder=None, person_uid=os.geteuid()))
    )
    lines = board_lines(board)
    at = lines.index(("head", "containment of process trees"))
    shown_style, text = lines[at + 1]
    assert shown_style == style
    assert text.startswith(f"  {kind}: ")
    shown = board_json(board)["containment"]
    assert isinstance(shown, dict)
    assert shown["kind"] == kind
    assert text == f"  {kind}: {shown['reason']}"
