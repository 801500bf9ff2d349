"""An abort that reaches the host after its call ended says so (`finished`): it is not
taken for an early abort, and no tombstone is left behind for a call that already ran."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

from tether import ErrorCode, ToolContext, tool
from tether.host import StopClass
from tether.host._broker import Broker
from tether.host._core import HostCore
from tether.host._inprocess import InProcessHost
from tether.host._protocol import (
    AbortRequest,
    CallKey,
    ExecuteRequest,
    HostEvent,
    ResultEvent,
)
from tether.host._rules import PermissionRules
from tether.testing import Echo

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


@pytest.mark.rule("S7")
async def test_abort_after_the_call_ended_answers_finished(workspace: Path) -> None:
    ended = anyio.Event()
    events: list[HostEvent] = []

    def sink(event: HostEvent) -> None:
        events.append(event)
        if isinstance(event, ResultEvent):
            ended.set()

    rules = PermissionRules.from_lists(allow=["Echo"], ask=[], deny=[])
    core = HostCore([Echo], broker=Broker(workspace=workspace, rules=rules))
    async with InProcessHost.open(core, sink) as host:
        key = CallKey("s1", "c1", "Echo")
        await host.execute(ExecuteRequest(key, {"text": "done"}))
        with anyio.fail_after(5):
            await ended.wait()
        ack = await host.abort(AbortRequest(key, "user", None))
        assert (ack.found, ack.phase) == (False, "finished")
        assert core.statistics().tombstones == 0
        # The same id for another tool never ran: that abort is an early one.
        other = await host.abort(
            AbortRequest(CallKey("s1", "c1", "Fail"), "user", None)
        )
        assert (other.found, other.phase) == (False, "unknown")
        assert core.statistics().tombstones == 1
    [result] = [e for e in events if isinstance(e, ResultEvent)]
    assert (result.output, result.code) == ("done", None)


@pytest.mark.rule("S7")
async def test_s7_tombstone_lives_exactly_its_ttl_on_a_controlled_clock(
    workspace: Path,
) -> None:
    """S7: the early abort blocks its call until its time to live is over, not after."""
    now = [100.0]
    results: dict[CallKey, ResultEvent] = {}
    arrived = anyio.Event()

    def sink(event: HostEvent) -> None:
        if isinstance(event, ResultEvent):
            results[event.key] = event
            arrived.set()

    rules = PermissionRules.from_lists(allow=["Echo"], ask=[], deny=[])
    core = HostCore(
        [Echo],
        broker=Broker(workspace=workspace, rules=rules),
        tombstone_ttl=30.0,
        clock=lambda: now[0],
    )
    async with InProcessHost.open(core, sink) as host:
        early, late = CallKey("s1", "early", "Echo"), CallKey("s1", "late", "Echo")
        await host.abort(AbortRequest(early, "user", None))
        await host.abort(AbortRequest(late, "user", None))
        now[0] += 29.9  # still alive: the call is blocked
        await host.execute(ExecuteRequest(early, {"text": "blocked"}))
        assert results[early].code is ErrorCode.TOOL_ABORTED
        now[0] += 0.1  # the time to live is over: the call runs
        arrived = anyio.Event()
        await host.execute(ExecuteRequest(late, {"text": "after ttl"}))
        with anyio.fail_after(5):
            await arrived.wait()
        assert (results[late].output, results[late].code) == ("after ttl", None)
        assert core.statistics().tombstones == 0


async def test_a_tool_whose_own_check_raises_fails_that_call_only(
    workspace: Path,
) -> None:
    """A plugin's `validate` that raises something other than InvalidInput fails its
    call with TOOL_FAILED; the call gets its one result and the host serves on."""

    @tool(stop_class=StopClass.READ_ONLY)
    async def Picky(ctx: ToolContext) -> str:
        """Never reached."""
        return "ran"

    def broken(raw: object) -> dict[str, object]:
        raise ValueError("the check itself broke")

    Picky.validate = broken  # type: ignore[method-assign]
    results: list[ResultEvent] = []
    got = anyio.Event()

    def sink(event: HostEvent) -> None:
        if isinstance(event, ResultEvent):
            results.append(event)
            got.set()

    rules = PermissionRules.from_lists(allow=["Picky", "Echo"], ask=[], deny=[])
    core = HostCore([Picky, Echo], broker=Broker(workspace=workspace, rules=rules))
    async with InProcessHost.open(core, sink) as host:
        await host.execute(ExecuteRequest(CallKey("s1", "p1", "Picky"), {}))
        assert results[0].code is ErrorCode.TOOL_FAILED
        assert "the check itself broke" in results[0].message
        got = anyio.Event()
        await host.execute(ExecuteRequest(CallKey("s1", "e1", "Echo"), {"text": "on"}))
        with anyio.fail_after(5):
            await got.wait()
        assert results[1].output == "on"
