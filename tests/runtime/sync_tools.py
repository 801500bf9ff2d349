"""Tools whose work blocks: in a worker thread, or in the host's own event loop.

Module-level, so the stdio host can import them. Each writes the file `mark` once its
code runs, then blocks until the file `release` exists (the test writes it from its own
process): a lookup returns what it found, a write writes `out` and says so.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio.to_thread

from tether import StopClass, ToolContext, tool


def _block(ctx: ToolContext, mark: str, release: str) -> None:
    Path(ctx.resolve(mark)).write_text("running", encoding="utf-8")
    flag = Path(ctx.resolve(release))
    while not flag.exists():
        time.sleep(0.005)


def _lookup(ctx: ToolContext, mark: str, release: str) -> str:
    _block(ctx, mark, release)
    return "found it"


def _write(ctx: ToolContext, mark: str, release: str, out: str) -> str:
    _block(ctx, mark, release)
    Path(ctx.resolve(out)).write_text("written", encoding="utf-8")
    return f"wrote {out}"


@tool(stop_class=StopClass.READ_ONLY)
async def ThreadLookup(ctx: ToolContext, mark: str, release: str) -> str:
    """A blocking lookup run in a worker thread."""
    return await anyio.to_thread.run_sync(_lookup, ctx, mark, release)


@tool(stop_class=StopClass.MUTATING)
async def ThreadWrite(ctx: ToolContext, mark: str, release: str, out: str) -> str:
    """A blocking write run in a worker thread."""
    return await anyio.to_thread.run_sync(_write, ctx, mark, release, out)


@tool(stop_class=StopClass.READ_ONLY)
async def LoopLookup(ctx: ToolContext, mark: str, release: str) -> str:
    """A blocking lookup called as it is: the host's event loop waits with it."""
    return _lookup(ctx, mark, release)


@tool(stop_class=StopClass.MUTATING)
async def LoopWrite(ctx: ToolContext, mark: str, release: str, out: str) -> str:
    """A blocking write called as it is: the host's event loop waits with it."""
    return _write(ctx, mark, release, out)


SYNC_TOOLS = [ThreadLookup, ThreadWrite, LoopLookup, LoopWrite]
