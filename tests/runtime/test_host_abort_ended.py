"""An abort that reaches the host after its call ended says so (`finished`): it is not
taken for an early abort, and no tombstone is left behind for a call that already ran."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

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
