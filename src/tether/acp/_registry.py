"""The ACP sessions open in this process, on every connection, and those being deleted.

A session belongs to the connection that opened it, but `session/delete` names it on
any connection of the account: the delete stops it on every connection of this process
that has it open (as `session/close` would there), then removes it from the ledger. A
`session/load` or `session/resume` of a session being deleted waits for the delete, and
then finds it gone; a delete of a session being loaded or resumed (its runtime starting,
no connection owning it yet) waits until it is open, and then closes it.

Sessions open in another process are not here: the ledger knows them (its
`session_writers`) and `delete_session` refuses them.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Generic, TypeVar, final

import anyio

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ("OpenSessions",)

Owner = TypeVar("Owner")


@final
class OpenSessions(Generic[Owner]):
    """Which owners (connections) have each session open, and which are being deleted."""

    def __init__(self) -> None:
        self._owners: dict[str, list[Owner]] = {}
        self._deleting: dict[str, anyio.Event] = {}
        self._opening: dict[str, list[anyio.Event]] = {}
        """Per session, one event per load or resume opening it, set when it ends."""

    def opened(self, session_id: str, owner: Owner) -> None:
        """Note that `owner` has the session open."""
        owners = self._owners.setdefault(session_id, [])
        if owner not in owners:
            owners.append(owner)

    def closed(self, session_id: str, owner: Owner) -> None:
        """Note that `owner` no longer has the session open."""
        owners = self._owners.get(session_id, [])
        if owner in owners:
            owners.remove(owner)
        if not owners:
            self._owners.pop(session_id, None)

    def owners(self, session_id: str) -> list[Owner]:
        """The owners that have the session open, in the order they opened it."""
        return list(self._owners.get(session_id, ()))

    @contextlib.asynccontextmanager
    async def deleting(self, session_id: str) -> AsyncIterator[None]:
        """Hold the session as being deleted (after any delete of it under way)."""
        await self.wait_deleted(session_id)
        # Invariant: no await between the wait and this mark, nor in `opening()`: an
        # opening begun after the mark waits for this delete, one begun before is
        # waited for here.
        done = self._deleting[session_id] = anyio.Event()
        try:
            for opening in list(self._opening.get(session_id, ())):
                await opening.wait()
            yield
        finally:
            del self._deleting[session_id]
            done.set()

    @contextlib.asynccontextmanager
    async def opening(self, session_id: str) -> AsyncIterator[None]:
        """Hold the session as being opened (after any delete of it under way).

        A delete begun meanwhile waits until the block ends; the block notes the
        owner (`opened()`) before it ends if the session opened.
        """
        await self.wait_deleted(session_id)
        done = anyio.Event()
        self._opening.setdefault(session_id, []).append(done)
        try:
            yield
        finally:
            openings = self._opening[session_id]
            openings.remove(done)
            if not openings:
                del self._opening[session_id]
            done.set()

    async def wait_deleted(self, session_id: str) -> None:
        """Wait until no delete of the session is under way."""
        while (busy := self._deleting.get(session_id)) is not None:
            await busy.wait()
