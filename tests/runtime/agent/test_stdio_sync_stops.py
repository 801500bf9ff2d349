"""A blocking tool stopped mid-call: the next model request says what happened.

On the stdio host the tool's "running" may reach the runtime after the stop (the tool
holds the host's loop); the model is still told the call ran, never "did not run".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from tests.runtime.agent.conftest import call
from tests.runtime.agent.test_stops import WHILE_RUNNING, next_request_results
from tests.runtime.sync_tools import SYNC_TOOLS
from tests.runtime.test_stdio_sync_record import tool_input, wait_for_file

from tether.models import Move

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ALLOW = {"allow": [t.name for t in SYNC_TOOLS]}


@pytest.mark.parametrize(
    ("host", "name", "told"),
    [
        ("inprocess", "ThreadLookup", WHILE_RUNNING + " It printed nothing."),
        ("stdio", "ThreadLookup", WHILE_RUNNING + " It printed nothing."),
        ("stdio", "LoopLookup", WHILE_RUNNING + " It printed nothing."),
        ("inprocess", "ThreadWrite", "wrote out.txt"),
        ("stdio", "ThreadWrite", "wrote out.txt"),
        ("stdio", "LoopWrite", "wrote out.txt"),
    ],
)
async def test_the_next_request_carries_what_a_stopped_blocking_call_did(
    harness: Callable[..., Any], workspace: Path, host: str, name: str, told: str
) -> None:
    """A read stopped while its code ran is "stopped while running"; a write is its
    real result."""
    moves = [
        Move(tool_calls=(call(name, "m1", **tool_input(name)),)),
        Move(text="ok"),
    ]
    async with harness(moves, tools=SYNC_TOOLS, permissions=ALLOW, host=host) as h:
        assert h.tg is not None

        async def stop_then_release() -> None:
            await wait_for_file(workspace / "mark")
            h.abort_soon()
            await h.report()
            (workspace / "release").write_text("go", encoding="utf-8")

        h.tg.start_soon(stop_then_release)
        ended = await h.session.prompt("look it up")
        assert ended.stop_reason == "cancelled"
        results = await next_request_results(h)
        [record] = h.runtime.ledger.calls(h.session.id)
    assert results == [{"role": "tool", "content": told, "tool_call_id": "m1"}]
    assert record.started_at is not None
