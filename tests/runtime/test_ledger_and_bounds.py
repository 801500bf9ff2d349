"""The ledger (memory and SQLite), the abort bound against a frozen host, and starvation."""

from __future__ import annotations

import os
import signal
import stat
import time
from typing import TYPE_CHECKING

import anyio
import pytest
from tests.runtime.support import ALLOW_ALL, TEST_TOOLS

from tether import Runtime, StopClass, ToolAborted
from tether.errors import StoreError
from tether.host._stdio import StdioHostClient
from tether.runtime import CallState
from tether.runtime._ledger import read_ledger_file
from tether.testing import event_log

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

MARGIN = 0.25
"""Scheduling slack past a bound on a loaded 2-core machine."""


async def test_sqlite_ledger_is_owner_only_wal_and_agrees_with_memory(
    host_kind: str, workspace: Path, tmp_path: Path
) -> None:
    """The SQLite ledger is a 0600 WAL file whose rows equal the in-memory ledger."""
    path = tmp_path / "state" / "ledger.sqlite"
    async with (
        Runtime(
            workspace=workspace,
            tools=TEST_TOOLS,
            permissions=ALLOW_ALL,
            grace=0.3,
            ledger=path,
            host=host_kind,  # type: ignore[arg-type]
            guard=False,
        ) as rt,
        event_log(rt) as events,
    ):
        session = rt.session()
        async with anyio.create_task_group() as tg, session.turn() as turn:
            await turn.call("Echo", {"text": "one"})

            async def stuck() -> None:
                with pytest.raises(ToolAborted):
                    await turn.call("Stuck", {"seconds": 0.3})

            tg.start_soon(stuck)
            await events.wait_started()
            report = await session.abort(reason="test")
        memory = session.ledger_calls()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_ledger_file(path) == memory
    assert [r.state for r in memory] == [CallState.SUCCEEDED, CallState.ABORTED]
    assert memory[1].abort_source == "user"
    assert memory[1].abort_reason == "test"
    assert list(report.calls) == memory


def test_sqlite_ledger_refuses_a_file_others_can_write(tmp_path: Path) -> None:
    """Bad input: a ledger file writable by others is refused with a clear error."""
    from tether.runtime._ledger import Ledger

    path = tmp_path / "ledger.sqlite"
    path.touch()
    os.chmod(path, 0o666)
    with pytest.raises(StoreError, match="chmod go-w"):
        Ledger(path)


async def test_abort_returns_within_bound_when_the_host_is_frozen(
    workspace: Path,
) -> None:
    """S6: with the stdio host stopped dead (SIGSTOP), abort() still returns within its
    bound; read-only calls end at once and the others say the stop is unconfirmed."""
    async with (
        Runtime(
            workspace=workspace,
            tools=TEST_TOOLS,
            permissions=ALLOW_ALL,
            grace=0.3,
            abort_bound=0.4,
            host="stdio",
            guard=False,
        ) as rt,
        event_log(rt) as events,
    ):
        assert isinstance(rt.host, StdioHostClient)
        pid = rt.host.process.pid
        session = rt.session()
        async with anyio.create_task_group() as tg, session.turn() as turn:

            async def stuck() -> None:
                with pytest.raises(ToolAborted):
                    await turn.call("Stuck", {"seconds": 0.2})

            async def write() -> None:
                await turn.call("SlowWrite", {"path": "w.txt", "seconds": 0.2})

            tg.start_soon(stuck)
            tg.start_soon(write)
            await events.wait_started(2)
            os.kill(pid, signal.SIGSTOP)
            try:
                t0 = time.perf_counter()
                report = await session.abort()
                elapsed = time.perf_counter() - t0
            finally:
                os.kill(pid, signal.SIGCONT)
            assert elapsed < 0.4 + MARGIN
            assert not report.settled
            [pending] = report.pending
            assert pending.tool == "SlowWrite"
            assert pending.stop_class is StopClass.MUTATING
        with anyio.fail_after(10):
            await session.settled()
        states = {r.tool: r.state for r in session.ledger_calls()}
        assert states == {"Stuck": CallState.ABORTED, "SlowWrite": CallState.SUCCEEDED}


async def test_stopped_read_only_calls_never_starve_new_ones(workspace: Path) -> None:
    """After 100 read-only calls were stopped while their workers were blocked, a new
    call still starts at once (their admission places were given back at the stop)."""
    async with (
        Runtime(
            workspace=workspace,
            tools=TEST_TOOLS,
            permissions=ALLOW_ALL,
            max_concurrent=4,
            guard=False,
        ) as rt,
        event_log(rt) as events,
    ):
        session = rt.session()
        for _ in range(25):
            async with anyio.create_task_group() as tg, session.turn() as turn:
                for _ in range(4):

                    async def stuck() -> None:
                        with pytest.raises(ToolAborted):
                            await turn.call("Stuck", {"seconds": 1.0})

                    tg.start_soon(stuck)
                await events.wait_started(4)
                events.seen.clear()
                await session.abort()
        async with session.turn() as turn:
            result = await turn.call("Echo", {"text": "still here"})
            # Ordering, not time: the last four stopped calls still hold their workers
            # for a second, and the new call did not wait for one of them to end.
            assert rt.statistics().late_results <= 96
        assert result.output == "still here"
        aborted = [r for r in session.ledger_calls() if r.state is CallState.ABORTED]
        assert len(aborted) == 100


async def test_abort_looks_only_at_turns_still_settling(workspace: Path) -> None:
    """After many settled turns, abort() walks only the unsettled ones, so its cost does
    not grow with the session's history (a regression: it once read every turn)."""
    async with Runtime(
        workspace=workspace, tools=TEST_TOOLS, permissions=ALLOW_ALL, guard=False
    ) as rt:
        session = rt.session()
        for _ in range(200):
            async with session.turn() as turn:
                await turn.call("Echo", {"text": "x"})
            await session.abort()
        assert session.unsettled_turns() == []
        async with session.turn() as turn:
            assert [t.id for t in session.unsettled_turns()] == [turn.id]
            report = await session.abort()
        assert report.settled
        assert report.calls == ()
        assert len(session.ledger_calls()) == 200
