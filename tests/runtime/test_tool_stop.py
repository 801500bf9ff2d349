"""Spec 01 rules S1-S12, run against the in-process host and the stdio host."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.runtime.support import TEST_TOOLS
from tests.waiting import await_until

from tether import ErrorCode, Runtime, StopClass, ToolAborted, ToolError
from tether.errors import DuplicateCallId
from tether.runtime import (
    CallChanged,
    CallState,
    PendingPhase,
    PermissionRequest,
    ToolProgress,
    TurnSettled,
)
from tether.testing import event_log, stop_once_started

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

MARGIN = 0.25
"""Scheduling slack past a bound on a loaded 2-core machine."""

MakeRuntime = Callable[..., Runtime]


@pytest.mark.rule("S5")
async def test_s5_abort_releases_call_whose_token_never_fires(
    make_runtime: MakeRuntime,
) -> None:
    """S5: a read-only tool that ignores its token and every cancellation is released."""
    async with make_runtime() as rt, event_log(rt) as events:
        session = rt.session()
        stopped = await stop_once_started(session, events, "Stuck", {"seconds": 1.5})
        assert stopped.report.settled
        assert stopped.report.pending == ()
        assert isinstance(stopped.outcome, ToolAborted)
        assert stopped.outcome.code is ErrorCode.TOOL_ABORTED
        [record] = session.ledger_calls()
        assert record.state is CallState.ABORTED
        assert record.code is ErrorCode.TOOL_ABORTED


@pytest.mark.rule("S2")
async def test_s2_losing_the_race_abandons_the_wait_and_tells_the_host(
    make_runtime: MakeRuntime, workspace: Path
) -> None:
    """S2: a stop ends the wait on a hung read-only call and the host cancels its work."""
    marker = workspace / "told"
    async with make_runtime() as rt, event_log(rt) as events:
        session = rt.session()
        stopped = await stop_once_started(session, events, "Hang", {"marker": "told"})
        assert isinstance(stopped.outcome, ToolAborted)
        await await_until(marker.exists, what="the host's cancel handler ran")
        assert marker.read_text(encoding="utf-8") == "cancelled"


@pytest.mark.rule("S3")
async def test_s3_late_result_of_abandoned_call_changes_nothing(
    make_runtime: MakeRuntime,
) -> None:
    """S3: the late result of an abandoned call gives no second result and no ledger change."""
    async with make_runtime() as rt, event_log(rt) as events:
        session = rt.session()
        stopped = await stop_once_started(
            session, events, "Stuck", {"seconds": 0.4, "ticks": 0.02}
        )
        before = session.ledger_calls()
        await await_until(
            lambda: rt.statistics().late_results >= 1, what="the late result"
        )
        assert session.ledger_calls() == before
        # One outcome only (stop_once_started holds exactly one): the abort's.
        assert isinstance(stopped.outcome, ToolAborted)
        events.drain()
        after_settle = events.seen[
            next(i for i, e in enumerate(events.seen) if isinstance(e, TurnSettled)) :
        ]
        assert not [
            e for e in after_settle if isinstance(e, ToolProgress | CallChanged)
        ]


@pytest.mark.rule("S4")
async def test_s4_progress_of_abandoned_call_stops_at_the_stop(
    make_runtime: MakeRuntime,
) -> None:
    """S4: no progress event of an abandoned call is delivered after the stop."""
    async with make_runtime() as rt, event_log(rt) as events:
        session = rt.session()
        async with anyio.create_task_group() as tg, session.turn() as turn:

            async def call() -> None:
                with pytest.raises(ToolAborted):
                    await turn.call("Stuck", {"seconds": 0.5, "ticks": 0.02})

            tg.start_soon(call)
            await events.wait_for(
                lambda e: isinstance(e, ToolProgress) and e.text == "tick"
            )
            await session.abort()
            events.drain()
            count_at_stop = len(events.seen)
        await await_until(
            lambda: rt.statistics().late_results >= 1, what="the late result"
        )
        events.drain()
        late = [e for e in events.seen[count_at_stop:] if isinstance(e, ToolProgress)]
        assert late == []


@pytest.mark.rule("S6")
async def test_s6_abort_returns_within_bound_and_tells_what_still_runs(
    make_runtime: MakeRuntime, workspace: Path
) -> None:
    """S6: abort() returns within its bound; pending calls say why, class first."""
    async with make_runtime(grace=0.3, abort_bound=0.5) as rt, event_log(rt) as events:
        session = rt.session()
        outcomes: dict[str, object] = {}
        async with anyio.create_task_group() as tg, session.turn() as turn:

            async def call(name: str, args: dict[str, Any]) -> None:
                try:
                    outcomes[name] = await turn.call(name, args)
                except ToolError as exc:
                    outcomes[name] = exc

            tg.start_soon(call, "SlowWrite", {"path": "out.txt", "seconds": 1.0})
            tg.start_soon(call, "SlowExtension", {"seconds": 1.0})
            tg.start_soon(call, "Stubborn", {})
            tg.start_soon(call, "Stuck", {"seconds": 1.0})
            await events.wait_started(4)
            t0 = time.perf_counter()
            report = await session.abort()
            elapsed = time.perf_counter() - t0
            assert elapsed < 0.5 + MARGIN
            assert not report.settled
            whys = {p.tool: p.why for p in report.pending}
            assert whys["SlowWrite"].startswith("mutating: started")
            assert whys["SlowExtension"].startswith("extension: started")
            assert whys["Stubborn"].startswith("process: terminating")
            assert "Stuck" not in whys
            # A write being waited for and a tree in its grace window are not workers
            # that ignore the stop: only the READ_ONLY worker stuck in its thread is.
            assert all(line.startswith("Stuck: ") for line in report.outliving)
            # The report is the ledger's view of the turn at that moment.
            assert list(report.calls) == session.ledger_calls()
            assert {r.tool for r in report.calls if not r.settled} == set(whys)
        await events.wait_for(lambda e: isinstance(e, TurnSettled))
        assert (workspace / "out.txt").read_text(encoding="utf-8") == "x"
        states = {r.tool: r.state for r in session.ledger_calls()}
        assert states == {
            "SlowWrite": CallState.SUCCEEDED,
            "SlowExtension": CallState.SUCCEEDED,
            "Stubborn": CallState.ABORTED,
            "Stuck": CallState.ABORTED,
        }
        assert all(r.settled for r in session.ledger_calls())
        assert outcomes["SlowWrite"].output.startswith("wrote")  # type: ignore[attr-defined]


async def test_process_call_ignoring_termination_ends_when_grace_closes(
    make_runtime: MakeRuntime,
) -> None:
    """A PROCESS call that ignores termination ends TOOL_ABORTED when the grace window
    closes, carrying what it streamed before the stop (spec 01 table)."""
    grace = 0.3
    async with make_runtime(grace=grace) as rt, event_log(rt) as events:
        session = rt.session()
        async with anyio.create_task_group() as tg, session.turn() as turn:
            got: list[ToolAborted] = []
            done_at: list[float] = []

            async def call() -> None:
                try:
                    await turn.call("Stubborn", {"lines": 3})
                except ToolAborted as exc:
                    got.append(exc)
                    done_at.append(time.perf_counter())

            tg.start_soon(call)
            await events.wait_for(
                lambda e: isinstance(e, ToolProgress) and e.text == "line 2\n"
            )
            t0 = time.perf_counter()
            report = await session.abort()
            assert report.pending[0].phase is PendingPhase.TERMINATING
        assert got[0].partial_output == "startedline 0\nline 1\nline 2\n"
        assert grace - 0.05 <= done_at[0] - t0 <= grace + 1.0
        await session.settled()
        assert session.ledger_calls()[0].state is CallState.ABORTED


async def test_process_call_that_obeys_returns_its_partial_output(
    make_runtime: MakeRuntime,
) -> None:
    """A PROCESS call that ends on termination within grace carries its full output."""
    async with make_runtime(grace=5.0) as rt, event_log(rt) as events:
        stopped = await stop_once_started(rt.session(), events, "Obedient")
        assert isinstance(stopped.outcome, ToolAborted)
        assert stopped.outcome.partial_output == "line 0\nline 1\nterminated\n"


@pytest.mark.rule("S9")
async def test_s9_call_stopped_in_pending_permission_never_runs(
    make_runtime: MakeRuntime, workspace: Path
) -> None:
    """S9: a stop during a pending prompt withdraws it; the call ends TOOL_ABORTED, never runs."""
    asked = anyio.Event()
    withdrawn = anyio.Event()

    async def approver(request: PermissionRequest) -> bool:
        asked.set()
        try:
            await anyio.sleep_forever()
        finally:
            withdrawn.set()
        return True  # pragma: no cover

    async with make_runtime(
        approver=approver, permissions={"ask": ["SlowWrite"]}
    ) as rt:
        session = rt.session()
        async with anyio.create_task_group() as tg, session.turn() as turn:
            got: list[ToolAborted] = []

            async def call() -> None:
                try:
                    await turn.call("SlowWrite", {"path": "never.txt", "seconds": 0})
                except ToolAborted as exc:
                    got.append(exc)

            tg.start_soon(call)
            with anyio.fail_after(5):
                await asked.wait()
            report = await session.abort()
        assert report.settled
        assert got[0].code is ErrorCode.TOOL_ABORTED
        with anyio.fail_after(5):
            await withdrawn.wait()
        assert not (workspace / "never.txt").exists()
        [record] = session.ledger_calls()
        assert record.code is ErrorCode.TOOL_ABORTED


@pytest.mark.rule("S9")
def test_s9_error_codes_are_one_documented_enum() -> None:
    """S9: the error codes are exactly the spec's list, each with a documented meaning."""
    import tether.errors as errors_module

    assert {c.value for c in ErrorCode} == {
        "TOOL_ABORTED",
        "PERMISSION_DENIED",
        "TOOL_FAILED",
        "TOOL_TIMEOUT",
        "UNKNOWN_TOOL",
        "INVALID_INPUT",
        "DUPLICATE_CALL_ID",
        "GUARD_REFUSED",
    }
    source = Path(errors_module.__file__).read_text(encoding="utf-8")
    for code in ErrorCode:
        assert f'{code.name} = "{code.value}"\n    """' in source


@pytest.mark.rule("S8")
async def test_s8_reused_call_id_is_refused_and_runs_nothing(
    make_runtime: MakeRuntime, workspace: Path
) -> None:
    """S8: a call id used before in the session is refused, in this turn or a later one."""
    async with make_runtime() as rt:
        session = rt.session()
        async with session.turn() as turn:
            await turn.call("Echo", {"text": "a"}, call_id="c1")
            with pytest.raises(DuplicateCallId) as info:
                await turn.call(
                    "SlowWrite", {"path": "dup.txt", "seconds": 0}, call_id="c1"
                )
            assert info.value.code is ErrorCode.DUPLICATE_CALL_ID
        async with session.turn() as turn:
            with pytest.raises(ToolError) as again:
                await turn.call("Echo", {"text": "b"}, call_id="c1")
            assert again.value.code is ErrorCode.DUPLICATE_CALL_ID
        assert [r.call_id for r in session.ledger_calls()] == ["c1"]
        assert not (workspace / "dup.txt").exists()
        other = rt.session()
        async with other.turn() as turn:
            result = await turn.call("Echo", {"text": "c"}, call_id="c1")
        assert result.output == "c"


@pytest.mark.rule("S10")
async def test_s10_nothing_starts_after_a_stop(
    make_runtime: MakeRuntime, workspace: Path
) -> None:
    """S10: after a stop, turn.call starts nothing and ends TOOL_ABORTED at once."""
    async with make_runtime() as rt:
        session = rt.session()
        async with session.turn() as turn:
            await session.abort()
            with pytest.raises(ToolAborted):
                await turn.call("SlowWrite", {"path": "after.txt", "seconds": 0})
        assert not (workspace / "after.txt").exists()
        [record] = session.ledger_calls()
        assert record.state is CallState.ABORTED
        assert record.settled
        assert record.started_at is None  # refused, never sent to the host


@pytest.mark.rule("S12")
async def test_s12_stopping_twice_or_a_settled_turn_is_harmless(
    make_runtime: MakeRuntime,
) -> None:
    """S12: a second stop and a stop of a settled turn return the same kind of report;
    the next turn starts clean with fresh ids."""
    async with make_runtime() as rt, event_log(rt) as events:
        session = rt.session()
        empty = await session.abort()
        assert empty.settled
        assert empty.turn_id is None
        async with anyio.create_task_group() as tg, session.turn() as turn:

            async def call() -> None:
                with pytest.raises(ToolAborted):
                    await turn.call("Stuck", {"seconds": 0.3})

            tg.start_soon(call)
            await events.wait_started()
            first = await session.abort(reason="first")
            second = await session.abort(reason="second")
        third = await session.abort()
        for report in (first, second, third):
            assert report.settled
            assert report.turn_id == turn.id
            assert report.reason == "first"
        async with session.turn() as next_turn:
            result = await next_turn.call("Echo", {"text": "again"})
        assert result.output == "again"
        ids = [r.call_id for r in session.ledger_calls()]
        assert len(ids) == len(set(ids)) == 2


_MINIMAL_INPUT: dict[str, dict[str, object]] = {
    "Hang": {"marker": "m"},
    "SlowWrite": {"path": "p"},
}


@pytest.mark.rule("S1")
@pytest.mark.parametrize("tool", TEST_TOOLS, ids=lambda t: t.name)
async def test_s1_every_tool_is_stoppable(
    make_runtime: MakeRuntime, tool: object
) -> None:
    """S1: for every tool, a stop while its call awaits permission ends it TOOL_ABORTED."""
    name = tool.name  # type: ignore[attr-defined]
    asked = anyio.Event()

    async def approver(request: PermissionRequest) -> bool:
        asked.set()
        await anyio.sleep_forever()
        return True  # pragma: no cover

    async with make_runtime(approver=approver, permissions={"ask": [name]}) as rt:
        session = rt.session()
        async with anyio.create_task_group() as tg, session.turn() as turn:

            async def call() -> None:
                with pytest.raises(ToolAborted):
                    await turn.call(name, _MINIMAL_INPUT.get(name, {}))

            tg.start_soon(call)
            with anyio.fail_after(5):
                await asked.wait()
            report = await session.abort()
        assert report.settled


@pytest.mark.rule("S1")
@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("Stuck", {"seconds": 0.3}, CallState.ABORTED),
        ("Stubborn", {}, CallState.ABORTED),
        ("SlowWrite", {"path": "f", "seconds": 0.3}, CallState.SUCCEEDED),
        ("SlowExtension", {"seconds": 0.3}, CallState.SUCCEEDED),
    ],
)
async def test_s1_every_stop_class_reaches_a_final_state(
    make_runtime: MakeRuntime, name: str, args: dict[str, object], expected: CallState
) -> None:
    """S1: a running call of each stop class reaches the final state its class promises."""
    async with make_runtime() as rt, event_log(rt) as events:
        session = rt.session()
        await stop_once_started(session, events, name, args)
        [record] = session.ledger_calls()
        assert record.state is expected
        assert record.settled
        classes = {t.name: t.stop_class for t in TEST_TOOLS}
        assert record.stop_class == str(classes[name])


async def test_parallel_calls_in_one_turn_are_stopped_together(
    make_runtime: MakeRuntime,
) -> None:
    """Several `turn.call` awaited concurrently are stopped by one abort."""
    async with make_runtime() as rt, event_log(rt) as events:
        session = rt.session()
        aborted = 0
        async with anyio.create_task_group() as tg, session.turn() as turn:

            async def call() -> None:
                nonlocal aborted
                try:
                    await turn.call("Stuck", {"seconds": 0.5})
                except ToolAborted:
                    aborted += 1

            for _ in range(5):
                tg.start_soon(call)
            await events.wait_started(5)
            report = await session.abort()
        assert aborted == 5
        assert report.settled
        assert [r.state for r in session.ledger_calls()] == [CallState.ABORTED] * 5


async def test_unknown_tool_and_invalid_input_are_clear_errors(
    make_runtime: MakeRuntime,
) -> None:
    """Bad input: an unknown tool gives UNKNOWN_TOOL; a bad field gives INVALID_INPUT with its path."""
    async with make_runtime() as rt:
        session = rt.session()
        async with session.turn() as turn:
            unknown = await turn.call("Nope", {})
            bad = await turn.call("Stuck", {"seconds": "soon"})
            extra = await turn.call("Echo", {"text": "x", "what": 1})
        assert unknown.is_error
        assert unknown.code is ErrorCode.UNKNOWN_TOOL
        assert "Nope" in unknown.output
        assert bad.code is ErrorCode.INVALID_INPUT
        assert "seconds" in bad.output
        assert extra.code is ErrorCode.INVALID_INPUT
        assert "what" in extra.output
        assert [r.state for r in session.ledger_calls()] == [CallState.FAILED] * 3


async def test_tool_failure_is_an_error_result(make_runtime: MakeRuntime) -> None:
    """A tool that raises ToolFailed gives an error result with TOOL_FAILED."""
    async with make_runtime() as rt:
        session = rt.session()
        async with session.turn() as turn:
            result = await turn.call("Fail", {"message": "disk on fire"})
        assert result.is_error
        assert result.code is ErrorCode.TOOL_FAILED
        assert result.output == "disk on fire"


async def test_ask_without_approver_is_denied(
    make_runtime: MakeRuntime, workspace: Path
) -> None:
    """With no approver, a call that needs permission is PERMISSION_DENIED and never runs."""
    async with make_runtime(permissions=None) as rt:
        session = rt.session()
        async with session.turn() as turn:
            result = await turn.call("SlowWrite", {"path": "nope.txt", "seconds": 0})
            read = await turn.call("Echo", {"text": "read-only runs by default"})
        assert result.code is ErrorCode.PERMISSION_DENIED
        assert not (workspace / "nope.txt").exists()
        assert read.output == "read-only runs by default"


def test_stop_classes_are_the_four_of_the_spec() -> None:
    """The stop classes are READ_ONLY, PROCESS, MUTATING, EXTENSION, lower-case on the wire."""
    assert [c.value for c in StopClass] == [
        "read_only",
        "process",
        "mutating",
        "extension",
    ]


async def test_approved_call_runs_and_moves_through_its_states(
    make_runtime: MakeRuntime, workspace: Path
) -> None:
    """A call the approver allows runs; the ledger saw it pending, then running."""
    seen: list[PermissionRequest] = []

    async def approver(request: PermissionRequest) -> bool:
        seen.append(request)
        return True

    async with make_runtime(
        approver=approver, permissions={"ask": ["SlowWrite"]}
    ) as rt:
        session = rt.session()
        async with event_log(rt) as events:
            async with session.turn() as turn:
                result = await turn.call("SlowWrite", {"path": "ok.txt", "seconds": 0})
            events.drain()
        states = [e.state for e in events.seen if isinstance(e, CallChanged)]
    assert result.output.startswith("wrote")
    assert seen[0].tool == "SlowWrite"
    assert seen[0].stop_class is StopClass.MUTATING
    assert states == [
        CallState.PENDING_PERMISSION,
        CallState.RUNNING,
        CallState.SUCCEEDED,
    ]
    assert (workspace / "ok.txt").exists()
