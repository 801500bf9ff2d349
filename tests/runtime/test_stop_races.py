"""Races on purpose: hypothesis picks the tool's stop class, the phase of the call when the
stop lands (before send, in permission, queued, started, finishing) and how many scheduler
turns pass first; the invariants of spec 01 must hold for every choice."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.runtime.support import ALLOW_ALL, TEST_TOOLS

from tether import Runtime, ToolAborted, ToolResult
from tether.host._inprocess import InProcessHost
from tether.runtime import CallChanged, CallState, PermissionRequest, ToolProgress
from tether.testing import event_log

if TYPE_CHECKING:
    from pathlib import Path


pytestmark = pytest.mark.slow


TOOLS: dict[str, dict[str, Any]] = {
    "Stuck": {"seconds": 0.2},
    "Stubborn": {"lines": 1},
    "SlowWrite": {"path": "out.txt", "seconds": 0.05},
    "SlowExtension": {"seconds": 0.05},
    "Echo": {"text": "quick"},
}
PHASES = ["before_send", "in_permission", "queued", "started", "finishing"]
ABORT_BOUND = 0.5


async def _one_race(
    workspace: Path, host: str, tool: str, phase: str, yields: int
) -> None:
    asked = anyio.Event()
    release = anyio.Event()

    async def approver(request: PermissionRequest) -> bool:
        asked.set()
        await release.wait()
        return True

    permissions: dict[str, list[str]] = dict(ALLOW_ALL)
    if phase == "in_permission":
        permissions = {"allow": [], "ask": [t.name for t in TEST_TOOLS]}
    runtime = Runtime(
        workspace=workspace,
        tools=TEST_TOOLS,
        permissions=permissions,
        approver=approver,
        grace=0.2,
        abort_bound=ABORT_BOUND,
        host=host,  # type: ignore[arg-type]
        guard=False,
        max_concurrent=1 if phase == "queued" else 16,
    )
    outcomes: list[ToolResult | ToolAborted] = []
    async with runtime as rt, event_log(rt) as events:
        session = rt.session()
        blocker = rt.session()
        async with anyio.create_task_group() as tg:
            if phase == "queued":
                # Another session's call holds the only admission place.
                async def block() -> None:
                    async with blocker.turn() as bturn:
                        with contextlib.suppress(ToolAborted):
                            await bturn.call("Stuck", {"seconds": 0.3})

                tg.start_soon(block)
                await events.wait_started()
            async with session.turn() as turn:

                async def call() -> None:
                    try:
                        outcomes.append(await turn.call(tool, TOOLS[tool]))
                    except ToolAborted as exc:
                        outcomes.append(exc)

                tg.start_soon(call)
                if phase == "in_permission":
                    with anyio.fail_after(10):
                        await asked.wait()
                elif phase == "queued":
                    await events.wait_for(
                        lambda e: (
                            isinstance(e, CallChanged)
                            and e.tool == tool
                            and e.state is CallState.QUEUED
                        )
                    )
                elif phase in ("started", "finishing") and tool != "Echo":
                    await events.wait_for(
                        lambda e: (
                            isinstance(e, ToolProgress)
                            and e.tool == tool
                            and e.text == "started"
                        )
                    )
                for _ in range(yields):
                    await anyio.lowlevel.checkpoint()
                t0 = time.perf_counter()
                report = await session.abort()
                elapsed = time.perf_counter() - t0
                ledger_now = session.ledger_calls()
                release.set()
            # Invariant: abort returns within its bound.
            assert elapsed < ABORT_BOUND + 0.25, elapsed
            # Invariant: the report is the ledger at that moment.
            assert list(report.calls) == ledger_now
            assert report.settled == all(r.settled for r in ledger_now)
            assert {p.call_id for p in report.pending} == {
                r.call_id for r in ledger_now if not r.settled
            }
            with anyio.fail_after(10):
                await session.settled()
                await blocker.settled()
                if isinstance(rt.host, InProcessHost):
                    await rt.host.core.wait_idle()
        settled_ledger = session.ledger_calls()
    # Invariant: each call has exactly one final state, and it is settled.
    [record] = settled_ledger
    assert record.state.is_final
    assert record.settled
    # Invariant: the caller's outcome agrees with the ledger.
    [outcome] = outcomes
    if isinstance(outcome, ToolAborted):
        assert record.state is CallState.ABORTED
    else:
        assert record.state in (CallState.SUCCEEDED, CallState.FAILED)
    # Invariant: nothing changed after settlement (late results were discarded).
    assert runtime.ledger.calls(session.id) == settled_ledger
    # No hidden side effect: a write the ledger calls aborted never happened (the stdio
    # host lets every call in flight finish before it exits, so this is final).
    if tool == "SlowWrite":
        assert (workspace / "out.txt").exists() == (record.state is CallState.SUCCEEDED)
    # The classes' promises: a mutating call that started is never reported stopped.
    if tool in ("SlowWrite", "SlowExtension") and phase in ("started", "finishing"):
        assert record.state is CallState.SUCCEEDED


def _race(
    tmp_path_factory: pytest.TempPathFactory,
    host: str,
    tool: str,
    phase: str,
    yields: int,
) -> None:
    workspace = tmp_path_factory.mktemp("race")
    anyio.run(_one_race, workspace, host, tool, phase, yields)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    tool=st.sampled_from(sorted(TOOLS)),
    phase=st.sampled_from(PHASES),
    yields=st.integers(min_value=0, max_value=30),
)
def test_stop_invariants_hold_wherever_the_stop_lands_inprocess(
    tmp_path_factory: pytest.TempPathFactory, tool: str, phase: str, yields: int
) -> None:
    """Spec 01 invariants hold for every stop class, phase and interleaving (in-process host)."""
    _race(tmp_path_factory, "inprocess", tool, phase, yields)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    tool=st.sampled_from(sorted(TOOLS)),
    phase=st.sampled_from(PHASES),
    yields=st.integers(min_value=0, max_value=30),
)
def test_stop_invariants_hold_wherever_the_stop_lands_stdio(
    tmp_path_factory: pytest.TempPathFactory, tool: str, phase: str, yields: int
) -> None:
    """Spec 01 invariants hold for every stop class, phase and interleaving (stdio host)."""
    _race(tmp_path_factory, "stdio", tool, phase, yields)


async def _parallel_race(
    workspace: Path, host: str, tools: list[str], yields: int
) -> None:
    runtime = Runtime(
        workspace=workspace,
        tools=TEST_TOOLS,
        permissions=ALLOW_ALL,
        grace=0.2,
        abort_bound=ABORT_BOUND,
        host=host,  # type: ignore[arg-type]
        guard=False,
    )
    outcomes: dict[int, ToolResult | ToolAborted] = {}
    async with runtime as rt:
        session = rt.session()
        async with anyio.create_task_group() as tg, session.turn() as turn:
            for n, name in enumerate(tools):
                args = dict(TOOLS[name])
                if name == "SlowWrite":
                    args["path"] = f"out{n}.txt"

                async def call(
                    n: int = n, name: str = name, args: dict[str, Any] = args
                ) -> None:
                    try:
                        outcomes[n] = await turn.call(name, args, call_id=f"c{n}")
                    except ToolAborted as exc:
                        outcomes[n] = exc

                tg.start_soon(call)
            for _ in range(yields):
                await anyio.lowlevel.checkpoint()
            t0 = time.perf_counter()
            report = await session.abort()
            elapsed = time.perf_counter() - t0
            ledger_now = session.ledger_calls()
        assert elapsed < ABORT_BOUND + 0.25, elapsed
        assert list(report.calls) == ledger_now
        assert {p.call_id for p in report.pending} == {
            r.call_id for r in ledger_now if not r.settled
        }
        with anyio.fail_after(10):
            await session.settled()
            if isinstance(rt.host, InProcessHost):
                await rt.host.core.wait_idle()
        final = {r.call_id: r for r in session.ledger_calls()}
    # Every call asked for has exactly one final, settled record, matching its caller.
    assert sorted(final) == sorted(f"c{n}" for n in outcomes)
    for n, name in enumerate(tools):
        record = final[f"c{n}"]
        assert record.state.is_final
        assert record.settled
        assert isinstance(outcomes[n], ToolAborted) == (
            record.state is CallState.ABORTED
        )
        if name == "SlowWrite":
            written = (workspace / f"out{n}.txt").exists()
            assert written == (record.state is CallState.SUCCEEDED)
    assert runtime.ledger.calls(session.id) == list(final.values())


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    tools=st.lists(st.sampled_from(sorted(TOOLS)), min_size=2, max_size=4),
    yields=st.integers(min_value=0, max_value=40),
)
def test_stop_invariants_hold_for_parallel_calls_in_any_interleaving(
    tmp_path_factory: pytest.TempPathFactory, tools: list[str], yields: int
) -> None:
    """Spec 01 invariants hold when several calls of mixed classes run in one turn and
    the stop lands at any point of their interleaving (in-process host)."""
    workspace = tmp_path_factory.mktemp("parallel")
    anyio.run(_parallel_race, workspace, "inprocess", tools, yields)
