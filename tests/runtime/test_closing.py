"""Leaving `async with Runtime` while calls still run: a started write is waited for on
both hosts; closing says what it waits for; nothing stays RUNNING and no caller hangs."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from tests.cli._run import TETHER
from tests.runtime.support import HeldWrite

from tether import Runtime, ToolAborted
from tether.runtime import CallState
from tether.testing import event_log

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

GRACE = 0.3
BOUND = 0.2
SHUTDOWN = GRACE + 2 * BOUND
"""How long closing waits for calls to settle before it acts."""


class _Said(logging.Handler):
    """Sets `event` when the runtime logs a line starting with `prefix`."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix
        self.event = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(self.prefix):
            self.event.set()


async def test_closing_waits_for_a_started_write_on_both_hosts_and_says_so(
    make_runtime: Callable[..., Runtime], host_kind: str, workspace: Path
) -> None:
    """Leaving the runtime while a write ran past the shutdown
    bound killed the stdio host and cut the write half done (END_UNKNOWN). On both
    hosts the started write is waited for: closing says so, the file is whole, and the
    ledger row and the caller's answer are its real result."""
    rt = make_runtime(tools=[HeldWrite], grace=GRACE, abort_bound=BOUND)
    said = _Said("tether: closing waits for")
    logger = logging.getLogger("tether.runtime")
    logger.addHandler(said)
    outcome: list[Any] = []
    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg, rt, event_log(rt) as events:
                session = rt.session()
                async with session.turn() as turn:

                    async def call() -> None:
                        outcome.append(
                            await turn.call(
                                "HeldWrite", {"path": "w.txt", "release": "go"}
                            )
                        )

                    tg.start_soon(call)
                    await events.wait_started()

                async def release() -> None:
                    # Only once closing has given up on the bound and said that it
                    # waits: the write runs past the shutdown bound for certain.
                    await said.event.wait()
                    (workspace / "go").touch()

                tg.start_soon(release)
    finally:
        logger.removeHandler(said)
    assert (workspace / "w.txt").read_text() == "first half, second half"
    assert outcome[0].output == "wrote both halves"
    (record,) = rt.sessions[0].ledger_calls()
    assert record.state is CallState.SUCCEEDED
    assert record.settled
    (line,) = [p for p in rt.problems if p.startswith("closing waits for")]
    assert f"HeldWrite call {record.call_id} (running, since " in line
    assert not [p for p in rt.problems if p.startswith("closed before")]


async def test_closing_names_a_stopped_tool_that_ignores_cancellation(
    make_runtime: Callable[..., Runtime], host_kind: str
) -> None:
    """Closing while a stopped tool's task still runs (it ignores cancellation) says,
    after the abort bound, which tool and call it waits for, on both hosts the call
    settles at once, and nothing hangs."""
    rt = make_runtime(grace=GRACE, abort_bound=BOUND)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg, rt, event_log(rt) as events:
            session = rt.session()
            async with session.turn() as turn:

                async def call() -> None:
                    with pytest.raises(ToolAborted):
                        await turn.call("Stuck", {"seconds": SHUTDOWN + 1.0})

                tg.start_soon(call)
                await events.wait_started()
    (record,) = rt.sessions[0].ledger_calls()
    assert record.state is CallState.ABORTED
    if host_kind == "inprocess":
        (said,) = [p for p in rt.problems if "ignore cancellation" in p]
        assert f"Stuck call {record.call_id} (stopped, still running, since " in said


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_stdio_host_whose_runtime_is_gone_finishes_a_started_write(
    workspace: Path,
) -> None:
    """A started write is never cut, even when the runtime went away without closing
    (its end of stdin closed): after the drain bound the host says that it waits for the
    write, lets it end with its real result, then exits."""
    argv = [
        *(*TETHER, "host", "--stdio", "--no-guard"),
        *("--workspace", str(workspace), "--eof-drain", "0.05"),
        *("--tool", "tests.runtime.support:HeldWrite"),
        *("--rules", json.dumps({"allow": ["HeldWrite"]})),
    ]
    execute = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools.execute",
        "params": {
            "session_id": "s",
            "call_id": "c1",
            "tool": "HeldWrite",
            "input": {"path": "w.txt", "release": "go"},
        },
    }
    with anyio.fail_after(10):
        async with await anyio.open_process(argv) as host:
            assert host.stdin is not None
            assert host.stdout is not None
            assert host.stderr is not None
            out = BufferedByteReceiveStream(host.stdout)
            err = BufferedByteReceiveStream(host.stderr)
            await host.stdin.send(json.dumps(execute).encode() + b"\n")
            while True:
                frame = json.loads(await out.receive_until(b"\n", 1 << 20))
                if frame.get("params", {}).get("text") == "started":
                    break
            await host.stdin.aclose()  # the runtime is gone
            said = (await err.receive_until(b"\n", 1 << 16)).decode()
            assert said == (
                "tether host: input closed; waiting for HeldWrite call c1"
                " (a started write is never cut)"
            )
            (workspace / "go").touch()
            while True:
                frame = json.loads(await out.receive_until(b"\n", 1 << 20))
                if frame.get("method") == "tools.result":
                    break
            assert await host.wait() == 0
    assert frame["params"]["output"] == "wrote both halves"
    assert frame["params"]["error"] is None
    assert (workspace / "w.txt").read_text() == "first half, second half"
