"""Abandoned work never starves tether's own tools: 100 stopped calls whose workers
ignore the stop leave every built-in tool running in its normal time, on both hosts;
the workers that outlive their calls are counted and named."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
import pytest
from tests.runtime.misbehaving import Blocker
from tests.threads import default_threads_held

from tether import Runtime, ToolAborted
from tether.host.tools import default_tools
from tether.testing import event_log, runtime_for

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

BUILTINS = {"Read", "Write", "Edit", "Glob", "Grep", "Bash", "GenerateImages"}


def _count(line: str) -> int:
    """The number of calls a line such as 'Blocker: 40 stopped calls ...' counts."""
    return int(line.split()[1])


async def test_stopped_workers_do_not_starve_the_built_in_tools(
    make_runtime: Callable[..., Runtime], host_kind: str, workspace: Path
) -> None:
    """Regression: after 100 stopped calls blocked in `to_thread.run_sync`, Read, Write
    and Grep never started (they shared anyio's 40 default threads), nor did Bash and
    GenerateImages (a path check and the containment probe in that pool), and on trio
    Grep and Bash waited in it to start their process too. Built-in tools have threads
    of their own and start processes without any; the outliving workers are reported
    by tool."""
    tools = [Blocker, *(t for t in default_tools() if t.name in BUILTINS)]
    rt = make_runtime(
        tools=tools,
        permissions={"allow": ["Blocker", *BUILTINS]},
        max_concurrent=16,
    )
    (workspace / "a.txt").write_text("needle\n", encoding="utf-8")
    async with rt, event_log(rt) as events:
        try:
            session = rt.session()
            for batch in range(10):
                async with anyio.create_task_group() as tg, session.turn() as turn:
                    for _ in range(10):

                        async def call(turn: object = turn) -> None:
                            with pytest.raises(ToolAborted):
                                await turn.call(  # type: ignore[attr-defined]
                                    "Blocker", {"release": "release.flag"}
                                )

                        tg.start_soon(call)
                    await events.wait_started(10 * (batch + 1))
                    report = await session.abort()
                    assert report.settled
            if host_kind == "inprocess":
                (line,) = [p for p in rt.problems if p.startswith("Blocker:")]
                assert "still running in a worker that ignores the stop" in line
                (said,) = report.outliving
                assert said.startswith("Blocker:")
                # Every worker holds a place of the default limiter. The report may
                # also count a call whose stop still lands while it waits for a place.
                held = anyio.to_thread.current_default_thread_limiter().borrowed_tokens
                assert held == 40
                assert held <= _count(line) <= _count(said)
            async with session.turn() as turn:
                calls: list[tuple[str, dict[str, object]]] = [
                    ("Read", {"file_path": "a.txt"}),
                    ("Write", {"file_path": "b.txt", "content": "new\n"}),
                    (
                        "Edit",
                        {"file_path": "b.txt", "old_string": "new", "new_string": "x"},
                    ),
                    ("Glob", {"pattern": "*.txt"}),
                    ("Grep", {"pattern": "needle"}),
                    ("Bash", {"command": "echo ok"}),
                    ("GenerateImages", {"prompt": "a knot", "count": 1}),
                ]
                for name, args in calls:
                    with anyio.move_on_after(5) as late:
                        result = await turn.call(name, args)
                    if late.cancelled_caught:
                        pytest.fail(f"{name} did not finish within 5 s")
                    assert not result.is_error, (name, result.output)

        finally:
            # The workers end only now; closing waits for them in process.
            (workspace / "release.flag").touch()
    assert (workspace / "b.txt").read_text() == "x\n"


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_the_stdio_host_starts_while_the_default_threads_are_held(
    workspace: Path,
) -> None:
    """Regression: on trio, opening a runtime with the stdio host waited for a place
    in trio's default thread limiter (the containment probe, then the host process's
    start), which the application's own blocked threads can hold."""
    bash = [t for t in default_tools() if t.name == "Bash"]
    async with default_threads_held():
        rt = runtime_for(workspace, bash, host="stdio", guard=False)
        with anyio.fail_after(30):
            async with rt, rt.session().turn() as turn:
                result = await turn.call("Bash", {"command": "echo ok"})
    assert not result.is_error, result.output
    assert "ok" in result.output
