"""The grace window belongs to the whole tree (spec 01 PROCESS, S4, S13, S13b).

Through the runtime, on both hosts: a command that handles SIGTERM gets its whole window
in each shape people type (a shell in front of it ending ends nothing) and its handler's
output reaches the result; a trap that outlives the window has its lines up to the kill
in the result and the ledger; a kill that left git's lock files says so, with the
command that removes them.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import anyio
import pytest

from tether import ToolAborted
from tether.host.tools.bash import Bash
from tether.runtime import ToolProgress
from tether.testing import event_log, runtime_for

if TYPE_CHECKING:
    from pathlib import Path

    from tether import Runtime, Session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

HANDLER = 0.6
"""Seconds the TERM handler takes to clean up."""
GRACE = 5.0
MARGIN = 1.5
"""Upper slack for a loaded 2-core machine."""

TRAP = (
    "#!/bin/bash\n"
    "trap 'echo got TERM; sleep {handler}; echo cleaned; exit 0' TERM\n"
    "echo building\n"
    "has_reader() {{ for f in /proc/[0-9]*/fd/0; do "
    '[ "$(readlink "$f" 2>/dev/null)" = "$1" ] && return 0; done; return 1; }}\n'
    "# Behind a pipe: ready once the reader's stdin is the pipe (a stop before that\n"
    "# would find no reader to spare).\n"
    'if [ "$1" = pipe ]; then out=$(readlink /proc/$$/fd/1); '
    'until has_reader "$out"; do sleep 0.01; done; fi\n'
    "sleep 30 &\n"
    ": > ready\n"
    "wait\n"
)
"""A command that cleans up for `handler` seconds after SIGTERM, printing as it goes;
the file `ready` says its trap is set."""

SHAPES = {
    "alone": "./job",
    "semicolon": "./job; echo done",
    "and": "./job && echo ok",
    "pipe": "./job pipe 2>&1 | tail -n 20",
    "subshell": "(./job)",
    "bash-c-script": "bash -c ./job",
    "sh-c": "sh -c './job; echo sh-done'",
}


def _job(workspace: Path, handler: float) -> None:
    job = workspace / "job"
    job.write_text(TRAP.format(handler=handler), encoding="utf-8")
    job.chmod(0o755)


def _bash_runtime(workspace: Path, host_kind: str, grace: float) -> Runtime:
    return runtime_for(
        workspace, [Bash()], grace=grace, abort_bound=0.5, guard=False, host=host_kind
    )


async def _stop_when(
    session: Session, rt: Runtime, command: str, ready: Path
) -> tuple[ToolAborted, float, str]:
    """Run `command`, stop once `ready` exists; (outcome, settle seconds, progress)."""
    got: list[ToolAborted] = []
    async with event_log(rt) as events:
        async with anyio.create_task_group() as tg, session.turn() as turn:

            async def call() -> None:
                try:
                    await turn.call("Bash", {"command": command})
                except ToolAborted as exc:
                    got.append(exc)

            tg.start_soon(call)
            with anyio.fail_after(10):
                while not await anyio.Path(ready).exists():  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            t0 = time.perf_counter()
            await session.abort()
        with anyio.fail_after(10):
            await session.settled()
        took = time.perf_counter() - t0
        events.drain()
        progress = "".join(e.text for e in events.seen if isinstance(e, ToolProgress))
    [outcome] = got
    return outcome, took, progress


@pytest.mark.rule("S13")
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
async def test_s13_every_shape_gets_its_whole_window_and_its_handler_output(
    shape: str, host_kind: str, workspace: Path
) -> None:
    """A TERM handler behind a shell (`;`, `&&`, `|`, `( )`, `bash -c`, `sh -c`) runs
    to its end: the call settles after the handler's time, not when the shell dies,
    and the handler's lines are in the result and the ledger."""
    _job(workspace, HANDLER)
    ready = workspace / "ready"
    async with _bash_runtime(workspace, host_kind, GRACE) as rt:
        session = rt.session()
        outcome, took, progress = await _stop_when(session, rt, shape, ready)
        [record] = session.ledger_calls()
    for seen in (outcome.partial_output, record.output or "", progress):
        assert "got TERM" in seen
        assert "cleaned" in seen
    assert HANDLER - 0.05 <= took <= HANDLER + MARGIN


@pytest.mark.rule("S13")
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_under_the_fallback_every_shape_gets_its_whole_window(
    host_kind: str, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same under the subreaper fallback, each shape a turn of one session: the
    handler's lines in the result, the ledger and the live view, the call settled
    after the handler's time; the tree ran in this process's own PID namespace."""
    monkeypatch.setenv("TETHER_CONTAINMENT", "subreaper")
    handler = 0.3
    _job(workspace, handler)
    ready = workspace / "ready"
    ours = os.readlink("/proc/self/ns/pid")
    async with _bash_runtime(workspace, host_kind, GRACE) as rt:
        session = rt.session()
        for shape in SHAPES.values():
            ready.unlink(missing_ok=True)
            command = f"readlink /proc/self/ns/pid; {shape}"
            outcome, took, progress = await _stop_when(session, rt, command, ready)
            record = session.ledger_calls()[-1]
            for seen in (outcome.partial_output, record.output or "", progress):
                assert seen.startswith(f"{ours}\nbuilding\n"), (shape, seen)
                assert "got TERM" in seen, (shape, seen)
                assert "cleaned" in seen, (shape, seen)
            assert handler - 0.05 <= took <= handler + MARGIN, (shape, took)


@pytest.mark.rule("S13")
@pytest.mark.rule("S13b")
async def test_a_trap_outliving_the_window_has_its_lines_up_to_the_kill(
    host_kind: str, workspace: Path
) -> None:
    """The window closes while the TERM trap still prints: the model's result, the
    ledger and the live view carry the trap's lines up to the kill, not only what came
    before the stop."""
    job = workspace / "job"
    job.write_text(
        "#!/bin/bash\n"
        "trap 'echo got TERM; for i in $(seq 1 300); do echo cleaning $i; "
        "sleep 0.05; done' TERM\n"
        "echo building\nsleep 30 &\n: > ready\nwait\n",
        encoding="utf-8",
    )
    job.chmod(0o755)
    grace = 0.6
    async with _bash_runtime(workspace, host_kind, grace) as rt:
        session = rt.session()
        outcome, took, progress = await _stop_when(
            session, rt, "./job && echo ok", workspace / "ready"
        )
        [record] = session.ledger_calls()
    for seen in (outcome.partial_output, record.output or "", progress):
        assert "building\ngot TERM\ncleaning 1\ncleaning 2\n" in seen
    assert grace <= took <= grace + MARGIN


@pytest.mark.rule("S13")
async def test_a_kill_that_left_git_locks_says_so_in_the_result(
    host_kind: str, workspace: Path
) -> None:
    """Where the kill had to land, the result and the ledger name the `index.lock` the
    killed command left in the workspace's repository, with the command that removes
    it; the lock is not removed."""
    (workspace / ".git").mkdir()
    command = "trap '' TERM; : > .git/index.lock; : > ready; sleep 30"
    async with _bash_runtime(workspace, host_kind, 0.3) as rt:
        session = rt.session()
        outcome, _, _ = await _stop_when(session, rt, command, workspace / "ready")
        [record] = session.ledger_calls()
    lock = workspace / ".git" / "index.lock"
    for seen in (outcome.partial_output, record.output or ""):
        assert f"remove them with: rm -f {lock}]" in seen
    assert lock.exists()
