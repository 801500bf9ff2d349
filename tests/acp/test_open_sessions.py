"""`OpenSessions`: a delete waits for a load or resume of the same session that is
opening it (then finds it open, to close it), and an opening waits for a delete under
way (then finds the session gone)."""

from __future__ import annotations

import anyio
import pytest

from tether.acp._registry import OpenSessions

pytestmark = pytest.mark.anyio


async def test_a_delete_waits_for_an_opening_then_sees_its_owner() -> None:
    """The session is opening (its runtime is starting, nothing owns it yet): a
    delete begun now waits until the opening ends, and then finds the owner it
    noted."""
    open_sessions: OpenSessions[str] = OpenSessions()
    seen: list[object] = []

    async def delete() -> None:
        async with open_sessions.deleting("s1"):
            seen.append(open_sessions.owners("s1"))

    async with anyio.create_task_group() as tg, open_sessions.opening("s1"):
        tg.start_soon(delete)
        await anyio.wait_all_tasks_blocked()
        assert seen == []  # the delete waits
        open_sessions.opened("s1", "connection A")
    assert seen == [["connection A"]]


async def test_an_opening_waits_for_a_delete_under_way() -> None:
    """A load begun while a delete of the session runs opens only once the delete
    is done; another session's opening does not wait."""
    open_sessions: OpenSessions[str] = OpenSessions()
    order: list[str] = []
    release = anyio.Event()

    async def delete() -> None:
        async with open_sessions.deleting("s1"):
            await release.wait()
            order.append("deleted")

    async def load(session_id: str) -> None:
        async with open_sessions.opening(session_id):
            order.append(f"opening {session_id}")

    async with anyio.create_task_group() as tg:
        tg.start_soon(delete)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(load, "s1")
        tg.start_soon(load, "s2")
        await anyio.wait_all_tasks_blocked()
        assert order == ["opening s2"]
        release.set()
    assert order == ["opening s2", "deleted", "opening s1"]
