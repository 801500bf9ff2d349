"""Harnesses for testing tools against stops.

A runtime with small bounds, its events waited on, and a call stopped once it started.

Everything here waits on what the runtime announces (its event stream), with a bound:
a test never sleeps to let things settle.
"""

from __future__ import annotations

import uuid
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, final

import anyio
import attrs
import psutil

from ..errors import ToolAborted
from ._trees import tree_pids, tree_procs

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence
    from pathlib import Path

    from anyio.streams.memory import MemoryObjectReceiveStream

    from ..host import Tool
    from ..runtime import (
        AbortReport,
        CallRecord,
        Runtime,
        RuntimeEvent,
        Session,
        ToolResult,
    )

# `tether.runtime` is imported where it is used: the stdio host imports this package
# for its test tools, and the runtime (with the model clients) would double its start.

__all__ = ("EventLog", "StoppedCall", "event_log", "runtime_for", "stop_once_started")

WAIT = 10.0
"""Seconds a wait of this module allows by default: long for a loaded machine, short
against a test run's time limit."""


def runtime_for(
    workspace: Path | str,
    tools: Sequence[Tool],
    *,
    grace: float = 0.3,
    abort_bound: float = 0.5,
    **options: Any,
) -> Runtime:
    """A `Runtime` for tests: `tools` only, each allowed, small stop bounds.

    `grace` and `abort_bound` are small so a test of a stop takes a fraction of a
    second; `options` go to `Runtime` as they are (`host="stdio"`, `guard=False`, ...).
    """
    from ..runtime import Runtime

    options.setdefault("permissions", {"allow": [t.name for t in tools]})
    return Runtime(
        workspace=workspace,
        tools=list(tools),
        grace=grace,
        abort_bound=abort_bound,
        **options,
    )


@final
class EventLog:
    """The events of a runtime (`Runtime.subscribe()`) in order, with bounded waits.

    `seen` holds every event received so far; a wait first looks there, then receives
    more until one matches.
    """

    def __init__(self, stream: MemoryObjectReceiveStream[RuntimeEvent]) -> None:
        self._stream = stream
        self.seen: list[RuntimeEvent] = []

    async def wait_for(
        self, predicate: Callable[[RuntimeEvent], bool], *, timeout: float = WAIT
    ) -> RuntimeEvent:
        """Return the first event, received or to come, that `predicate` accepts.

        Raises:
            TimeoutError: none came within `timeout` seconds.
            LookupError: the runtime closed first.
        """
        for event in self.seen:
            if predicate(event):
                return event
        with anyio.fail_after(timeout):
            async for event in self._stream:
                self.seen.append(event)
                if predicate(event):
                    return event
        raise LookupError("the runtime closed before the event came")

    async def wait_started(self, count: int = 1, *, timeout: float = WAIT) -> None:
        """Wait until `count` calls have reported `started` as progress.

        Every tool of `tether.testing` reports `started` first, once its work began.
        """
        await self.wait_for(
            lambda _event: self._count_started() >= count, timeout=timeout
        )

    def _count_started(self) -> int:
        from ..runtime import ToolProgress

        return sum(
            1 for e in self.seen if isinstance(e, ToolProgress) and e.text == "started"
        )

    async def wait_announced(
        self, count: int, *, call_id: str | None = None, timeout: float = WAIT
    ) -> list[psutil.Process]:
        """Wait until the progress output announced `count` processes of a tree.

        Only `call_id`'s output counts when it is given, else every call's. Return the
        processes (see `announce()`), found from here.
        """
        await self.wait_for(
            lambda _event: len(tree_pids(self.progress(call_id))) >= count,
            timeout=timeout,
        )
        return tree_procs(self.progress(call_id))

    def progress(self, call_id: str | None = None) -> str:
        """The progress output received so far, of `call_id` or of every call, joined."""
        from ..runtime import ToolProgress

        return "".join(
            e.text
            for e in self.seen
            if isinstance(e, ToolProgress) and call_id in (None, e.call_id)
        )

    def drain(self) -> None:
        """Receive every event already sent, without waiting."""
        while True:
            try:
                self.seen.append(self._stream.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream):
                return


@asynccontextmanager
async def event_log(runtime: Runtime) -> AsyncIterator[EventLog]:
    """Subscribe to `runtime`'s events for the block.

    Used as `async with event_log(rt) as log:`.
    """
    stream = runtime.subscribe()
    async with stream:
        yield EventLog(stream)


@final
@attrs.frozen
class StoppedCall:
    """What `stop_once_started` saw.

    The caller's outcome, the abort's report, the ledger's record once settled, and
    the processes the call announced.
    """

    outcome: ToolResult | ToolAborted
    """The result the caller got, or the `ToolAborted` it caught."""
    report: AbortReport
    """What `Session.abort()` returned."""
    record: CallRecord
    """The call in the ledger after `Session.settled()`."""
    procs: tuple[psutil.Process, ...] = ()
    """The processes the call announced before the stop (with `processes`)."""


async def stop_once_started(
    session: Session,
    events: EventLog,
    name: str,
    input: dict[str, Any] | None = None,
    *,
    processes: int = 0,
    call_id: str | None = None,
    reason: str | None = None,
    timeout: float = WAIT,
) -> StoppedCall:
    """Run tool `name` in a new turn of `session`; stop the turn once the call started.

    Then wait until the turn has settled.

    "Started" is the call's first progress output (`ctx.progress(...)`: every tool of
    `tether.testing` reports `started` first); with `processes`, it is that many
    processes announced in its output (`announce()`, as the trees of `TREES` do).
    `events` must be the runtime's `event_log`, opened before the call.

    Raises:
        TimeoutError: the call did not start, or did not settle, within `timeout`.
    """
    from ..runtime import ToolProgress

    call_id = call_id or f"stopped-{uuid.uuid4().hex[:8]}"
    outcomes: list[ToolResult | ToolAborted] = []
    procs: list[psutil.Process] = []

    async def call() -> None:
        try:
            outcomes.append(await turn.call(name, input, call_id=call_id))
        except ToolAborted as exc:
            outcomes.append(exc)

    started = True
    async with anyio.create_task_group() as tg, session.turn() as turn:
        tg.start_soon(call)
        try:
            if processes:
                procs = await events.wait_announced(
                    processes, call_id=call_id, timeout=timeout
                )
            else:
                await events.wait_for(
                    lambda e: isinstance(e, ToolProgress) and e.call_id == call_id,
                    timeout=timeout,
                )
        except TimeoutError:
            started = False  # the turn is stopped all the same, then this is raised
        report = await session.abort(reason=reason)
    if not started:
        raise TimeoutError(f"{name} did not start within {timeout:g} s")
    with anyio.fail_after(timeout):
        await session.settled()
    [record] = [r for r in session.ledger_calls() if r.call_id == call_id]
    [outcome] = outcomes
    return StoppedCall(outcome, report, record, tuple(procs))
