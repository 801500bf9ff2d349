"""Tools that misbehave on purpose, for tests of the stop (importable by the stdio host).

Each tool reports `started` as its first progress output, so a test can wait for the
moment the operation began instead of sleeping.
"""

from __future__ import annotations

import anyio

from ..errors import ToolFailed
from ..host import StopClass, ToolContext, tool

__all__ = (
    "Echo",
    "Fail",
    "Hang",
    "Obedient",
    "SlowExtension",
    "SlowWrite",
    "Stubborn",
    "Stuck",
)


@tool(stop_class=StopClass.READ_ONLY)
async def Echo(ctx: ToolContext, text: str = "") -> str:
    """Return the text at once."""
    return text


@tool(stop_class=StopClass.READ_ONLY)
async def Stuck(ctx: ToolContext, seconds: float = 3600.0, ticks: float = 0.0) -> str:
    """A read-only tool that ignores its token and every cancellation for `seconds`.

    With `ticks`, it reports `tick` that often: output that must stop at a stop (S4).
    """
    ctx.progress("started")
    with anyio.CancelScope(shield=True):
        end = anyio.current_time() + seconds
        while anyio.current_time() < end:
            await anyio.sleep(min(ticks or seconds, end - anyio.current_time()))
            if ticks:
                ctx.progress("tick")
    return "late result"


@tool(stop_class=StopClass.READ_ONLY)
async def Hang(ctx: ToolContext, marker: str) -> str:
    """A read-only tool that never returns; when the host cancels it, it writes `marker`.

    The marker file is how a test sees that the host was told (S2), across processes.
    """
    ctx.progress("started")
    try:
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.Path(ctx.resolve(marker)).write_text(
                "cancelled" if ctx.cancelled.is_set() else "ended", encoding="utf-8"
            )
    return "never"  # pragma: no cover - sleep_forever ends only by cancellation


@tool(stop_class=StopClass.EXTENSION)
async def SlowExtension(ctx: ToolContext, seconds: float = 0.5) -> str:
    """An extension-like tool that finishes its work after `seconds`, whatever a stop says."""
    ctx.progress("started")
    await anyio.sleep(seconds)
    return "extension done"


@tool(stop_class=StopClass.PROCESS)
async def Stubborn(ctx: ToolContext, lines: int = 3) -> str:
    """A process-like tool that ignores termination: only the kill at grace ends it."""
    ctx.progress("started")
    for n in range(lines):
        ctx.progress(f"line {n}\n")
    await anyio.sleep_forever()
    return "never"  # pragma: no cover - sleep_forever ends only by cancellation


@tool(stop_class=StopClass.PROCESS)
async def Obedient(ctx: ToolContext, lines: int = 2) -> str:
    """A process-like tool that ends on termination, printing what its trap prints."""
    ctx.progress("started")
    out = [f"line {n}\n" for n in range(lines)]
    for line in out:
        ctx.progress(line)
    await ctx.cancelled.wait()
    return "".join(out) + "terminated\n"


@tool(stop_class=StopClass.MUTATING, subject_field="path")
async def SlowWrite(
    ctx: ToolContext, path: str, text: str = "x", seconds: float = 0.5
) -> str:
    """A mutating tool that writes a file after `seconds`, whatever a stop says."""
    ctx.progress("started")
    await anyio.sleep(seconds)
    target = ctx.resolve(path)
    target.write_text(text, encoding="utf-8")
    return f"wrote {len(text)} bytes to {path}"


@tool(stop_class=StopClass.READ_ONLY)
async def Fail(ctx: ToolContext, message: str = "it broke") -> str:
    """Fail with a message."""
    raise ToolFailed(message)
