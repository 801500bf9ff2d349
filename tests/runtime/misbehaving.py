"""Tools that break the host's assumptions: they raise what is not an `Exception`, or
return more than the wire carries. Module-level, so the stdio host can import them."""

from __future__ import annotations

import asyncio
import os
import time

import anyio
import anyio.lowlevel
import anyio.to_thread

from tether import StopClass, ToolContext, tool


@tool(stop_class=StopClass.READ_ONLY)
async def Raise(ctx: ToolContext, kind: str) -> str:
    """Raise a `BaseException` of the given kind, as if a library under the tool did."""
    ctx.progress("started")
    await anyio.lowlevel.checkpoint()
    match kind:
        case "asyncio-cancelled":
            raise asyncio.CancelledError("a future the tool awaited was cancelled")
        case "anyio-cancelled":
            raise await _leaked_cancellation()
        case "system-exit":
            raise SystemExit(3)
        case "keyboard-interrupt":
            raise KeyboardInterrupt
        case _:
            raise BaseException(f"a bare BaseException ({kind})")


async def _leaked_cancellation() -> BaseException:
    """The backend's own cancellation exception, caught from a scope the tool cancelled
    and carried out of it (trio's has no public constructor: this is how one leaks)."""
    with anyio.CancelScope() as scope:
        scope.cancel()
        try:
            await anyio.lowlevel.checkpoint()
        except anyio.get_cancelled_exc_class() as exc:
            return exc
    raise AssertionError("a cancelled scope let its checkpoint pass")


@tool(stop_class=StopClass.MUTATING)
async def RaiseAfterWrite(ctx: ToolContext, path: str, kind: str) -> str:
    """Write a file whole, then raise: the write happened, the call still ends alone."""
    ctx.progress("started")
    await anyio.Path(ctx.resolve(path)).write_text("whole", encoding="utf-8")
    if kind == "system-exit":
        raise SystemExit(4)
    raise asyncio.CancelledError("cancelled elsewhere")


@tool(stop_class=StopClass.READ_ONLY)
async def Big(ctx: ToolContext, size: int, progress: int = 0) -> str:
    """Return `size` characters; with `progress`, first report that many as progress."""
    ctx.progress("started")
    if progress:
        ctx.progress("p" * progress)
    return "x" * size


@tool(stop_class=StopClass.MUTATING)
async def BigWrite(ctx: ToolContext, path: str, size: int, seconds: float = 0.3) -> str:
    """Write a file slowly, then return a result of `size` characters."""
    ctx.progress("started")
    target = anyio.Path(ctx.resolve(path))
    await target.write_text("half", encoding="utf-8")
    await anyio.sleep(seconds)
    await target.write_text("whole", encoding="utf-8")
    return "y" * size


MISBEHAVING = [Raise, RaiseAfterWrite, Big, BigWrite]


def _wait_for_file(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.01)


@tool(stop_class=StopClass.READ_ONLY)
async def Blocker(ctx: ToolContext, release: str) -> str:
    """Wait in a worker thread, ignoring the stop, until the file `release` exists."""
    ctx.progress("started")
    await anyio.to_thread.run_sync(
        _wait_for_file, str(ctx.resolve(release)), abandon_on_cancel=False
    )
    return "released"


MISBEHAVING.append(Blocker)
