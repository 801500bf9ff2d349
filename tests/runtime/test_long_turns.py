"""A long turn keeps nothing of its finished calls but their ledger rows, and those rows
hold only plain values: thousands of calls add nothing the cycle collector has to walk
again and again (a full pass would otherwise cost more as a session goes on)."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

import pytest

from tether import Runtime
from tether.host._calls import HostCall
from tether.runtime._executor import ActiveCall
from tether.testing import Echo

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CALLS = 300


def _alive(kind: type) -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is kind)


async def test_a_long_turn_keeps_no_finished_call(workspace: Path) -> None:
    async with Runtime(workspace=workspace, tools=[Echo]) as rt:
        session = rt.session()
        async with session.turn() as turn:
            for n in range(CALLS):
                result = await turn.call("Echo", {"text": f"n{n}"})
                assert result.output == f"n{n}"
            assert turn.calls == {}
            # Nothing of a sent call is kept by the turn: only refused ids are.
            assert turn.refused == set()
            assert _alive(ActiveCall) == 0
            assert _alive(HostCall) == 0
        assert len(session.ledger_calls()) == CALLS


async def test_ledger_rows_hold_plain_values_only(workspace: Path) -> None:
    async with Runtime(workspace=workspace, tools=[Echo]) as rt:
        session = rt.session()
        async with session.turn() as turn:
            for n in range(20):
                await turn.call("Echo", {"text": f"n{n}"})
        gc.collect()
        tracked = [
            o
            for o in gc.get_objects()
            if type(o) is dict and o.get("turn_id") == turn.id and "state" in o
        ]
        # A dict of strings, numbers and None is untracked by the collector's passes.
        assert tracked == []
        rows = list(rt.ledger._rows[session.id].values())
        assert len(rows) == 20
        assert not any(gc.is_tracked(row) for row in rows)
        records = session.ledger_calls()
        assert [r.state.value for r in records] == ["succeeded"] * 20
        assert all(r.code is None and r.settled for r in records)
