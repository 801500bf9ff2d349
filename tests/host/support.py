"""Shared helpers for tool tests: a context, a stop at the moment a call reports, and a
person who is asked and never answers."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, NoReturn

import anyio

from tether.errors import ToolAborted
from tether.host import Tool, ToolContext

if TYPE_CHECKING:
    from pathlib import Path


def make_ctx(workspace: Path, **kwargs: Any) -> ToolContext:
    """A tool context in `workspace`, as the host builds one."""
    return ToolContext(
        call_id="call-1", session_id="session-1", workspace=workspace, **kwargs
    )


async def stop_tool_once_started(
    tool: Tool, workspace: Path, args: dict[str, Any], *, flag_only: bool = False
) -> tuple[float, BaseException | None]:
    """Start a call, stop it at its first progress report; return the time to its end.

    The stop is what the host does to a READ_ONLY call (`ctx.cancelled` set and the
    task cancelled), or only the flag with `flag_only`. A worker that is not abandoned
    makes the call return only after the worker has, so the time is the worker's.
    """
    started = anyio.Event()
    ctx = make_ctx(workspace, on_progress=lambda _text: started.set())
    scope = anyio.CancelScope()
    outcome: dict[str, Any] = {}

    async def call() -> None:
        with scope:
            try:
                await tool.run(ctx, args)
            except ToolAborted as exc:
                outcome["error"] = exc
        outcome["end"] = time.perf_counter()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await started.wait()
            t0 = time.perf_counter()
            ctx.cancelled.set()
            if not flag_only:
                scope.cancel()
    return outcome["end"] - t0, outcome.get("error")


async def asked_until_withdrawn(
    asking: anyio.Event, withdrawn: anyio.Event
) -> NoReturn:
    """A person asked a question who never answers: `asking` is set at once,
    `withdrawn` once the question is taken back (this wait cancelled)."""
    asking.set()
    try:
        await anyio.sleep_forever()
    finally:
        withdrawn.set()
    raise AssertionError("unreachable: a question is answered or withdrawn")
